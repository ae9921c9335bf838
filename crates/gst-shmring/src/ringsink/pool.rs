//! The sink's buffer pool: every buffer it hands upstream is a reservation in the
//! ring, so upstream writes the frame in place and the sink's `render` only writes
//! the media header and commits.
//!
//! A producer holds at most one open reservation, so the pool owns a fixed set of
//! producers, one per buffer it can have outstanding. A buffer's memory remembers
//! its producer; when the buffer is freed, the producer is free again (an
//! uncommitted reservation is aborted then: upstream dropped the buffer). When every
//! producer is busy, or the ring has no room, the pool hands out an ordinary buffer
//! instead, which `render` copies (and counts).

use std::sync::{Arc, Mutex, OnceLock};

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

/// The producers behind one pool.
pub struct Core {
    slots: Mutex<Vec<Slot>>,
    policy: FullPolicy,
}

impl Core {
    /// `buffers` producers on `seg`, reserving with `policy`.
    pub fn new(seg: &Arc<Segment>, buffers: usize, policy: FullPolicy) -> Result<Core, Error> {
        let mut slots = Vec::with_capacity(buffers);
        for _ in 0..buffers {
            slots.push(Slot {
                producer: Some(seg.producer()?),
                busy: false,
                open: None,
            });
        }
        Ok(Core {
            slots: Mutex::new(slots),
            policy,
        })
    }

    /// A reservation for `size` bytes of frame (plus the header), or `None`.
    fn reserve(self: &Arc<Self>, size: usize) -> Option<Chunk> {
        let (idx, mut producer) = {
            let mut slots = lock(&self.slots);
            let idx = slots.iter().position(|s| !s.busy && s.producer.is_some())?;
            slots[idx].busy = true;
            (idx, slots[idx].producer.take().expect("checked above"))
        };
        let r = producer.reserve_raw(MEDIA_HEADER_SIZE + size, self.policy);
        let mut slots = lock(&self.slots);
        let slot = &mut slots[idx];
        slot.producer = Some(producer);
        match r {
            Ok(r) => {
                slot.open = Some(r.ptr as usize);
                Some(Chunk {
                    core: self.clone(),
                    idx,
                    // SAFETY: the reservation spans header + size bytes from r.ptr.
                    ptr: unsafe { r.ptr.add(MEDIA_HEADER_SIZE) },
                    len: size,
                })
            }
            Err(_) => {
                slot.busy = false;
                None
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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
            true
        }

        fn stop(&self) -> bool {
            true
        }

        fn acquire_buffer(
            &self,
            _params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            let size = self.size.load(Ordering::Acquire);
            let chunk = self.core.get().and_then(|c| c.reserve(size));
            let mut buffer = gst::Buffer::new();
            let mem = match chunk {
                Some(chunk) => gst::Memory::from_mut_slice(chunk),
                // Every producer busy or no room: an ordinary buffer, copied later.
                None => gst::Memory::with_size(size),
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
