//! The shared-memory segment: creation (memfd or named), attaching, validation,
//! mapping, and typed access to the structures of [`crate::layout`].

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};

use rustix::fs::{MemfdFlags, Mode, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::error::{os, Error, Result};
use crate::layout::{
    Control, Geometry, LogEntry, Slot, CONTROL_SIZE, FLAG_EVENTFD, FLAG_HUGE_PAGES, LAYOUT_VERSION,
    MAGIC, SLOT_SIZE,
};
use crate::protocol::Shared;
use crate::stats::Stats;
use crate::sync::{AtomicU64, Ordering};

/// How a ring is sized. Worst-case shared memory is [`Config::segment_size`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Data ring bytes: a power of two, 64 KiB to 2 GiB. The default, 16 MiB, holds
    /// five 1080p I420 frames and stays within a server's last-level cache; size it
    /// up for consumers that stall for long (`shmring record --capacity-mib`).
    pub capacity: u64,
    /// Largest payload; `None`: a quarter of the capacity. At most capacity/2 − 64.
    pub max_record: Option<u64>,
    /// Records in flight at once (claimed, unread or held); `None`: capacity/4096,
    /// clamped to 64..=65536. A power of two.
    pub log_entries: Option<u32>,
    /// Producer slots, 1..=256.
    pub max_producers: u32,
    /// Producers wake the consumer through an eventfd (for epoll/asyncio/tokio)
    /// instead of the futex.
    pub eventfd: bool,
    /// Ask for transparent huge pages on the ring (`MADV_HUGEPAGE` in every process
    /// that maps it): fewer TLB misses when frames are megabytes. Takes effect only
    /// where the kernel allows huge pages on shared memory
    /// (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `advise` or
    /// `always`); elsewhere the ring works as without it.
    pub huge_pages: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            capacity: Self::DEFAULT_CAPACITY,
            max_record: None,
            log_entries: None,
            max_producers: Self::DEFAULT_MAX_PRODUCERS,
            eventfd: false,
            huge_pages: false,
        }
    }
}

impl Config {
    /// The default ring size, 16 MiB: every binding and command starts from it.
    pub const DEFAULT_CAPACITY: u64 = 16 << 20;
    /// The default number of producer slots.
    pub const DEFAULT_MAX_PRODUCERS: u32 = 64;

    /// A default configuration with `capacity` bytes of ring.
    pub fn with_capacity(capacity: u64) -> Self {
        Config {
            capacity,
            ..Default::default()
        }
    }

    /// A default configuration with `capacity` bytes of ring whose records may be as
    /// large as `largest` bytes: max_record is the default (a quarter of the capacity)
    /// or `largest`, whichever is more. A ring too small for `largest` (more than
    /// capacity/2 − 64) is reported by [`Config::geometry`] and by segment creation.
    ///
    /// ```
    /// use shmring::Config;
    /// let frame = 1920 * 1080 * 3 / 2;
    /// assert_eq!(Config::for_records(8 << 20, frame).max_record, Some(frame));
    /// assert_eq!(Config::for_records(64 << 20, frame).max_record, Some(16 << 20));
    /// assert!(Config::for_records(4 << 20, frame).geometry().is_err());
    /// ```
    pub fn for_records(capacity: u64, largest: u64) -> Self {
        Config {
            max_record: Some((capacity / 4).max(largest)),
            ..Config::with_capacity(capacity)
        }
    }

    /// The layout this configuration produces, or why it is invalid.
    pub fn geometry(&self) -> Result<Geometry> {
        let max_record = self.max_record.unwrap_or(self.capacity / 4);
        let log_entries = self.log_entries.unwrap_or_else(|| {
            ((self.capacity / 4096).clamp(64, 65536) as u32).next_power_of_two()
        });
        let flags = if self.eventfd { FLAG_EVENTFD } else { 0 }
            | if self.huge_pages { FLAG_HUGE_PAGES } else { 0 };
        Geometry::new(
            self.capacity,
            max_record,
            log_entries,
            self.max_producers,
            flags,
        )
        .map_err(Error::Config)
    }

