//! Claim watching: polling the claim log at the peek cursor and at the parked
//! claims, and what the consumer does with what it finds (hands out a record,
//! skips a claim, waits for a pending one, overtakes or takes back one that stays
//! pending).

use std::time::Instant;

use crate::error::{Error, Result};
use crate::layout::{cursor_seq, seq_diff, ClaimState, RecordHeader, SEQ_MASK, UNIT};
use crate::producer::Meta;
use crate::protocol::{is_forged, ConsumerCursor, Poll};
use crate::slots;
use crate::sync::Ordering;
use crate::sys::now_ns;

use super::{Consumer, RawFrame};

/// A pending claim the consumer is watching: the one at its peek cursor, or one it
/// stepped over ("parked", see [`crate::ConsumerOptions::overtake_after`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Watched {
    pub(super) seq: u64,
    /// Parked claims: the claim's position (for its record's geometry).
    pub(super) pos: u64,
    /// First seen pending.
    pub(super) since: Instant,
    pub(super) since_ns: u64,
    /// Last liveness check.
    pub(super) checked: Instant,
}

/// When claims were first seen in flight: samples of the write cursor's claim
/// number, each with the time it was read, taken whenever the consumer starts
/// watching a pending claim and at each liveness look at one. A claim the
/// write cursor had passed at a sample existed then: its clocks start at the
/// oldest such sample. So every claim's clock starts within one liveness
/// interval of the moment it was made, however many claims are pending before
/// it (one clock for the ring, not one per claim in turn). Fixed size, no
/// allocation.
pub(super) struct ClaimClock {
    /// Oldest first: (claim number, when, when in ns).
    samples: [(u64, Instant, u64); CLOCK_SAMPLES],
    len: usize,
    n: u64,
}

const CLOCK_SAMPLES: usize = 16;

impl ClaimClock {
    pub(super) fn new() -> ClaimClock {
        ClaimClock {
            samples: [(0, Instant::now(), 0); CLOCK_SAMPLES],
            len: 0,
            n: 1,
        }
    }

    /// The write cursor read `w` (its claim number) at `now`. A sample whose
    /// claims are all behind the claims in flight now is no use any more.
    fn note(&mut self, w: u64, now: Instant, n: u64) {
        self.n = n;
        if self.len > 0 && self.samples[self.len - 1].0 == w {
            return;
        }
        if self.len == CLOCK_SAMPLES {
            self.samples.copy_within(1.., 0);
            self.len -= 1;
        }
        self.samples[self.len] = (w, now, now_ns());
        self.len += 1;
    }

    /// Since when claim `seq` (masked) has been in flight, as far as the samples
    /// tell; `now` if none saw it.
    fn since(&mut self, seq: u64, now: Instant) -> (Instant, u64) {
        // Drop samples that saw only claims before this one: later claims the
        // peek cursor reaches are after it too.
        while self.len > 0 {
            let d = seq_diff(self.samples[0].0, seq);
            if d != 0 && d <= self.n {
                return (self.samples[0].1, self.samples[0].2);
            }
            self.samples.copy_within(1.., 0);
            self.len -= 1;
        }
        (now, now_ns())
    }
}

/// Parked claims watched without allocating; more grow the list (at most one per
/// claim log entry: every parked claim is in flight).
pub(super) const PARKED_PREALLOC: usize = 16;

/// The ring's consumer notes the ring's occupancy every this many records (and at
/// every audit).
const OCCUPANCY_EVERY: u32 = 16;

/// What one poll of the claim log leads to.
pub(super) enum Step {
    Frame(RawFrame),
    Again,
    Wait,
}

impl Consumer {
    pub(super) fn poll_once(&self) -> Result<Step> {
        let sh = self.seg.shared();
        let mut cur = self.cur.borrow_mut();
        // The peek entry is loaded before the parked claims are looked at, and
        // nothing loaded later is handed out from the peek cursor: so a parked
        // claim committed before a later record of its producer comes out first.
        let v = cur.load_peek(&sh);
        if !self.parked.borrow().is_empty() {
            if let Some(step) = self.poll_parked(&mut cur)? {
                return Ok(step);
            }
        }
        let poll = cur.poll_value(&sh, v);
        self.on_poll(&mut cur, poll, None)
    }

