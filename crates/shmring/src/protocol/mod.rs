//! The lock-free protocol: claim → commit/abort (producers), poll → release (consumer).
//!
//! Written against references to atomics, so the same code runs on the shared
//! mapping and, under `--cfg loom`, inside the model checker.
//!
//! # Claim (any number of producers, lock-free)
//! 1. Load the write cursor `(k, p)` (Acquire: pairs with the Release half of the
//!    cursor CAS, so the entry loads below see at least what made the cursor move).
//! 2. Load log entry `k % N` (Acquire).
//!    - stamp `k`: another producer owns claim `k` but has not moved the cursor yet;
//!      *help* by CASing the cursor to `(k+1, p+units)` and retry.
//!    - stamp `k-N`: the entry's previous generation; claim `k` is free.
//!    - anything else: our cursor value is stale; retry (bounded).
//! 3. Check space against the read cursor (Acquire, pairs with the consumer's
//!    Release store after it is done with the bytes): at most `N` claims and
//!    `capacity` units in flight.
//! 4. Store that value in the slot's `open_claim` word (Release), then CAS the entry
//!    from the value seen in 2 to `(k, Claimed, slot, units)` (AcqRel).
//!    Success means claim `k` is ours: its holder and extent are recorded in one
//!    atomic write, so a producer killed at any later instruction leaves a claim the
//!    consumer can attribute and skip. Nobody can have stamped `k` before us, so the
//!    cursor still reads `(k, p)` or is being helped past it: `p` is our position.
//! 5. CAS the cursor `(k, p)` → `(k+1, p+units)` (AcqRel); failure means a helper did it.
//!
//! When the consumer's release leaves the ring empty with its write cursor past
//! the placement window (see [`place_window`]), it *places* the next record at the
//! ring's start: it claims the rest of the ring as padding, an entry born
//! abandoned, and steps over it at once (see [`Shared::pad_to_start`]).
//!
//! # Commit / abort
//! CAS the entry from our `Claimed` value to `Committed` or `Aborted` (AcqRel: the
//! Release half publishes the record header and payload written before it), then
//! clear `open_claim` (Release). A failed CAS means the claim was taken from us: the
//! consumer judged us dead, found the claim forged, or reset.
//!
//! So while a claim by slot `s` is `Claimed`, slot `s`'s `open_claim` holds exactly
//! its entry value: it is stored before the entry CAS and cleared only after the
//! settling CAS. A consumer that reads the entry (Acquire), then `open_claim`
//! (Acquire), and finds another value, then reads the entry again unchanged, knows
//! the claim was not made by the slot's holder (see [`is_forged`]).
//!
//! # Poll / release (one consumer)
//! The consumer keeps its cursors locally and trusts nothing it reads back: it loads
//! entry `peek % N` once (Acquire, pairs with the commit's Release), checks its stamp
//! against `peek`, and its extent against the space it could legally cover. Records
//! may be released in any order; the read cursor advances over the released prefix
//! and is published with a Release store.

use crate::layout::Futex;
use crate::layout::{
    claim_geometry, claim_total, cursor_pos, cursor_seq, pack_cursor, pos_diff, seq_diff,
    ClaimState, LogEntry, SEQ_MASK,
};
use crate::sync::{fence, spin, AtomicU64, Ordering};

mod cursor;
mod pins;
pub use cursor::{ConsumerCursor, NotHeld, Poll};
pub use pins::{pack_pin, unpack_pin, PinTable};

/// References to the shared words the protocol runs on.
pub struct Shared<'a> {
    pub write: &'a AtomicU64,
    pub read: &'a AtomicU64,
    pub log: &'a [AtomicU64],
    /// Data ring size in 64-byte units (a power of two).
    pub cap_units: u64,
    /// The ranges producers place records around.
    pub pins: PinTable<'a>,
}

/// A claim held by a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Claim sequence number (masked to 28 bits).
    pub seq: u64,
    /// Position of the claim's first unit (masked to 36 bits).
    pub pos: u64,
    /// Units claimed, padding included.
    pub total: u64,
    /// Paddings claimed before it to place it around pins (see [`PinTable`]).
    pub paddings: u32,
    /// Record offset from the data ring start, in units.
    pub rec_off: u64,
    /// Record units (header + payload).
    pub rec_units: u64,
    /// The packed log entry value we installed.
    pub claimed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimError {
    /// Not enough free bytes.
    FullBytes,
    /// As many records in flight as the claim log holds.
    FullRecords,
    /// The shared cursors contradict each other persistently (overwritten by someone).
    Broken,
}

/// The placement window is `1/PLACE_FRACTION` of the ring (see [`place_window`]).
pub const PLACE_FRACTION: u64 = 64;

