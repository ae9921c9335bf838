//! Producers: claim space lock-free, write the payload in place, commit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{
    cursor_pos, cursor_seq, header_seq, pos_diff, record_units, seq_diff, ClaimState, RecordHeader,
    Slot, UNIT,
};
use crate::protocol::{Claim, ClaimError};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use crate::sys::now_ns;
use crate::{slots, wake};

/// What a producer does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// Fail at once with [`Error::Full`]; the drop is counted.
    Fail,
    /// Wait for space up to this long, then fail with [`Error::Timeout`] (or
    /// [`Error::NoConsumer`] if no consumer is alive); the drop is counted.
    Block(Duration),
}

/// A record's metadata, stored in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// Which stream the record belongs to (e.g. one per camera or participant).
    pub stream: u32,
    /// What it is (see [`crate::media::kind`] for the values shmring's tools use).
    pub kind: u32,
    /// When it was captured, in nanoseconds (CLOCK_MONOTONIC by default).
    pub timestamp_ns: u64,
    /// Free for the application.
    pub flags: u32,
}

impl Meta {
    /// Metadata stamped with the current monotonic time.
    pub fn new(stream: u32, kind: u32) -> Self {
        Meta {
            stream,
            kind,
            timestamp_ns: now_ns(),
            flags: 0,
        }
    }
    pub fn with_timestamp(mut self, ns: u64) -> Self {
        self.timestamp_ns = ns;
        self
    }
    pub fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
}

/// A producer: one per thread (it is `Send`, not `Sync`). Each holds one slot of
/// the ring for its lifetime and at most one reservation at a time.
///
/// ```
/// # use shmring::{Address, Config, Meta};
/// let seg = Address::memfd("doc-producer", Config::with_capacity(1 << 20)).open().unwrap();
/// let consumer = seg.consumer().unwrap();
/// let mut producer = seg.producer().unwrap();
/// let mut r = producer.reserve(1000).unwrap();
/// r.payload().fill(7); // write in place, no copy
/// r.commit(Meta::new(0, 1)).unwrap();
/// assert_eq!(consumer.try_next().unwrap().unwrap().payload(), &[7u8; 1000][..]);
/// ```
pub struct Producer {
    seg: Arc<Segment>,
    slot: u32,
    policy: FullPolicy,
    /// A claim not yet committed or aborted, aborted on drop (covers a leaked
    /// [`Reservation`]).
    active: Option<Claim>,
    /// The next media `sequence` of each stream this producer writes.
    numbering: crate::media::Numbering,
}

impl Producer {
    /// Attaches a producer to the ring.
    pub fn new(seg: Arc<Segment>) -> Result<Producer> {
        if seg.uses_eventfd() && seg.eventfd().is_none() {
            return Err(Error::EventfdRequired(seg.label()));
        }
        // Read the clock once now: the first read may locate the vDSO with a system
        // call (prctl or /proc), which a sandbox entered after attach would forbid.
        let _ = now_ns();
        let slot = slots::acquire(&seg)?;
        Ok(Producer {
            seg,
            slot,
            policy: FullPolicy::Block(Duration::from_secs(1)),
            active: None,
            numbering: Default::default(),
        })
    }

    /// Sets what to do when the ring is full (default: block up to 1 s).
    pub fn set_policy(&mut self, policy: FullPolicy) {
        self.policy = policy;
    }

    pub fn policy(&self) -> FullPolicy {
        self.policy
    }