    /// Looks at the parked claims once each, oldest first; the first that
    /// resolves decides the step.
    fn poll_parked(&self, cur: &mut ConsumerCursor) -> Result<Option<Step>> {
        let sh = self.seg.shared();
        let mut i = 0;
        loop {
            let Some(w) = self.parked.borrow().get(i).copied() else {
                return Ok(None);
            };
            let poll = cur.poll_parked(&sh, w.seq, w.pos);
            if !matches!(poll, Poll::Pending { .. }) {
                self.parked.borrow_mut().remove(i);
                self.publish_oldest_pending();
            }
            match self.on_poll(cur, poll, Some((i, w.seq)))? {
                Step::Wait => i += 1,
                step => return Ok(Some(step)),
            }
        }
    }

    /// Acts on what a poll found: at the peek cursor (`parked` None) or on the
    /// parked claim at that index of the parked list, with that sequence number.
    fn on_poll(
        &self,
        cur: &mut ConsumerCursor,
        poll: Poll,
        parked: Option<(usize, u64)>,
    ) -> Result<Step> {
        let sh = self.seg.shared();
        let counters = self.role.counters(&self.seg);
        match poll {
            Poll::Record {
                seq,
                rec_off,
                rec_units,
            } => {
                match parked {
                    None => self.set_pending(None),
                    // Its record stays pinned while the frame is held.
                    Some(_) => self.pins.borrow_mut().handed_out(&self.seg, seq),
                }
                // SAFETY: rec_off + rec_units <= cap_units (validated geometry), so the
                // 64-byte header lies inside the data ring. It may be changing under
                // us (untrusted): one volatile read into a local, checked below.
                let h: RecordHeader = unsafe {
                    std::ptr::read_volatile(
                        self.seg.data().add((rec_off * UNIT) as usize) as *const RecordHeader
                    )
                };
                let room = (rec_units - 1) * UNIT;
                if h.len > room || h.seq != crate::layout::header_seq(seq) {
                    // Marked committed by a peer while its holder still writes it (the
                    // holder's open-claim word still holds the claim): wait for the
                    // holder instead, as for any pending claim.
                    if parked.is_none() && self.unpoll_forged_commit(cur, seq) {
                        let h = &self.seg.control().health.0;
                        self.count(&h.forged_claims, 1);
                        self.count(&self.seg.control().counters.0.corruption, 1);
                        return Ok(Step::Wait);
                    }
                    let _ = self.release_in(cur, seq);
                    self.publish(cur);
                    let what = if h.len > room {
                        "record length exceeds its claim"
                    } else {
                        "record header does not belong to its claim"
                    };
                    // A header where no honest producer put it: either the record
                    // was scribbled, or producers write where we do not read (a
                    // shifted write cursor). The audit tells; the latter resets.
                    if let Err(ring) = cur.audit_write_cursor(&sh) {
                        return self.corrupt(cur, seq, ring);
                    }
                    // One bad record in a ring whose claims still add up: skip it
                    // (counted), no reset, so the records after it are not lost.
                    if let Some(cc) = counters {
                        self.count(&cc.corruption, 1);
                    }
                    let mut health = self.health.get();
                    health.last_corruption = Some(what);
                    self.health.set(health);
                    if self.opts.auto_reset {
                        return Ok(Step::Again);
                    }
                    return Err(Error::Corrupt {
                        segment: self.seg.label(),
                        seq,
                        what,
                    });
                }
                if !self.opts.filter.takes_record(h.kind, h.stream) || self.too_old(&h) {
                    // Refused: released unread, its space back to producers now.
                    if self.release_in(cur, seq).unwrap_or(false) {
                        self.publish(cur);
                        self.wake_producers(cur);
                    }
                    self.count(self.role.filtered(&self.seg), 1);
                    return Ok(Step::Again);
                }
                if self.role.is_owner() {
                    // Occupancy needs the write cursor, a line producers write at
                    // every claim: looked at every OCCUPANCY_EVERY records (and at
                    // every audit), not at each.
                    let n = self.handed.get().wrapping_add(1);
                    self.handed.set(n);
                    if n % OCCUPANCY_EVERY == 0 {
                        self.note_occupancy(cur);
                    }
                }
                let (records, bytes) = self.role.consumed(&self.seg);
                self.count(records, 1);
                self.count(bytes, h.len);
                // SAFETY: the payload follows the header inside the record (len <= room).
                let ptr = unsafe { self.seg.data().add(((rec_off + 1) * UNIT) as usize) };
                Ok(Step::Frame(RawFrame {
                    seq,
                    ptr,
                    len: h.len as usize,
                    meta: Meta {
                        stream: h.stream,
                        kind: h.kind,
                        timestamp_ns: h.timestamp_ns,
                        flags: h.flags,
                    },
                }))
            }
            Poll::Skipped { state } => {
                match parked {
                    None => self.set_pending(None),
                    // Aborted: its holder settled it. Abandoned (by us, a reset,
                    // or a peer): its holder may still write it until it settles.
                    Some((_, seq)) if state == ClaimState::Aborted => {
                        if self.pins.borrow_mut().settled(&self.seg, seq) {
                            self.pins_changed();
                        }
                    }
                    Some((_, seq)) => {
                        self.pins.borrow_mut().taken_back(seq);
                    }
                }
                if let (Some(cc), true) = (counters, state != ClaimState::Abandoned) {
                    self.count(&cc.skipped_aborted, 1);
                }
                self.publish(cur);
                self.wake_producers(cur);
                Ok(Step::Again)
            }
            Poll::Empty => Ok(Step::Wait),
            Poll::Pending { slot, value } => self.on_pending(cur, slot, value, parked),
            Poll::Saturated => Err(Error::TooManyHeld {
                segment: self.seg.label(),
                held: cur.outstanding(),
            }),
            Poll::Corrupt(what) => {
                let seq = parked.map_or(cur.peek_seq, |(_, seq)| seq);
                self.corrupt(cur, seq, what)
            }
        }
    }

