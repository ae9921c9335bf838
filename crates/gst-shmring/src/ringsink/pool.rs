//! The sink's buffer pool: every buffer it hands upstream is a reservation in the
//! ring, so upstream writes the frame in place and the sink's `render` only writes
//! the media header and commits.
//!
//! A producer holds at most one open reservation, so the pool owns a set of
//! producers, one per buffer it can have outstanding, attached as they are first
//! needed, up to as many frames as half the ring holds (at most
//! [`MAX_BUFFERS`]). A buffer's memory remembers its producer; when the buffer is
//! freed, the producer is free again (an uncommitted reservation is aborted then:
//! upstream dropped the buffer). When every producer is busy, `acquire` waits for
//! one, as a pool of fixed size does: so a `queue` before the sink holds pool
//! buffers only, and every frame is written in place. When the ring has no room,
//! no consumer, or the caller may not wait, the pool hands out a spare buffer
//! instead, which `render` copies (and counts); one the ring refused after the
//! producer waited for room is remembered ([`Core::refused`]), so `render` drops
//! it instead of waiting a second time.
//!
//! A pool serves one ring. When the sink moves to another ring (its consumer
//! was replaced), the old pool is *retired*: it reserves nothing more (its ring
//! has no consumer to free the space), and upstream is asked to choose its
//! buffers again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use gst::glib;
use gst::subclass::prelude::*;
use shmring::media::{MediaHeader, MEDIA_HEADER_SIZE};
use shmring::{Error, FullPolicy, Meta, Producer, Segment};

use crate::lock;

struct Slot {
    /// `None` while the pool reserves through it (outside the lock).
    producer: Option<Producer>,
    /// A buffer of this pool uses the producer.
    busy: bool,
    /// The open reservation's payload start (the media header goes there).
    open: Option<usize>,
}

/// Most buffers (producers) a pool hands out at once.
pub const MAX_BUFFERS: usize = 16;

/// The producers behind one pool.
pub struct Core {
    seg: Arc<Segment>,
    slots: Mutex<Vec<Slot>>,
    /// A slot became free (a buffer was freed), or the pool is flushing.
    freed: Condvar,
    max: usize,
    policy: FullPolicy,
    /// The ring has no consumer (the sink says so): reserve without waiting.
    no_consumer: AtomicBool,
    /// The sink writes into another ring now: reserve nothing.
    retired: AtomicBool,
    flushing: AtomicBool,
    /// Where the spare buffers handed out because the ring refused a reservation
    /// (full, after the wait) begin.
    refused: Mutex<Vec<usize>>,
}

impl Core {
    /// A pool core on `seg` for frames of `frame` bytes, reserving with `policy`:
    /// up to as many buffers as half the ring holds (2 to [`MAX_BUFFERS`]).
    pub fn new(seg: &Arc<Segment>, frame: usize, policy: FullPolicy) -> Result<Core, Error> {
        let half = seg.geometry().capacity as usize / 2;
        let max = (half / (frame + MEDIA_HEADER_SIZE + 64).max(1)).clamp(2, MAX_BUFFERS);
        // One producer now: the ring must take one.
        let first = Slot {
            producer: Some(seg.producer()?),
            busy: false,
            open: None,
        };
        let mut slots = Vec::with_capacity(max);
        slots.push(first);
        Ok(Core {
            seg: seg.clone(),
            slots: Mutex::new(slots),
            freed: Condvar::new(),
            max,
            policy,
            no_consumer: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            flushing: AtomicBool::new(false),
            refused: Mutex::new(Vec::new()),
        })
    }

    /// Buffers the pool hands out at most.
    pub fn max_buffers(&self) -> usize {
        self.max
    }

    /// The sink found the ring without (or again with) a consumer.
    pub fn set_no_consumer(&self, gone: bool) {
        // Relaxed: a hint for how long to wait; the reservation itself is checked.
        self.no_consumer.store(gone, Ordering::Relaxed);
    }

