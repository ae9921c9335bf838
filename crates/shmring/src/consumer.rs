//! The consumer: zero-copy reads with three cursors.
//!
//! *write* (shared, producers): the next free byte. *peek* (ours): the next record
//! to hand out. *read* (ours, published): up to here space may be reused. Frames
//! handed out between read and peek stay valid until released, in any order.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{cursor_pos, pack_cursor, pos_diff, ClaimState, RecordHeader, SEQ_MASK, UNIT};
use crate::producer::{bump, Meta};
use crate::protocol::{is_forged, ConsumerCursor, Poll};
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::sys::now_ns;
use crate::{slots, wake};

/// Tuning for a consumer.
///
/// ```
/// use std::time::Duration;
/// use shmring::ConsumerOptions;
/// // A recorder: audio keeps flowing past a video thread stuck in a reservation.
/// let opts = ConsumerOptions {
///     overtake_after: Some(Duration::from_millis(200)),
///     ..Default::default()
/// };
/// assert!(opts.auto_reset);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// How often to look after the ring's health: whether the producer of a
    /// pending claim is alive (one `fcntl`), whether that claim is really its own,
    /// and whether the shared state still agrees with the consumer's (an audit of
    /// the cursors, the claim log in flight and the identity line). A dead
    /// producer's claim is skipped, and corruption found, at the first look after;
    /// so this bounds the stall a crash causes and, with `auto_reset`, how long a
    /// peer's scribbling can stop the ring after the peer stops.
    pub liveness_interval: Duration,
    /// Polls to spin before sleeping in a blocking wait (0: sleep at once).
    pub spin: u32,
    /// Deliver committed records behind a claim that has stayed pending this long
    /// (`None`, the default: records are delivered in claim order, always). The
    /// overtaken claim keeps its space until its producer commits (it is then
    /// delivered), aborts or dies. Each producer's records stay in its commit order;
    /// records of different producers may then arrive out of claim order.
    pub overtake_after: Option<Duration>,
    /// On corruption, carry on by itself (the default): a record whose header does
    /// not fit its claim is skipped; shared state that contradicts the consumer's
    /// (cursors, claim log) makes it reset the ring at once. Both are counted
    /// (`Stats::corruption`, `Stats::resets`, [`Consumer::health`]); frames held
    /// across a reset stay valid. `false`: report [`Error::Corrupt`] instead, and
    /// leave resetting to [`Consumer::reset`].
    pub auto_reset: bool,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            liveness_interval: Duration::from_millis(50),
            spin: 64,
            overtake_after: None,
            auto_reset: true,
        }
    }
}

/// A pending claim the consumer is watching: the one at its peek cursor, or one it
/// stepped over ("parked", see [`ConsumerOptions::overtake_after`]).
#[derive(Debug, Clone, Copy)]
struct Watched {
    seq: u64,
    /// Parked claims: the claim's position (for its record's geometry).
    pos: u64,
    /// First seen pending.
    since: Instant,
    since_ns: u64,
    /// Last liveness check.
    checked: Instant,
}

/// Parked claims watched at once; more are left in claim order (not overtaken).
const MAX_PARKED: usize = 16;

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

/// A record handed out by the consumer, without a borrow: for bindings that manage
/// lifetimes themselves. Release it with [`Consumer::release_raw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame {
    /// Consumer-local sequence number (identifies the frame for release).
    pub seq: u64,
    /// Payload address inside the mapping (64-byte aligned).
    pub ptr: *const u8,
    pub len: usize,
    pub meta: Meta,
}

/// The single consumer of a ring. Not `Sync`: one thread reads. Frames borrow it
/// and release themselves on drop.
pub struct Consumer {
    seg: Arc<Segment>,
    cur: RefCell<ConsumerCursor>,
    opts: ConsumerOptions,
    /// The pending claim at the peek cursor.
    pending: Cell<Option<Watched>>,
    /// Pending claims the peek cursor stepped over, oldest first.
    parked: RefCell<Vec<Watched>>,
    /// When we last looked for dead producers because someone seemed to wait.
    last_reap: Cell<Option<Instant>>,
    /// When the shared state was last audited, and records handed out since.
    last_audit: Cell<Instant>,
    since_audit: Cell<u32>,
    health: Cell<Health>,
    /// When the claim published as the oldest pending was first seen (0: none).
    published_since: Cell<u64>,
}

