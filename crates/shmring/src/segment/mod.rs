//! The shared-memory segment: creation (memfd or named), attaching, validation,
//! mapping, and typed access to the structures of [`crate::layout`].
//!
//! By concept: `address` ([`Address`]: how to reach a ring, its text form, and the
//! one `open`), `attach` (make a ring, or attach to one by name or descriptors),
//! `identity` (the geometry's three lines: validated, written, restored), `mapping`
//! (the probe and the whole ring mapped), `files` (the lock file and who holds
//! it), `in_process` (a ring in this process's heap), `read_only`
//! ([`ReadOnlySegment`]), `config` ([`Config`]).

mod attach;
mod config;
pub(crate) mod files;
mod identity;
mod in_process;
mod mapping;
mod read_only;
mod reserve;

pub(crate) use attach::name_problem;
pub use config::Config;
pub use read_only::ReadOnlySegment;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{os, Error, Result};
use crate::layout::{
    ClaimState, Control, Geometry, LogEntry, Slot, FLAG_EVENTFD, SEQ_MASK, SLOT_SIZE,
};
use crate::protocol::Shared;
use crate::sync::{AtomicU64, Ordering};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    Memfd,
    /// A named segment; unlinked on drop when we created it and did not persist it.
    Named {
        created: bool,
    },
    /// A ring in this process's heap (see `in_process`), freed with its last view.
    InProcess(Arc<in_process::Block>),
}

/// A mapped segment. Share it between a consumer and producers in one process with
/// `Arc`; other processes attach by name or by descriptor.
///
/// ```
/// use shmring::{Address, Config, Meta};
/// let seg = Address::memfd("doc", Config::with_capacity(1 << 20)).open().unwrap();
/// let consumer = seg.consumer().unwrap();
/// let mut producer = seg.producer().unwrap();
/// producer.send(b"hello", Meta::new(1, 2)).unwrap();
/// let frame = consumer.try_next().unwrap().unwrap();
/// assert_eq!(frame.payload(), b"hello");
/// ```
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    /// The ring's lock file as this process holds it (see [`files`]); `None` only
    /// for a read-only view of a memfd ring, which gets no lock file.
    locks: Option<Arc<files::LockFile>>,
    /// A memfd ring's segment descriptor (a named ring's is its lock file's).
    data: Option<OwnedFd>,
    /// [`Segment::read_only_fd`], opened once on demand (memfd rings; a named
    /// ring's goes to its lock file entry).
    read_only: std::sync::OnceLock<OwnedFd>,
    geo: Geometry,
    /// The largest payload producers of this mapping accept: the geometry's, or a
    /// larger one the identity line says once the consumer has repaired a line a
    /// peer wrote before we attached (see [`Segment::refresh_max_record`]).
    max_record: std::sync::atomic::AtomicU64,
    name: String,
    label: crate::error::Name,
    backing: Backing,
    persist: std::sync::atomic::AtomicBool,
    eventfd: Option<OwnedFd>,
    /// Named segments only: absorbs SIGBUS from a peer's truncation.
    guard: Option<crate::sys::sigbus::Guard>,
}

// SAFETY: the mapping is shared memory that every peer accesses through atomics or
// through raw pointers whose use the protocol arbitrates; the struct itself is
// immutable after construction.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` hands out only shared references to atomics.
unsafe impl Sync for Segment {}