    /// The slot this producer occupies.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    fn my_slot(&self) -> &Slot {
        self.seg.slot(self.slot)
    }

    /// Claims space for a payload of `len` bytes, following the full-ring policy.
    pub fn reserve(&mut self, len: usize) -> Result<Reservation<'_>> {
        let policy = self.policy;
        self.reserve_with(len, policy)
    }

    /// Claims space, failing at once if the ring is full.
    pub fn try_reserve(&mut self, len: usize) -> Result<Reservation<'_>> {
        self.reserve_with(len, FullPolicy::Fail)
    }

    /// Claims space with an explicit policy for this call.
    pub fn reserve_with(&mut self, len: usize, policy: FullPolicy) -> Result<Reservation<'_>> {
        let claim = self.claim(len as u64, policy)?;
        self.active = Some(claim);
        Ok(Reservation {
            producer: self,
            claim,
            len,
            done: false,
        })
    }

    /// Claims space like [`Producer::reserve_with`] but without a borrow: the
    /// reservation stays open in the producer until [`Producer::commit_raw`] or
    /// [`Producer::abort_raw`] (or the producer is dropped, which aborts it). For
    /// bindings and elements that manage lifetimes themselves. A producer holds at
    /// most one open reservation: [`Error::ReservationOpen`] otherwise.
    ///
    /// ```
    /// # use shmring::{Address, Config, Meta, FullPolicy};
    /// let seg = Address::memfd("doc-raw", Config::with_capacity(1 << 20)).open().unwrap();
    /// let consumer = seg.consumer().unwrap();
    /// let mut producer = seg.producer().unwrap();
    /// let r = producer.reserve_raw(3, FullPolicy::Fail).unwrap();
    /// // SAFETY: r.ptr points at r.len writable bytes until commit or abort.
    /// unsafe { std::ptr::copy_nonoverlapping(b"abc".as_ptr(), r.ptr, r.len) };
    /// producer.commit_raw(r.len, Meta::new(0, 1)).unwrap();
    /// assert_eq!(consumer.try_next().unwrap().unwrap().payload(), b"abc");
    /// ```
    pub fn reserve_raw(&mut self, len: usize, policy: FullPolicy) -> Result<RawReservation> {
        if self.active.is_some() {
            return Err(Error::ReservationOpen(self.seg.label()));
        }
        let claim = self.claim(len as u64, policy)?;
        self.active = Some(claim);
        Ok(RawReservation {
            // SAFETY: see `Reservation::payload`: the payload follows the header
            // inside the record.
            ptr: unsafe { self.record_ptr(&claim).add(UNIT as usize) },
            len,
            seq: claim.seq,
        })
    }

    /// Commits the reservation opened by [`Producer::reserve_raw`] with a payload of
    /// `len` bytes (at most the reserved length; a sink may learn the real size only
    /// after filling). [`Error::NoReservation`] if none is open.
    pub fn commit_raw(&mut self, len: usize, meta: Meta) -> Result<()> {
        let Some(claim) = self.active else {
            return Err(Error::NoReservation(self.seg.label()));
        };
        let room = ((claim.rec_units - 1) * UNIT) as usize;
        if len > room {
            return Err(Error::TooLarge {
                segment: self.seg.label(),
                len: len as u64,
                max: room as u64,
            });
        }
        self.commit_claim(claim, len, meta)
    }

    /// Aborts the reservation opened by [`Producer::reserve_raw`]; the consumer skips
    /// it. Returns whether one was open.
    pub fn abort_raw(&mut self) -> bool {
        match self.active {
            Some(claim) => {
                self.abort_claim(claim);
                true
            }
            None => false,
        }
    }

    /// Is a reservation open (from [`Producer::reserve_raw`])?
    pub fn has_reservation(&self) -> bool {
        self.active.is_some()
    }

    /// Copies `bytes` into the ring as one record.
    pub fn send(&mut self, bytes: &[u8], meta: Meta) -> Result<()> {
        let mut r = self.reserve(bytes.len())?;
        r.payload().copy_from_slice(bytes);
        r.commit(meta)
    }

    fn claim(&mut self, len: u64, policy: FullPolicy) -> Result<Claim> {
        // A `Reservation` borrows the producer mutably, so only a raw reservation can
        // still be open here; `reserve_raw` checks, and `reserve` aborts a leaked one.
        if let Some(open) = self.active.take() {
            self.abort_claim(open);
        }
        let mut max = self.seg.max_record();
        if len > max {
            max = self.seg.refresh_max_record();
        }
        if len > max {
            return Err(Error::TooLarge {
                segment: self.seg.label(),
                len,
                max,
            });
        }
        let units = record_units(len);
        // We hold no claim now: say so in our open-claim word (a peer may have
        // written a forged claim's value there, which would make the consumer
        // believe that claim ours; each reservation attempt clears it, even one
        // that finds the ring full).
        self.my_slot().open_claim.store(0, Ordering::Release);
        let mut deadline: Option<Instant> = None;
        let space = &self.seg.control().space.0;
        let mut armed: Option<u32> = None;
        loop {
            let attempt = self
                .seg
                .shared()
                .try_claim(units, self.slot, &self.my_slot().open_claim);
            if self.seg.truncated() {
                return Err(self.seg.truncated_error());
            }
            if let Some(seen) = armed.take() {
                // We announced ourselves before this attempt: if it failed, any space
                // freed since will bump `seen`, so sleeping on it cannot miss it.
                if attempt.is_err() {
                    bump(&self.my_slot().counters.waits, 1);
                    let left = deadline.map_or(Duration::ZERO, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    // Woken or timed out, the next attempt decides.
                    wake::sleep(space, seen, left.min(Duration::from_millis(50)));
                }
                // Clear our mark before the shared count, so a reaper never takes
                // back a count we already gave back.
                self.my_slot().space_waiting.store(0, Ordering::Relaxed);
                wake::disarm(space);
            }
            if let Ok(c) = &attempt {
                if c.paddings > 0 {
                    bump(&self.my_slot().counters.paddings, c.paddings as u64);
                }
            }
            let (why, broken) = match attempt {
                Ok(c) => return Ok(c),
                // The consumer finds this too, and resets the ring: a blocking
                // producer waits for that as it waits for space, then carries on.
                Err(ClaimError::Broken) => {
                    ("write and read cursors contradict the claim log", true)
                }
                Err(ClaimError::FullBytes) => ("no free bytes", false),
                Err(ClaimError::FullRecords) => ("too many records in flight", false),
            };
            let corrupt = || Error::Corrupt {
                segment: self.seg.label(),
                seq: 0,
                what: why,
            };
            if broken && policy == FullPolicy::Fail {
                return Err(corrupt());
            }
            let wait = match policy {
                FullPolicy::Fail => {
                    bump(&self.my_slot().counters.drops_full, 1);
                    return Err(Error::Full {
                        segment: self.seg.label(),
                        why,
                    });
                }
                FullPolicy::Block(t) => t,
            };
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + wait);
            if now >= deadline {
                if broken {
                    return Err(corrupt());
                }
                bump(&self.my_slot().counters.drops_full, 1);
                if !slots::consumer_alive(&self.seg) {
                    return Err(Error::NoConsumer(self.seg.label()));
                }
                return Err(Error::Timeout {
                    segment: self.seg.label(),
                    waiting_for: "free space",
                    after: wait,
                });
            }
            space.need.fetch_max(units as u32, Ordering::Relaxed);
            let seen = wake::arm(space);
            // Mark the slot after counting ourselves in: if we die asleep, the reaper
            // of our slot takes the count back.
            self.my_slot().space_waiting.store(1, Ordering::Relaxed);
            armed = Some(seen);
        }
    }

    /// Writes the record header and publishes the claim. Writes nothing if the
    /// claim is no longer ours (the consumer took it back: its record is still
    /// ours to write, pinned, but nobody will read it).
    fn commit_claim(&mut self, claim: Claim, len: usize, meta: Meta) -> Result<()> {
        // Acquire: as any entry load; a claim taken back reads abandoned (or, reset
        // or reused, not our value at all). One a peer marked committed while we
        // wrote is still ours to commit (see `Shared::settle`).
        let now = self.seg.shared().entry(claim.seq).load(Ordering::Acquire);
        let committed = crate::layout::LogEntry {
            state: ClaimState::Committed,
            ..crate::layout::LogEntry::unpack(claim.claimed)
        }
        .pack();
        if now != claim.claimed && now != committed {
            self.settle(&claim, ClaimState::Committed);
            if self.seg.truncated() {
                return Err(self.seg.truncated_error());
            }
            return Err(Error::Abandoned {
                segment: self.seg.label(),
                seq: claim.seq,
            });
        }
        if len >= crate::media::MEDIA_HEADER_SIZE {
            // SAFETY: the payload (`len` bytes after the record header) is ours until
            // the commit below; nobody else writes it meanwhile.
            let payload = unsafe {
                std::slice::from_raw_parts_mut(
                    self.record_ptr(&claim).add(UNIT as usize),
                    crate::media::MEDIA_HEADER_SIZE,
                )
            };
            self.numbering.number(meta.stream, meta.kind, payload);
        }
        let h = RecordHeader {
            len: len as u64,
            timestamp_ns: meta.timestamp_ns,
            stream: meta.stream,
            kind: meta.kind,
            flags: meta.flags,
            _pad: 0,
            seq: header_seq(claim.seq),
            _reserved: [0; 3],
        };
        // SAFETY: the header is the first unit of our record (see `record_ptr`),
        // 64-byte aligned; the commit below publishes it with Release ordering.
        unsafe { std::ptr::write_volatile(self.record_ptr(&claim) as *mut RecordHeader, h) };
        // Counted before the commit, and taken back if it fails: a producer killed
        // right after its commit has counted it, so the consumer never shows more
        // records consumed than producers committed.
        let c = &self.seg.slot(self.slot).counters;
        bump(&c.records_committed, 1);
        bump(&c.bytes_committed, len as u64);
        let ok = self.settle(&claim, ClaimState::Committed);
        if !ok {
            let c = &self.my_slot().counters;
            bump(&c.records_committed, u64::MAX);
            bump(&c.bytes_committed, (len as u64).wrapping_neg());
        }
        if self.seg.truncated() {
            return Err(self.seg.truncated_error());
        }
        if ok {
            Ok(())
        } else {
            Err(Error::Abandoned {
                segment: self.seg.label(),
                seq: claim.seq,
            })
        }
    }

    fn abort_claim(&mut self, claim: Claim) {
        self.settle(&claim, ClaimState::Aborted);
        bump(&self.my_slot().counters.aborted, 1);
    }

    /// Settles our claim (commit or abort) and wakes the consumer if it sleeps.
    fn settle(&mut self, claim: &Claim, state: ClaimState) -> bool {
        self.active = None;
        let ok = self
            .seg
            .shared()
            .settle(claim, state, &self.my_slot().open_claim);
        let c = self.seg.control();
        let past = |mark: u32| {
            // Relaxed: a hint for when to wake; the consumer's timer bounds the rest.
            let sh = self.seg.shared();
            let (w, r) = (
                sh.write.load(Ordering::Relaxed),
                sh.read.load(Ordering::Relaxed),
            );
            let n = self.seg.geometry().log_entries as u64;
            pos_diff(cursor_pos(w), cursor_pos(r)) >= mark as u64
                || seq_diff(cursor_seq(w), cursor_seq(r)) >= n / 2
        };
        if wake::notify_consumers(&c.data.0, &c.tether_data.0, self.seg.eventfd(), past) {
            bump(&self.my_slot().counters.wakes_sent, 1);
        }
        ok
    }

    fn record_ptr(&self, claim: &Claim) -> *mut u8 {
        // SAFETY: rec_off + rec_units <= cap_units (claim geometry), so the record
        // lies inside the data ring of the mapping, which outlives `self`.
        unsafe { self.seg.data().add((claim.rec_off * UNIT) as usize) }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        if let Some(c) = self.active {
            self.abort_claim(c);
        }
        slots::detach(&self.seg, self.slot);
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("segment", &self.seg.name())
            .field("slot", &self.slot)
            .finish()
    }
}