/// A frame: a record's payload in place in shared memory, valid until dropped.
pub struct Frame<'c> {
    consumer: &'c Consumer,
    raw: RawFrame,
}

impl Frame<'_> {
    /// The payload, in the ring (no copy). A misbehaving producer could still change
    /// these bytes while you read them; see the threat model in `docs/DESIGN.md`.
    pub fn payload(&self) -> &[u8] {
        // SAFETY: ptr/len were computed from validated local copies and lie inside the
        // data ring; the record is held (not released), so no honest producer can
        // claim these bytes until this frame is dropped.
        unsafe { std::slice::from_raw_parts(self.raw.ptr, self.raw.len) }
    }
    pub fn meta(&self) -> Meta {
        self.raw.meta
    }
    pub fn stream(&self) -> u32 {
        self.raw.meta.stream
    }
    pub fn kind(&self) -> u32 {
        self.raw.meta.kind
    }
    pub fn timestamp_ns(&self) -> u64 {
        self.raw.meta.timestamp_ns
    }
    pub fn seq(&self) -> u64 {
        self.raw.seq
    }
    /// Releases the frame now (same as dropping it).
    pub fn release(self) {}
    /// Turns the frame into a raw one that must be released with
    /// [`Consumer::release_raw`].
    pub fn into_raw(self) -> RawFrame {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl std::ops::Deref for Frame<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.payload()
    }
}

impl Drop for Frame<'_> {
    fn drop(&mut self) {
        let _ = self.consumer.release_raw(self.raw.seq);
    }
}

impl std::fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("seq", &self.raw.seq)
            .field("len", &self.raw.len)
            .field("meta", &self.raw.meta)
            .finish()
    }
}

impl Consumer {
    /// Becomes the ring's consumer (taking over from a dead one, at its read cursor).
    pub fn new(seg: Arc<Segment>) -> Result<Consumer> {
        Self::with_options(seg, ConsumerOptions::default())
    }