/// Rings smaller than this many units (1 MiB) place nothing: they stay in the
/// caches anyway.
pub const PLACE_MIN_RING_UNITS: u64 = (1 << 20) / crate::layout::UNIT;

/// The placement window of a ring of `cap_units` units, in units: when the
/// consumer's release leaves the ring empty with its write cursor this far or
/// further past the ring's start, the next record goes to the ring's start (see
/// [`Shared::pad_to_start`]). Records of an empty ring thus keep to the first
/// 1/64 of it (256 KiB of a 16 MiB ring) plus one record, memory still in the
/// caches, instead of going round a ring larger than the caches: a 3 MB video
/// frame goes back to the start after every frame, 4 KiB of audio after every 64
/// records. `u64::MAX` (never) for a ring below 1 MiB.
#[inline]
pub const fn place_window(cap_units: u64) -> u64 {
    if cap_units >= PLACE_MIN_RING_UNITS {
        cap_units / PLACE_FRACTION
    } else {
        u64::MAX
    }
}

/// How many consecutive inconsistent observations of the same cursor value a
/// producer tolerates before reporting the ring broken (a consumer reset in
/// progress is the only honest cause, and it takes microseconds).
const STALE_LIMIT: u32 = 1 << 12;

impl<'a> Shared<'a> {
    #[inline]
    fn n(&self) -> u64 {
        self.log.len() as u64
    }