impl Segment {
    /// The ring's eventfd, for a ring created with [`Config::eventfd`]: readable when
    /// data is ready. Hand it to producers along with the segment descriptor.
    pub fn eventfd(&self) -> Option<BorrowedFd<'_>> {
        self.eventfd.as_ref().map(|f| f.as_fd())
    }

    /// Does this ring want wake-ups through an eventfd?
    pub fn uses_eventfd(&self) -> bool {
        self.geo.flags & FLAG_EVENTFD != 0
    }

    /// Keep a named segment after this `Segment` is dropped.
    pub fn persist(&self) {
        self.persist
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The segment's descriptor (a memfd for an [`Address::Memfd`](crate::Address::Memfd)). A
    /// producer in another process needs [`Segment::descriptors`]. An in-process
    /// ring has none: its is an eventfd no ring is behind (every attach and
    /// listener refuse it).
    pub fn fd(&self) -> BorrowedFd<'_> {
        match (&self.data, &self.locks) {
            (Some(d), _) => d.as_fd(),
            (None, Some(l)) => l.file().expect("a named ring's lock file is its file"),
            (None, None) => unreachable!("a segment holds a descriptor"),
        }
    }

    /// A read-only descriptor of the segment (`O_RDONLY`, re-opened through
    /// `/proc/self/fd`), for observers: the kernel refuses a writable shared mapping
    /// of it, and it gives no access to the lock file. Opened once and kept.
    pub fn read_only_fd(&self) -> Result<BorrowedFd<'_>> {
        if let Backing::InProcess(_) = self.backing {
            return Err(Error::Config(format!(
                "segment {}: an in-process ring has no descriptor; a tap here reads it \
                 through ReadOnlySegment::of",
                self.name
            )));
        }
        let slot = match (&self.data, &self.locks) {
            // A named ring: the segment is the lock file, whose descriptors this
            // process must keep (closing one would drop its record locks).
            (None, Some(l)) => {
                if let Some(fd) = l.read_only() {
                    return Ok(fd);
                }
                None
            }
            _ => Some(&self.read_only),
        };
        if let Some(fd) = slot.and_then(|s| s.get()) {
            return Ok(fd.as_fd());
        }
        let path = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&self.fd())
        );
        let fd = rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| os("re-open read-only (/proc/self/fd)", &self.name, e))?;
        match (slot, &self.locks) {
            (Some(s), _) => {
                // Another thread may have won the race: ours is closed (a memfd
                // ring's segment holds no lock).
                let _ = s.set(fd);
                Ok(s.get().expect("set above").as_fd())
            }
            (None, Some(l)) => {
                files::register(fd, false, &self.name)?;
                Ok(l.read_only().expect("registered above"))
            }
            (None, None) => unreachable!("a named ring has a lock file"),
        }
    }

    /// The segment's name, for messages (`/name`, `memfd:name`, `fd:N` or
    /// `in-process:name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as shared by errors (cloning it does not allocate).
    pub fn label(&self) -> crate::error::Name {
        self.label.clone()
    }

    /// The validated layout.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The mapping's address range (for zero-copy checks and bindings).
    pub fn mapping(&self) -> (*const u8, usize) {
        (self.base.as_ptr(), self.len)
    }

    /// The producer slot that made claim `seq`: the slot its claim log entry names
    /// while that entry holds the committed claim, as it does while the consumer
    /// holds the record (a [`crate::Frame::seq`] not yet released); `None` once the
    /// entry holds anything else. Records are attributed to slots, not to
    /// processes: a peer that writes the claim log can make an entry name any slot
    /// (see the threat model in `docs/DESIGN.md`); producers using the library
    /// name their own.
    pub fn committed_by(&self, seq: u64) -> Option<u32> {
        // Acquire: as any entry load.
        let e = LogEntry::unpack(self.shared().entry(seq).load(Ordering::Acquire));
        (e.stamp == seq & SEQ_MASK
            && e.state == ClaimState::Committed
            && e.slot < self.geo.max_producers)
            .then_some(e.slot)
    }

    /// Does a live producer hold producer slot `slot`? Its lock says (one `fcntl`),
    /// as for the claims the consumer waits on.
    pub fn producer_alive(&self, slot: u32) -> bool {
        slot < self.geo.max_producers && crate::slots::is_alive(self, slot)
    }

    /// Was this (named) segment truncated by a peer under us? Its mapping then reads
    /// zeros and is no longer shared: every consumer and producer call fails with
    /// [`Error::Truncated`]; create a new segment. Always `false` for a sealed memfd.
    pub fn truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.tripped())
    }

    /// A named segment's file shorter than the ring (a peer truncated it, maybe
    /// only partly, so no page we touched has faulted yet): [`Error::Truncated`].
    /// One `fstat`; consumers and taps ask every liveness interval. A sealed
    /// memfd cannot shrink, nor an in-process ring: always `Ok`.
    pub fn check_size(&self) -> Result<()> {
        if self.truncated() {
            return Err(self.truncated_error());
        }
        if !matches!(self.backing, Backing::Named { .. }) {
            return Ok(());
        }
        match rustix::fs::fstat(self.fd()) {
            Ok(st) if (st.st_size as u64) < self.geo.total_size => Err(self.truncated_error()),
            _ => Ok(()),
        }
    }

    /// The error for a segment whose mapping faulted (see [`Segment::truncated`]):
    /// [`Error::Truncated`] when its file is shorter than the ring; when it is
    /// not, the kernel could not provide a page of it (a full `/dev/shm`):
    /// [`Error::NoSpace`].
    pub(crate) fn truncated_error(&self) -> Error {
        if self.backing != Backing::Memfd {
            if let Ok(st) = rustix::fs::fstat(self.fd()) {
                if st.st_size as u64 >= self.geo.total_size {
                    let room = reserve::shm_room(self.fd());
                    return reserve::no_space(&self.name, self.geo.total_size, room, true);
                }
            }
        }
        Error::Truncated(self.label())
    }

    pub(crate) fn control(&self) -> &Control {
        // SAFETY: the mapping is at least CONTROL_SIZE bytes, page aligned, lives as
        // long as `self`, and Control is made of atomics and plain integers.
        unsafe { &*(self.base.as_ptr() as *const Control) }
    }

    pub(crate) fn slot(&self, i: u32) -> &Slot {
        assert!(i < self.geo.max_producers);
        // SAFETY: the slot table lies inside the validated mapping, each slot is
        // SLOT_SIZE bytes and 64-byte aligned (slots_offset is 4096).
        unsafe {
            &*(self
                .base
                .as_ptr()
                .add((self.geo.slots_offset + i as u64 * SLOT_SIZE) as usize)
                as *const Slot)
        }
    }

    pub(crate) fn log(&self) -> &[AtomicU64] {
        // SAFETY: the claim log lies inside the validated mapping, 8-byte aligned.
        unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(self.geo.log_offset as usize) as *const AtomicU64,
                self.geo.log_entries as usize,
            )
        }
    }

    pub(crate) fn shared(&self) -> Shared<'_> {
        let c = self.control();
        Shared {
            write: &c.write.0,
            read: &c.cursors.0.read,
            log: self.log(),
            cap_units: self.geo.cap_units(),
            pins: crate::protocol::PinTable {
                in_use: &c.cursors.0.pinned,
                extent: &c.pins.0.extent,
            },
        }
    }

    /// Start of the data ring.
    pub(crate) fn data(&self) -> *mut u8 {
        // SAFETY: data_offset < total_size == mapping length.
        unsafe { self.base.as_ptr().add(self.geo.data_offset as usize) }
    }

    /// The ring's lock file as this process holds it; `None` only in a read-only
    /// view of a memfd ring (see [`ReadOnlySegment`]), which cannot lock.
    pub(crate) fn locks(&self) -> Option<&files::LockFile> {
        self.locks.as_deref()
    }

    /// The lock file of a segment that producers or consumers use (every
    /// `Arc<Segment>` has one).
    pub(crate) fn lock_file(&self) -> &files::LockFile {
        self.locks
            .as_deref()
            .expect("only a read-only view lacks a lock file, and nothing locks through it")
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Unregister before unmapping, so the SIGBUS handler never remaps an address
        // range that is no longer ours.
        drop(self.guard.take());
        if let Backing::InProcess(_) = self.backing {
            return; // the block goes with its last view
        }
        // SAFETY: base/len describe the mapping we created and nobody can use it
        // after drop (every user holds an Arc to us).
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast(), self.len);
        }
        // Only while the name is still this ring's file: a file that replaced it
        // (removed by `shmring rm`, then made again by another recorder) is left
        // alone.
        if self.backing == (Backing::Named { created: true })
            && !self.persist.load(std::sync::atomic::Ordering::Relaxed)
            && attach::named_file(&self.name).is_ok_and(|st| {
                Some(files::key_of_stat(&st)) == self.locks.as_ref().map(|l| l.key())
            })
        {
            let _ = rustix::shm::unlink(self.name.as_str());
        }
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("geometry", &self.geo)
            .finish()
    }
}