    /// Bytes of shared memory the segment takes: control block, slots, claim log
    /// and data ring. Nothing else in shmring grows with traffic.
    pub fn segment_size(&self) -> Result<u64> {
        Ok(self.geometry()?.total_size)
    }
}

/// One open descriptor per segment file per process. Record locks (our liveness
/// signal) are dropped when a process closes *any* descriptor of the file, so every
/// descriptor of a file that this process hands us stays open until the last user
/// of that file is gone.
struct FileHandle {
    fd: OwnedFd,
    key: (u64, u64),
    extra: Mutex<Vec<OwnedFd>>,
    local: LocalRoles,
    /// A read-only descriptor of the same file, opened once on demand
    /// ([`Segment::read_only_fd`]) and kept as long as the file's other descriptors.
    read_only: std::sync::OnceLock<OwnedFd>,
}

/// Which roles of a segment this process holds: the producer slots of its own
/// producers and the consumer role. Record locks cannot tell a process its own
/// locks, so the process remembers them here, in its private memory, where no peer
/// can forge them. After `fork` the child holds none of its parent's locks: the
/// record carries the fork generation it belongs to (see [`crate::sys::forks`],
/// no system call, so sandboxed producers may detach) and reads as empty after one.
#[derive(Default)]
pub(crate) struct LocalRoles {
    /// 1 + the fork generation this record belongs to (0: never used).
    generation: std::sync::atomic::AtomicU32,
    slots: [std::sync::atomic::AtomicU64; 4],
    consumer: std::sync::atomic::AtomicBool,
    /// Bit `j`: a tethered consumer of this process holds tether line `j`.
    tethers: std::sync::atomic::AtomicU32,
}

impl LocalRoles {
    fn current(&self) -> bool {
        use std::sync::atomic::Ordering::*;
        let me = crate::sys::forks().wrapping_add(1);
        if self.generation.load(Acquire) == me {
            return true;
        }
        // A fresh record, or one inherited through fork: start empty.
        for w in &self.slots {
            w.store(0, Relaxed);
        }
        self.consumer.store(false, Relaxed);
        self.tethers.store(0, Relaxed);
        self.generation.store(me, Release);
        false
    }
    /// Does a producer of this process hold `slot`?
    pub(crate) fn has_slot(&self, slot: u32) -> bool {
        self.current()
            && self.slots[(slot / 64) as usize].load(std::sync::atomic::Ordering::Acquire)
                & (1 << (slot % 64))
                != 0
    }
    pub(crate) fn set_slot(&self, slot: u32, held: bool) {
        self.current();
        let w = &self.slots[(slot / 64) as usize];
        let bit = 1u64 << (slot % 64);
        if held {
            w.fetch_or(bit, std::sync::atomic::Ordering::AcqRel);
        } else {
            w.fetch_and(!bit, std::sync::atomic::Ordering::AcqRel);
        }
    }
    /// Is this process the segment's consumer?
    pub(crate) fn is_consumer(&self) -> bool {
        self.current() && self.consumer.load(std::sync::atomic::Ordering::Acquire)
    }
    pub(crate) fn set_consumer(&self, held: bool) {
        self.current();
        self.consumer
            .store(held, std::sync::atomic::Ordering::Release);
    }
    /// Does a tethered consumer of this process hold tether line `j`?
    pub(crate) fn has_tether(&self, j: u32) -> bool {
        self.current() && self.tethers.load(std::sync::atomic::Ordering::Acquire) & (1 << j) != 0
    }
    pub(crate) fn set_tether(&self, j: u32, held: bool) {
        use std::sync::atomic::Ordering::AcqRel;
        self.current();
        if held {
            self.tethers.fetch_or(1 << j, AcqRel);
        } else {
            self.tethers.fetch_and(!(1 << j), AcqRel);
        }
    }
}

type FileKey = (u64, u64);
static FILES: Mutex<Vec<(FileKey, Weak<FileHandle>)>> = Mutex::new(Vec::new());

