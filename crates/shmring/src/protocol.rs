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
//! 4. CAS the entry from the value seen in 2 to `(k, Claimed, slot, units)` (AcqRel).
//!    Success means claim `k` is ours: its owner and extent are recorded in one
//!    atomic write, so a producer killed at any later instruction leaves a claim the
//!    consumer can attribute and skip. Nobody can have stamped `k` before us, so the
//!    cursor still reads `(k, p)` or is being helped past it: `p` is our position.
//! 5. CAS the cursor `(k, p)` → `(k+1, p+units)` (AcqRel); failure means a helper did it.
//!
//! # Commit / abort
//! CAS the entry from our `Claimed` value to `Committed` or `Aborted` (AcqRel: the
//! Release half publishes the record header and payload written before it). A failed
//! CAS means the claim was taken from us: the consumer judged us dead, or reset.
//!
//! # Poll / release (one consumer)
//! The consumer keeps its cursors locally and trusts nothing it reads back: it loads
//! entry `peek % N` once (Acquire, pairs with the commit's Release), checks its stamp
//! against `peek`, and its extent against the space it could legally cover. Records
//! may be released in any order; the read cursor advances over the released prefix
//! and is published with a Release store.

use crate::layout::{
    claim_geometry, claim_total, cursor_pos, cursor_seq, pack_cursor, pos_diff, seq_diff,
    ClaimState, LogEntry, SEQ_MASK,
};
use crate::sync::{spin, AtomicU64, Ordering};