    pub fn with_options(seg: Arc<Segment>, opts: ConsumerOptions) -> Result<Consumer> {
        slots::take_consumer(&seg)?;
        let read = seg.control().cursors.0.read.load(Ordering::Acquire);
        let cur = ConsumerCursor::new(seg.geometry().log_entries as usize, read);
        let c = Consumer {
            seg,
            cur: RefCell::new(cur),
            opts,
            pending: Cell::new(None),
            parked: RefCell::new(Vec::with_capacity(MAX_PARKED)),
            last_reap: Cell::new(None),
            last_audit: Cell::new(Instant::now()),
            since_audit: Cell::new(0),
            health: Cell::new(Health::default()),
            published_since: Cell::new(0),
        };
        // A predecessor may have died holding a ring that a peer then scribbled on:
        // look before the first frame. (With `auto_reset` off, what it finds is
        // reported by the first `next` instead, so the application can attach and
        // then reset.)
        let _ = c.audit();
        Ok(c)
    }

    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// The next frame if one is ready, without waiting.
    pub fn try_next(&self) -> Result<Option<Frame<'_>>> {
        Ok(self.next_raw(Some(Duration::ZERO))?.map(|raw| Frame {
            consumer: self,
            raw,
        }))
    }

    /// The next frame, waiting up to `timeout` (`None`: forever). `Ok(None)` on
    /// timeout.
    pub fn next_timeout(&self, timeout: Option<Duration>) -> Result<Option<Frame<'_>>> {
        Ok(self.next_raw(timeout)?.map(|raw| Frame {
            consumer: self,
            raw,
        }))
    }

    /// The next frame, waiting for it.
    pub fn recv(&self) -> Result<Frame<'_>> {
        loop {
            if let Some(f) = self.next_timeout(None)? {
                return Ok(f);
            }
        }
    }

    /// Like [`Consumer::next_timeout`] but the frame is not tied to a borrow.
    pub fn next_raw(&self, timeout: Option<Duration>) -> Result<Option<RawFrame>> {
        // The clock is read only when a wait is due (spinning must stay cheap), and
        // every AUDIT_EVERY records while records flow.
        let mut start: Option<Instant> = None;
        let mut spins = 0u32;
        let mut skips = 0u32;
        loop {
            let n = self.since_audit.get() + 1;
            self.since_audit.set(n);
            if n >= AUDIT_EVERY {
                self.audit_if_due(Instant::now())?;
            }
            let step = self.poll_once();
            if self.seg.truncated() {
                return Err(self.seg.truncated_error());
            }
            let step = step?;
            if let Step::Frame(f) = step {
                return Ok(Some(f));
            }
            // Skipped an aborted or abandoned claim: look at the next one at once. A
            // stream of them cannot keep a timed call from returning: after a bounded
            // number of skips the deadline counts too.
            if let Step::Again = step {
                skips += 1;
                if skips <= SKIPS_BEFORE_DEADLINE {
                    continue;
                }
            }
            if let Step::Wait = step {
                if timeout != Some(Duration::ZERO) && spins < self.opts.spin {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
            }
            let now = Instant::now();
            // Nothing to hand out: a good moment to check the shared state.
            if self.audit_if_due(now)? {
                continue;
            }
            if timeout == Some(Duration::ZERO) {
                return Ok(None);
            }
            let start = *start.get_or_insert(now);
            let left = match timeout {
                Some(t) => match t.checked_sub(now.duration_since(start)) {
                    Some(l) if !l.is_zero() => l,
                    _ => return Ok(None),
                },
                None => Duration::from_secs(3600),
            };
            if let Step::Again = step {
                continue;
            }
            self.sleep(left.min(self.until_next_look(now)));
        }
    }

    /// How long until the next health look is due (a pending claim's liveness check
    /// or the audit), so a crash or a scribble stalls us one interval at most.
    fn until_next_look(&self, now: Instant) -> Duration {
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
    fn sleep(&self, max: Duration) {
        let f = &self.seg.control().data.0;
        let seen = wake::arm(f);
        // Re-check after arming so a commit made just before cannot be missed.
        if self.peek_is_final() {
            wake::disarm(f);
            return;
        }
        bump(&self.seg.control().counters.0.waits, 1);
        // Woken or timed out, the caller looks again.
        match self.seg.eventfd() {
            Some(fd) => wake::sleep_eventfd(fd, max),
            None => wake::sleep(f, seen, max),
        }
        wake::disarm(f);
    }

    /// Is the entry at peek something other than "empty" or "claimed"?
    fn peek_is_final(&self) -> bool {
        let cur = self.cur.borrow();
        let sh = self.seg.shared();
        let e = crate::layout::LogEntry::unpack(sh.entry(cur.peek_seq).load(Ordering::Acquire));
        e.stamp == cur.peek_seq & SEQ_MASK && e.state != ClaimState::Claimed
    }

    fn poll_once(&self) -> Result<Step> {
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
        let counters = &self.seg.control().counters.0;
        match poll {
            Poll::Record {
                seq,
                rec_off,
                rec_units,
            } => {
                if parked.is_none() {
                    self.set_pending(None);
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
                if h.len > room || h.seq != seq & SEQ_MASK {
                    let _ = cur.release(seq);
                    cur.publish(&sh);
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
                    bump(&counters.corruption, 1);
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
                let w = sh.write.load(Ordering::Relaxed);
                let ahead = pos_diff(cursor_pos(w), cur.peek_pos);
                let occ = (cur.held_units() + ahead.min(sh.cap_units)).min(sh.cap_units) * UNIT;
                if occ > counters.peak_occupancy.load(Ordering::Relaxed) {
                    counters.peak_occupancy.store(occ, Ordering::Relaxed);
                }
                bump(&counters.records_consumed, 1);
                bump(&counters.bytes_consumed, h.len);
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
                if parked.is_none() {
                    self.set_pending(None);
                }
                if state != ClaimState::Abandoned {
                    bump(&counters.skipped_aborted, 1);
                }
                cur.publish(&sh);
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

    /// A claim is pending: every liveness interval, skip it if its producer is
    /// dead or it is not really that producer's; overtake it if it stays pending
    /// past `overtake_after`.
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
                    let w = Watched {
                        seq: cur.peek_seq,
                        pos: cur.peek_pos,
                        since: now,
                        since_ns: now_ns(),
                        checked: now,
                    };
                    self.set_pending(Some(w));
                    return Ok(Step::Wait);
                }
            },
        };
        if now.duration_since(w.checked) < self.opts.liveness_interval {
            return Ok(Step::Wait);
        }
        w.checked = now;
        match parked {
            Some((i, _)) => self.parked.borrow_mut()[i] = w,
            None => self.pending.set(Some(w)),
        }
        let sh = self.seg.shared();
        let alive = slots::is_alive(&self.seg, slot);
        let forged = alive && is_forged(&sh, w.seq, value, &self.seg.slot(slot).open_claim);
        if !alive || forged {
            if ConsumerCursor::abandon_at(&sh, w.seq, value) {
                if forged {
                    let h = &self.seg.control().health.0;
                    bump(&h.forged_claims, 1);
                    bump(&self.seg.control().counters.0.corruption, 1);
                } else {
                    bump(&self.seg.control().counters.0.abandoned, 1);
                }
            }
            slots::reap(&self.seg);
            return Ok(Step::Again);
        }
        self.publish_oldest_pending();
        if parked.is_none() {
            if let Some(limit) = self.opts.overtake_after {
                if now.duration_since(w.since) >= limit && self.parked.borrow().len() < MAX_PARKED {
                    let units = crate::layout::LogEntry::unpack(value).units;
                    let (seq, pos) = cur.park(units);
                    self.parked.borrow_mut().push(Watched { seq, pos, ..w });
                    self.set_pending(None);
                    bump(&self.seg.control().health.0.stalled_claims, 1);
                    let mut h = self.health.get();
                    h.stalled_claims += 1;
                    self.health.set(h);
                    return Ok(Step::Again);
                }
            }
        }
        Ok(Step::Wait)
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

    /// Writes the oldest pending claim (peek or parked) to the segment, for `stat`.
    fn publish_oldest_pending(&self) {
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

    /// Something in shared memory cannot have been written by an honest peer: count
    /// it and, with `auto_reset`, reset and carry on.
    fn corrupt(&self, cur: &mut ConsumerCursor, seq: u64, what: &'static str) -> Result<Step> {
        bump(&self.seg.control().counters.0.corruption, 1);
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

    /// Runs [`Consumer::audit`] if a liveness interval has passed since the last one.
    /// `Ok(true)`: it reset the ring.
    fn audit_if_due(&self, now: Instant) -> Result<bool> {
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
        let c = self.seg.control();
        let repair = |what: &'static str| {
            bump(&c.health.0.repairs, 1);
            bump(&c.counters.0.corruption, 1);
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
        let read = pack_cursor(cur.published_read_seq(), cur.read_pos);
        if c.cursors.0.read.load(Ordering::Relaxed) != read {
            cur.publish(&sh);
            repair("read cursor changed");
        }
        let peek = pack_cursor(cur.peek_seq, cur.peek_pos);
        if c.cursors.0.peek.load(Ordering::Relaxed) != peek {
            c.cursors.0.peek.store(peek, Ordering::Relaxed);
        }
        if let Err(what) = cur.audit_write_cursor(&sh) {
            let seq = cur.peek_seq;
            return match self.corrupt(&mut cur, seq, what)? {
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
        cur.reset(&sh);
        c.cursors
            .0
            .peek
            .store(pack_cursor(cur.peek_seq, cur.peek_pos), Ordering::Relaxed);
        // Nobody is asleep for data while we run; a peer may have raised these.
        c.data.0.waiting.store(0, Ordering::Relaxed);
        c.space.0.need.store(0, Ordering::Relaxed);
        bump(&c.counters.0.resets, 1);
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

    /// Releases a frame handed out by [`Consumer::next_raw`]. O(1): nothing is
    /// zeroed or copied. Space returns to producers once every earlier frame is
    /// released too.
    pub fn release_raw(&self, seq: u64) -> Result<()> {
        let mut cur = self.cur.borrow_mut();
        match cur.release(seq) {
            Ok(moved) => {
                if moved {
                    let sh = self.seg.shared();
                    cur.publish(&sh);
                    self.wake_producers(&cur);
                }
                Ok(())
            }
            Err(_) => Err(Error::NotHeld {
                segment: self.seg.label(),
                seq,
            }),
        }
    }

    fn wake_producers(&self, cur: &ConsumerCursor) {
        let f = &self.seg.control().space.0;
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
            bump(&self.seg.control().counters.0.wakes_sent, 1);
        }
    }

    /// Is there room for what the waiting producers need: their largest record,
    /// at least 1/16 of the ring, and 1/16 of the claim log? (Or is the ring empty?)
    fn enough_room(&self, cur: &ConsumerCursor, f: &crate::layout::Futex) -> bool {
        let sh = self.seg.shared();
        let w = sh.write.load(Ordering::Relaxed);
        let used = pos_diff(cursor_pos(w), cur.read_pos);
        if used == 0 {
            return true;
        }
        let cap = sh.cap_units;
        let n = self.seg.geometry().log_entries as u64;
        let records =
            crate::layout::seq_diff(crate::layout::cursor_seq(w), cur.published_read_seq());
        // `need` is a peer's hint: no honest producer needs more than the largest record.
        let largest = crate::layout::record_units(self.seg.geometry().max_record);
        let want = (f.need.load(Ordering::Relaxed) as u64)
            .min(largest)
            .max(cap / 16);
        used + want <= cap && records + (n / 16).max(1) <= n
    }

    /// Is `seq` a frame this consumer handed out and has not released?
    pub fn is_held(&self, seq: u64) -> bool {
        self.cur.borrow().is_held(seq)
    }

    /// Frames handed out and not yet released (or released out of order and not yet
    /// passed by the read cursor).
    pub fn outstanding(&self) -> u64 {
        self.cur.borrow().outstanding()
    }

    /// Recovers from corruption by hand (with `auto_reset`, the consumer does this
    /// by itself): rewrites the claim log and the cursors and starts a new
    /// generation. Frames still held stay valid; claims in flight are forgotten, and
    /// a producer still holding one gets [`Error::Abandoned`] at commit. Refused
    /// ([`Error::Corrupt`]) while frames held from before an earlier reset are out.
    pub fn reset(&mut self) -> Result<()> {
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

    /// For an eventfd ring: sets the "consumer waiting" flag so producers signal the
    /// eventfd, and reports whether a record (or a skippable claim) is already there
    /// (then do not wait; call [`Consumer::try_next`]). Pair with
    /// [`Consumer::disarm`] after the wait.
    pub fn arm(&self) -> bool {
        let f = &self.seg.control().data.0;
        wake::arm(f);
        let ready = self.peek_is_final();
        if ready {
            wake::disarm(f);
        }
        ready
    }

    /// Clears the flag set by a successful wait after [`Consumer::arm`], and drains
    /// the eventfd.
    pub fn disarm(&self) {
        wake::disarm(&self.seg.control().data.0);
        if let Some(fd) = self.seg.eventfd() {
            wake::drain_eventfd(fd);
        }
    }

    pub fn options(&self) -> ConsumerOptions {
        self.opts
    }
}

/// Skips a call makes before its deadline is checked between them.
const SKIPS_BEFORE_DEADLINE: u32 = 4096;

/// Polls between two looks at the clock for a due audit while records flow.
const AUDIT_EVERY: u32 = 1024;

enum Step {
    Frame(RawFrame),
    Again,
    Wait,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        slots::drop_consumer(&self.seg);
    }
}

impl Segment {
    /// Becomes this ring's consumer. See [`Consumer`].
    pub fn consumer(self: &Arc<Self>) -> Result<Consumer> {
        Consumer::new(self.clone())
    }

    /// Attaches a producer. See [`crate::Producer`].
    pub fn producer(self: &Arc<Self>) -> Result<crate::Producer> {
        crate::Producer::new(self.clone())
    }
}