fn file_handle(fd: OwnedFd, name: &str) -> Result<Arc<FileHandle>> {
    let st = rustix::fs::fstat(&fd).map_err(|e| os("fstat", name, e))?;
    let key = (st.st_dev as u64, st.st_ino as u64);
    let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
    files.retain(|(_, w)| w.strong_count() > 0);
    if let Some(h) = files
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        h.extra.lock().unwrap_or_else(|p| p.into_inner()).push(fd);
        return Ok(h);
    }
    let h = Arc::new(FileHandle {
        fd,
        key,
        extra: Mutex::new(Vec::new()),
        local: LocalRoles::default(),
        read_only: std::sync::OnceLock::new(),
    });
    files.push((key, Arc::downgrade(&h)));
    Ok(h)
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|(k, w)| *k != self.key || w.strong_count() > 0);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    Memfd,
    /// A named segment; unlinked on drop when we created it and did not persist it.
    Named {
        owner: bool,
    },
}

/// A mapped segment. Share it between a consumer and producers in one process with
/// `Arc`; other processes attach by name or by descriptor.
///
/// ```
/// use shmring::{Config, Segment, Meta};
/// let seg = Segment::create_memfd("doc", &Config::with_capacity(1 << 20)).unwrap();
/// let consumer = seg.consumer().unwrap();
/// let mut producer = seg.producer().unwrap();
/// producer.send(b"hello", Meta::new(1, 2)).unwrap();
/// let frame = consumer.try_next().unwrap().unwrap();
/// assert_eq!(frame.payload(), b"hello");
/// ```
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    file: Arc<FileHandle>,
    geo: Geometry,
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

fn shm_name(name: &str) -> Result<String> {
    let n = name.strip_prefix('/').unwrap_or(name);
    if n.is_empty() || n.len() > 200 || n.contains('/') || n == "." || n == ".." {
        return Err(Error::Config(format!(
            "segment name {name:?}: 1 to 200 characters, no '/' except a leading one"
        )));
    }
    Ok(format!("/{n}"))
}

