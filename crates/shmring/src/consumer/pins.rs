//! The ring's consumer's pins (see [`crate::layout::Pins`] and
//! [`crate::protocol::PinTable`]): which records producers place around, why
//! each is pinned, and when it comes back.
//!
//! A record is pinned when the consumer stops waiting for its claim in claim
//! order while a process may still write it: it *parks* the claim (overtaking), or
//! it takes the claim back at the claim timeout (an *orphan*: the holder may still
//! write until its next library call). A parked claim that commits is handed out
//! from where it lies, so its record stays pinned while the frame is held. The
//! pin is written before the read cursor that passes the record is published, and
//! cleared once nobody can touch the record any more: the holder settled the
//! claim (its open-claim word no longer holds it: loaded with Acquire, it pairs
//! with the holder's Release store after its last write) or died (its lock is
//! gone), or the frame was released. Only the ring's consumer pins: a tethered
//! consumer's read cursor holds its bytes as before.

use crate::layout::{claim_geometry, LogEntry, MAX_PINS};
use crate::protocol::{pack_pin, unpack_pin};
use crate::segment::Segment;
use crate::slots;
use crate::sync::Ordering;

/// Why a record is pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its claim is parked: the holder may still write it, or commit it.
    Parked,
    /// A frame handed out from a parked claim, not released yet.
    Frame,
    /// Its claim was taken back (the claim timeout, a reset) while the holder may
    /// still write it.
    Orphan,
}

#[derive(Debug, Clone, Copy)]
struct Pin {
    /// The claim's number, as the consumer's cursor counts them.
    seq: u64,
    /// What the table's extent entry holds.
    extent: u64,
    /// The claim's log entry value while its holder may write it; 0 for a frame.
    claim: u64,
    why: Why,
}

/// The consumer's own copy of the pin table: the shared table is written from it
/// and compared with it at every audit (a peer's writes there are repaired).
pub(super) struct Pins {
    pins: [Option<Pin>; MAX_PINS],
    /// One past the highest entry in use.
    hi: usize,
    /// Entries pinned for frames (so a release looks only when there are some).
    frames: u32,
}

impl Pins {
    pub(super) fn new() -> Pins {
        Pins {
            pins: [None; MAX_PINS],
            hi: 0,
            frames: 0,
        }
    }

    /// Is there room for one more pin?
    pub(super) fn has_room(&self) -> bool {
        self.pins.iter().any(Option::is_none)
    }

    /// Pins the record of claim `seq` at position `pos` (`units` claimed, padding
    /// included), whose log entry is `claim` (its holder's open-claim word holds
    /// it while it may write), parked (`orphan` false) or taken back. Before the
    /// caller publishes a read cursor past it. `false`: the table is full (the
    /// caller keeps the claim in claim order instead).
    pub(super) fn pin(
        &mut self,
        seg: &Segment,
        seq: u64,
        pos: u64,
        claim: u64,
        orphan: bool,
    ) -> bool {
        let cap = seg.geometry().cap_units();
        let units = LogEntry::unpack(claim).units;
        let Some((off, len)) = claim_geometry(pos, units, cap) else {
            return false;
        };
        let Some(i) = self.pins.iter().position(Option::is_none) else {
            return false;
        };
        let why = if orphan { Why::Orphan } else { Why::Parked };
        let pin = Pin {
            seq,
            extent: pack_pin(off, len),
            claim,
            why,
        };
        self.pins[i] = Some(pin);
        self.hi = self.hi.max(i + 1);
        // Relaxed: published with the extent's Release store after it.
        seg.control().pins.0.claim[i].store(claim, Ordering::Relaxed);
        seg.shared().pins.set(i, pin.extent, self.hi);
        true
    }

    fn find(&self, seq: u64, why: Why) -> Option<usize> {
        self.pins[..self.hi]
            .iter()
            .position(|p| p.is_some_and(|p| p.seq == seq && p.why == why))
    }