/// References to the shared words the protocol runs on.
pub struct Shared<'a> {
    pub write: &'a AtomicU64,
    pub read: &'a AtomicU64,
    pub log: &'a [AtomicU64],
    /// Data ring size in 64-byte units (a power of two).
    pub cap_units: u64,
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

    /// Claims `units` units (header included) for producer slot `slot`.
    pub fn try_claim(&self, units: u64, slot: u32) -> Result<Claim, ClaimError> {
        let n = self.n();
        let cap = self.cap_units;
        let mut stale = 0u32;
        let mut last = u64::MAX;
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
                // Help the owner of claim k move the cursor past it. Failure: someone did.
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
                return Err(ClaimError::FullBytes);
            }
            let claimed = LogEntry {
                stamp: k,
                state: ClaimState::Claimed,
                slot,
                units: total,
            }
            .pack();
            // AcqRel: Release publishes nothing yet but keeps the claim ordered after
            // our space check; Acquire orders our payload writes after the claim.
            if slot_ref
                .compare_exchange(e, claimed, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let _ = self.write.compare_exchange(
                    c,
                    pack_cursor(k + 1, p + total),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                let (rec_off, rec_units) =
                    claim_geometry(p, total, cap).expect("a claim we computed is well formed");
                return Ok(Claim {
                    seq: k,
                    pos: p,
                    total,
                    rec_off,
                    rec_units,
                    claimed,
                });
            }
        }
    }

    /// Moves our claim to `Committed` or `Aborted`. `false`: it was taken from us.
    pub fn finish(&self, claim: &Claim, state: ClaimState) -> bool {
        let le = LogEntry::unpack(claim.claimed);
        let new = LogEntry { state, ..le }.pack();
        // AcqRel: the Release half publishes the record written before the commit.
        self.entry(claim.seq)
            .compare_exchange(claim.claimed, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

#[inline]
fn backoff(step: u32) {
    if step % 512 == 0 {
        #[cfg(not(loom))]
        std::thread::yield_now();
    }
    spin();
}

/// What the consumer found at its peek cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// No claim for the next sequence number yet.
    Empty,
    /// Claimed by `slot`, not committed yet; `value` is the entry as seen.
    Pending { slot: u32, value: u64 },
    /// A committed record; the peek cursor moved past it. Release it with `seq`.
    Record {
        seq: u64,
        rec_off: u64,
        rec_units: u64,
    },
    /// An aborted or abandoned claim was stepped over (and released).
    Skipped { state: ClaimState },
    /// The consumer holds as many records as the claim log can track.
    Saturated,
    /// The entry cannot come from an honest producer.
    Corrupt(&'static str),
}

/// Per log index: not handed out / handed out and held / released, read not past yet.
const FREE: u8 = 0;
const HELD: u8 = 1;
const DONE: u8 = 2;

/// Releasing a record that is not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotHeld;

/// The consumer's private view of the ring. Its counters are local and unmasked;
/// shared memory only ever receives copies of them.
pub struct ConsumerCursor {
    pub peek_seq: u64,
    pub peek_pos: u64,
    pub read_seq: u64,
    pub read_pos: u64,
    state: Box<[u8]>,
    units: Box<[u32]>,
}

impl ConsumerCursor {
    pub fn new(log_entries: usize, read_cursor: u64) -> Self {
        let (seq, pos) = (cursor_seq(read_cursor), cursor_pos(read_cursor));
        ConsumerCursor {
            peek_seq: seq,
            peek_pos: pos,
            read_seq: seq,
            read_pos: pos,
            state: vec![FREE; log_entries].into_boxed_slice(),
            units: vec![0; log_entries].into_boxed_slice(),
        }
    }

    #[inline]
    fn idx(&self, seq: u64) -> usize {
        (seq & (self.state.len() as u64 - 1)) as usize
    }

    /// Records handed out and not yet passed by the read cursor.
    pub fn outstanding(&self) -> u64 {
        self.peek_seq - self.read_seq
    }

    /// Units between the read and peek cursors.
    pub fn held_units(&self) -> u64 {
        self.peek_pos - self.read_pos
    }

    /// Looks at the next claim, once.
    pub fn poll(&mut self, sh: &Shared<'_>) -> Poll {
        if self.outstanding() >= self.state.len() as u64 {
            return Poll::Saturated;
        }
        let k = self.peek_seq;
        // Acquire: pairs with the producer's committing CAS (Release).
        let mut v = sh.entry(k).load(Ordering::Acquire);
        if LogEntry::unpack(v).stamp != k & SEQ_MASK {
            // Not claimed yet, unless the write cursor is already past claim k: a
            // claim's entry is stamped before anyone moves the cursor past it (the
            // mover read the stamp with Acquire and published with its CAS), so with
            // the cursor loaded first, a missing stamp on a second look means the
            // entry was overwritten.
            let w = sh.write.load(Ordering::Acquire);
            v = sh.entry(k).load(Ordering::Acquire);
            if LogEntry::unpack(v).stamp != k & SEQ_MASK {
                let ahead = seq_diff(cursor_seq(w), k);
                if ahead != 0 && ahead <= self.state.len() as u64 {
                    return Poll::Corrupt("claim log entry overwritten behind the write cursor");
                }
                return Poll::Empty;
            }
        }
        let e = LogEntry::unpack(v);
        if e.units == 0 || self.held_units() + e.units > sh.cap_units {
            return Poll::Corrupt("claim length exceeds the free space it was claimed from");
        }
        match e.state {
            ClaimState::Claimed => Poll::Pending {
                slot: e.slot,
                value: v,
            },
            ClaimState::Committed => {
                let Some((rec_off, rec_units)) =
                    claim_geometry(self.peek_pos, e.units, sh.cap_units)
                else {
                    return Poll::Corrupt("claim geometry");
                };
                self.step(e.units, HELD);
                Poll::Record {
                    seq: k,
                    rec_off,
                    rec_units,
                }
            }
            state @ (ClaimState::Aborted | ClaimState::Abandoned) => {
                self.step(e.units, DONE);
                self.advance_read();
                Poll::Skipped { state }
            }
        }
    }

    fn step(&mut self, units: u64, state: u8) {
        let i = self.idx(self.peek_seq);
        self.state[i] = state;
        self.units[i] = units as u32;
        self.peek_seq += 1;
        self.peek_pos += units;
    }

    /// Marks `seq` released (any order). Returns whether the read cursor moved.
    pub fn release(&mut self, seq: u64) -> Result<bool, NotHeld> {
        if seq < self.read_seq || seq >= self.peek_seq {
            return Err(NotHeld);
        }
        let i = self.idx(seq);
        if self.state[i] != HELD {
            return Err(NotHeld);
        }
        self.state[i] = DONE;
        Ok(self.advance_read())
    }

    /// Is `seq` handed out and not released?
    pub fn is_held(&self, seq: u64) -> bool {
        seq >= self.read_seq && seq < self.peek_seq && self.state[self.idx(seq)] == HELD
    }

    fn advance_read(&mut self) -> bool {
        let mut moved = false;
        while self.read_seq < self.peek_seq {
            let i = self.idx(self.read_seq);
            if self.state[i] != DONE {
                break;
            }
            self.state[i] = FREE;
            self.read_pos += self.units[i] as u64;
            self.read_seq += 1;
            moved = true;
        }
        moved
    }

    /// Publishes the read cursor (Release: everything we did with the released bytes
    /// happens before a producer can claim them again).
    pub fn publish(&self, sh: &Shared<'_>) {
        sh.read
            .store(pack_cursor(self.read_seq, self.read_pos), Ordering::Release);
    }

    /// Marks a pending claim abandoned. `false`: it changed meanwhile (look again).
    pub fn abandon(&self, sh: &Shared<'_>, value: u64) -> bool {
        let e = LogEntry::unpack(value);
        let new = LogEntry {
            state: ClaimState::Abandoned,
            ..e
        }
        .pack();
        sh.entry(self.peek_seq)
            .compare_exchange(value, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Forgets every record (none may be held) and starts a new generation of
    /// sequence numbers past anything a producer could still hold, so no stale
    /// claim can be mistaken for a new one. Rewrites the claim log, then the read
    /// cursor, then the write cursor (producers that see a half-done reset retry).
    /// Returns the new base cursor.
    pub fn reset(&mut self, sh: &Shared<'_>) -> u64 {
        let n = self.state.len() as u64;
        let base_seq = self.peek_seq + 2 * n;
        // Start after whatever producers had claimed, if the write cursor is sane, so
        // a writer still finishing an old claim does not scribble on new records soon.
        let w = sh.write.load(Ordering::Acquire);
        let ahead = pos_diff(cursor_pos(w), self.peek_pos);
        let base_pos = self.peek_pos + if ahead <= sh.cap_units { ahead } else { 0 };
        for k in base_seq..base_seq + n {
            sh.entry(k)
                .store(LogEntry::initial(k, n), Ordering::Release);
        }
        self.state.fill(FREE);
        self.peek_seq = base_seq;
        self.read_seq = base_seq;
        self.peek_pos = base_pos;
        self.read_pos = base_pos;
        self.publish(sh);
        let base = pack_cursor(base_seq, base_pos);
        sh.write.store(base, Ordering::Release);
        base
    }
}