    /// Is the record older than `max_age` (`ConsumerOptions::max_age`)? Its
    /// timestamp is a producer's word: one ahead of now is age 0, and a forged
    /// old one only drops that producer's own record, as not sending it would.
    fn too_old(&self, h: &RecordHeader) -> bool {
        self.opts.max_age.is_some_and(|max| {
            crate::now_ns().saturating_sub(h.timestamp_ns) > max.as_nanos() as u64
        })
    }

    /// The record `seq` just handed out has no header of its own: was its entry
    /// marked committed by a peer while its producer is still writing it? Then the
    /// entry goes back to claimed and the peek cursor onto it (see
    /// [`ConsumerCursor::unpoll_forged_commit`]).
    fn unpoll_forged_commit(&self, cur: &mut ConsumerCursor, seq: u64) -> bool {
        if !self.role.is_owner() {
            return false;
        }
        let sh = self.seg.shared();
        // Acquire: as any entry load.
        let e = crate::layout::LogEntry::unpack(sh.entry(seq).load(Ordering::Acquire));
        if e.state != ClaimState::Committed
            || e.stamp != seq & SEQ_MASK
            || e.slot >= self.seg.geometry().max_producers
        {
            return false;
        }
        let claimed = crate::layout::LogEntry {
            state: ClaimState::Claimed,
            ..e
        }
        .pack();
        // Acquire: pairs with the holder's Release stores of its open-claim word.
        self.seg.slot(e.slot).open_claim.load(Ordering::Acquire) == claimed
            && cur.unpoll_forged_commit(&sh, seq, claimed)
    }

