//! Waiting: the consumer's sleep until a producer signals data, how long it
//! spins first ([`Spin`]), the eventfd arm/disarm pair, and waking producers that
//! wait for space.

use std::time::{Duration, Instant};

use crate::layout::{cursor_pos, cursor_seq, pos_diff, seq_diff, ClaimState, SEQ_MASK};
use crate::protocol::ConsumerCursor;
use crate::sync::{fence, Ordering};
use crate::{slots, tether, wake};

use super::Consumer;

impl Consumer {
    /// How long until the next health look is due (a pending claim's liveness check
    /// or the audit), so a crash or a scribble stalls us one interval at most.
    pub(super) fn until_next_look(&self, now: Instant) -> Duration {
        let iv = self.opts.liveness_interval;
        let mut due = self.last_audit.get() + iv;
        if let Some(w) = self.pending.get() {
            due = due.min(w.checked + iv);
        }
        if let Some(w) = self.parked.borrow().first() {
            due = due.min(w.checked + iv);
        }
        due.saturating_duration_since(now)
            .max(Duration::from_micros(100))
    }

    /// Sleeps until a producer signals data (or `max` passes).
    pub(super) fn sleep(&self, max: Duration) {
        let owner = self.role.is_owner();
        let f = self.role.data_futex(&self.seg);
        // Under a latency budget, after a wake that found records: sleep on our
        // timer, and let producers wake us only past the fill mark.
        let lazy = owner && self.found.replace(false) && self.opts.latency_budget.is_some();
        let max = match self.opts.latency_budget {
            Some(b) if lazy => max.min(b),
            _ => max,
        };
        if owner {
            // Before arming (its fence orders it): the mark producers judge by.
            f.need
                .store(if lazy { self.wake_mark() } else { 0 }, Ordering::Relaxed);
        }
        // One waiter (us, the ring's consumer) or counted waiters (see `Role::arm`).
        let seen = self.role.arm(f);
        // Re-check after arming so a commit made just before (or, for a tethered
        // consumer not adopted yet, the adoption) cannot be missed.
        // A release another thread queued meanwhile is applied at once too.
        let ready = self.release_queued()
            || if self.joined.get() {
                self.peek_is_final()
            } else {
                self.role.adoption_seen(&self.seg)
            };
        if ready {
            self.role.disarm(f);
            return;
        }
        if self.role.has_tethers() {
            // After arming: a tethered consumer that released space producers wait
            // for either sees us armed (and wakes us) or we see its cursor here.
            let cur = self.cur.borrow();
            self.publish(&cur);
            self.wake_producers(&cur);
        } else if !self.joined.get() {
            // Not adopted yet: make sure the ring's consumer looks.
            tether::poke_consumer(&self.seg);
        }
        if let Some(cc) = self.role.counters(&self.seg) {
            self.count(&cc.waits, 1);
        }
        // Woken or timed out, the caller looks again.
        match self.role.eventfd(&self.seg) {
            Some(fd) => wake::sleep_eventfd(fd, max),
            None => wake::sleep(f, seen, max),
        }
        self.role.disarm(f);
    }

    /// Under a latency budget: the fill (in units) past which a producer wakes us
    /// anyway, half the ring. (Producers also wake us at half the claim log.)
    fn wake_mark(&self) -> u32 {
        (self.seg.shared().cap_units / 2).clamp(1, u32::MAX as u64) as u32
    }

    /// Is the entry at peek something other than "empty" or "claimed"?
    fn peek_is_final(&self) -> bool {
        let cur = self.cur.borrow();
        let sh = self.seg.shared();
        let e = crate::layout::LogEntry::unpack(sh.entry(cur.peek_seq).load(Ordering::Acquire));
        e.stamp == cur.peek_seq & SEQ_MASK && e.state != ClaimState::Claimed
    }

    pub(super) fn wake_producers(&self, cur: &ConsumerCursor) {
        let f = &self.seg.control().space.0;
        if self.is_tethered() {
            // SeqCst: our published cursor before the flag (see `Consumer::sleep`):
            // producers wait for space and the ring's consumer publishes it.
            fence(Ordering::SeqCst);
            if f.waiting.load(Ordering::Relaxed) != 0 {
                tether::poke_consumer(&self.seg);
            }
            return;
        }
        // Someone seems to wait for space. If it is a producer that died asleep, its
        // count stays raised until its slot is reaped: look for such slots, at most
        // once per liveness interval, so waking is free again soon after a crash.
        if f.waiting.load(Ordering::Relaxed) != 0 {
            let now = Instant::now();
            let due = self
                .last_reap
                .get()
                .is_none_or(|t| now.duration_since(t) >= self.opts.liveness_interval);
            if due {
                self.last_reap.set(Some(now));
                slots::reap(&self.seg);
            }
        }
        if f.waiting.load(Ordering::Relaxed) != 0 && !self.enough_room(cur, f) {
            // Hysteresis: let the ring drain a while before waking producers, rather
            // than waking them for every released record. Producers re-check on
            // their own at least every 50 ms, so nobody waits forever.
            return;
        }
        if wake::notify(f, true, None) {
            f.need.store(0, Ordering::Relaxed);
            self.count(&self.seg.control().counters.0.wakes_sent, 1);
        }
    }