    /// The sink writes into another ring now (see the module's documentation).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        let _g = lock(&self.slots);
        self.freed.notify_all();
    }

    /// Was the buffer whose data begins at `data` handed out because the ring
    /// refused its reservation (full, after the producer waited)?
    pub fn refused(&self, data: *const u8) -> bool {
        lock(&self.refused).contains(&(data as usize))
    }

    fn set_flushing(&self, flushing: bool) {
        self.flushing.store(flushing, Ordering::Release);
        let _g = lock(&self.slots);
        self.freed.notify_all();
    }

    /// A free slot, attaching a producer for it if the pool may grow; waiting for
    /// a buffer to be freed (`wait`) otherwise. `None`: none (flushing, may not
    /// wait, or the ring takes no more producers).
    fn take_slot(&self, wait: bool) -> Option<(usize, Producer)> {
        let mut slots = lock(&self.slots);
        loop {
            if self.flushing.load(Ordering::Acquire) || self.retired.load(Ordering::Acquire) {
                return None;
            }
            if let Some(idx) = slots.iter().position(|s| !s.busy && s.producer.is_some()) {
                slots[idx].busy = true;
                return Some((idx, slots[idx].producer.take().expect("checked above")));
            }
            if slots.len() < self.max {
                if let Ok(p) = self.seg.producer() {
                    slots.push(Slot {
                        producer: None,
                        busy: true,
                        open: None,
                    });
                    return Some((slots.len() - 1, p));
                }
            }
            if !wait {
                return None;
            }
            // Woken when a buffer is freed; the timeout only bounds a missed wake.
            slots = self
                .freed
                .wait_timeout(slots, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A reservation for `size` bytes of frame (plus the header); `Err(true)`:
    /// none because the ring refused it (full, after the wait), `Err(false)`:
    /// none for another reason.
    fn reserve(self: &Arc<Self>, size: usize, wait: bool) -> Result<Chunk, bool> {
        let (idx, mut producer) = self.take_slot(wait).ok_or(false)?;
        let policy = if self.no_consumer.load(Ordering::Relaxed) {
            FullPolicy::Fail
        } else {
            self.policy
        };
        let r = producer.reserve_raw(MEDIA_HEADER_SIZE + size, policy);
        let mut slots = lock(&self.slots);
        let slot = &mut slots[idx];
        slot.producer = Some(producer);
        match r {
            Ok(r) => {
                slot.open = Some(r.ptr as usize);
                Ok(Chunk {
                    core: self.clone(),
                    idx,
                    // SAFETY: the reservation spans header + size bytes from r.ptr.
                    ptr: unsafe { r.ptr.add(MEDIA_HEADER_SIZE) },
                    len: size,
                })
            }
            Err(e) => {
                slot.busy = false;
                self.freed.notify_one();
                // Counted by the producer in the ring's drops_full.
                Err(matches!(
                    e,
                    Error::Full { .. } | Error::Timeout { .. } | Error::NoConsumer(_)
                ))
            }
        }
    }

    /// If `data` is the frame of one of this pool's open reservations, writes the
    /// header before it and commits `len` frame bytes. `Ok(false)`: not ours.
    pub fn commit(
        &self,
        data: *const u8,
        len: usize,
        hd: &MediaHeader,
        meta: Meta,
    ) -> Result<bool, Error> {
        let start = (data as usize).wrapping_sub(MEDIA_HEADER_SIZE);
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.iter_mut().find(|s| s.open == Some(start)) else {
            return Ok(false);
        };
        let Some(producer) = slot.producer.as_mut() else {
            return Ok(false);
        };
        let bytes = hd.to_bytes();
        // SAFETY: `start` is the payload start of this producer's open reservation
        // (header + frame bytes, exclusively ours until commit); the header fits in
        // front of the frame by construction.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), start as *mut u8, MEDIA_HEADER_SIZE)
        };
        slot.open = None;
        producer.commit_raw(MEDIA_HEADER_SIZE + len, meta)?;
        Ok(true)
    }

    fn free(&self, idx: usize) {
        let mut slots = lock(&self.slots);
        let slot = &mut slots[idx];
        if slot.open.take().is_some() {
            if let Some(p) = slot.producer.as_mut() {
                p.abort_raw();
            }
        }
        slot.busy = false;
        self.freed.notify_one();
    }
}

/// A buffer's memory: a frame-sized window of an open reservation.
struct Chunk {
    core: Arc<Core>,
    idx: usize,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the window lies in the shared mapping that the core's producers keep
// mapped; it is written only by whoever holds the buffer (GStreamer's writability
// rules), and freeing goes through the core's lock.
unsafe impl Send for Chunk {}

impl AsMut<[u8]> for Chunk {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the reservation is open (or committed and still owned by this
        // buffer's producer, which cannot reserve again until this chunk is
        // dropped), so these bytes are ours; ptr/len come from `reserve_raw`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.core.free(self.idx);
    }
}

/// A buffer's memory when the ring gave none: its own bytes, copied by `render`,
/// or, when the ring refused it after the producer waited, remembered by the
/// core as refused until it is freed.
struct Spare {
    buf: Vec<u8>,
    refused_by: Option<Arc<Core>>,
}

impl Spare {
    fn new(size: usize, refused_by: Option<Arc<Core>>) -> Spare {
        let buf = vec![0u8; size];
        if let Some(core) = &refused_by {
            lock(&core.refused).push(buf.as_ptr() as usize);
        }
        Spare { buf, refused_by }
    }
}

impl AsMut<[u8]> for Spare {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl AsRef<[u8]> for Spare {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(core) = &self.refused_by {
            let at = self.buf.as_ptr() as usize;
            lock(&core.refused).retain(|&p| p != at);
        }
    }
}

glib::wrapper! {
    /// A buffer pool whose buffers are reservations in a ring.
    pub struct RingPool(ObjectSubclass<imp::RingPool>) @extends gst::BufferPool, gst::Object;
}

impl RingPool {
    /// A pool over `core`'s producers.
    pub fn new(core: Arc<Core>) -> RingPool {
        let pool: RingPool = glib::Object::new();
        let _ = pool.imp().core.set(core);
        pool
    }
}

mod imp {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    pub struct RingPool {
        pub(super) core: OnceLock<Arc<Core>>,
        size: AtomicUsize,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for RingPool {
        const NAME: &'static str = "GstShmRingPool";
        type Type = super::RingPool;
        type ParentType = gst::BufferPool;
    }

    impl ObjectImpl for RingPool {}
    impl GstObjectImpl for RingPool {}

    impl BufferPoolImpl for RingPool {
        fn set_config(&self, config: &mut gst::BufferPoolConfigRef) -> bool {
            let Some((_, size, _, _)) = config.params() else {
                return false;
            };
            self.size.store(size as usize, Ordering::Release);
            self.parent_set_config(config)
        }

        fn start(&self) -> bool {
            // Nothing to preallocate: reservations are made per acquire.
            if let Some(c) = self.core.get() {
                c.set_flushing(false);
            }
            true
        }

        fn stop(&self) -> bool {
            if let Some(c) = self.core.get() {
                c.set_flushing(true);
            }
            true
        }

        fn flush_start(&self) {
            if let Some(c) = self.core.get() {
                c.set_flushing(true);
            }
        }

        fn flush_stop(&self) {
            if let Some(c) = self.core.get() {
                c.set_flushing(false);
            }
        }

        fn acquire_buffer(
            &self,
            params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            let size = self.size.load(Ordering::Acquire);
            let wait =
                !params.is_some_and(|p| p.flags().contains(gst::BufferPoolAcquireFlags::DONTWAIT));
            let core = self.core.get();
            let chunk = core.map_or(Err(false), |c| c.reserve(size, wait));
            let mut buffer = gst::Buffer::new();
            let mem = match chunk {
                Ok(chunk) => gst::Memory::from_mut_slice(chunk),
                // No room, no consumer, flushing, retired or may not wait: a
                // spare buffer, copied later (or dropped: refused).
                Err(refused) => {
                    gst::Memory::from_mut_slice(Spare::new(size, core.filter(|_| refused).cloned()))
                }
            };
            buffer
                .get_mut()
                .expect("a new buffer is writable")
                .append_memory(mem);
            Ok(buffer)
        }

        fn release_buffer(&self, buffer: gst::Buffer) {
            // Never reused: dropping it frees its producer (see `Chunk`).
            drop(buffer);
        }
    }
}