    /// A claim is pending: every liveness interval, skip it if its producer is
    /// dead or it is not really that producer's, and take it back once it has been
    /// pending for the claim timeout; park it (pinned, so the ring goes on around
    /// it) once it has been pending for `overtake_after`. A claim taken back while
    /// its holder may still write it stays pinned until the holder settles it.
    fn on_pending(
        &self,
        cur: &mut ConsumerCursor,
        slot: u32,
        value: u64,
        parked: Option<(usize, u64)>,
    ) -> Result<Step> {
        if slot >= self.seg.geometry().max_producers {
            let seq = parked.map_or(cur.peek_seq, |(_, seq)| seq);
            return self.corrupt(cur, seq, "claim names a producer slot that does not exist");
        }
        let now = Instant::now();
        let mut w = match parked {
            Some((i, _)) => self.parked.borrow()[i],
            None => match self.pending.get() {
                Some(w) if w.seq == cur.peek_seq => w,
                _ => {
                    let w = self.watch(cur, now);
                    self.set_pending(Some(w));
                    if w.checked == now {
                        return Ok(Step::Wait);
                    }
                    w
                }
            },
        };
        if now.duration_since(w.checked) < self.opts.liveness_interval {
            return Ok(Step::Wait);
        }
        w.checked = now;
        drop(self.note_claims(now));
        match parked {
            Some((i, _)) => self.parked.borrow_mut()[i] = w,
            None => self.pending.set(Some(w)),
        }
        let sh = self.seg.shared();
        // Only the ring's consumer judges producers; a tethered one waits for its
        // verdict (the claim turns abandoned) like for the producer's commit.
        let owner = self.role.is_owner();
        let alive = !owner || slots::is_alive(&self.seg, slot);
        let forged =
            owner && alive && is_forged(&sh, w.seq, value, &self.seg.slot(slot).open_claim);
        // A claim the consumer waits for in claim order is taken back at the
        // claim timeout. A parked claim stops nobody (the ring goes on around it,
        // its record pinned), so a live holder keeps it, however long it takes
        // (a `queue` of pool buffers before a GStreamer sink holds claims for
        // half a second and more), while the claim log has room: its log entry
        // holds every claim after it. Once the log is half full behind parked
        // claims, those past the claim timeout are taken back together (still
        // pinned, so nothing is risked), before the log fills and producers
        // wait; once it is full, any parked claim is.
        let age = now.duration_since(w.since);
        let timed_out = self.opts.claim_timeout.is_some_and(|t| age >= t);
        // A claim due to be parked is parked, not taken back, even when a late
        // look (a consumer that was not running) finds it past the claim timeout.
        let to_park = parked.is_none() && self.opts.overtake_after.is_some_and(|o| age >= o);
        let expired = owner
            && match parked {
                None => timed_out && !to_park,
                Some(_) => {
                    let used = self.log_used(cur);
                    let n = self.seg.geometry().log_entries as u64;
                    used >= n || timed_out && used >= n / 2
                }
            };
        if !alive || forged || expired {
            // Taken back from a live holder whose open-claim word holds the claim:
            // it may still write the record, which stays pinned until it settles.
            // With no room left to pin it, it is not taken back yet.
            let orphan = alive && !forged;
            if orphan {
                let pins = self.pins.borrow();
                if !pins.is_parked(w.seq) && !pins.has_room() {
                    return Ok(Step::Wait);
                }
            }
            if ConsumerCursor::abandon_at(&sh, w.seq, value) {
                let h = &self.seg.control().health.0;
                if !alive {
                    self.count(&self.seg.control().counters.0.abandoned, 1);
                } else if forged {
                    self.count(&h.forged_claims, 1);
                    self.count(&self.seg.control().counters.0.corruption, 1);
                } else {
                    self.count(&h.expired_claims, 1);
                }
                let mut pins = self.pins.borrow_mut();
                if orphan {
                    if !pins.taken_back(w.seq) {
                        pins.pin(&self.seg, w.seq, w.pos, value, true);
                    }
                } else if pins.settled(&self.seg, w.seq) {
                    drop(pins);
                    self.pins_changed();
                }
            }
            slots::reap(&self.seg);
            return Ok(Step::Again);
        }
        if owner {
            self.publish_oldest_pending();
        }
        if parked.is_none() {
            if let Some(limit) = self.opts.overtake_after {
                if now.duration_since(w.since) >= limit {
                    let units = crate::layout::LogEntry::unpack(value).units;
                    // Pinned, the ring's read cursor goes past it at once: the
                    // ring goes on around it (the ring's consumer only).
                    let pinned = owner
                        && self
                            .pins
                            .borrow_mut()
                            .pin(&self.seg, w.seq, w.pos, value, false);
                    let (seq, pos) = cur.park(units, pinned);
                    self.parked.borrow_mut().push(Watched { seq, pos, ..w });
                    self.set_pending(None);
                    if pinned {
                        self.publish(cur);
                        self.wake_producers(cur);
                    }
                    if owner {
                        self.count(&self.seg.control().health.0.stalled_claims, 1);
                    }
                    let mut h = self.health.get();
                    h.stalled_claims += 1;
                    self.health.set(h);
                    return Ok(Step::Again);
                }
            }
        }
        Ok(Step::Wait)
    }

