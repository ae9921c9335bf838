//! The consumer: zero-copy reads with three cursors.
//!
//! *write* (shared, producers): the next free byte. *peek* (ours): the next record
//! to hand out. *read* (ours, published): up to here space may be reused. Frames
//! handed out between read and peek stay valid until released, in any order.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{cursor_pos, pos_diff, ClaimState, RecordHeader, SEQ_MASK, UNIT};
use crate::producer::{bump, Meta};
use crate::protocol::{ConsumerCursor, Poll};
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::sys::process_token;
use crate::{slots, wake};

/// Tuning for a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// While a claim is pending, how often to check whether its producer is alive
    /// (one `fcntl`). A dead producer's claim is skipped at the first check after it
    /// died, so this bounds the stall a crash causes.
    pub liveness_interval: Duration,
    /// Polls to spin before sleeping in a blocking wait (0: sleep at once).
    pub spin: u32,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            liveness_interval: Duration::from_millis(50),
            spin: 64,
        }
    }
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
    token: u64,
    opts: ConsumerOptions,
    /// (peek seq, when we last checked the pending claim's producer)
    pending_check: Cell<Option<(u64, Instant)>>,
    /// When we last looked for dead producers because someone seemed to wait.
    last_reap: Cell<Option<Instant>>,
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
        let token = process_token();
        slots::take_consumer(&seg, token)?;
        let read = seg.control().cursors.0.read.load(Ordering::Acquire);
        let cur = ConsumerCursor::new(seg.geometry().log_entries as usize, read);
        Ok(Consumer {
            seg,
            cur: RefCell::new(cur),
            token,
            opts,
            pending_check: Cell::new(None),
            last_reap: Cell::new(None),
        })
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
        // The clock is read only when a wait is due (spinning must stay cheap).
        let mut start: Option<Instant> = None;
        let mut spins = 0u32;
        let mut skips = 0u32;
        loop {
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
            if timeout == Some(Duration::ZERO) {
                return Ok(None);
            }
            if let Step::Wait = step {
                if spins < self.opts.spin {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
            }
            let now = Instant::now();
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
            self.sleep(left.min(self.until_liveness_check(now)));
        }
    }

    /// How long until the pending claim's owner is due for a liveness check (a full
    /// interval when nothing is pending), so a crash stalls us one interval at most.
    fn until_liveness_check(&self, now: Instant) -> Duration {
        let iv = self.opts.liveness_interval;
        match self.pending_check.get() {
            Some((seq, at)) if seq == self.cur.borrow().peek_seq => iv
                .saturating_sub(now.duration_since(at))
                .max(Duration::from_micros(100)),
            _ => iv,
        }
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
        };
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
        let counters = &self.seg.control().counters.0;
        let mut cur = self.cur.borrow_mut();
        match cur.poll(&sh) {
            Poll::Record {
                seq,
                rec_off,
                rec_units,
            } => {
                self.pending_check.set(None);
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
                    bump(&counters.corruption, 1);
                    return Err(Error::Corrupt {
                        segment: self.seg.label(),
                        seq,
                        what: if h.len > room {
                            "record length exceeds its claim"
                        } else {
                            "record header does not belong to its claim"
                        },
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
                match state {
                    ClaimState::Abandoned => {}
                    _ => bump(&counters.skipped_aborted, 1),
                }
                cur.publish(&sh);
                drop(cur);
                self.wake_producers();
                Ok(Step::Again)
            }
            Poll::Empty => Ok(Step::Wait),
            Poll::Pending { slot, value } => {
                let now = Instant::now();
                let peek = cur.peek_seq;
                let due = match self.pending_check.get() {
                    Some((s, at)) if s == peek => {
                        now.duration_since(at) >= self.opts.liveness_interval
                    }
                    _ => {
                        self.pending_check.set(Some((peek, now)));
                        false
                    }
                };
                if !due {
                    return Ok(Step::Wait);
                }
                self.pending_check.set(Some((peek, now)));
                if slot >= self.seg.geometry().max_producers {
                    bump(&counters.corruption, 1);
                    return Err(Error::Corrupt {
                        segment: self.seg.label(),
                        seq: peek,
                        what: "claim names a producer slot that does not exist",
                    });
                }
                if slots::is_alive(&self.seg, slot, self.token) {
                    return Ok(Step::Wait);
                }
                if cur.abandon(&sh, value) {
                    bump(&counters.abandoned, 1);
                }
                drop(cur);
                slots::reap(&self.seg, self.token);
                Ok(Step::Again)
            }
            Poll::Saturated => Err(Error::TooManyHeld {
                segment: self.seg.label(),
                held: cur.outstanding(),
            }),
            Poll::Corrupt(what) => {
                bump(&counters.corruption, 1);
                Err(Error::Corrupt {
                    segment: self.seg.label(),
                    seq: cur.peek_seq,
                    what,
                })
            }
        }
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
                    drop(cur);
                    self.wake_producers();
                }
                Ok(())
            }
            Err(_) => Err(Error::NotHeld {
                segment: self.seg.label(),
                seq,
            }),
        }
    }

    fn wake_producers(&self) {
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
                slots::reap(&self.seg, self.token);
            }
        }
        if f.waiting.load(Ordering::Relaxed) != 0 && !self.enough_room(f) {
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
    fn enough_room(&self, f: &crate::layout::Futex) -> bool {
        let cur = self.cur.borrow();
        let sh = self.seg.shared();
        let w = sh.write.load(Ordering::Relaxed);
        let used = pos_diff(cursor_pos(w), cur.read_pos);
        if used == 0 {
            return true;
        }
        let cap = sh.cap_units;
        let n = self.seg.geometry().log_entries as u64;
        let records = crate::layout::seq_diff(crate::layout::cursor_seq(w), cur.read_seq);
        let want = (f.need.load(Ordering::Relaxed) as u64)
            .max(cap / 16)
            .min(cap);
        used <= cap - want.min(cap) && records + (n / 16).max(1) <= n
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

    /// Recovers from corruption: forgets everything in flight, rewrites the claim log
    /// and the cursors, and starts a new generation. Requires that no [`Frame`] is
    /// alive (the `&mut` proves it); raw frames handed out before are invalid after.
    /// A producer still holding an old claim gets [`Error::Abandoned`] at commit.
    pub fn reset(&mut self) {
        let sh = self.seg.shared();
        self.seg.write_identity();
        self.seg
            .control()
            .identity
            .0
            .magic
            .store(crate::layout::MAGIC, Ordering::Release);
        self.cur.get_mut().reset(&sh);
        let c = self.seg.control();
        c.consumer.0.epoch.fetch_add(1, Ordering::AcqRel);
        bump(&c.counters.0.resets, 1);
        self.pending_check.set(None);
        // Nothing is outstanding now: every slot without a live owner can go.
        slots::reap(&self.seg, self.token);
        self.wake_producers();
    }

    /// Frees the slots of dead producers that hold nothing (done automatically when
    /// a dead producer's claim is skipped, and by producers short of slots).
    pub fn reap(&self) -> u32 {
        slots::reap(&self.seg, self.token)
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