    /// Is there room for what the waiting producers need: their largest record,
    /// at least 1/16 of the ring, and 1/16 of the claim log? (Or is the ring empty?)
    fn enough_room(&self, _cur: &ConsumerCursor, f: &crate::layout::Futex) -> bool {
        let sh = self.seg.shared();
        let w = sh.write.load(Ordering::Relaxed);
        // The ring's read cursor as we published it (ours, or the farthest behind).
        let r = sh.read.load(Ordering::Relaxed);
        let used = pos_diff(cursor_pos(w), cursor_pos(r));
        if used == 0 {
            return true;
        }
        let cap = sh.cap_units;
        let n = self.seg.geometry().log_entries as u64;
        let records = seq_diff(cursor_seq(w), cursor_seq(r));
        // `need` is a peer's hint: no honest producer needs more than the largest record.
        let largest = crate::layout::record_units(self.seg.geometry().max_record);
        let want = (f.need.load(Ordering::Relaxed) as u64)
            .min(largest)
            .max(cap / 16);
        used + want <= cap && records + (n / 16).max(1) <= n
    }

    /// For an eventfd ring: sets the "consumer waiting" flag so producers signal the
    /// eventfd, and reports whether a record (or a skippable claim) is already there
    /// (then do not wait; call [`Consumer::try_next`]), or a shared consumer's
    /// release is queued (the next receive applies it). Pair with
    /// [`Consumer::disarm`] after the wait.
    ///
    /// A tethered consumer never waits on the ring's eventfd (producers signal it
    /// for the ring's consumer only): for it `arm` reports ready at once and does
    /// nothing, and `disarm` does nothing; wait with [`Consumer::next_timeout`].
    pub fn arm(&self) -> bool {
        if self.is_tethered() {
            return true;
        }
        let f = &self.seg.control().data.0;
        // Every commit wakes an eventfd waiter (no latency budget here).
        f.need.store(0, Ordering::Relaxed);
        wake::arm_one(f);
        // A release another thread queued (a shared consumer's): look again too.
        let ready = self.peek_is_final() || self.release_queued();
        if ready {
            wake::disarm_one(f);
        }
        ready
    }

    /// Clears the flag set by a successful wait after [`Consumer::arm`], and drains
    /// the eventfd.
    pub fn disarm(&self) {
        if self.is_tethered() {
            return;
        }
        wake::disarm_one(&self.seg.control().data.0);
        if let Some(fd) = self.seg.eventfd() {
            wake::drain_eventfd(fd);
        }
    }
}

/// How many polls a blocking wait spins before it sleeps: at most
/// `ConsumerOptions::spin` (its `max`), adapted to how records arrive. Each spin
/// that ends in a sleep anyway halves it; each sleep that a record ends within
/// `QUICK_RECORD` (a spin would have saved it) doubles it, from 1. So records a
/// few microseconds apart are caught spinning, and records tens of microseconds
/// apart cost no spin: an occasional quick wake there (a record late, the next on
/// time) brings back one poll, not `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spin {
    limit: u32,
    max: u32,
}

impl Spin {
    pub(super) fn new(max: u32) -> Spin {
        Spin { limit: max, max }
    }

    /// Polls to spin in the next wait.
    pub(super) fn limit(self) -> u32 {
        self.limit
    }

    /// The spin ended in a sleep: spin half as long next time.
    #[must_use]
    pub(super) fn slept(self) -> Spin {
        Spin {
            limit: self.limit / 2,
            ..self
        }
    }

    /// The sleep ended quickly: spin twice as long (at least one poll) next time.
    #[must_use]
    pub(super) fn woke_quickly(self) -> Spin {
        Spin {
            limit: self.limit.saturating_mul(2).max(1).min(self.max),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Spin;

    /// Polls spun over `waits` waits that each end in a sleep, the sleeps listed
    /// quick or not.
    fn spun(mut s: Spin, quick: impl IntoIterator<Item = bool>) -> (u64, Spin) {
        let mut total = 0u64;
        for q in quick {
            total += u64::from(s.limit());
            s = s.slept();
            if q {
                s = s.woke_quickly();
            }
        }
        (total, s)
    }

    #[test]
    fn records_far_apart_stop_the_spin() {
        let (first, s) = spun(Spin::new(64), [false; 7]);
        assert_eq!(first, 64 + 32 + 16 + 8 + 4 + 2 + 1);
        assert_eq!(s.limit(), 0);
        // Every tenth sleep quick (a record late, the next on time): one poll
        // after each (a return to the whole spin would make it 127 after each).
        let (total, s) = spun(s, (0..1000).map(|i| i % 10 == 9));
        assert_eq!(total, 99);
        assert_eq!(s.limit(), 1);
    }

    #[test]
    fn records_close_together_bring_the_whole_spin_back() {
        let (_, s) = spun(Spin::new(64), [false; 10]);
        assert_eq!(s.limit(), 0);
        // Every sleep quick: the limit doubles back up to the option, no further.
        let mut s = s;
        let mut seen = Vec::new();
        for _ in 0..9 {
            s = s.woke_quickly();
            seen.push(s.limit());
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        // A spin that fails and a sleep that ends quickly: it holds.
        assert_eq!(s.slept().woke_quickly().limit(), 64);
    }

    #[test]
    fn no_spin_stays_no_spin() {
        let s = Spin::new(0);
        assert_eq!(s.woke_quickly().limit(), 0);
        assert_eq!(s.slept().limit(), 0);
        let s = Spin::new(u32::MAX).slept().woke_quickly();
        assert_eq!(s.limit(), u32::MAX - 1);
        assert_eq!(Spin::new(1).slept().woke_quickly().limit(), 1);
    }
}
