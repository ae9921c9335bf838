//! The consumer's side of the protocol (see "Poll / release" in the module
//! above): its private cursors over the claim log, what a poll finds
//! ([`Poll`]), releasing in any order, and the audit, repair, reset and rebase of
//! its view of the ring.
//!
//! This file holds the cursors' bookkeeping, polling and releasing;
//! `recovery` the audit, repair, realignment, take-over, reset and rebase.

mod recovery;

use super::Shared;
use crate::layout::{
    claim_geometry, cursor_pos, cursor_seq, pack_cursor, seq_diff, ClaimState, LogEntry, SEQ_MASK,
};
use crate::sync::Ordering;

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

/// Per log index (the consumer's own bookkeeping, not the slot state `SLOT_FREE`):
/// not handed out / handed out and held / released, read not past yet
/// / pending claim the peek cursor stepped over (see [`ConsumerCursor::park`]).
const IDLE: u8 = 0;
const HELD: u8 = 1;
const DONE: u8 = 2;
const PARKED: u8 = 3;
/// Added to `HELD` or `PARKED`: the claim's record is pinned (see
/// [`crate::layout::Pins`]), so the ring's read cursor may pass its bytes while
/// it stays parked or held.
const PIN: u8 = 0x80;

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
    /// Claims from the read cursor on that are done or pinned, and their units:
    /// the ring's read cursor (as published) is this much past ours in bytes.
    pass: u64,
    pass_units: u64,
    /// Records handed out and not released (state HELD).
    held: u64,
    /// After a reset with records still held: where the old generation ends and
    /// the new one begins (see [`ConsumerCursor::reset`]).
    gap: Option<Gap>,
}

/// The jump between generations after a reset that kept held records.
#[derive(Debug, Clone, Copy)]
struct Gap {
    /// The old generation's end: the read cursor jumps when it gets here.
    old_seq: u64,
    /// The new generation's first claim and position.
    new_seq: u64,
    new_pos: u64,
}

impl ConsumerCursor {
    pub fn new(log_entries: usize, read_cursor: u64) -> Self {
        let (seq, pos) = (cursor_seq(read_cursor), cursor_pos(read_cursor));
        ConsumerCursor {
            peek_seq: seq,
            peek_pos: pos,
            read_seq: seq,
            read_pos: pos,
            state: vec![IDLE; log_entries].into_boxed_slice(),
            units: vec![0; log_entries].into_boxed_slice(),
            pass: 0,
            pass_units: 0,
            held: 0,
            gap: None,
        }
    }

    /// Is `seq` between the read and peek cursors (skipping a reset's gap)?
    fn in_window(&self, seq: u64) -> bool {
        match self.gap {
            Some(g) => {
                (seq >= self.read_seq && seq < g.old_seq)
                    || (seq >= g.new_seq && seq < self.peek_seq)
            }
            None => seq >= self.read_seq && seq < self.peek_seq,
        }
    }

    /// The read cursor's claim number as producers must see it: the new
    /// generation's first claim while a reset's gap is open.
    pub fn published_read_seq(&self) -> u64 {
        self.gap.map_or(self.read_seq, |g| g.new_seq)
    }

    /// Can [`ConsumerCursor::reset`] run now? Not while records held from before an
    /// earlier reset are still out (one gap between generations at a time).
    pub fn can_reset(&self) -> bool {
        self.gap.is_none()
    }

    /// Records handed out and not yet released.
    pub fn held(&self) -> u64 {
        self.held
    }

    #[inline]
    fn idx(&self, seq: u64) -> usize {
        (seq & (self.state.len() as u64 - 1)) as usize
    }

    /// Records handed out and not yet passed by the read cursor.
    pub fn outstanding(&self) -> u64 {
        match self.gap {
            Some(g) => (g.old_seq - self.read_seq) + (self.peek_seq - g.new_seq),
            None => self.peek_seq - self.read_seq,
        }
    }

    /// Units between the ring's read cursor as we publish it and the peek cursor:
    /// what we hold that producers cannot claim (pinned claims behind it are
    /// placed around instead).
    pub fn held_units(&self) -> u64 {
        self.peek_pos - self.front_pos()
    }

    /// Our read position as we publish it: past the claims from our read cursor
    /// on that are done or pinned. Unmasked, like our other positions.
    pub fn front_pos(&self) -> u64 {
        self.read_pos + self.pass_units
    }

    /// Looks at the next claim, once.
    pub fn poll(&mut self, sh: &Shared<'_>) -> Poll {
        let v = self.load_peek(sh);
        self.poll_value(sh, v)
    }

    /// Loads the entry at the peek cursor (Acquire: pairs with the producer's
    /// committing CAS, Release). For [`ConsumerCursor::poll_value`].
    pub fn load_peek(&self, sh: &Shared<'_>) -> u64 {
        sh.entry(self.peek_seq).load(Ordering::Acquire)
    }

