//! The consumer: zero-copy reads with three cursors.
//!
//! *write* (shared, producers): the next free byte. *peek* (ours): the next record
//! to hand out. *read* (ours, published): up to here space may be reused. Frames
//! handed out between read and peek stay valid until released, in any order.

mod claims;
mod counters;
mod frame;
mod health;
mod pins;
mod role;
mod shared;
mod wait;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{cursor_pos, cursor_seq, pos_diff, seq_diff};
use crate::options::ConsumerOptions;
use crate::protocol::ConsumerCursor;
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::tether::{self, Supervisor};
use crate::{slots, wake};

use claims::{Step, Watched, PARKED_PREALLOC};
pub use frame::{Frame, RawFrame};
pub use health::Health;
use role::Role;
pub use shared::{SharedConsumer, SharedFrame};

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
    /// The ring's consumer's counters (see `counters.rs`).
    own: counters::OwnCounters,
    /// The records producers place around (the ring's consumer's; see `pins.rs`).
    pins: RefCell<Box<pins::Pins>>,
    /// When claims were first seen in flight (see `claims::ClaimClock`).
    clock: RefCell<claims::ClaimClock>,
    /// A record was handed out since the last sleep (see `latency_budget`).
    found: Cell<bool>,
    /// Polls to spin in the next wait (see `wait::Spin`).
    spin: Cell<wait::Spin>,
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
    /// A tethered consumer: since when its line has read expelled, unconfirmed
    /// (see `Consumer::check_role`).
    detached_seen: Cell<Option<Instant>>,
    /// A shared consumer's: releases other threads queued (see `shared.rs`).
    remote: Option<Arc<shared::Remote>>,
}

