//! The ring's health: corruption (counted, and reset or reported), a tethered
//! consumer's resynchronisation, the periodic audit of the shared state, resets,
//! reaping dead producers' slots, and what the consumer has seen ([`Health`]).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{cursor_pos, cursor_seq, pack_cursor, pos_diff, seq_diff, UNIT};
use crate::protocol::ConsumerCursor;
use crate::sync::Ordering;
use crate::{slots, tether};

use super::claims::Step;
use super::{pins, Consumer};

/// What the consumer has seen of the ring's health (see [`Consumer::health`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Health {
    /// Resets this consumer made.
    pub resets: u64,
    /// Why the last one was made.
    pub last_corruption: Option<&'static str>,
    /// Claims overtaken because they stayed pending past `overtake_after`.
    pub stalled_claims: u64,
    /// The oldest claim still pending: its producer slot and how long it has been.
    pub oldest_pending: Option<(u32, Duration)>,
}

impl Consumer {
    /// Something in shared memory cannot have been written by an honest peer: count
    /// it and, with `auto_reset`, reset and carry on.
    pub(super) fn corrupt(
        &self,
        cur: &mut ConsumerCursor,
        seq: u64,
        what: &'static str,
    ) -> Result<Step> {
        if let Some(j) = self.role.line() {
            // The ring's consumer judges the ring: it resets it (we then carry on
            // from the new generation's start) or finds it intact. Jumping ahead
            // by ourselves would skip records it still delivers. A ring's consumer
            // that does neither for a few liveness intervals (gone, or blind to
            // what we see) leaves us to follow the write cursor.
            // Our position went wrong on an entry rewritten after the ring's
            // consumer passed it: take it again from the write cursor back.
            if cur.realign(&self.seg.shared()) && cur.audit_write_cursor(&self.seg.shared()).is_ok()
            {
                let mut h = self.health.get();
                h.last_corruption = Some(what);
                self.health.set(h);
                self.publish(cur);
                return Ok(Step::Again);
            }
            let resets = self.seg.control().counters.0.resets.load(Ordering::Relaxed);
            let since = self.corrupt_since.get().unwrap_or_else(Instant::now);
            self.corrupt_since.set(Some(since));
            let waited = since.elapsed() >= self.opts.liveness_interval * 4;
            if (resets != self.resets_seen.get() || waited) && cur.can_reset() {
                self.resets_seen.set(resets);
                self.corrupt_since.set(None);
                self.resync(cur, j, what);
                return Ok(Step::Again);
            }
            if cur.can_reset() {
                return Ok(Step::Wait);
            }
            return Err(Error::Corrupt {
                segment: self.seg.label(),
                seq,
                what,
            });
        }
        self.count(&self.seg.control().counters.0.corruption, 1);
        if self.opts.auto_reset && cur.can_reset() {
            self.reset_cursor(cur, what);
            return Ok(Step::Again);
        }
        Err(Error::Corrupt {
            segment: self.seg.label(),
            seq,
            what,
        })
    }

    /// A tethered consumer that finds the ring contradicting its cursors (the ring
    /// was reset, or scribbled and about to be): carry on from the write cursor,
    /// counting the records not read as lost. Frames held stay valid.
    fn resync(&self, cur: &mut ConsumerCursor, j: u32, why: &'static str) {
        let w = self.seg.shared().write.load(Ordering::Acquire);
        // The new generation's start, as the ring's consumer published it at its
        // reset: from there, not from the write cursor, so records committed since
        // the reset (which the ring's consumer delivers) are not skipped. A value
        // that cannot be at or behind the write cursor is not used.
        let base = self
            .seg
            .control()
            .tethers
            .0
            .reset_base
            .load(Ordering::Acquire);
        let n = self.seg.geometry().log_entries as u64;
        // Only from a generation before it (never back within the current one).
        let w = if seq_diff(cursor_seq(w), cur.peek_seq) > n
            && seq_diff(cursor_seq(w), cursor_seq(base)) <= n
            && pos_diff(cursor_pos(w), cursor_pos(base)) <= self.seg.geometry().cap_units()
        {
            base
        } else {
            w
        };
        let lost = seq_diff(cursor_seq(w), cur.peek_seq);
        if lost <= self.seg.geometry().log_entries as u64 {
            self.count(&tether::counters(&self.seg, j).lost, lost);
        }
        cur.rebase(cursor_seq(w), cursor_pos(w));
        self.parked.borrow_mut().clear();
        self.pending.set(None);
        let mut h = self.health.get();
        h.resets += 1;
        h.last_corruption = Some(why);
        self.health.set(h);
        self.publish(cur);
    }

    /// Updates the ring's peak occupancy (the ring's consumer): what it holds plus
    /// what producers claimed beyond its peek cursor.
    pub(super) fn note_occupancy(&self, cur: &ConsumerCursor) {
        let Some(cc) = self.role.counters(&self.seg) else {
            return;
        };
        let sh = self.seg.shared();
        let w = sh.write.load(Ordering::Relaxed);
        let ahead = pos_diff(cursor_pos(w), cur.peek_pos);
        let occ = (cur.held_units() + ahead.min(sh.cap_units)).min(sh.cap_units) * UNIT;
        self.own.raise(&self.seg, &cc.peak_occupancy, occ);
    }