    /// Claim log entries in flight from our read cursor to the write cursor (the
    /// log's size of them: producers cannot claim).
    fn log_used(&self, cur: &ConsumerCursor) -> u64 {
        // Acquire: as any cursor load (only its claim number is used).
        let w = cursor_seq(self.seg.shared().write.load(Ordering::Acquire));
        seq_diff(w, cur.read_seq & SEQ_MASK)
    }

    /// Starts watching the claim pending at the peek cursor, with its clocks
    /// (overtaking, the claim timeout, the first liveness look) started when the
    /// claim was first seen in flight (see [`ClaimClock`]): claims held together
    /// are parked and taken back together, not one after the other.
    fn watch(&self, cur: &ConsumerCursor, now: Instant) -> Watched {
        let (since, since_ns) = self.note_claims(now).since(cur.peek_seq & SEQ_MASK, now);
        Watched {
            seq: cur.peek_seq,
            pos: cur.peek_pos,
            since,
            since_ns,
            checked: since,
        }
    }

    /// Notes which claims are in flight now (the write cursor's claim number):
    /// at each new watch and each liveness look at a pending claim.
    fn note_claims(&self, now: Instant) -> std::cell::RefMut<'_, ClaimClock> {
        // Acquire: as any cursor load (only its claim number is used).
        let w = cursor_seq(self.seg.shared().write.load(Ordering::Acquire));
        let mut clock = self.clock.borrow_mut();
        clock.note(w, now, self.seg.geometry().log_entries as u64);
        clock
    }

    /// Notes the claim pending at the peek cursor. Publishing it for `stat` (one
    /// `fcntl` for the holder's pid) waits for its first liveness check, so a claim
    /// seen pending for a moment, as most are, costs no system call.
    fn set_pending(&self, w: Option<Watched>) {
        self.pending.set(w);
        if w.is_none() && self.published_since.get() != 0 {
            self.publish_oldest_pending();
        }
    }

    /// Writes the oldest pending claim (peek or parked) to the segment, for `stat`
    /// (the ring's consumer's only).
    pub(super) fn publish_oldest_pending(&self) {
        if !self.role.is_owner() {
            return;
        }
        let oldest = self.parked.borrow().first().copied().or(self.pending.get());
        let h = &self.seg.control().health.0;
        self.published_since.set(oldest.map_or(0, |w| w.since_ns));
        match oldest {
            None => h.oldest_pending_since_ns.store(0, Ordering::Relaxed),
            Some(w) => {
                let sh = self.seg.shared();
                let e = crate::layout::LogEntry::unpack(sh.entry(w.seq).load(Ordering::Relaxed));
                let slot = e.slot.min(self.seg.geometry().max_producers - 1);
                h.oldest_pending_slot.store(slot, Ordering::Relaxed);
                h.oldest_pending_pid
                    .store(slots::holder_pid(&self.seg, slot), Ordering::Relaxed);
                h.oldest_pending_since_ns
                    .store(w.since_ns, Ordering::Relaxed);
            }
        }
    }
}