impl Segment {
    /// Creates an anonymous segment backed by a memfd sealed against shrinking and
    /// growing. Hand [`Segment::fd`] to producers (inherit it, or [`crate::send_fds`]).
    pub fn create_memfd(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        let geo = cfg.geometry()?;
        let label = format!("memfd:{name}");
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| os("memfd_create", &label, e))?;
        rustix::fs::ftruncate(&fd, geo.total_size).map_err(|e| os("ftruncate", &label, e))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| os("add seals", &label, e))?;
        let mut seg = Self::map(fd, geo, label, Backing::Memfd)?;
        seg.init();
        seg.make_eventfd()?;
        Ok(Arc::new(seg))
    }

    /// Creates a named segment (`/dev/shm/NAME`, mode 0600). It is unlinked when
    /// this `Segment` is dropped, unless [`Segment::persist`] is called.
    pub fn create_named(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        let geo = cfg.geometry()?;
        let path = shm_name(name)?;
        let fd = rustix::shm::open(
            path.as_str(),
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::EXCL | rustix::shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::EXIST => Error::Exists(path.as_str().into()),
            e => os("shm_open", &path, e),
        })?;
        let cleanup = |e: Error| {
            let _ = rustix::shm::unlink(path.as_str());
            e
        };
        rustix::fs::ftruncate(&fd, geo.total_size)
            .map_err(|e| cleanup(os("ftruncate", &path, e)))?;
        let seg =
            Self::map(fd, geo, path.clone(), Backing::Named { owner: true }).map_err(cleanup)?;
        seg.init();
        let mut seg = seg;
        seg.make_eventfd()?;
        Ok(Arc::new(seg))
    }

    /// Removes the named segment `/dev/shm/NAME` (the name is checked as by
    /// [`Segment::open_named`]). Processes that have it mapped keep their mapping;
    /// nobody can open it by name any more. Whether the ring is still in use is the
    /// caller's question (see [`Segment::consumer_alive`]).
    pub fn unlink_named(name: &str) -> Result<()> {
        let path = shm_name(name)?;
        rustix::shm::unlink(path.as_str()).map_err(|e| match e {
            rustix::io::Errno::NOENT => Error::NotFound(path.as_str().into()),
            e => os("shm_unlink", &path, e),
        })
    }

    /// Opens an existing named segment.
    pub fn open_named(name: &str) -> Result<Arc<Segment>> {
        let path = shm_name(name)?;
        let fd = rustix::shm::open(path.as_str(), rustix::shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| match e {
                rustix::io::Errno::NOENT => Error::NotFound(path.as_str().into()),
                e => os("shm_open", &path, e),
            })?;
        Self::attach(fd, path, Backing::Named { owner: false }).map(Arc::new)
    }

    /// Opens an existing named segment read-only (`O_RDONLY`, `PROT_READ`): for
    /// taps and observers, which must not be able to write a byte of it.
    pub(crate) fn open_named_read_only(name: &str) -> Result<Segment> {
        let path = shm_name(name)?;
        let fd = rustix::shm::open(path.as_str(), rustix::shm::OFlags::RDONLY, Mode::empty())
            .map_err(|e| match e {
                rustix::io::Errno::NOENT => Error::NotFound(path.as_str().into()),
                e => os("shm_open", &path, e),
            })?;
        Self::attach_prot(fd, path, Backing::Named { owner: false }, ProtFlags::READ)
    }

    /// Attaches to a segment from a descriptor (inherited or received). A memfd must
    /// be sealed against shrinking and growing.
    pub fn from_fd(fd: OwnedFd) -> Result<Arc<Segment>> {
        Self::from_fds(fd, None)
    }

    /// Attaches from a segment descriptor and, for a ring created with
    /// [`Config::eventfd`], its eventfd (both as sent by [`crate::send_fds`]).
    pub fn from_fds(fd: OwnedFd, eventfd: Option<OwnedFd>) -> Result<Arc<Segment>> {
        let label = format!("fd:{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        let backing = match rustix::fs::fcntl_get_seals(&fd) {
            Ok(seals) => {
                if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
                    return Err(Error::Unsealed(label.into()));
                }
                Backing::Memfd
            }
            Err(_) => Backing::Named { owner: false },
        };
        let mut seg = Self::attach(fd, label, backing)?;
        seg.eventfd = eventfd;
        Ok(Arc::new(seg))
    }

    /// Opens a named segment created with [`Config::eventfd`], with its eventfd.
    pub fn open_named_with_eventfd(name: &str, eventfd: OwnedFd) -> Result<Arc<Segment>> {
        let seg = Self::open_named(name)?;
        let mut seg = Arc::try_unwrap(seg).expect("fresh segment has one owner");
        seg.eventfd = Some(eventfd);
        Ok(Arc::new(seg))
    }

    fn make_eventfd(&mut self) -> Result<()> {
        if self.geo.flags & FLAG_EVENTFD != 0 {
            let fd = rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )
            .map_err(|e| os("eventfd", &self.name, e))?;
            self.eventfd = Some(fd);
        }
        Ok(())
    }

    /// The ring's eventfd, for a ring created with [`Config::eventfd`]: readable when
    /// data is ready. Hand it to producers along with the segment descriptor.
    pub fn eventfd(&self) -> Option<BorrowedFd<'_>> {
        self.eventfd.as_ref().map(|f| f.as_fd())
    }

    /// Does this ring want wake-ups through an eventfd?
    pub fn uses_eventfd(&self) -> bool {
        self.geo.flags & FLAG_EVENTFD != 0
    }

    fn attach(fd: OwnedFd, name: String, backing: Backing) -> Result<Segment> {
        Self::attach_prot(fd, name, backing, ProtFlags::READ | ProtFlags::WRITE)
    }

    /// Attaches a sealed memfd and maps it read-only (`PROT_READ`): for observers
    /// that must never write into the ring. The result is not an `Arc<Segment>`, so
    /// no producer or consumer (which write) can be made from it; wrap it (see
    /// `crate::handoff::ReadOnlySegment`).
    pub(crate) fn attach_read_only(fd: OwnedFd) -> Result<Segment> {
        let label = format!("fd:{} (read-only)", std::os::fd::AsRawFd::as_raw_fd(&fd));
        match rustix::fs::fcntl_get_seals(&fd) {
            Ok(seals) if seals.contains(SealFlags::SHRINK | SealFlags::GROW) => {}
            _ => return Err(Error::Unsealed(label.into())),
        }
        Self::attach_prot(fd, label, Backing::Memfd, ProtFlags::READ)
    }

    fn attach_prot(
        fd: OwnedFd,
        name: String,
        backing: Backing,
        prot: ProtFlags,
    ) -> Result<Segment> {
        // Register the descriptor first: if this process already uses the file, the
        // descriptor must stay open even when validation fails (closing it would drop
        // our record locks on the file).
        let file = file_handle(fd, &name)?;
        let fd = file.fd.as_fd();
        let st = rustix::fs::fstat(fd).map_err(|e| os("fstat", &name, e))?;
        let size = st.st_size as u64;
        if size < CONTROL_SIZE {
            return Err(Error::LayoutMismatch {
                segment: name.into(),
                field: "file size",
                expected: CONTROL_SIZE.to_string(),
                found: size.to_string(),
            });
        }
        // Map the control block alone first: every size comes from untrusted memory.
        let geo = {
            let probe = Mapping::new(fd, CONTROL_SIZE as usize, &name, prot)?;
            // Declared after `probe`, so dropped (unregistered) before it is unmapped.
            let guard = probe.guard(&backing, &name)?;
            // SAFETY: the mapping is CONTROL_SIZE bytes, page aligned, and Control fits.
            let c = unsafe { &*(probe.ptr.as_ptr() as *const Control) };
            let geo = Self::validate(c, size, &name);
            if guard.as_ref().is_some_and(|g| g.tripped()) {
                return Err(Error::LayoutMismatch {
                    segment: name.into(),
                    field: "file size",
                    expected: CONTROL_SIZE.to_string(),
                    found: "the file was truncated while attaching".into(),
                });
            }
            geo?
        };
        Self::map_file(file, geo, name, backing, prot)
    }

    fn validate(c: &Control, file_size: u64, name: &str) -> Result<Geometry> {
        let id = &c.identity.0;
        let mismatch = |field, expected: String, found: String| Error::LayoutMismatch {
            segment: name.into(),
            field,
            expected,
            found,
        };
        // Acquire: pairs with the creator's Release store of the magic, written last.
        let magic = id.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(mismatch(
                "magic",
                format!("{MAGIC:#x}"),
                format!("{magic:#x}"),
            ));
        }
        // Each field is read once (Relaxed: the Acquire load of the magic above
        // orders them after the creator's writes) and only the local copy is checked.
        let version = id.version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(mismatch(
                "layout version",
                LAYOUT_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let control_size = id.control_size.load(Ordering::Relaxed);
        if control_size as u64 != CONTROL_SIZE {
            return Err(mismatch(
                "control block size",
                CONTROL_SIZE.to_string(),
                control_size.to_string(),
            ));
        }
        let geo = Geometry::new(
            id.capacity.load(Ordering::Relaxed),
            id.max_record.load(Ordering::Relaxed),
            id.log_entries.load(Ordering::Relaxed),
            id.max_producers.load(Ordering::Relaxed),
            id.flags.load(Ordering::Relaxed),
        )
        .map_err(|e| mismatch("geometry", "a valid configuration".into(), e))?;
        if geo.flags & !(FLAG_EVENTFD | FLAG_HUGE_PAGES) != 0 {
            return Err(mismatch(
                "flags",
                format!("a subset of {FLAG_EVENTFD:#x}"),
                format!("{:#x}", geo.flags),
            ));
        }
        let data_offset = id.data_offset.load(Ordering::Relaxed);
        if data_offset != geo.data_offset {
            return Err(mismatch(
                "data offset",
                geo.data_offset.to_string(),
                data_offset.to_string(),
            ));
        }
        let total = id.total_size.load(Ordering::Relaxed);
        if total != geo.total_size {
            return Err(mismatch(
                "segment size",
                geo.total_size.to_string(),
                format!(
                    "the header is inconsistent: its geometry makes a segment of {} bytes, \
                     its size field says {total}",
                    geo.total_size
                ),
            ));
        }
        if file_size != geo.total_size {
            return Err(mismatch(
                "segment size",
                geo.total_size.to_string(),
                format!(
                    "the file is {file_size} bytes but its header describes a ring of {} bytes \
                     (truncated or resized by another program, or not a finished ring)",
                    geo.total_size
                ),
            ));
        }
        Ok(geo)
    }

    fn map(fd: OwnedFd, geo: Geometry, name: String, backing: Backing) -> Result<Segment> {
        let file = file_handle(fd, &name)?;
        Self::map_file(file, geo, name, backing, ProtFlags::READ | ProtFlags::WRITE)
    }

    fn map_file(
        file: Arc<FileHandle>,
        geo: Geometry,
        name: String,
        backing: Backing,
        prot: ProtFlags,
    ) -> Result<Segment> {
        let len = geo.total_size as usize;
        let m = Mapping::new(file.fd.as_fd(), len, &name, prot)?;
        if geo.flags & FLAG_HUGE_PAGES != 0 {
            // SAFETY: advice on our own mapping, its exact range; it changes no
            // contents. Refused (an old kernel): the ring works with small pages.
            let _ = unsafe {
                rustix::mm::madvise(
                    m.ptr.as_ptr().cast(),
                    len,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
        let guard = m.guard(&backing, &name)?;
        let base = m.ptr;
        std::mem::forget(m); // ownership moves to the Segment, unmapped in its Drop
        Ok(Segment {
            base,
            len,
            file,
            geo,
            label: name.as_str().into(),
            name,
            backing,
            persist: std::sync::atomic::AtomicBool::new(false),
            eventfd: None,
            guard,
        })
    }

    /// Writes a fresh control block, slots and claim log. Only the creator calls
    /// this, before the segment is visible to anyone else; the magic goes last.
    fn init(&self) {
        let n = self.geo.log_entries as u64;
        for (i, e) in self.log().iter().enumerate() {
            e.store(LogEntry::initial(i as u64, n), Ordering::Relaxed);
        }
        // The magic goes last (Release): everything above is visible to whoever sees it.
        self.restore_identity();
    }

    /// Rewrites the identity line (line 0) from our validated geometry: at creation,
    /// and when the consumer finds a peer changed it. Relaxed stores: the creator
    /// publishes them with its Release store of the magic; at a repair, a peer that
    /// attaches concurrently reads each field once and gets either value.
    pub(crate) fn write_identity(&self) {
        let g = &self.geo;
        let id = &self.control().identity.0;
        id.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        id.control_size
            .store(CONTROL_SIZE as u32, Ordering::Relaxed);
        id.capacity.store(g.capacity, Ordering::Relaxed);
        id.max_record.store(g.max_record, Ordering::Relaxed);
        id.log_entries.store(g.log_entries, Ordering::Relaxed);
        id.max_producers.store(g.max_producers, Ordering::Relaxed);
        id.flags.store(g.flags, Ordering::Relaxed);
        id.data_offset.store(g.data_offset, Ordering::Relaxed);
        id.total_size.store(g.total_size, Ordering::Relaxed);
    }

    /// Does the identity line still describe our geometry? (Each field loaded once.)
    pub(crate) fn identity_intact(&self) -> bool {
        let g = &self.geo;
        let id = &self.control().identity.0;
        id.magic.load(Ordering::Relaxed) == MAGIC
            && id.version.load(Ordering::Relaxed) == LAYOUT_VERSION
            && id.control_size.load(Ordering::Relaxed) as u64 == CONTROL_SIZE
            && id.capacity.load(Ordering::Relaxed) == g.capacity
            && id.max_record.load(Ordering::Relaxed) == g.max_record
            && id.log_entries.load(Ordering::Relaxed) == g.log_entries
            && id.max_producers.load(Ordering::Relaxed) == g.max_producers
            && id.flags.load(Ordering::Relaxed) == g.flags
            && id.data_offset.load(Ordering::Relaxed) == g.data_offset
            && id.total_size.load(Ordering::Relaxed) == g.total_size
    }

    /// Rewrites the identity line, magic last (Release, as at creation).
    pub(crate) fn restore_identity(&self) {
        self.write_identity();
        self.control()
            .identity
            .0
            .magic
            .store(MAGIC, Ordering::Release);
    }

    /// Keep a named segment after this `Segment` is dropped.
    pub fn persist(&self) {
        self.persist
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The segment's descriptor (a memfd for [`Segment::create_memfd`]).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.fd.as_fd()
    }

    /// A read-only descriptor of the segment's file (`O_RDONLY`, re-opened through
    /// `/proc/self/fd`), for observers: the kernel refuses a writable shared mapping
    /// of it. Opened once and kept open as long as the segment's other descriptors
    /// (closing it would drop this process's record locks on the file).
    pub fn read_only_fd(&self) -> Result<BorrowedFd<'_>> {
        if let Some(fd) = self.file.read_only.get() {
            return Ok(fd.as_fd());
        }
        let path = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&self.file.fd)
        );
        let fd = rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| os("re-open read-only (/proc/self/fd)", &self.name, e))?;
        // Another thread may have won the race: keep its descriptor and ours both
        // open (ours goes to `extra`; closing it would drop our record locks).
        if let Err(fd) = self.file.read_only.set(fd) {
            self.file
                .extra
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(fd);
        }
        Ok(self.file.read_only.get().expect("set above").as_fd())
    }

    /// The segment's name, for messages (`/name`, `memfd:name` or `fd:N`).
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

    /// Was this (named) segment truncated by a peer under us? Its mapping then reads
    /// zeros and is no longer shared: every consumer and producer call fails with
    /// [`Error::Truncated`]; create a new segment. Always `false` for a sealed memfd.
    pub fn truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.tripped())
    }

    /// The error for a truncated segment (see [`Segment::truncated`]).
    pub(crate) fn truncated_error(&self) -> Error {
        Error::Truncated(self.label())
    }

    /// Is a consumer attached and alive (in any process)? One `fcntl` call; a
    /// producer asks before counting a record as delivered, and `shmring rm` before
    /// removing a ring. A ring whose creator died has no live consumer.
    pub fn consumer_alive(&self) -> bool {
        crate::slots::consumer_alive(self)
    }

    /// The tethered consumers attached, each with its lag behind the write cursor.
    pub fn tethers(&self) -> Vec<crate::TetherInfo> {
        crate::tether::infos(self)
    }

    /// A snapshot of the counters in the segment.
    pub fn stats(&self) -> Stats {
        Stats::read(self)
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
        }
    }

    /// Start of the data ring.
    pub(crate) fn data(&self) -> *mut u8 {
        // SAFETY: data_offset < total_size == mapping length.
        unsafe { self.base.as_ptr().add(self.geo.data_offset as usize) }
    }

    pub(crate) fn lock_fd(&self) -> BorrowedFd<'_> {
        self.file.fd.as_fd()
    }

    /// The roles this process holds in this segment (see [`LocalRoles`]).
    pub(crate) fn local(&self) -> &LocalRoles {
        &self.file.local
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Unregister before unmapping, so the SIGBUS handler never remaps an address
        // range that is no longer ours.
        drop(self.guard.take());
        // SAFETY: base/len describe the mapping we created and nobody can use it
        // after drop (every user holds an Arc to us).
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast(), self.len);
        }
        if self.backing == (Backing::Named { owner: true })
            && !self.persist.load(std::sync::atomic::Ordering::Relaxed)
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

/// A shared mapping (read-write, or read-only for observers), unmapped on drop
/// unless forgotten.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize, name: &str, prot: ProtFlags) -> Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED), so no existing
        // memory is affected; the descriptor is valid for the call.
        let p =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }
                .map_err(|e| os("mmap", name, e))?;
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// A named segment can be truncated by any process that opens it (it cannot be
    /// sealed): its mappings are guarded against SIGBUS before anyone touches them.
    fn guard(&self, backing: &Backing, name: &str) -> Result<Option<crate::sys::sigbus::Guard>> {
        if *backing == Backing::Memfd {
            return Ok(None);
        }
        crate::sys::sigbus::register(self.ptr.as_ptr(), self.len)
            .map(Some)
            .map_err(|e| match e {
                Some(errno) => os(
                    "install SIGBUS guard",
                    name,
                    std::io::Error::from_raw_os_error(errno),
                ),
                None => Error::Config(format!(
                    "segment {name}: too many named segments mapped in this process"
                )),
            })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