/// The ring consumer's reset count (statistics, a peer can write it: used only to
/// tell when to rebase).
fn seg_resets(seg: &Segment) -> u64 {
    seg.control().counters.0.resets.load(Ordering::Relaxed)
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
        let role = Role::owner(tethers, published);
        // A predecessor with pinned records published a position ahead of its
        // claim number: start where that claim number is, and take over what
        // lies between (see `ConsumerCursor::take_over`).
        let n = seg.geometry().log_entries as u64;
        let start = ConsumerCursor::position_of(&seg.shared(), cursor_seq(read), n)
            .map_or(read, |pos| {
                crate::layout::pack_cursor(cursor_seq(read), pos)
            });
        let c = Consumer::with_role(seg, role, start, opts);
        c.take_over(cursor_pos(read));
        // A predecessor may have died holding a ring that a peer then scribbled on:
        // look before the first frame. (With `auto_reset` off, what it finds is
        // reported by the first `next` instead, so the application can attach and
        // then reset.)
        let _ = c.audit();
        Ok(c)
    }

    /// Taking over the ring from a consumer that published `front` as its
    /// position: the claims before it that it had released stay done, pinned ones
    /// are parked (handed out when committed), and the pins its predecessor left
    /// for holders that may still write stay until they settle.
    fn take_over(&self, front: u64) {
        let sh = self.seg.shared();
        let t = &self.seg.control().pins.0;
        let in_table = |extent: u64| {
            // Acquire: as any load of the table.
            t.extent.iter().any(|e| e.load(Ordering::Acquire) == extent)
        };
        let parked = self.cur.borrow_mut().take_over(&sh, front, in_table);
        let now = Instant::now();
        let cap = self.seg.geometry().cap_units();
        let mut mine = Vec::with_capacity(parked.len());
        for &(seq, pos) in &parked {
            let e = crate::layout::LogEntry::unpack(sh.entry(seq).load(Ordering::Acquire));
            if let Some((off, len)) = crate::layout::claim_geometry(pos, e.units, cap) {
                mine.push((crate::protocol::pack_pin(off, len), seq));
            }
            self.parked.borrow_mut().push(Watched {
                seq,
                pos,
                since: now,
                since_ns: crate::sys::now_ns(),
                checked: now,
            });
        }
        self.pins.borrow_mut().take_over(&self.seg, |extent| {
            mine.iter().find(|m| m.0 == extent).map(|m| m.1)
        });
        let cur = self.cur.borrow();
        self.publish(&cur);
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
    /// # use shmring::{Address, Config, Meta, Consumer, ConsumerOptions};
    /// let seg = Address::memfd("doc-tether", Config::with_capacity(1 << 20)).open().unwrap();
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
        Ok(Consumer::with_role(seg, Role::tethered(line), 0, opts))
    }

    /// A consumer in `role` whose cursors start at the read cursor `read`.
    fn with_role(seg: Arc<Segment>, role: Role, read: u64, opts: ConsumerOptions) -> Consumer {
        let cur = ConsumerCursor::new(seg.geometry().log_entries as usize, read);
        let resets = seg_resets(&seg);
        let own = counters::OwnCounters::new(&seg);
        Consumer {
            seg,
            joined: Cell::new(role.is_owner()),
            role,
            cur: RefCell::new(cur),
            opts,
            pending: Cell::new(None),
            parked: RefCell::new(Vec::with_capacity(PARKED_PREALLOC)),
            own,
            pins: RefCell::new(Box::new(pins::Pins::new())),
            clock: RefCell::new(claims::ClaimClock::new()),
            found: Cell::new(false),
            spin: Cell::new(wait::Spin::new(opts.spin)),
            last_reap: Cell::new(None),
            last_audit: Cell::new(Instant::now()),
            since_audit: Cell::new(0),
            handed: Cell::new(0),
            resets_seen: Cell::new(resets),
            corrupt_since: Cell::new(None),
            health: Cell::new(Health::default()),
            published_since: Cell::new(0),
            detached_seen: Cell::new(None),
            remote: None,
        }
    }

    /// The ring's consumer: adopts tethered consumers that asked (one load when
    /// none did). A tethered consumer: has it been adopted (its cursors set)?
    fn join(&self) -> Result<bool> {
        let Some(j) = self.role.line() else {
            if self.role.adopt_asked(&self.seg, &self.cur) {
                let cur = self.cur.borrow();
                self.publish(&cur);
                wake::notify(&self.seg.control().tether_data.0, true, None);
            }
            return Ok(true);
        };
        if self.joined.get() {
            return Ok(true);
        }
        match tether::joined(&self.seg, j)? {
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

    /// Has the ring's consumer adopted this one (it then gets every record from
    /// its start)? Always true for the ring's consumer. [`Error::Detached`] once a
    /// tethered consumer was detached.
    pub fn adopted(&self) -> Result<bool> {
        if self.role.is_owner() {
            return Ok(true);
        }
        Ok(self.check_role()? && self.join()?)
    }

    /// Is this consumer still attached and may it hand out records now? A
    /// tethered consumer whose line reads expelled as stalled (DETACHED) waits
    /// four liveness intervals for the ring's consumer to confirm it (it writes
    /// a DETACHED another process forged back at its next audit): `Ok(false)`
    /// meanwhile, handing out nothing (if it is real, its frames are no longer
    /// protected); then [`Error::Detached`]. Any other state ends it at once.
    fn check_role(&self) -> Result<bool> {
        match self.role.check(&self.seg) {
            Ok(()) => {
                self.detached_seen.set(None);
                Ok(true)
            }
            Err(e) => {
                let Some(j) = self.role.line() else {
                    return Err(e);
                };
                if !tether::reads_expelled(&self.seg, j) {
                    return Err(e);
                }
                let since = *self.detached_seen.get().get_or_insert_with(Instant::now);
                self.detached_seen.set(Some(since));
                if since.elapsed() >= self.opts.liveness_interval * 4 {
                    return Err(e);
                }
                Ok(false)
            }
        }
    }

    /// A tethered consumer's line as the ring lists it (its counters and lag);
    /// `None` for the ring's consumer.
    pub fn tether_info(&self) -> Option<crate::TetherInfo> {
        self.role.info(&self.seg)
    }

    /// Records released unread by this consumer's filter and age limit
    /// ([`ConsumerOptions::filter`], [`ConsumerOptions::max_age`]): the ring's
    /// `records_filtered` for its consumer, its line's for a tethered one.
    pub fn records_filtered(&self) -> u64 {
        // Relaxed: a counter read for reporting, ordered with nothing.
        self.role.filtered(&self.seg).load(Ordering::Relaxed)
    }

    /// Is this a tethered consumer (see [`Consumer::tethered`])?
    pub fn is_tethered(&self) -> bool {
        !self.role.is_owner()
    }

    /// Publishes our read cursor (see [`Role::publish`]).
    fn publish(&self, cur: &ConsumerCursor) {
        self.role.publish(&self.seg, cur)
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
        let mut usable = self.check_role()?;
        loop {
            // Before every look at the ring, so before a wait and after a wake:
            // releases other threads queued (a shared consumer's).
            self.apply_queued();
            if !usable || !self.join()? {
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
                usable = self.check_role()?;
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
                if timeout != Some(Duration::ZERO) && spins < self.spin.get().limit() {
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
            self.spin.set(self.spin.get().slept());
            spins = 0;
            self.sleep(left.min(self.until_next_look(now)));
            if now.elapsed() < QUICK_RECORD {
                self.spin.set(self.spin.get().woke_quickly());
            }
        }
    }

    /// Releases a frame handed out by [`Consumer::next_raw`]. O(1): nothing is
    /// zeroed or copied. Space returns to producers once every earlier frame is
    /// released too.
    pub fn release_raw(&self, seq: u64) -> Result<()> {
        let mut cur = self.cur.borrow_mut();
        match self.release_in(&mut cur, seq) {
            Ok(moved) => {
                if moved {
                    self.publish(&cur);
                    self.place(&mut cur);
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

    /// Releases `seq` in `cur` (see [`ConsumerCursor::release`]); a frame handed
    /// out from a pinned record gives its pin back (producers waiting for space
    /// are told: they may fit now).
    fn release_in(
        &self,
        cur: &mut ConsumerCursor,
        seq: u64,
    ) -> std::result::Result<bool, crate::protocol::NotHeld> {
        let moved = cur.release(seq)?;
        if self.pins.borrow_mut().released(&self.seg, seq) {
            self.pins_changed();
        }
        Ok(moved)
    }

    /// Adds `n` to a counter of ours (see `counters.rs`).
    fn count(&self, field: &crate::sync::AtomicU64, n: u64) {
        self.own.bump(&self.seg, field, n)
    }

    /// A pin went: producers waiting for space, which may have been short of room
    /// around it, look again (the usual hysteresis does not see pins).
    fn pins_changed(&self) {
        if crate::wake::notify(&self.seg.control().space.0, true, None) {
            self.count(&self.seg.control().counters.0.wakes_sent, 1);
        }
    }

    /// Placement: after a release that left the ring empty (its read cursor
    /// published at the write cursor) past the placement window
    /// (`protocol::place_window`), the next record goes to the ring's start (see
    /// `Shared::pad_to_start`): the ring's consumer pads the ring to its end,
    /// steps over the padding at once and publishes past it. Not with tethered
    /// consumers (the ring is empty only when they are done too).
    fn place(&self, cur: &mut ConsumerCursor) {
        let cap = self.seg.geometry().cap_units();
        if cur.peek_pos & (cap - 1) < crate::protocol::place_window(cap) {
            return;
        }
        if !self.role.is_owner() || self.role.has_tethers() || cur.outstanding() != 0 {
            return;
        }
        let sh = self.seg.shared();
        if sh.pad_to_start(cur.peek_seq, cur.peek_pos).is_none() {
            return;
        }
        if let crate::protocol::Poll::Skipped { .. } = cur.poll(&sh) {
            self.publish(cur);
            if let Some(cc) = self.role.counters(&self.seg) {
                self.count(&cc.placements, 1);
            }
        }
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

    pub fn options(&self) -> ConsumerOptions {
        self.opts
    }
}

/// A sleep that ends sooner than this (a record came) would have been saved by a
/// spin: the consumer spins more (see `wait::Spin`).
const QUICK_RECORD: Duration = Duration::from_micros(4);

/// Skips a call makes before its deadline is checked between them.
const SKIPS_BEFORE_DEADLINE: u32 = 4096;

/// Polls between two looks at the clock for a due audit while records flow.
const AUDIT_EVERY: u32 = 1024;

impl Drop for Consumer {
    fn drop(&mut self) {
        self.role.leave(&self.seg)
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