    /// Runs [`Consumer::audit`] if a liveness interval has passed since the last one.
    /// `Ok(true)`: it reset the ring.
    pub(super) fn audit_if_due(&self, now: Instant) -> Result<bool> {
        self.since_audit.set(0);
        if now.duration_since(self.last_audit.get()) < self.opts.liveness_interval {
            return Ok(false);
        }
        self.audit()
    }

    /// Checks that the shared state agrees with ours, and mends it: the identity
    /// line, our published cursors and the consumer role are rewritten if a peer
    /// changed them (counted in `repairs` and `corruption`); a write cursor or claim
    /// log that contradicts our cursors is corruption (reset). Runs every liveness
    /// interval, busy or idle. `Ok(true)`: it reset the ring.
    pub fn audit(&self) -> Result<bool> {
        self.last_audit.set(Instant::now());
        self.since_audit.set(0);
        self.seg.check_size()?;
        if let Some(j) = self.role.line() {
            return self.audit_tethered(j);
        }
        let c = self.seg.control();
        let repair = |what: &'static str| {
            self.count(&c.health.0.repairs, 1);
            self.count(&c.counters.0.corruption, 1);
            let mut h = self.health.get();
            h.last_corruption = Some(what);
            self.health.set(h);
        };
        if !self.seg.identity_intact() {
            self.seg.restore_identity();
            repair("identity line changed");
        }
        if c.consumer.0.state.load(Ordering::Relaxed) != slots::CONSUMER_ATTACHED {
            c.consumer
                .0
                .state
                .store(slots::CONSUMER_ATTACHED, Ordering::Release);
            repair("consumer role changed");
        }
        let mut cur = self.cur.borrow_mut();
        let sh = self.seg.shared();
        // The ring's consumer from here on (a tethered one returned above).
        let own = cur.published();
        let ring = c.cursors.0.read.load(Ordering::Relaxed);
        if Some(ring) != self.role.published()
            || c.cursors.0.owner_read.load(Ordering::Relaxed) != own
        {
            self.publish(&cur);
            repair("read cursor changed");
        } else if ring != self.role.ring_read(&self.seg, own) {
            // The ring's read cursor is a function of our cursors and the
            // tethered consumers' lines, never a value kept on its own: one
            // that stopped following them (whatever put it there) would hold
            // space nobody holds for ever.
            self.publish(&cur);
        }
        let limit = self.opts.tether_stall_limit;
        let (detached, mended) = self.role.audit_tethers(&self.seg, own, limit);
        if mended > 0 {
            repair("tether mask or line state changed");
        }
        let asked = c.tethers.0.mask.load(Ordering::Relaxed) != 0;
        if detached > 0 || asked {
            self.publish(&cur);
            self.wake_producers(&cur);
        }
        self.note_occupancy(&cur);
        let peek = pack_cursor(cur.peek_seq, cur.peek_pos);
        if c.cursors.0.peek.load(Ordering::Relaxed) != peek {
            c.cursors.0.peek.store(peek, Ordering::Relaxed);
        }
        // Entries no claim has reached yet are mended in place: no reset.
        if cur.repair_ahead(&sh) > 0 {
            repair("claim log entry ahead of the write cursor rewritten");
        }
        if self.pins.borrow_mut().repair(&self.seg) {
            repair("pin table changed");
        }
        // Our counters as we counted them (a peer's writes there are rewritten).
        if self.own.repair(&self.seg) > 0 {
            repair("consumer counters changed");
        }
        // Records pinned for claims taken back: back once their holders settled
        // them or died.
        let unpinned = self.pins.borrow_mut().check_orphans(&self.seg);
        if unpinned {
            self.pins_changed();
        }
        self.audit_claims(&mut cur)
    }

    /// A tethered consumer's audit: is it still attached, is its line as it left
    /// it, do the write cursor and claim log agree with its cursors? `Ok(true)`: it
    /// resynchronised.
    fn audit_tethered(&self, j: u32) -> Result<bool> {
        if !self.check_role()? || !self.joined.get() {
            return Ok(false);
        }
        let mut cur = self.cur.borrow_mut();
        let l = tether::counters(&self.seg, j);
        if l.read.load(Ordering::Relaxed) != cur.published() {
            // Only we write our line's read cursor once adopted.
            return Err(tether::overwritten(&self.seg, j));
        }
        self.audit_claims(&mut cur)
    }

    /// Do the write cursor and the claim log in flight agree with our cursors? If
    /// not, that is corruption (see [`Consumer::corrupt`]). `Ok(true)`: it reset the
    /// ring (or, tethered, resynchronised).
    fn audit_claims(&self, cur: &mut ConsumerCursor) -> Result<bool> {
        if let Err(what) = cur.audit_write_cursor(&self.seg.shared()) {
            let seq = cur.peek_seq;
            return match self.corrupt(cur, seq, what)? {
                Step::Again => Ok(true),
                _ => Ok(false),
            };
        }
        Ok(false)
    }

    /// Resets the ring (see [`ConsumerCursor::reset`]), counted, and wakes producers.
    fn reset_cursor(&self, cur: &mut ConsumerCursor, why: &'static str) {
        let sh = self.seg.shared();
        let c = self.seg.control();
        self.seg.restore_identity();
        let tethers_pos = self.role.tethers_floor_pos(&self.seg, cur.front_pos());
        // Claims in flight are forgotten, but their holders may still write them:
        // their records stay pinned until they settle.
        self.pins.borrow_mut().forget_parked();
        self.pin_in_flight(cur);
        let base = cur.reset(&sh, tethers_pos);
        // Release: tethered consumers rebase here (see `resync`).
        c.tethers.0.reset_base.store(base, Ordering::Release);
        c.cursors
            .0
            .owner_read
            .store(cur.published(), Ordering::Release);
        self.role
            .note_published(c.cursors.0.read.load(Ordering::Relaxed));
        c.cursors
            .0
            .peek
            .store(pack_cursor(cur.peek_seq, cur.peek_pos), Ordering::Relaxed);
        // Nobody is asleep for data while we run; a peer may have raised these.
        c.data.0.waiting.store(0, Ordering::Relaxed);
        c.data.0.need.store(0, Ordering::Relaxed);
        c.space.0.need.store(0, Ordering::Relaxed);
        self.count(&c.counters.0.resets, 1);
        self.parked.borrow_mut().clear();
        self.pending.set(None);
        self.publish_oldest_pending();
        let mut h = self.health.get();
        h.resets += 1;
        h.last_corruption = Some(why);
        self.health.set(h);
        slots::reap(&self.seg);
        self.wake_producers(cur);
    }

    /// Before a reset forgets them: pins the records of the claims between the
    /// peek and write cursors whose live holders' open-claim words hold them (an
    /// honest producer still writing), as taken back. At most a log's worth of
    /// entries, stopping at the first that is not a claim.
    fn pin_in_flight(&self, cur: &ConsumerCursor) {
        let sh = self.seg.shared();
        let n = self.seg.geometry().log_entries as u64;
        // Acquire: as any cursor load.
        let w = cursor_seq(sh.write.load(Ordering::Acquire));
        let ahead = seq_diff(w, cur.peek_seq);
        if ahead > n {
            return;
        }
        let mut pins = self.pins.borrow_mut();
        let mut pos = cur.peek_pos;
        for j in cur.peek_seq..cur.peek_seq + ahead {
            // Acquire: as in `poll`.
            let v = sh.entry(j).load(Ordering::Acquire);
            let e = crate::layout::LogEntry::unpack(v);
            if e.stamp != j & crate::layout::SEQ_MASK || e.units == 0 || e.units > sh.cap_units {
                return;
            }
            if e.state == crate::layout::ClaimState::Claimed && pins::holder_may_write(&self.seg, v)
            {
                pins.pin(&self.seg, j, pos, v, true);
            }
            pos += e.units;
        }
    }

    /// Recovers from corruption by hand (with `auto_reset`, the consumer does this
    /// by itself): rewrites the claim log and the cursors and starts a new
    /// generation. Frames still held stay valid; claims in flight are forgotten, and
    /// a producer still holding one gets [`Error::Abandoned`] at commit. Refused
    /// ([`Error::Corrupt`]) while frames held from before an earlier reset are out.
    pub fn reset(&mut self) -> Result<()> {
        if !self.role.is_owner() {
            return Err(Error::Config(
                "a tethered consumer cannot reset the ring; the ring's consumer does".into(),
            ));
        }
        let mut cur = self.cur.borrow_mut();
        if !cur.can_reset() {
            return Err(Error::Corrupt {
                segment: self.seg.label(),
                seq: cur.peek_seq,
                what: "frames held from before the last reset are still out; release them first",
            });
        }
        self.reset_cursor(&mut cur, "reset by the application");
        Ok(())
    }

    /// Frees the slots of dead producers that hold nothing (done automatically when
    /// a dead producer's claim is skipped, and by producers short of slots).
    pub fn reap(&self) -> u32 {
        slots::reap(&self.seg)
    }

    /// What this consumer has seen of the ring's health: resets (and why), claims
    /// overtaken, the oldest claim still pending.
    pub fn health(&self) -> Health {
        let mut h = self.health.get();
        let now = Instant::now();
        let oldest = self.parked.borrow().first().copied().or(self.pending.get());
        h.oldest_pending = oldest.map(|w| {
            let sh = self.seg.shared();
            let e = crate::layout::LogEntry::unpack(sh.entry(w.seq).load(Ordering::Relaxed));
            (e.slot, now.duration_since(w.since))
        });
        h
    }

    /// Resets this consumer made (by itself or through [`Consumer::reset`]).
    pub fn resets(&self) -> u64 {
        self.health.get().resets
    }
}
