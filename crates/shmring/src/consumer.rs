//! The consumer: zero-copy reads with three cursors.
//!
//! *write* (shared, producers): the next free byte. *peek* (ours): the next record
//! to hand out. *read* (ours, published): up to here space may be reused. Frames
//! handed out between read and peek stay valid until released, in any order.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{
    cursor_pos, cursor_seq, pack_cursor, pos_diff, seq_diff, ClaimState, ConsumerCounters,
    RecordHeader, SEQ_MASK, UNIT,
};
use crate::producer::{bump, Meta};
use crate::protocol::{is_forged, ConsumerCursor, Poll};
use crate::segment::Segment;
use crate::sync::{fence, Ordering};
use crate::sys::now_ns;
use crate::tether::{self, Supervisor};
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
    /// Most polls to spin before sleeping in a blocking wait (0: sleep at once).
    /// Spinning adapts below this: it halves each time a spin ends in a sleep
    /// anyway, and comes back when a record follows a sleep within a few
    /// microseconds (so a record every few tens of microseconds costs no spin,
    /// and a fast stream is caught without sleeping).
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
    /// The ring's consumer detaches a tethered consumer whose read cursor stays
    /// behind its own without moving for this long (it gets [`Error::Detached`]),
    /// so a stuck reader stops holding the ring after this bound. Its death is
    /// found within one `liveness_interval`, like a producer's.
    pub tether_stall_limit: Duration,
    /// Let a record wait up to this long before the consumer sees it (`None`, the
    /// default: a producer wakes a sleeping consumer at every commit). With a
    /// budget, a consumer whose last wake found records sleeps on its own timer
    /// for at most the budget, and producers do not wake it unless the ring is
    /// half full (bytes or claim log): one wake-up then serves every record that
    /// came meanwhile. After a wake that found nothing it sleeps as without a
    /// budget, so the first record of a burst wakes it at once.
    pub latency_budget: Option<Duration>,
    /// Take back a claim still pending (reserved and not committed) this long
    /// after the consumer first saw it, whoever holds it: its space is freed and
    /// its producer's commit fails with [`Error::Abandoned`]. A producer fills a
    /// reservation in microseconds to milliseconds; a claim older than this is a
    /// stuck producer or one made up by a peer in a live producer's name, which
    /// nothing in shared memory can tell apart, so this bounds how long either can
    /// stop a consumer that delivers in claim order (and, with `overtake_after`,
    /// how long it can pin its space). `None`: wait for live producers for ever
    /// (trusted producers only).
    pub claim_timeout: Option<Duration>,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            liveness_interval: Duration::from_millis(50),
            spin: 64,
            overtake_after: None,
            auto_reset: true,
            tether_stall_limit: Duration::from_millis(500),
            latency_budget: None,
            claim_timeout: Some(Duration::from_millis(500)),
        }
    }
}

