//! Producers: claim space lock-free, write the payload in place, commit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{record_units, ClaimState, RecordHeader, Slot, UNIT};
use crate::protocol::{Claim, ClaimError};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use crate::sys::{now_ns, process_token};
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
/// # use shmring::{Config, Segment, Meta};
/// let seg = Segment::create_memfd("doc-producer", &Config::with_capacity(1 << 20)).unwrap();
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
    token: u64,
    policy: FullPolicy,
    /// A claim not yet committed or aborted, aborted on drop (covers a leaked
    /// [`Reservation`]).
    active: Option<Claim>,
}

impl Producer {
    /// Attaches a producer to the ring.
    pub fn new(seg: Arc<Segment>) -> Result<Producer> {
        if seg.uses_eventfd() && seg.eventfd().is_none() {
            return Err(Error::EventfdRequired(seg.label()));
        }
        let token = process_token();
        // Read the clock once now: the first read may locate the vDSO with a system
        // call (prctl or /proc), which a sandbox entered after attach would forbid.
        let _ = now_ns();
        let slot = slots::acquire(&seg, token)?;
        Ok(Producer {
            seg,
            slot,
            token,
            policy: FullPolicy::Block(Duration::from_secs(1)),
            active: None,
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

    /// Copies `bytes` into the ring as one record.
    pub fn send(&mut self, bytes: &[u8], meta: Meta) -> Result<()> {
        let mut r = self.reserve(bytes.len())?;
        r.payload().copy_from_slice(bytes);
        r.commit(meta)
    }

    fn claim(&mut self, len: u64, policy: FullPolicy) -> Result<Claim> {
        assert!(self.active.is_none(), "one reservation at a time");
        let max = self.seg.geometry().max_record;
        if len > max {
            return Err(Error::TooLarge {
                segment: self.seg.label(),
                len,
                max,
            });
        }
        let units = record_units(len);
        let mut deadline: Option<Instant> = None;
        let space = &self.seg.control().space.0;
        let mut armed: Option<u32> = None;
        loop {
            let attempt = self.seg.shared().try_claim(units, self.slot);
            if self.seg.truncated() {
                return Err(self.seg.truncated_error());
            }
            if let Some(seen) = armed.take() {
                // We announced ourselves before this attempt: if it failed, any space
                // freed since will bump `seen`, so sleeping on it cannot miss it.
                if let Err(ClaimError::FullBytes | ClaimError::FullRecords) = attempt {
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
            let why = match attempt {
                Ok(c) => return Ok(c),
                Err(ClaimError::Broken) => {
                    return Err(Error::Corrupt {
                        segment: self.seg.label(),
                        seq: 0,
                        what: "write and read cursors contradict the claim log",
                    })
                }
                Err(ClaimError::FullBytes) => "no free bytes",
                Err(ClaimError::FullRecords) => "too many records in flight",
            };
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
                bump(&self.my_slot().counters.drops_full, 1);
                if !slots::consumer_alive(&self.seg, self.token) {
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

    fn finish(&mut self, claim: &Claim, state: ClaimState) -> bool {
        self.active = None;
        let ok = self.seg.shared().finish(claim, state);
        let f = &self.seg.control().data.0;
        if wake::notify(f, false, self.seg.eventfd()) {
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
        if let Some(c) = self.active.take() {
            let _ = self.seg.shared().finish(&c, ClaimState::Aborted);
        }
        slots::release(&self.seg, self.slot);
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
        let h = RecordHeader {
            len: self.len as u64,
            timestamp_ns: meta.timestamp_ns,
            stream: meta.stream,
            kind: meta.kind,
            flags: meta.flags,
            _pad: 0,
            seq: self.claim.seq,
            _reserved: [0; 3],
        };
        // SAFETY: the header is the first unit of our record (see `payload`), 64-byte
        // aligned; the commit below publishes it with Release ordering.
        unsafe {
            std::ptr::write_volatile(
                self.producer.record_ptr(&self.claim) as *mut RecordHeader,
                h,
            )
        };
        self.done = true;
        let claim = self.claim;
        let p = &mut *self.producer;
        let ok = p.finish(&claim, ClaimState::Committed);
        if p.seg.truncated() {
            return Err(p.seg.truncated_error());
        }
        if ok {
            let c = &p.my_slot().counters;
            bump(&c.records_committed, 1);
            bump(&c.bytes_committed, self.len as u64);
            Ok(())
        } else {
            Err(Error::Abandoned {
                segment: p.seg.label(),
                seq: claim.seq,
            })
        }
    }

    /// Gives the space back without publishing anything.
    pub fn abort(mut self) {
        self.abort_inner();
    }

    fn abort_inner(&mut self) {
        if !self.done {
            self.done = true;
            let claim = self.claim;
            let p = &mut *self.producer;
            p.finish(&claim, ClaimState::Aborted);
            bump(&p.my_slot().counters.aborted, 1);
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
