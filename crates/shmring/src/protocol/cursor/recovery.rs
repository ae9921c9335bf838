//! The consumer's recovery of its view of the ring: the audit of the write
//! cursor and the repair of what a peer moved ahead of it, realigning a
//! reader's position, taking over from another consumer, the reset that
//! starts a new generation of claim numbers, and the rebase onto it.

use super::{ConsumerCursor, Gap, DONE, HELD, IDLE, PARKED, PIN};
use crate::layout::{
    claim_geometry, cursor_pos, cursor_seq, pack_cursor, pos_diff, seq_diff, ClaimState, LogEntry,
    SEQ_MASK,
};
use crate::protocol::{pack_pin, Shared};
use crate::sync::Ordering;

impl ConsumerCursor {
    /// Checks the shared write cursor against the claim log and our own cursors:
    /// every claim between the peek and write cursors must be stamped, and the write
    /// position must be exactly the peek position plus their lengths; the entry at
    /// the write cursor, and every one after it up to a full log, must be free or
    /// being claimed. `Err` names the first contradiction. O(log size). First it
    /// helps the write cursor past claims already stamped at it, as any producer
    /// would: a producer that died (or stalls) between stamping its entry and
    /// moving the cursor leaves the cursor behind a claim we may already have
    /// stepped over, which is no contradiction.
    pub fn audit_write_cursor(&self, sh: &Shared<'_>) -> Result<(), &'static str> {
        let n = self.state.len() as u64;
        // Acquire (inside): the entries of every claim the cursor passed are visible.
        let w = sh.help_write_cursor();
        let (k, p) = (cursor_seq(w), cursor_pos(w));
        // Claims ahead of the peek cursor: at most a log's worth. (More than a log
        // ahead of the read cursor is possible when a peer moved the published read
        // cursor's claim number while frames were held: those claims share log
        // entries with held frames, which the peek cursor steps onto only once the
        // frames are released, and bytes are not affected.)
        if seq_diff(k, self.peek_seq) > n {
            return Err("write cursor's claim number is outside the claim log");
        }
        if pos_diff(p, self.front_pos()) > sh.cap_units {
            return Err("write cursor's position is outside the ring");
        }
        let mut pos = self.peek_pos;
        for d in 0..seq_diff(k, self.peek_seq) {
            let j = self.peek_seq + d;
            // Acquire: as in `poll`.
            let e = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire));
            if e.stamp != j & SEQ_MASK || e.units == 0 || e.units > sh.cap_units {
                return Err("claim log entry behind the write cursor is not a claim");
            }
            pos += e.units;
        }
        if pos_diff(p, pos) != 0 {
            return Err("write cursor's position contradicts the claim log");
        }
        let e = LogEntry::unpack(sh.entry(k).load(Ordering::Acquire));
        let stamped = e.stamp == k & SEQ_MASK;
        if !stamped && e.stamp != k.wrapping_sub(n) & SEQ_MASK {
            return Err("claim log entry at the write cursor is neither free nor claimed");
        }
        if stamped && (e.units == 0 || e.units > sh.cap_units) {
            return Err("claim at the write cursor has an impossible length");
        }
        // The entries producers will claim next hold their previous generation (or,
        // claimed since we loaded the cursor, their own claim): anything else would
        // stop producers when they get there.
        // Claims are stamped in order (a claimer stamps entry j only once the cursor
        // reads j, and the cursor passes only stamped entries, which stay stamped
        // until released): a stamped entry past one we saw free is genuine only if
        // that one is stamped by now.
        let end = self.published_read_seq() + n;
        let mut first_free = None;
        for j in k + 1..end {
            let e = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire));
            let stamp = e.stamp;
            if stamp == j & SEQ_MASK {
                if e.units == 0 || e.units > sh.cap_units {
                    return Err("claim ahead of the write cursor has an impossible length");
                }
                if let Some(f) = first_free {
                    // Acquire, after the later entry: as in `poll`.
                    let again = LogEntry::unpack(sh.entry(f).load(Ordering::Acquire)).stamp;
                    if again != f & SEQ_MASK {
                        return Err("a claim ahead of the write cursor follows a free entry");
                    }
                    first_free = None;
                }
            } else if stamp == j.wrapping_sub(n) & SEQ_MASK {
                first_free.get_or_insert(j);
            } else {
                return Err("claim log entry ahead of the write cursor is not free");
            }
        }
        Ok(())
    }

    /// Rewrites to their free value the entries at and ahead of the write cursor
    /// that no claim can have written: not free and not stamped with their own
    /// claim number, stamped with an impossible length, or stamped past an entry
    /// that is still free (claims are stamped in order). No claim has reached them,
    /// so nothing is lost: producers stopped there claim again, with no reset. Each
    /// rewrite is a CAS from the value seen (AcqRel, like a producer's claim; a
    /// claim made meanwhile wins). Returns how many were rewritten.
    pub fn repair_ahead(&self, sh: &Shared<'_>) -> u32 {
        let n = self.state.len() as u64;
        // Acquire: as in `audit_write_cursor`.
        let k = cursor_seq(sh.write.load(Ordering::Acquire));
        if seq_diff(k, self.peek_seq) > n {
            return 0; // the cursor itself is wrong: the audit resets
        }
        let sane = |e: &LogEntry| e.units != 0 && e.units <= sh.cap_units;
        let mut repaired = 0;
        let mut first_free: Option<u64> = None;
        for j in k..self.published_read_seq() + n {
            let v = sh.entry(j).load(Ordering::Acquire);
            let e = LogEntry::unpack(v);
            let free = e.stamp == j.wrapping_sub(n) & SEQ_MASK;
            let claimed = e.stamp == j & SEQ_MASK && sane(&e);
            let forged = if free {
                first_free.get_or_insert(j);
                false
            } else if claimed {
                // Acquire, after the later entry: a free entry before a claim must be
                // claimed by now if the claim is real.
                first_free.is_some_and(|f| {
                    LogEntry::unpack(sh.entry(f).load(Ordering::Acquire)).stamp != f & SEQ_MASK
                })
            } else {
                true
            };
            if forged
                && sh
                    .entry(j)
                    .compare_exchange(
                        v,
                        LogEntry::initial(j, n),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                repaired += 1;
                first_free.get_or_insert(j);
            }
        }
        repaired
    }

    /// Holding nothing, re-derives the peek (and read) position from the write
    /// cursor back over the claims between: for a reader whose position went wrong
    /// on an entry a peer rewrote after the ring's consumer had passed it (the
    /// claims from the peek cursor on are intact, else the ring's consumer resets).
    /// `true`: the position now agrees with the write cursor.
    pub fn realign(&mut self, sh: &Shared<'_>) -> bool {
        let n = self.state.len() as u64;
        if self.held != 0 || self.gap.is_some() {
            return false;
        }
        // Acquire: as in `audit_write_cursor`.
        let w = sh.write.load(Ordering::Acquire);
        let (k, p) = (cursor_seq(w), cursor_pos(w));
        let ahead = seq_diff(k, self.peek_seq);
        if ahead > n {
            return false;
        }
        let mut units = 0u64;
        for d in 0..ahead {
            let j = self.peek_seq + d;
            let e = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire));
            if e.stamp != j & SEQ_MASK || e.units == 0 || e.units > sh.cap_units {
                return false;
            }
            units += e.units;
        }
        if units > sh.cap_units {
            return false;
        }
        let pos = p.wrapping_sub(units) & crate::layout::POS_MASK;
        self.rebase(self.peek_seq, pos);
        true
    }

    /// The position of claim `seq` if the claims from it to the write cursor are
    /// intact: the write cursor's position less their lengths (after helping the
    /// cursor past claims already stamped at it). For a consumer taking over a
    /// read cursor whose position ran ahead of its claim number (pinned records,
    /// see [`ConsumerCursor::front_pos`]).
    pub fn position_of(sh: &Shared<'_>, seq: u64, n: u64) -> Option<u64> {
        let w = sh.help_write_cursor();
        let (k, p) = (cursor_seq(w), cursor_pos(w));
        let ahead = seq_diff(k, seq);
        if ahead > n {
            return None;
        }
        let mut units = 0u64;
        for d in 0..ahead {
            let j = seq + d;
            // Acquire: as in `poll`.
            let e = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire));
            if e.stamp != j & SEQ_MASK || e.units == 0 || e.units > sh.cap_units {
                return None;
            }
            units += e.units;
        }
        (units <= sh.cap_units).then(|| p.wrapping_sub(units) & crate::layout::POS_MASK)
    }

    /// Taking over from a consumer that published `front` as its position, ahead
    /// of our read cursor (where its claim number is): the claims whose bytes lie
    /// before `front` were released by it (their bytes may be reused: they are
    /// done, not handed out again) or are pinned (`pinned(extent)` finds the
    /// record's extent, [`pack_pin`], in the pin table): those are parked,
    /// to be handed out when committed (again, for a frame it held) or skipped.
    /// Returns the parked claims' numbers and positions, oldest first.
    pub fn take_over(
        &mut self,
        sh: &Shared<'_>,
        front: u64,
        pinned: impl Fn(u64) -> bool,
    ) -> Vec<(u64, u64)> {
        let n = self.state.len() as u64;
        let mut parked = Vec::new();
        let ahead = pos_diff(front, self.read_pos);
        if ahead > sh.cap_units {
            return parked;
        }
        let limit = self.read_pos + ahead;
        while self.peek_pos < limit && self.outstanding() < n {
            // Acquire: as in `poll`.
            let e = LogEntry::unpack(sh.entry(self.peek_seq).load(Ordering::Acquire));
            if e.stamp != self.peek_seq & SEQ_MASK
                || e.units == 0
                || self.peek_pos + e.units > limit
            {
                break;
            }
            let Some((off, len)) = claim_geometry(self.peek_pos, e.units, sh.cap_units) else {
                break;
            };
            let open = matches!(e.state, ClaimState::Claimed | ClaimState::Committed);
            if open && pinned(pack_pin(off, len)) {
                parked.push((self.peek_seq, self.peek_pos));
                self.step(e.units, PARKED | PIN);
            } else {
                self.step(e.units, DONE);
            }
        }
        self.advance_read();
        parked
    }

    /// Starts a new generation of sequence numbers past anything a producer could
    /// still hold, so no stale claim can be mistaken for a new one: rewrites the
    /// claim log, then the read cursor, then the write cursor (producers that see a
    /// half-done reset retry). Records still held stay valid: their space stays
    /// behind the published read cursor until they are released, and the read
    /// cursor then jumps to the new generation. Pending and parked claims are
    /// forgotten (their producers' commits fail). `tethers_pos` is the
    /// farthest-behind byte the tethered consumers still hold (`None`: there are
    /// none): the new generation starts no more than a ring ahead of it and of our
    /// own read position, and the ring's read cursor keeps the farther behind of
    /// the two. Returns the new base cursor.
    ///
    /// The ring's read cursor is published from our state after the rebase, never
    /// from before it: with nothing held, our read cursor *is* the new base, so
    /// whatever lay between the old read position and the base (claims a peer
    /// made up, or a write cursor moved a ring ahead) is free again at once.
    pub fn reset(&mut self, sh: &Shared<'_>, tethers_pos: Option<u64>) -> u64 {
        let n = self.state.len() as u64;
        let base_seq = self.peek_seq + 2 * n;
        let own = self.front_pos();
        let floor_pos = tethers_pos.map_or(own, |t| {
            if pos_diff(own, t) <= sh.cap_units {
                t
            } else {
                own
            }
        });
        // Start after whatever producers had claimed, if the write cursor is sane and
        // the ring can afford it, so a writer still writing an old claim's record does not
        // scribble on new records soon.
        let w = sh.write.load(Ordering::Acquire);
        let ahead = pos_diff(cursor_pos(w), self.peek_pos);
        let behind = pos_diff(self.peek_pos, floor_pos).max(self.held_units());
        let base_pos = self.peek_pos
            + if behind + ahead <= sh.cap_units {
                ahead
            } else {
                0
            };
        // A swap, not a store: each entry is a read-modify-write ordered against
        // a producer's committing CAS on it, so exactly one of them reads the
        // other (the commit lands before the reset and is forgotten, or fails).
        // A plain store has the same meaning to the hardware, but loom does not
        // order a store racing a CAS by modification order (tokio-rs/loom#282),
        // and the model of this race (`tests/loom.rs`) must be sound. AcqRel: the
        // Release half publishes the new generation's entries before the cursors
        // stored below; the Acquire half is the read-modify-write's own.
        for k in base_seq..base_seq + n {
            sh.entry(k).swap(LogEntry::initial(k, n), Ordering::AcqRel);
        }
        self.rebase(base_seq, base_pos);
        // The ring's read cursor: our new claim number, and the farther behind of
        // our (new) read position and the tethered consumers'.
        let own = self.front_pos();
        let pos = match tethers_pos {
            Some(t) if pos_diff(own, t) <= sh.cap_units => t,
            _ => own,
        };
        sh.read.store(
            pack_cursor(self.published_read_seq(), pos),
            Ordering::Release,
        );
        let base = pack_cursor(base_seq, base_pos);
        sh.write.store(base, Ordering::Release);
        base
    }

    /// Moves the peek cursor to (`base_seq`, `base_pos`), a new generation: what is
    /// not held is done; records still held stay valid (their space stays behind
    /// our read position, and the read cursor jumps to the new generation once they
    /// are released: the gap). For a reset, and for a tethered consumer following
    /// one (it rebases on the write cursor, losing what it had not read).
    pub fn rebase(&mut self, base_seq: u64, base_pos: u64) {
        debug_assert!(self.can_reset(), "rebase while a reset's gap is open");
        // What is not held any more (released out of order, parked, skipped) is done.
        for seq in self.read_seq..self.peek_seq {
            let i = self.idx(seq);
            if self.state[i] & !PIN != HELD {
                self.state[i] = DONE;
            }
        }
        if self.held == 0 {
            self.state.fill(IDLE);
            self.read_seq = base_seq;
            self.read_pos = base_pos;
            self.pass = 0;
            self.pass_units = 0;
            self.gap = None;
        } else {
            // The old generation ends at the peek cursor (an earlier gap, if any,
            // is still closed by `advance_read` on the way there).
            let old_seq = self.peek_seq;
            let gap = Gap {
                old_seq,
                new_seq: base_seq,
                new_pos: base_pos,
            };
            self.gap = Some(gap);
            self.advance_read();
        }
        self.peek_seq = base_seq;
        self.peek_pos = base_pos;
    }
}