/// A reservation opened by [`Producer::reserve_raw`]: the payload's address and
/// length inside the ring. Valid until the producer commits or aborts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawReservation {
    /// First payload byte (64-byte aligned), writable until commit or abort.
    pub ptr: *mut u8,
    /// Bytes reserved.
    pub len: usize,
    /// The claim's sequence number (low 28 bits).
    pub seq: u64,
}

/// Space claimed in the ring: write the payload in place, then [`commit`]. Dropped
/// without a commit, it is aborted and the consumer skips it.
///
/// [`commit`]: Reservation::commit
pub struct Reservation<'p> {
    producer: &'p mut Producer,
    claim: Claim,
    len: usize,
    done: bool,
}

impl Reservation<'_> {
    /// The payload bytes, inside the ring. Their previous contents are unspecified.
    pub fn payload(&mut self) -> &mut [u8] {
        // SAFETY: the claim gives us exclusive use of these bytes until we commit or
        // abort: no producer can claim them, and the consumer reads them only after
        // our commit. The payload follows the 64-byte header and ends inside the
        // record (rec_units >= 1 + ceil(len/64)).
        unsafe {
            std::slice::from_raw_parts_mut(
                self.producer.record_ptr(&self.claim).add(UNIT as usize),
                self.len,
            )
        }
    }

    /// The payload as a raw pointer (for bindings).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.payload().as_mut_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The claim's sequence number (low 28 bits).
    pub fn seq(&self) -> u64 {
        self.claim.seq
    }

    /// Publishes the record. [`Error::Abandoned`] if the claim was taken from us.
    pub fn commit(mut self, meta: Meta) -> Result<()> {
        self.done = true;
        let (claim, len) = (self.claim, self.len);
        self.producer.commit_claim(claim, len, meta)
    }

    /// Gives the space back without publishing anything.
    pub fn abort(mut self) {
        self.abort_inner();
    }

    fn abort_inner(&mut self) {
        if !self.done {
            self.done = true;
            let claim = self.claim;
            self.producer.abort_claim(claim);
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.abort_inner();
    }
}

/// Adds to a counter that only this side writes (no read-modify-write needed).
#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}