    /// Clears entry `i`: nobody writes or reads its record any more.
    fn clear(&mut self, seg: &Segment, i: usize) {
        if let Some(p) = self.pins[i].take() {
            if p.why == Why::Frame {
                self.frames -= 1;
            }
        }
        self.hi = self.pins[..self.hi]
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |j| j + 1);
        seg.shared().pins.clear(i, self.hi);
        seg.control().pins.0.claim[i].store(0, Ordering::Relaxed);
    }

    /// The parked claim `seq` was committed and handed out: its record stays
    /// pinned until the frame is released.
    pub(super) fn handed_out(&mut self, seg: &Segment, seq: u64) {
        if let Some(i) = self.find(seq, Why::Parked) {
            if let Some(p) = &mut self.pins[i] {
                p.why = Why::Frame;
                p.claim = 0;
            }
            self.frames += 1;
            seg.control().pins.0.claim[i].store(0, Ordering::Relaxed);
        }
    }

    /// The frame `seq` was released: its record comes back. Whether a pin went.
    pub(super) fn released(&mut self, seg: &Segment, seq: u64) -> bool {
        if self.frames == 0 {
            return false;
        }
        match self.find(seq, Why::Frame) {
            Some(i) => {
                self.clear(seg, i);
                true
            }
            None => false,
        }
    }

    /// The parked claim `seq` was settled by its holder (aborted), or its holder
    /// is dead or never made it (forged): nobody writes its record any more.
    pub(super) fn settled(&mut self, seg: &Segment, seq: u64) -> bool {
        match self.find(seq, Why::Parked) {
            Some(i) => {
                self.clear(seg, i);
                true
            }
            None => false,
        }
    }

    /// The parked claim `seq` was taken back while its holder may still write
    /// it: pinned until the holder settles or dies. `false`: it was not pinned.
    pub(super) fn taken_back(&mut self, seq: u64) -> bool {
        match self.find(seq, Why::Parked) {
            Some(i) => {
                if let Some(p) = &mut self.pins[i] {
                    p.why = Why::Orphan;
                }
                true
            }
            None => false,
        }
    }

    /// Is the parked claim `seq` pinned?
    pub(super) fn is_parked(&self, seq: u64) -> bool {
        self.find(seq, Why::Parked).is_some()
    }

    /// After a reset: parked claims were forgotten (their holders' commits will
    /// fail) but their holders may still write them.
    pub(super) fn forget_parked(&mut self) {
        for p in self.pins.iter_mut().flatten() {
            if p.why == Why::Parked {
                p.why = Why::Orphan;
            }
        }
    }

    /// Clears the pins of claims taken back whose holders settled them or died.
    /// One load per pin, and one lock probe per pin whose holder has not settled.
    /// Whether a pin went (producers waiting for space may then fit).
    pub(super) fn check_orphans(&mut self, seg: &Segment) -> bool {
        let mut cleared = false;
        for i in 0..self.hi {
            let Some(p) = self.pins[i] else { continue };
            if p.why != Why::Orphan {
                continue;
            }
            if !holder_may_write(seg, p.claim) {
                self.clear(seg, i);
                cleared = true;
            }
        }
        cleared
    }

    /// Does the shared table still say what we pinned? Rewrites what a peer
    /// changed; returns whether anything was rewritten.
    pub(super) fn repair(&mut self, seg: &Segment) -> bool {
        let t = &seg.control().pins.0;
        let mut repaired = false;
        for i in 0..MAX_PINS {
            let (extent, claim) = self.pins[i].map_or((0, 0), |p| (p.extent, p.claim));
            if t.extent[i].load(Ordering::Relaxed) != extent {
                t.extent[i].store(extent, Ordering::Release);
                repaired = true;
            }
            if t.claim[i].load(Ordering::Relaxed) != claim {
                t.claim[i].store(claim, Ordering::Relaxed);
                repaired = true;
            }
        }
        let pinned = &seg.control().cursors.0.pinned;
        if pinned.load(Ordering::Relaxed) != self.hi as u32 {
            // Release: as the extents (see `PinTable`).
            pinned.store(self.hi as u32, Ordering::Release);
            repaired = true;
        }
        repaired
    }

    /// A consumer taking over the ring: the pins its predecessor left. Each
    /// whose claim a live holder may still write stays (as taken back, until the
    /// holder settles), and so does each the caller finds among the claims it
    /// will look at again (`mine`: their sequence number, as parked); the rest
    /// are cleared.
    pub(super) fn take_over(&mut self, seg: &Segment, mine: impl Fn(u64) -> Option<u64>) {
        let t = &seg.control().pins.0;
        let cap = seg.geometry().cap_units();
        for i in 0..MAX_PINS {
            // Acquire: as any load of the table.
            let extent = t.extent[i].load(Ordering::Acquire);
            let claim = t.claim[i].load(Ordering::Relaxed);
            let pin = unpack_pin(extent, cap).and_then(|_| {
                if let Some(seq) = mine(extent) {
                    return Some(Pin {
                        seq,
                        extent,
                        claim,
                        why: Why::Parked,
                    });
                }
                holder_may_write(seg, claim).then_some(Pin {
                    seq: u64::MAX,
                    extent,
                    claim,
                    why: Why::Orphan,
                })
            });
            self.pins[i] = pin;
        }
        self.hi = self
            .pins
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |j| j + 1);
        self.frames = 0;
        self.repair(seg);
    }
}

/// May the holder of the claim whose log entry is `claim` still write its record?
/// Its slot's open-claim word still holds the claim (Acquire: pairs with the
/// holder's Release store when it settles, after its last write) and its holder
/// is alive.
pub(super) fn holder_may_write(seg: &Segment, claim: u64) -> bool {
    if claim == 0 {
        return false;
    }
    let slot = LogEntry::unpack(claim).slot;
    if slot >= seg.geometry().max_producers {
        return false;
    }
    seg.slot(slot).open_claim.load(Ordering::Acquire) == claim && slots::is_alive(seg, slot)
}