    #[inline]
    pub fn entry(&self, seq: u64) -> &'a AtomicU64 {
        &self.log[(seq & (self.n() - 1)) as usize]
    }

    /// Claims `units` units (header included) for producer slot `slot`, whose
    /// `open_claim` word is `open`.
    pub fn try_claim(&self, units: u64, slot: u32, open: &AtomicU64) -> Result<Claim, ClaimError> {
        let n = self.n();
        let cap = self.cap_units;
        let mut stale = 0u32;
        let mut last = u64::MAX;
        let mut paddings = 0u32;
        loop {
            // Acquire: see the entries of every claim the cursor has moved past.
            let c = self.write.load(Ordering::Acquire);
            if c != last {
                last = c;
                stale = 0;
            }
            let (k, p) = (cursor_seq(c), cursor_pos(c));
            let slot_ref = self.entry(k);
            // Acquire: pairs with the installing CAS of claim k (helping reads its units).
            let e = slot_ref.load(Ordering::Acquire);
            let le = LogEntry::unpack(e);
            if le.stamp == k {
                if le.units == 0 || le.units > cap {
                    return Err(ClaimError::Broken);
                }
                // Help the holder of claim k move the cursor past it. Failure: someone did.
                let _ = self.write.compare_exchange(
                    c,
                    pack_cursor(k + 1, p + le.units),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                continue;
            }
            if le.stamp != k.wrapping_sub(n) & SEQ_MASK {
                stale += 1;
                if stale > STALE_LIMIT {
                    return Err(ClaimError::Broken);
                }
                backoff(stale);
                continue;
            }
            // Acquire: pairs with the consumer's Release store of the read cursor, so
            // the consumer is done with every byte before the position we see.
            let r = self.read.load(Ordering::Acquire);
            let in_flight = seq_diff(k, cursor_seq(r));
            let used = pos_diff(p, cursor_pos(r));
            if in_flight > n || used > cap {
                // The read cursor is ahead of our cursor value: it is stale. Retry.
                stale += 1;
                if stale > STALE_LIMIT {
                    return Err(ClaimError::Broken);
                }
                backoff(stale);
                continue;
            }
            if in_flight == n {
                return Err(ClaimError::FullRecords);
            }
            let total = claim_total(p, units, cap);
            if used + total > cap {
                // The consumer placing the next record (see `pad_to_start`) claimed
                // the rest of the ring and is about to step over it: an abandoned
                // claim at the read cursor is gone in a moment, so look again.
                if self.abandoned_at(r, in_flight) && stale < STALE_LIMIT {
                    stale += 1;
                    backoff(stale);
                    continue;
                }
                return Err(ClaimError::FullBytes);
            }
            let (rec_off, rec_units) =
                claim_geometry(p, total, cap).expect("a claim we computed is well formed");
            // After the read cursor (Acquire): a pin the consumer added before it
            // published that read cursor is seen (see `PinTable`).
            if let Some(end) = self.pins.overlap(rec_off, rec_units, cap) {
                // Our record would lie on a pinned record: claim the units up to
                // the pin's end (or, for a record that wrapped, the ring's end) as
                // a padding of our own, born abandoned, and look again after it.
                let off = p & (cap - 1);
                let pad = if rec_off != off { cap - off } else { end - off };
                if used + pad > cap {
                    return Err(ClaimError::FullBytes);
                }
                let padding = LogEntry {
                    stamp: k,
                    state: ClaimState::Abandoned,
                    slot,
                    units: pad,
                }
                .pack();
                // AcqRel, as the claiming CAS below: exactly one claimer gets `k`.
                if slot_ref
                    .compare_exchange(e, padding, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    paddings += 1;
                    // AcqRel, as every cursor move; failure means someone helped.
                    let _ = self.write.compare_exchange(
                        c,
                        pack_cursor(k + 1, p + pad),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                }
                continue;
            }
            let claimed = LogEntry {
                stamp: k,
                state: ClaimState::Claimed,
                slot,
                units: total,
            }
            .pack();
            // Release: whoever sees our entry (Acquire) sees this value or a later one.
            open.store(claimed, Ordering::Release);
            // AcqRel: Release publishes `open` and keeps the claim ordered after our
            // space check; Acquire orders our payload writes after the claim.
            if slot_ref
                .compare_exchange(e, claimed, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                // Not ours after all: take the announcement back before looking again.
                open.store(0, Ordering::Relaxed);
            } else {
                let _ = self.write.compare_exchange(
                    c,
                    pack_cursor(k + 1, p + total),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                // Release: the claim (and the write cursor past it) before every byte
                // we write into it, for taps, which read without any claim: a tap
                // that sees one of our bytes sees the cursor past our claim (see
                // `crate::tap`). Free on x86.
                fence(Ordering::Release);
                return Ok(Claim {
                    seq: k,
                    pos: p,
                    total,
                    paddings,
                    rec_off,
                    rec_units,
                    claimed,
                });
            }
        }
    }

    /// Is the claim at the read cursor `r` (with `in_flight` claims from `r` to the
    /// write cursor) abandoned: a padding or a dead producer's claim the consumer
    /// has not stepped over yet?
    fn abandoned_at(&self, r: u64, in_flight: u64) -> bool {
        if in_flight == 0 {
            return false;
        }
        let k = cursor_seq(r);
        // Acquire: as any entry load.
        let e = LogEntry::unpack(self.entry(k).load(Ordering::Acquire));
        e.stamp == k && e.state == ClaimState::Abandoned
    }

    /// Placement, the consumer's: called by the ring's consumer when it has
    /// released everything up to its peek cursor `(k, p)` (unmasked) and `p` is
    /// past the placement window (see [`place_window`]). If the ring is
    /// empty (the write cursor is at `(k, p)`) and `p` is not the ring's start, it
    /// claims the units up to the ring's end as claim `k`, born
    /// [`ClaimState::Abandoned`] (space no record will fill), so the next record
    /// goes to the ring's start, where the last one was: a stream of frames keeps
    /// writing and reading the same memory, still in the caches, as a pool
    /// allocator reuses the block just freed, instead of going round a ring
    /// larger than the caches. Returns the padding's units; the caller steps over
    /// it at once (a poll finds it abandoned) and publishes its read cursor past
    /// it. A producer that claimed first wins (`None`); one that finds the ring
    /// full behind the padding in the moment before the read cursor moves looks
    /// again (see [`Shared::try_claim`]).
    pub fn pad_to_start(&self, k: u64, p: u64) -> Option<u64> {
        let cap = self.cap_units;
        let off = p & (cap - 1);
        if off == 0 {
            return None;
        }
        let c = pack_cursor(k, p);
        // Acquire: as a producer's cursor load.
        if self.write.load(Ordering::Acquire) != c {
            return None;
        }
        let entry = self.entry(k);
        // Acquire: as a producer's entry load.
        let e = entry.load(Ordering::Acquire);
        if LogEntry::unpack(e).stamp != k.wrapping_sub(self.n()) & SEQ_MASK {
            return None;
        }
        let pad = cap - off;
        let padding = LogEntry {
            stamp: k & SEQ_MASK,
            state: ClaimState::Abandoned,
            slot: 0,
            units: pad,
        }
        .pack();
        // AcqRel, as a producer's claiming CAS: exactly one of us and the
        // producers gets claim `k`.
        if entry
            .compare_exchange(e, padding, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // AcqRel, as every cursor move; failure means a producer helped.
        let _ = self.write.compare_exchange(
            c,
            pack_cursor(k + 1, p + pad),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        Some(pad)
    }

    /// Helps the write cursor past every claim already stamped at it, as a producer
    /// about to claim does (a claimer stamps its entry, then moves the cursor; one
    /// that died or stalls in between leaves the move to whoever comes next).
    /// Returns the cursor as finally loaded. At most one log's worth of steps.
    pub fn help_write_cursor(&self) -> u64 {
        let n = self.n();
        let mut c = self.write.load(Ordering::Acquire);
        for _ in 0..n {
            let (k, p) = (cursor_seq(c), cursor_pos(c));
            // Acquire: as in `try_claim`.
            let le = LogEntry::unpack(self.entry(k).load(Ordering::Acquire));
            if le.stamp != k || le.units == 0 || le.units > self.cap_units {
                break;
            }
            // AcqRel, as a producer's helping CAS; failure means someone moved it.
            c = match self.write.compare_exchange(
                c,
                pack_cursor(k + 1, p + le.units),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => pack_cursor(k + 1, p + le.units),
                Err(now) => now,
            };
        }
        c
    }

    /// Moves our claim to `Committed` or `Aborted`, then clears our `open_claim`
    /// word. `false`: it was taken from us.
    /// An entry that already reads exactly the state we were setting (another
    /// process wrote it there before us) counts as settled: for a commit, the record
    /// was written before, so the consumer may have it already, and reporting it
    /// abandoned would make the producer send it twice.
    pub fn settle(&self, claim: &Claim, state: ClaimState, open: &AtomicU64) -> bool {
        let le = LogEntry::unpack(claim.claimed);
        let new = LogEntry { state, ..le }.pack();
        // AcqRel: the Release half publishes the record written before the commit.
        let ok = match self.entry(claim.seq).compare_exchange(
            claim.claimed,
            new,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => true,
            Err(now) => now == new,
        };
        // Release: a consumer that sees the cleared word (Acquire) sees the entry
        // resolved, so it never takes our finished claim for a forged one.
        open.store(0, Ordering::Release);
        ok
    }
}

/// Was the pending claim `value` at `seq` made by someone other than the holder of
/// the slot it names? `open` is that slot's `open_claim` word. Only a positive
/// answer is certain: the entry still read `value` after the holder's word was seen
/// holding something else, which the holder never does while its claim is pending.
/// (A peer that also forges the holder's word is believed until the holder's next
/// claim or commit overwrites it.)
pub fn is_forged(sh: &Shared<'_>, seq: u64, value: u64, open: &AtomicU64) -> bool {
    // Acquire: pairs with the holder's Release stores of `open` (see `try_claim` and
    // `settle`), so a cleared word means the entry we load next is resolved.
    if open.load(Ordering::Acquire) == value {
        return false;
    }
    // Acquire: see the holder's settling CAS if that is why the word changed.
    sh.entry(seq).load(Ordering::Acquire) == value
}

/// The ring's read cursor for a consumer whose own read cursor is `own` and whose
/// tethered consumers' are `others`: the farthest behind the write cursor `w`, for
/// claims and for bytes separately (after a reset, a tethered consumer's claim
/// number belongs to the old generation while its bytes still need protecting).
/// A cursor that cannot be behind `w` (more than `n` claims or `cap` units) is
/// ignored for that part. `own` always counts.
pub fn farthest_behind(own: u64, others: &[u64], w: u64, n: u64, cap: u64) -> u64 {
    let (ws, wp) = (cursor_seq(w), cursor_pos(w));
    let (mut s, mut p) = (cursor_seq(own), cursor_pos(own));
    for &c in others {
        let (cs, cp) = (cursor_seq(c), cursor_pos(c));
        let (ds, dp) = (seq_diff(ws, cs), pos_diff(wp, cp));
        if ds <= n && ds > seq_diff(ws, s) {
            s = cs;
        }
        if dp <= cap && dp > pos_diff(wp, p) {
            p = cp;
        }
    }
    pack_cursor(s, p)
}

/// The wake-up handshake on a futex word (`crate::wake` adds the system calls).
///
/// The waiter announces itself ([`arm`](handshake::arm): waiting count up, SeqCst fence, read
/// `seq`), re-checks its condition and sleeps on `seq` only while it still reads
/// the value `arm` returned. The waker makes its change, then
/// ([`signal`](handshake::signal)) fences
/// SeqCst and reads the waiting count; if someone waits it bumps `seq` (then wakes
/// the word). One of the two always sees the other, so no wake-up is lost. A
/// waiter under a latency budget stores a *mark* in `need` before arming: the waker
/// then bumps only once `past(mark)` (the ring is filled past it), and the waiter
/// bounds its own sleep by the budget instead.
pub mod handshake;

#[inline]
fn backoff(step: u32) {
    if step % 512 == 0 {
        #[cfg(not(loom))]
        std::thread::yield_now();
    }
    spin();
}