/// Which of a ring's consumers this is.
enum Role {
    /// The ring's consumer: it alone writes the ring's read cursor, judges
    /// producers, audits and resets, and supervises the tethered consumers.
    Owner {
        tethers: Box<RefCell<Supervisor>>,
        /// The ring's read cursor as last published (for the audit).
        published: Cell<u64>,
    },
    /// A tethered consumer on this tether line.
    Tethered(u32),
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

/// Parked claims watched without allocating; more grow the list (at most one per
/// claim log entry: every parked claim is in flight).
const PARKED_PREALLOC: usize = 16;

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

/// A consumer of a ring: the ring's own ([`Consumer::new`]) or a tethered one
/// ([`Consumer::tethered`]). Not `Sync`: one thread reads. Frames borrow it and
/// release themselves on drop.
pub struct Consumer {
    seg: Arc<Segment>,
    role: Role,
    /// A tethered consumer: adopted by the ring's consumer (its cursors start
    /// then). Always true for the ring's consumer.
    joined: Cell<bool>,
    cur: RefCell<ConsumerCursor>,
    opts: ConsumerOptions,
    /// The pending claim at the peek cursor.
    pending: Cell<Option<Watched>>,
    /// Pending claims the peek cursor stepped over, oldest first.
    parked: RefCell<Vec<Watched>>,
    /// A record was handed out since the last sleep (see `latency_budget`).
    found: Cell<bool>,
    /// Polls to spin in the next wait (adapts up to `ConsumerOptions::spin`).
    spin_limit: Cell<u32>,
    /// When we last looked for dead producers because someone seemed to wait.
    last_reap: Cell<Option<Instant>>,
    /// When the shared state was last audited, and records handed out since.
    last_audit: Cell<Instant>,
    since_audit: Cell<u32>,
    /// Records handed out (wrapping), for sampling the occupancy.
    handed: Cell<u32>,
    /// A tethered consumer: the ring's reset count when it last (re)joined the
    /// generation, and since when it has seen the ring contradict its cursors
    /// without the ring's consumer resetting (see `corrupt`).
    resets_seen: Cell<u64>,
    corrupt_since: Cell<Option<Instant>>,
    health: Cell<Health>,
    /// When the claim published as the oldest pending was first seen (0: none).
    published_since: Cell<u64>,
}

/// The ring consumer's reset count (statistics, a peer can write it: used only to
/// tell when to rebase).
fn seg_resets(seg: &Segment) -> u64 {
    seg.control().counters.0.resets.load(Ordering::Relaxed)
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
        let c = seg.control();
        let mut read = c.cursors.0.read.load(Ordering::Acquire);
        let mut tethers = Supervisor::new();
        if tethers.take_over(&seg) {
            // A predecessor with tethered consumers published the farthest behind of
            // all as the ring's read cursor: carry on from its own, if it is sane.
            let own = c.cursors.0.owner_read.load(Ordering::Acquire);
            let w = c.write.0.load(Ordering::Acquire);
            let n = seg.geometry().log_entries as u64;
            let (ds, dp) = (
                seq_diff(cursor_seq(w), cursor_seq(own)),
                pos_diff(cursor_pos(w), cursor_pos(own)),
            );
            if ds <= seq_diff(cursor_seq(w), cursor_seq(read))
                && dp <= pos_diff(cursor_pos(w), cursor_pos(read))
                && ds <= n
            {
                read = own;
            }
        }
        let published = c.cursors.0.read.load(Ordering::Relaxed);
        let role = Role::Owner {
            tethers: Box::new(RefCell::new(tethers)),
            published: Cell::new(published),
        };
        let c = Consumer::with_role(seg, role, read, opts);
        // A predecessor may have died holding a ring that a peer then scribbled on:
        // look before the first frame. (With `auto_reset` off, what it finds is
        // reported by the first `next` instead, so the application can attach and
        // then reset.)
        let _ = c.audit();
        Ok(c)
    }

    /// Attaches a *tethered* consumer: a full consumer beside the ring's own, with
    /// its own cursors, that gets every record from where it starts (the ring
    /// consumer's read cursor when that one next looks at the ring and adopts this
    /// one: at its next poll, or within its liveness interval when idle; until
    /// then this one sees no records) and holds their space until it releases
    /// them, like the ring's consumer. At most [`crate::layout::MAX_TETHERS`] per
    /// ring; the ring's consumer must be alive ([`Error::NoConsumer`]).
    ///
    /// The ring's consumer detaches a tethered consumer that dies (within one
    /// liveness interval) or whose read cursor stays behind without moving for its
    /// [`ConsumerOptions::tether_stall_limit`]; calls then fail with
    /// [`Error::Detached`]. A tethered consumer does not judge producers or reset
    /// the ring (the ring's consumer does both); after a reset it carries on from
    /// the new generation, frames it holds staying valid.
    ///
    /// ```
    /// # use shmring::{Config, Segment, Meta, Consumer, ConsumerOptions};
    /// let seg = Segment::create_memfd("doc-tether", &Config::with_capacity(1 << 20)).unwrap();
    /// let recorder = seg.consumer().unwrap();
    /// let preview = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    /// let mut producer = seg.producer().unwrap();
    /// producer.send(b"frame", Meta::new(0, 1)).unwrap();
    /// assert_eq!(recorder.try_next().unwrap().unwrap().payload(), b"frame");
    /// assert_eq!(preview.try_next().unwrap().unwrap().payload(), b"frame");
    /// ```
    pub fn tethered(seg: Arc<Segment>, opts: ConsumerOptions) -> Result<Consumer> {
        let line = tether::attach(&seg)?;
        // The real start comes with the adoption (see `Consumer::join`).
        Ok(Consumer::with_role(seg, Role::Tethered(line), 0, opts))
    }

