//! A ring in this process's heap: one zeroed, page-aligned block instead of a
//! shared mapping, and an in-process table of locks instead of record locks (see
//! [`crate::sys::lock::Table`]); wake-ups are the same shared futexes. Everything
//! above the segment (producers, consumers, tethered consumers, taps) runs on it
//! unchanged. It is what checkers that cannot make the system calls of a shared
//! mapping run the ring on (Miri has no `memfd_create`, `mmap` of a file or record
//! locks), and a ring for threads of one process.
//!
//! A holder's death is a test hook here ([`Segment::kill_producer`],
//! [`Segment::kill_consumer`]): its locks go, as the kernel drops a dead process's
//! record locks, and its `Drop` never runs, as a dead process runs nothing.

use std::alloc::Layout;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::{files, Backing, Config, Segment};
use crate::error::{os, Error, Result};
use crate::layout::MAX_PRODUCERS;
use crate::sys::lock::{self, LOCK_BASE};
use crate::{Consumer, Producer};

/// The block's alignment: a page, as a mapping's (the layout needs 64 bytes).
const ALIGN: usize = 4096;

/// The heap block of an in-process ring, freed when its last view goes.
pub(super) struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is plain memory that every user accesses through atomics or
// through raw pointers whose use the protocol arbitrates, as a shared mapping.
unsafe impl Send for Block {}
// SAFETY: as above.
unsafe impl Sync for Block {}

impl Block {
    fn new(len: usize, name: &str) -> Result<Block> {
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|e| Error::Config(format!("segment {name}: {e}")))?;
        // SAFETY: `len` is at least a control block, so the layout is not empty.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| {
            os(
                "allocate an in-process ring",
                name,
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            )
        })?;
        Ok(Block { ptr, layout })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated in `Block::new` with this layout; every view of the
        // block holds an `Arc` to it, so none is left.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({} bytes)", self.layout.size())
    }
}

impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        self.ptr == other.ptr
    }
}

impl Eq for Block {}

/// An in-process ring has no descriptor: what [`Segment::fd`] returns for it is an
/// eventfd no ring is behind, on which every attach and every listener refuse
/// (not a memfd, no control block).
fn placeholder(name: &str) -> Result<OwnedFd> {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
        .map_err(|e| os("eventfd (in-process ring)", name, e))
}

/// Holders killed by the test hook: never dropped, as a dead process runs no
/// destructor (and kept reachable, so a leak checker does not count them).
static DEAD: Mutex<Vec<Box<dyn std::any::Any + Send>>> = Mutex::new(Vec::new());

impl Segment {
    /// Creates a ring in this process's heap (`in-process:NAME`): for threads of
    /// one process, and for checkers that cannot map shared memory (under Miri,
    /// an [`Address::Memfd`](crate::Address::Memfd) makes one of these). It has no
    /// descriptor to hand over ([`Segment::descriptors`] is empty) and no file;
    /// liveness is an in-process table, wake-ups the same futexes as a shared
    /// ring's.
    ///
    /// ```
    /// use shmring::{Config, Meta, Segment};
    /// let seg = Segment::create_in_process("doc", &Config::with_capacity(1 << 16))?;
    /// let consumer = seg.consumer()?;
    /// let mut producer = seg.producer()?;
    /// producer.send(b"hello", Meta::new(1, 2))?;
    /// assert_eq!(consumer.try_next()?.expect("a frame").payload(), b"hello");
    /// assert!(seg.descriptors().is_empty());
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn create_in_process(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        let geo = cfg.geometry()?;
        let label = format!("in-process:{name}");
        let block = Arc::new(Block::new(geo.total_size as usize, &label)?);
        let mut seg = Segment::over_block(
            block,
            Some(files::LockFile::in_process()),
            placeholder(&label)?,
            geo,
            label,
        );
        seg.init();
        seg.make_eventfd()?;
        Ok(Arc::new(seg))
    }

    fn over_block(
        block: Arc<Block>,
        locks: Option<Arc<files::LockFile>>,
        fd: OwnedFd,
        geo: crate::layout::Geometry,
        name: String,
    ) -> Segment {
        Segment {
            base: block.ptr,
            len: geo.total_size as usize,
            locks,
            data: Some(fd),
            read_only: std::sync::OnceLock::new(),
            max_record: std::sync::atomic::AtomicU64::new(geo.max_record),
            geo,
            label: name.as_str().into(),
            name,
            backing: Backing::InProcess(block),
            persist: std::sync::atomic::AtomicBool::new(false),
            eventfd: None,
            guard: None,
        }
    }

    /// The read-only view of an in-process ring: the same block, no locks.
    pub(super) fn in_process_view(&self) -> Result<Option<Segment>> {
        let Backing::InProcess(block) = &self.backing else {
            return Ok(None);
        };
        let name = format!("{} (read-only)", self.name);
        let fd = placeholder(&name)?;
        Ok(Some(Segment::over_block(
            block.clone(),
            None,
            fd,
            self.geo,
            name,
        )))
    }

    /// Test hook: `producer` dies, as its process would be killed. Its lock goes
    /// (the slot reads dead to the consumer, which takes back its claim and frees
    /// the slot), and it runs nothing more: no abort, no detach. Only for a ring
    /// made by [`Segment::create_in_process`] (a shared ring's producers die by
    /// `kill`); anything else is [`Error::Config`] and the producer is dropped as
    /// usual.
    pub fn kill_producer(producer: Producer) -> Result<()> {
        let seg = producer.segment().clone();
        let slot = producer.slot();
        seg.kill(producer, crate::slots::slot_byte(slot), |l| {
            l.set_slot(slot, false)
        })
    }

    /// Test hook: `consumer` (the ring's or a tethered one) dies, as
    /// [`Segment::kill_producer`] says: its lock goes, its `Drop` never runs. A
    /// tethered consumer whose line is no longer held (expelled) is an error.
    pub fn kill_consumer(consumer: Consumer) -> Result<()> {
        let seg = consumer.segment().clone();
        if !consumer.is_tethered() {
            return seg.kill(consumer, LOCK_BASE, |l| l.set_consumer(false));
        }
        let Some(j) = consumer.tether_info().map(|t| t.line) else {
            return Err(Error::Config(format!(
                "segment {}: this tethered consumer holds no line any more",
                seg.name
            )));
        };
        seg.kill(consumer, tether_byte(j), |l| l.set_tether(j, false))
    }

    fn kill<T: Send + 'static>(
        &self,
        holder: T,
        byte: i64,
        forget: impl FnOnce(&files::LocalRoles),
    ) -> Result<()> {
        if !matches!(self.backing, Backing::InProcess(_)) {
            return Err(Error::Config(format!(
                "segment {}: only an in-process ring's holders can be killed in process",
                self.name
            )));
        }
        {
            let _g = files::attach_guard();
            let locks = self.lock_file();
            forget(locks.local());
            lock::unlock(locks.fd(), byte);
        }
        DEAD.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(holder));
        Ok(())
    }
}

/// The lock byte of tether line `j` (after the consumer's and every producer
/// slot's; see `crate::tether`).
fn tether_byte(j: u32) -> i64 {
    LOCK_BASE + 1 + MAX_PRODUCERS as i64 + j as i64
}