    /// Acts on the entry value `v` loaded at the peek cursor by
    /// [`ConsumerCursor::load_peek`]. Nothing it hands out was loaded after `v`: a
    /// caller that looks at parked claims between the two keeps each producer's
    /// records in commit order.
    pub fn poll_value(&mut self, sh: &Shared<'_>, v: u64) -> Poll {
        if self.outstanding() >= self.state.len() as u64 {
            // A parked claim at our read cursor holds the claim log, not a frame
            // we handed out: nothing more can be claimed until it is resolved, so
            // wait for it.
            if self.state[self.idx(self.read_seq)] & !PIN == PARKED {
                return Poll::Empty;
            }
            return Poll::Saturated;
        }
        let k = self.peek_seq;
        if LogEntry::unpack(v).stamp != k & SEQ_MASK {
            // Not claimed yet, unless the write cursor is already past claim k: a
            // claim's entry is stamped before anyone moves the cursor past it (the
            // mover read the stamp with Acquire and published with its CAS), so with
            // the cursor loaded first, a missing stamp on a second look means the
            // entry was overwritten.
            let w = sh.write.load(Ordering::Acquire);
            let v2 = sh.entry(k).load(Ordering::Acquire);
            if LogEntry::unpack(v2).stamp != k & SEQ_MASK {
                let ahead = seq_diff(cursor_seq(w), k);
                if ahead != 0 && ahead <= self.state.len() as u64 {
                    return Poll::Corrupt("claim log entry overwritten behind the write cursor");
                }
            }
            // Claimed just now (or missing): look again on the next poll, so nothing
            // is handed out that was loaded after the caller's other checks.
            return Poll::Empty;
        }
        let e = LogEntry::unpack(v);
        if e.units == 0 || self.held_units() + e.units > sh.cap_units {
            // At the write cursor, nobody claimed it (a claim of that length could
            // not be made): a value a peer wrote ahead of every claim. Back to free,
            // and nothing is lost.
            // Acquire: as any cursor load.
            let w = sh.write.load(Ordering::Acquire);
            if cursor_seq(w) == k & SEQ_MASK
                && sh
                    .entry(k)
                    .compare_exchange(
                        v,
                        LogEntry::initial(k, self.state.len() as u64),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return Poll::Empty;
            }
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
        if state == HELD {
            self.held += 1;
        }
    }

    /// Steps the peek cursor over the pending claim it stands on (of `units` units,
    /// as validated by [`ConsumerCursor::poll`]), so later records can be handed
    /// out while it stays pending. Its log entry stays ours until
    /// [`ConsumerCursor::poll_parked`] resolves it (the read cursor's claim number
    /// cannot pass it); its bytes too unless `pinned` (the caller pinned its record,
    /// see [`crate::layout::Pins`]): then the ring's read cursor may pass them.
    /// Returns its sequence number and position.
    pub fn park(&mut self, units: u64, pinned: bool) -> (u64, u64) {
        let at = (self.peek_seq, self.peek_pos);
        self.step(units, if pinned { PARKED | PIN } else { PARKED });
        self.advance_pass();
        at
    }

    /// Looks once at a claim parked at (`seq`, `pos`): a committed record is handed
    /// out (`Record`), an aborted or abandoned one stepped over (`Skipped`), a
    /// pending one reported (`Pending`). An entry that no longer matches what was
    /// parked is `Corrupt`.
    pub fn poll_parked(&mut self, sh: &Shared<'_>, seq: u64, pos: u64) -> Poll {
        let i = self.idx(seq);
        if self.state[i] & !PIN != PARKED || !self.in_window(seq) {
            return Poll::Corrupt("parked claim lost");
        }
        // Acquire: pairs with the producer's committing CAS (Release).
        let v = sh.entry(seq).load(Ordering::Acquire);
        let e = LogEntry::unpack(v);
        if e.stamp != seq & SEQ_MASK || e.units != self.units[i] as u64 {
            return Poll::Corrupt("claim log entry of a pending claim overwritten");
        }
        match e.state {
            ClaimState::Claimed => Poll::Pending {
                slot: e.slot,
                value: v,
            },
            ClaimState::Committed => {
                let Some((rec_off, rec_units)) = claim_geometry(pos, e.units, sh.cap_units) else {
                    return Poll::Corrupt("claim geometry");
                };
                self.state[i] = HELD | (self.state[i] & PIN);
                self.held += 1;
                Poll::Record {
                    seq,
                    rec_off,
                    rec_units,
                }
            }
            state @ (ClaimState::Aborted | ClaimState::Abandoned) => {
                self.state[i] = DONE;
                self.advance_read();
                Poll::Skipped { state }
            }
        }
    }

    /// Takes back the hand-out of the record `seq`, the last one [`poll`] handed
    /// out, whose entry a peer marked committed while its holder was still writing
    /// it (the holder's open-claim word still holds the claim): the entry goes back
    /// to `claimed` (a CAS from `committed`, AcqRel, so a commit by the holder since
    /// wins) and the peek cursor back onto it, so the record is delivered once its
    /// holder commits it, or skipped if it dies. `false`: nothing was taken back.
    ///
    /// [`poll`]: ConsumerCursor::poll
    pub fn unpoll_forged_commit(&mut self, sh: &Shared<'_>, seq: u64, claimed: u64) -> bool {
        let e = LogEntry::unpack(claimed);
        let i = self.idx(seq);
        if seq.wrapping_add(1) != self.peek_seq
            || self.state[i] != HELD
            || e.units as u32 != self.units[i]
        {
            return false;
        }
        let committed = LogEntry {
            state: ClaimState::Committed,
            ..e
        }
        .pack();
        if sh
            .entry(seq)
            .compare_exchange(committed, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.state[i] = IDLE;
        self.held -= 1;
        self.peek_seq -= 1;
        self.peek_pos -= e.units;
        true
    }

    /// Marks `seq` released (any order). Returns whether the read cursor moved.
    pub fn release(&mut self, seq: u64) -> Result<bool, NotHeld> {
        if !self.in_window(seq) {
            return Err(NotHeld);
        }
        let i = self.idx(seq);
        if self.state[i] & !PIN != HELD {
            return Err(NotHeld);
        }
        self.state[i] = DONE;
        self.held -= 1;
        Ok(self.advance_read())
    }

    /// Is `seq` handed out and not released?
    pub fn is_held(&self, seq: u64) -> bool {
        self.in_window(seq) && self.state[self.idx(seq)] & !PIN == HELD
    }

    /// Moves the read cursor over the released prefix, and the published
    /// position over the done or pinned claims after it. Returns whether what we
    /// publish moved.
    fn advance_read(&mut self) -> bool {
        let mut moved = false;
        loop {
            if let Some(g) = self.gap {
                if self.read_seq == g.old_seq {
                    // Every record of the old generation is released: join the new.
                    self.read_seq = g.new_seq;
                    self.read_pos = g.new_pos;
                    self.gap = None;
                    self.pass = 0;
                    self.pass_units = 0;
                    moved = true;
                }
            }
            let end = self.gap.map_or(self.peek_seq, |g| g.old_seq);
            if self.read_seq >= end {
                break;
            }
            let i = self.idx(self.read_seq);
            if self.state[i] != DONE {
                break;
            }
            self.state[i] = IDLE;
            let units = self.units[i] as u64;
            self.read_pos += units;
            self.read_seq += 1;
            if self.pass > 0 {
                // Already passed in bytes: only our claim number moves.
                self.pass -= 1;
                self.pass_units -= units;
            }
            moved = true;
        }
        self.advance_pass() || moved
    }

    /// Moves the published position over the claims after the read cursor (and
    /// those it already passes) that are done or pinned: their bytes are free, or
    /// producers place records around them. Within the generation the read
    /// cursor is in. Returns whether it moved.
    fn advance_pass(&mut self) -> bool {
        let end = self.gap.map_or(self.peek_seq, |g| g.old_seq);
        let mut moved = false;
        while self.read_seq + self.pass < end {
            let i = self.idx(self.read_seq + self.pass);
            if self.state[i] != DONE && self.state[i] & PIN == 0 {
                break;
            }
            self.pass += 1;
            self.pass_units += self.units[i] as u64;
            moved = true;
        }
        moved
    }

    /// The ring's read cursor as we publish it: our claim number (see
    /// [`ConsumerCursor::published_read_seq`]) and our published position
    /// ([`ConsumerCursor::front_pos`]). Producers compare claim numbers and
    /// positions separately, so the two need not belong to one claim.
    pub fn published(&self) -> u64 {
        pack_cursor(self.published_read_seq(), self.front_pos())
    }

    /// Our own read cursor, its claim number and position belonging to one
    /// claim: where a consumer taking over from us would start.
    pub fn own_read(&self) -> u64 {
        pack_cursor(self.published_read_seq(), self.read_pos)
    }

    /// Publishes our read cursor as the ring's (Release: everything we did with the
    /// released bytes happens before a producer can claim them again). A consumer
    /// with tethered consumers publishes the farthest behind of theirs and ours
    /// instead (see [`farthest_behind`](super::farthest_behind)).
    pub fn publish(&self, sh: &Shared<'_>) {
        sh.read.store(self.published(), Ordering::Release);
    }

    /// Marks the pending claim at the peek cursor abandoned. `false`: it changed
    /// meanwhile (look again).
    pub fn abandon(&self, sh: &Shared<'_>, value: u64) -> bool {
        Self::abandon_at(sh, self.peek_seq, value)
    }

    /// Marks the pending claim `seq` (entry `value`) abandoned (AcqRel: the holder's
    /// commit CAS and ours cannot both succeed). `false`: it changed meanwhile.
    pub fn abandon_at(sh: &Shared<'_>, seq: u64, value: u64) -> bool {
        let e = LogEntry::unpack(value);
        let new = LogEntry {
            state: ClaimState::Abandoned,
            ..e
        }
        .pack();
        sh.entry(seq)
            .compare_exchange(value, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}