    /// A consumer in `role` whose cursors start at the read cursor `read`.
    fn with_role(seg: Arc<Segment>, role: Role, read: u64, opts: ConsumerOptions) -> Consumer {
        let cur = ConsumerCursor::new(seg.geometry().log_entries as usize, read);
        let resets = seg_resets(&seg);
        Consumer {
            seg,
            joined: Cell::new(matches!(role, Role::Owner { .. })),
            role,
            cur: RefCell::new(cur),
            opts,
            pending: Cell::new(None),
            parked: RefCell::new(Vec::with_capacity(PARKED_PREALLOC)),
            found: Cell::new(false),
            spin_limit: Cell::new(opts.spin),
            last_reap: Cell::new(None),
            last_audit: Cell::new(Instant::now()),
            since_audit: Cell::new(0),
            handed: Cell::new(0),
            resets_seen: Cell::new(resets),
            corrupt_since: Cell::new(None),
            health: Cell::new(Health::default()),
            published_since: Cell::new(0),
        }
    }

    /// The ring's consumer: adopts tethered consumers that asked (one load when
    /// none did). A tethered consumer: has it been adopted (its cursors set)?
    fn join(&self) -> Result<bool> {
        match &self.role {
            Role::Owner { tethers, .. } => {
                if tethers.borrow().asked(&self.seg) {
                    let cur = self.cur.borrow();
                    // With a reset's gap open, our read cursor is two cursors: adopt
                    // once it is one again.
                    if cur.can_reset() && tethers.borrow_mut().adopt(&self.seg, cur.published()) {
                        self.publish(&cur);
                        wake::notify(&self.seg.control().tether_data.0, true, None);
                    }
                }
                Ok(true)
            }
            Role::Tethered(j) => {
                if self.joined.get() {
                    return Ok(true);
                }
                match tether::joined(&self.seg, *j)? {
                    Some(read) => {
                        *self.cur.borrow_mut() =
                            ConsumerCursor::new(self.seg.geometry().log_entries as usize, read);
                        self.resets_seen.set(seg_resets(&self.seg));
                        self.joined.set(true);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
        }
    }

    /// Has the ring's consumer adopted this one (it then gets every record from
    /// its start)? Always true for the ring's consumer. [`Error::Detached`] once a
    /// tethered consumer was detached.
    pub fn adopted(&self) -> Result<bool> {
        match self.role {
            Role::Tethered(j) => {
                tether::check(&self.seg, j)?;
                self.join()
            }
            Role::Owner { .. } => Ok(true),
        }
    }

    /// A tethered consumer's line as the ring lists it (its counters and lag);
    /// `None` for the ring's consumer.
    pub fn tether_info(&self) -> Option<crate::TetherInfo> {
        match self.role {
            Role::Tethered(j) => tether::info(&self.seg, j),
            Role::Owner { .. } => None,
        }
    }

    /// Is this a tethered consumer (see [`Consumer::tethered`])?
    pub fn is_tethered(&self) -> bool {
        matches!(self.role, Role::Tethered(_))
    }

    /// The ring's consumer's counters; `None` for a tethered consumer (it keeps
    /// its own in its tether line).
    fn owner_counters(&self) -> Option<&ConsumerCounters> {
        match self.role {
            Role::Owner { .. } => Some(&self.seg.control().counters.0),
            Role::Tethered(_) => None,
        }
    }

    /// Publishes our read cursor: a tethered consumer in its line; the ring's
    /// consumer as the ring's read cursor, or, with tethered consumers, the
    /// farthest behind of theirs and its own (adopting any that asked).
    fn publish(&self, cur: &ConsumerCursor) {
        let own = cur.published();
        let c = self.seg.control();
        match &self.role {
            Role::Tethered(j) => {
                tether::publish(&self.seg, *j, own, pack_cursor(cur.peek_seq, cur.peek_pos))
            }
            Role::Owner { tethers, published } => {
                // Release: tethered consumers adopted from now on start here.
                c.cursors.0.owner_read.store(own, Ordering::Release);
                let t = tethers.borrow();
                let ring = if t.any() {
                    t.ring_read(&self.seg, own)
                } else {
                    own
                };
                // Release: everything we (and the tethered consumers whose cursors we
                // loaded with Acquire) did with the released bytes comes first.
                c.cursors.0.read.store(ring, Ordering::Release);
                published.set(ring);
            }
        }
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
        if let Role::Tethered(j) = self.role {
            tether::check(&self.seg, j)?;
        }
        loop {
            if !self.join()? {
                if timeout == Some(Duration::ZERO) {
                    return Ok(None);
                }
                self.sleep(
                    timeout
                        .unwrap_or(Duration::MAX)
                        .min(self.opts.liveness_interval),
                );
                if timeout.is_some_and(|t| start.get_or_insert_with(Instant::now).elapsed() >= t) {
                    return Ok(None);
                }
                continue;
            }
            let n = self.since_audit.get() + 1;
            self.since_audit.set(n);
            if n >= AUDIT_EVERY {
                self.audit_if_due(Instant::now())?;
            }
            let step = self.poll_once();
            if self.seg.truncated() {
                return Err(self.seg.truncated_error());
            }
            if let Err(Error::TooManyHeld { .. }) = step {
                // Holding as many frames as the log tracks, the caller may call again
                // and again without releasing: the audit still runs every interval.
                self.audit_if_due(Instant::now())?;
            }
            let step = step?;
            if let Step::Frame(f) = step {
                self.found.set(true);
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
                if timeout != Some(Duration::ZERO) && spins < self.spin_limit.get() {
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
            // The spin did not catch a record: spin less next time.
            self.spin_limit.set(self.spin_limit.get() / 2);
            spins = 0;
            self.sleep(left.min(self.until_next_look(now)));
            // Woken (or a record was there) within what a spin covers: spin again.
            if now.elapsed() < QUICK_RECORD {
                self.spin_limit.set(self.opts.spin);
            }
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
        let c = self.seg.control();
        let tethered = self.is_tethered();
        let f = if tethered {
            &c.tether_data.0
        } else {
            &c.data.0
        };
        // Under a latency budget, after a wake that found records: sleep on our
        // timer, and let producers wake us only past the fill mark.
        let lazy = !tethered && self.found.replace(false) && self.opts.latency_budget.is_some();
        let max = match self.opts.latency_budget {
            Some(b) if lazy => max.min(b),
            _ => max,
        };
        if !tethered {
            // Before arming (its fence orders it): the mark producers judge by.
            f.need
                .store(if lazy { self.wake_mark() } else { 0 }, Ordering::Relaxed);
        }
        // The data futex has one waiter (us, the ring's consumer): its flag is taken
        // by the first producer that wakes us. The tether futex counts its waiters.
        let seen = if tethered {
            wake::arm(f)
        } else {
            wake::arm_one(f)
        };
        let disarm = || {
            if tethered {
                wake::disarm(f)
            } else {
                wake::disarm_one(f)
            }
        };
        // Re-check after arming so a commit made just before (or, for a tethered
        // consumer not adopted yet, the adoption) cannot be missed.
        let ready = match self.role {
            Role::Tethered(j) if !self.joined.get() => {
                !matches!(tether::joined(&self.seg, j), Ok(None))
            }
            _ => self.peek_is_final(),
        };
        if ready {
            disarm();
            return;
        }
        match &self.role {
            // After arming: a tethered consumer that released space producers wait
            // for either sees us armed (and wakes us) or we see its cursor here.
            Role::Owner { tethers, .. } if tethers.borrow().any() => {
                let cur = self.cur.borrow();
                self.publish(&cur);
                self.wake_producers(&cur);
            }
            // Not adopted yet: make sure the ring's consumer looks.
            Role::Tethered(_) if !self.joined.get() => tether::poke_consumer(&self.seg),
            _ => {}
        }
        if let Some(cc) = self.owner_counters() {
            bump(&cc.waits, 1);
        }
        // Woken or timed out, the caller looks again.
        match self.seg.eventfd() {
            Some(fd) if !tethered => wake::sleep_eventfd(fd, max),
            _ => wake::sleep(f, seen, max),
        }
        disarm();
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
        let counters = self.owner_counters();
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
                if h.len > room || h.seq != crate::layout::header_seq(seq) {
                    // Marked committed by a peer while its owner still writes it (the
                    // owner's open-claim word still holds the claim): wait for the
                    // owner instead, as for any pending claim.
                    if parked.is_none() && self.unpoll_forged_commit(cur, seq) {
                        let h = &self.seg.control().health.0;
                        bump(&h.forged_claims, 1);
                        bump(&self.seg.control().counters.0.corruption, 1);
                        return Ok(Step::Wait);
                    }
                    let _ = cur.release(seq);
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
                        bump(&cc.corruption, 1);
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
                match (counters, &self.role) {
                    (Some(cc), _) => {
                        // Occupancy needs the write cursor, a line producers write
                        // at every claim: looked at every OCCUPANCY_EVERY records
                        // (and at every audit), not at each.
                        let n = self.handed.get().wrapping_add(1);
                        self.handed.set(n);
                        if n % OCCUPANCY_EVERY == 0 {
                            self.note_occupancy(cur);
                        }
                        bump(&cc.records_consumed, 1);
                        bump(&cc.bytes_consumed, h.len);
                    }
                    (None, Role::Tethered(j)) => {
                        let l = tether::counters(&self.seg, *j);
                        bump(&l.records_consumed, 1);
                        bump(&l.bytes_consumed, h.len);
                    }
                    (None, Role::Owner { .. }) => {}
                }
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
                if let (Some(cc), true) = (counters, state != ClaimState::Abandoned) {
                    bump(&cc.skipped_aborted, 1);
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

    /// The record `seq` just handed out has no header of its own: was its entry
    /// marked committed by a peer while its producer is still writing it? Then the
    /// entry goes back to claimed and the peek cursor onto it (see
    /// [`ConsumerCursor::unpoll_forged_commit`]).
    fn unpoll_forged_commit(&self, cur: &mut ConsumerCursor, seq: u64) -> bool {
        if self.is_tethered() {
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
        // Acquire: pairs with the owner's Release stores of its open-claim word.
        self.seg.slot(e.slot).open_claim.load(Ordering::Acquire) == claimed
            && cur.unpoll_forged_commit(&sh, seq, claimed)
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
        // Only the ring's consumer judges producers; a tethered one waits for its
        // verdict (the claim turns abandoned) like for the producer's commit.
        let owner = !self.is_tethered();
        let alive = !owner || slots::is_alive(&self.seg, slot);
        let forged =
            owner && alive && is_forged(&sh, w.seq, value, &self.seg.slot(slot).open_claim);
        let expired = owner
            && self
                .opts
                .claim_timeout
                .is_some_and(|t| now.duration_since(w.since) >= t);
        if !alive || forged || expired {
            if ConsumerCursor::abandon_at(&sh, w.seq, value) {
                let h = &self.seg.control().health.0;
                if !alive {
                    bump(&self.seg.control().counters.0.abandoned, 1);
                } else if forged {
                    bump(&h.forged_claims, 1);
                    bump(&self.seg.control().counters.0.corruption, 1);
                } else {
                    bump(&h.expired_claims, 1);
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
                    let (seq, pos) = cur.park(units);
                    self.parked.borrow_mut().push(Watched { seq, pos, ..w });
                    self.set_pending(None);
                    if owner {
                        bump(&self.seg.control().health.0.stalled_claims, 1);
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
    fn publish_oldest_pending(&self) {
        if self.is_tethered() {
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

    /// Something in shared memory cannot have been written by an honest peer: count
    /// it and, with `auto_reset`, reset and carry on.
    fn corrupt(&self, cur: &mut ConsumerCursor, seq: u64, what: &'static str) -> Result<Step> {
        if let Role::Tethered(j) = self.role {
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
            bump(&tether::counters(&self.seg, j).lost, lost);
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
    fn note_occupancy(&self, cur: &ConsumerCursor) {
        let Some(cc) = self.owner_counters() else {
            return;
        };
        let sh = self.seg.shared();
        let w = sh.write.load(Ordering::Relaxed);
        let ahead = pos_diff(cursor_pos(w), cur.peek_pos);
        let occ = (cur.held_units() + ahead.min(sh.cap_units)).min(sh.cap_units) * UNIT;
        if occ > cc.peak_occupancy.load(Ordering::Relaxed) {
            cc.peak_occupancy.store(occ, Ordering::Relaxed);
        }
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
        self.seg.check_size()?;
        if let Role::Tethered(j) = self.role {
            return self.audit_tethered(j);
        }
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
        if let Role::Owner { tethers, published } = &self.role {
            let own = cur.published();
            let ring = c.cursors.0.read.load(Ordering::Relaxed);
            if ring != published.get() || c.cursors.0.owner_read.load(Ordering::Relaxed) != own {
                self.publish(&cur);
                repair("read cursor changed");
            } else {
                // The ring's read cursor is a function of our cursors and the
                // tethered consumers' lines, never a value kept on its own: one
                // that stopped following them (whatever put it there) would hold
                // space nobody holds for ever.
                let expected = if tethers.borrow().any() {
                    tethers.borrow().ring_read(&self.seg, own)
                } else {
                    own
                };
                if ring != expected {
                    self.publish(&cur);
                }
            }
            let limit = self.opts.tether_stall_limit;
            let detached = tethers.borrow_mut().audit(&self.seg, own, limit);
            let asked = c.tethers.0.mask.load(Ordering::Relaxed) != 0;
            if detached > 0 || asked {
                self.publish(&cur);
                self.wake_producers(&cur);
            }
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
        if let Err(what) = cur.audit_write_cursor(&sh) {
            let seq = cur.peek_seq;
            return match self.corrupt(&mut cur, seq, what)? {
                Step::Again => Ok(true),
                _ => Ok(false),
            };
        }
        Ok(false)
    }

    /// A tethered consumer's audit: is it still attached, is its line as it left
    /// it, do the write cursor and claim log agree with its cursors? `Ok(true)`: it
    /// resynchronised.
    fn audit_tethered(&self, j: u32) -> Result<bool> {
        tether::check(&self.seg, j)?;
        if !self.joined.get() {
            return Ok(false);
        }
        let mut cur = self.cur.borrow_mut();
        let l = tether::counters(&self.seg, j);
        if l.read.load(Ordering::Relaxed) != cur.published() {
            // Only we write our line's read cursor once adopted.
            return Err(tether::overwritten(&self.seg, j));
        }
        let sh = self.seg.shared();
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
        let tethers_pos = match &self.role {
            Role::Owner { tethers, .. } if tethers.borrow().any() => {
                Some(tethers.borrow().floor_pos(&self.seg, cur.read_pos))
            }
            _ => None,
        };
        let base = cur.reset(&sh, tethers_pos);
        // Release: tethered consumers rebase here (see `resync`).
        c.tethers.0.reset_base.store(base, Ordering::Release);
        c.cursors
            .0
            .owner_read
            .store(cur.published(), Ordering::Release);
        if let Role::Owner { published, .. } = &self.role {
            published.set(c.cursors.0.read.load(Ordering::Relaxed));
        }
        c.cursors
            .0
            .peek
            .store(pack_cursor(cur.peek_seq, cur.peek_pos), Ordering::Relaxed);
        // Nobody is asleep for data while we run; a peer may have raised these.
        c.data.0.waiting.store(0, Ordering::Relaxed);
        c.data.0.need.store(0, Ordering::Relaxed);
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
                    self.publish(&cur);
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
            bump(&self.seg.control().counters.0.wakes_sent, 1);
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
        if self.is_tethered() {
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

    /// For an eventfd ring: sets the "consumer waiting" flag so producers signal the
    /// eventfd, and reports whether a record (or a skippable claim) is already there
    /// (then do not wait; call [`Consumer::try_next`]). Pair with
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
        let ready = self.peek_is_final();
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

    pub fn options(&self) -> ConsumerOptions {
        self.opts
    }
}

/// A record that follows a sleep sooner than this would have been caught by a
/// spin: the consumer spins again (see `ConsumerOptions::spin`).
const QUICK_RECORD: Duration = Duration::from_micros(4);

/// Skips a call makes before its deadline is checked between them.
const SKIPS_BEFORE_DEADLINE: u32 = 4096;

/// Polls between two looks at the clock for a due audit while records flow.
const AUDIT_EVERY: u32 = 1024;
/// The ring's consumer notes the ring's occupancy every this many records (and at
/// every audit).
const OCCUPANCY_EVERY: u32 = 16;

enum Step {
    Frame(RawFrame),
    Again,
    Wait,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        match self.role {
            Role::Owner { .. } => slots::drop_consumer(&self.seg),
            Role::Tethered(j) => tether::leave(&self.seg, j),
        }
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
