//! The ring's consumer's counters, kept in private memory and written through to
//! the segment (lines 6 to 8 of the control block, which only the ring's
//! consumer writes): a peer that scribbles them is overwritten at the next audit,
//! and the rewrite counted as a repair. Counters other processes add to are not
//! mirrored, as a mirror would undo their counts: `reaped_slots` (producers short
//! of a slot), and `abandoned`, `corruption`, `forged_claims` and `wakes_sent`
//! (a tethered consumer steps over a dead or forged claim, and wakes producers,
//! as the ring's consumer does); nor, of course, each producer's and each
//! tethered consumer's own. Those are statistics a peer can falsify.

use std::cell::Cell;
use std::mem::{offset_of, size_of};

use crate::layout::{ClaimHealth, ConsumerCounters, Control};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};

/// The words mirrored: every counter of lines 6 to 8 but these (byte offsets in
/// the control block): those others add to (see above) and the oldest pending
/// claim's state (published, not counted).
const FIRST: usize = offset_of!(Control, counters);
const WORDS: usize = (offset_of!(Control, health) + size_of::<ClaimHealth>() - FIRST) / 8;

fn not_mirrored(offset: usize) -> bool {
    let cc = offset_of!(Control, counters);
    let h = offset_of!(Control, health);
    offset == cc + offset_of!(ConsumerCounters, reaped_slots)
        || offset == cc + offset_of!(ConsumerCounters, abandoned)
        || offset == cc + offset_of!(ConsumerCounters, corruption)
        || offset == cc + offset_of!(ConsumerCounters, wakes_sent)
        || offset == h + offset_of!(ClaimHealth, forged_claims)
        || offset == h + offset_of!(ClaimHealth, oldest_pending_since_ns)
        || offset == h + offset_of!(ClaimHealth, oldest_pending_slot)
        || offset >= cc + size_of::<ConsumerCounters>() && offset < h
}

/// The ring's consumer's counters in private memory.
pub(super) struct OwnCounters {
    vals: [Cell<u64>; WORDS],
}

impl OwnCounters {
    /// Starts from what the segment says (a consumer taking over carries on
    /// from its predecessor's counts).
    pub(super) fn new(seg: &Segment) -> OwnCounters {
        let c = OwnCounters {
            vals: std::array::from_fn(|_| Cell::new(0)),
        };
        for i in 0..WORDS {
            if let Some(w) = word(seg, i) {
                // Relaxed: statistics.
                c.vals[i].set(w.load(Ordering::Relaxed));
            }
        }
        c
    }

    /// The index of `field` if it is one of ours.
    fn index(seg: &Segment, field: &AtomicU64) -> Option<usize> {
        let off =
            (field as *const AtomicU64 as usize).checked_sub(seg.control() as *const _ as usize)?;
        let i = off.checked_sub(FIRST)? / 8;
        (off % 8 == 0 && i < WORDS && !not_mirrored(off)).then_some(i)
    }

    /// Adds `n` to `field`: ours through the mirror, any other as a plain bump.
    pub(super) fn bump(&self, seg: &Segment, field: &AtomicU64, n: u64) {
        match Self::index(seg, field) {
            Some(i) => {
                let v = self.vals[i].get().wrapping_add(n);
                self.vals[i].set(v);
                // Relaxed: statistics.
                field.store(v, Ordering::Relaxed);
            }
            None => crate::producer::bump(field, n),
        }
    }

    /// Raises `field` to `v` if it is below (a peak).
    pub(super) fn raise(&self, seg: &Segment, field: &AtomicU64, v: u64) {
        if let Some(i) = Self::index(seg, field) {
            if v > self.vals[i].get() {
                self.vals[i].set(v);
                field.store(v, Ordering::Relaxed);
            }
        }
    }

    /// Rewrites the counters a peer changed. Returns how many.
    pub(super) fn repair(&self, seg: &Segment) -> u32 {
        let mut n = 0;
        for i in 0..WORDS {
            if let Some(w) = word(seg, i) {
                let mine = self.vals[i].get();
                // Relaxed: statistics.
                if w.load(Ordering::Relaxed) != mine {
                    w.store(mine, Ordering::Relaxed);
                    n += 1;
                }
            }
        }
        n
    }
}

/// Mirrored word `i` of the segment, if it is one.
fn word(seg: &Segment, i: usize) -> Option<&AtomicU64> {
    let off = FIRST + 8 * i;
    if not_mirrored(off) {
        return None;
    }
    // SAFETY: FIRST + 8 * i lies inside lines 6 to 8 of the control block (i <
    // WORDS), 8-aligned; every 8-byte word there is an AtomicU64 field of
    // ConsumerCounters or ClaimHealth, or padding of their lines, which is
    // zeroed shared memory nobody else uses as anything but a u64.
    Some(unsafe { &*((seg.control() as *const Control as *const u8).add(off) as *const AtomicU64) })
}
