//! The shared-memory segment: creation (memfd or named), attaching, validation,
//! mapping, and typed access to the structures of [`crate::layout`].

mod config;
pub(crate) mod files;
mod read_only;

pub use config::Config;
pub use read_only::ReadOnlySegment;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use rustix::fs::{MemfdFlags, Mode, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::error::{os, Error, Result};
use crate::layout::{
    Control, Geometry, Identity, LogEntry, Slot, CONTROL_SIZE, FLAG_EVENTFD, FLAG_HUGE_PAGES,
    FLAG_LOCK_FILE, LAYOUT_VERSION, MAGIC, SLOT_SIZE,
};

/// How long a writer attaching to a ring whose claim log contradicts its identity
/// line waits for the consumer to repair the line (several liveness intervals).
const GEOMETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The seals of a lock file: it can never hold a byte (nor grow into storage).
const LOCK_FILE_SEALS: SealFlags = SealFlags::GROW
    .union(SealFlags::SHRINK)
    .union(SealFlags::WRITE);

fn shm_open_err(path: &str, e: rustix::io::Errno) -> Error {
    match e {
        rustix::io::Errno::NOENT => Error::NotFound(path.into()),
        e => os("shm_open", path, e),
    }
}
use crate::protocol::Shared;
use crate::stats::Stats;
use crate::sync::{AtomicU64, Ordering};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    Memfd,
    /// A named segment; unlinked on drop when we created it and did not persist it.
    Named {
        created: bool,
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
    /// growing, with its lock file (a second sealed memfd that holds no bytes). Hand
    /// producers every descriptor of [`Segment::descriptors`] (inherit them, or
    /// [`Segment::send`] them; a [`crate::Listener`] does it for you).
    pub fn create_memfd(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        let mut geo = cfg.geometry()?;
        geo.flags |= FLAG_LOCK_FILE;
        let label = format!("memfd:{name}");
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| os("memfd_create", &label, e))?;
        rustix::fs::ftruncate(&fd, geo.total_size).map_err(|e| os("ftruncate", &label, e))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| os("add seals", &label, e))?;
        let locks = rustix::fs::memfd_create(
            format!("{name}:locks"),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| os("memfd_create (lock file)", &label, e))?;
        // Empty for ever: a lock file can hold record locks, never bytes.
        rustix::fs::fcntl_add_seals(&locks, LOCK_FILE_SEALS | SealFlags::SEAL)
            .map_err(|e| os("add seals (lock file)", &label, e))?;
        let locks = files::register(locks, true, &label)?;
        let mut seg = Self::map_file(
            Some(locks),
            Some(fd),
            geo,
            label,
            Backing::Memfd,
            ProtFlags::READ | ProtFlags::WRITE,
        )?;
        seg.init();
        seg.make_eventfd()?;
        Ok(Arc::new(seg))
    }

    /// Creates a named segment (`/dev/shm/NAME`, mode 0600). It is unlinked when
    /// this `Segment` is dropped, unless [`Segment::persist`] is called. Its lock
    /// file is the segment file itself (see [`Segment::descriptors`]).
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
        let locks = files::register(fd, true, &path).map_err(cleanup)?;
        let mut seg = Self::map_file(
            Some(locks),
            None,
            geo,
            path.clone(),
            Backing::Named { created: true },
            ProtFlags::READ | ProtFlags::WRITE,
        )
        .map_err(cleanup)?;
        seg.init();
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
        let locks = match Self::named_open_here(&path)?.filter(|l| l.writable().is_some()) {
            Some(locks) => locks,
            None => {
                let fd = rustix::shm::open(path.as_str(), rustix::shm::OFlags::RDWR, Mode::empty())
                    .map_err(|e| shm_open_err(&path, e))?;
                files::register(fd, true, &path)?
            }
        };
        Self::attach(locks, None, path, Backing::Named { created: false }, false).map(Arc::new)
    }

    /// Opens an existing named segment read-only (`PROT_READ`, and `O_RDONLY` unless
    /// this process has it open already): for taps and observers, which must not be
    /// able to write a byte of it.
    pub(crate) fn open_named_read_only(name: &str) -> Result<Segment> {
        let path = shm_name(name)?;
        let locks = match Self::named_open_here(&path)? {
            Some(locks) => locks,
            None => {
                let fd =
                    rustix::shm::open(path.as_str(), rustix::shm::OFlags::RDONLY, Mode::empty())
                        .map_err(|e| shm_open_err(&path, e))?;
                files::register(fd, false, &path)?
            }
        };
        Self::attach(locks, None, path, Backing::Named { created: false }, true)
    }

    /// The entry of the file `/dev/shm/NAME` names now, if this process holds it
    /// open: a named ring open here is never opened again, since closing the new
    /// descriptor would drop this process's record locks on it.
    fn named_open_here(path: &str) -> Result<Option<Arc<files::LockFile>>> {
        let full = format!("/dev/shm{path}");
        match rustix::fs::stat(full.as_str()) {
            Ok(st) => Ok(files::lookup(files::key_of_stat(&st))),
            Err(rustix::io::Errno::NOENT) => Err(Error::NotFound(path.into())),
            // Let the open say what is wrong.
            Err(_) => Ok(None),
        }
    }

    /// Attaches from a descriptor (inherited or received): a named ring's file, or
    /// a sealed memfd. A memfd ring needs its lock file too: use
    /// [`Segment::from_descriptors`] with every descriptor of
    /// [`Segment::descriptors`].
    pub fn from_fd(fd: OwnedFd) -> Result<Arc<Segment>> {
        Self::from_descriptors(vec![fd])
    }

    /// Attaches from a ring's descriptors, in the one order shmring hands them over
    /// (see [`Segment::descriptors`]): the segment; for a memfd ring, its lock file;
    /// for a ring created with [`Config::eventfd`], its eventfd (which a consumer
    /// or a tap may leave out). The ring itself says which it has: a missing lock
    /// file or a descriptor too many is [`Error::Descriptors`].
    pub fn from_descriptors(fds: Vec<OwnedFd>) -> Result<Arc<Segment>> {
        let mut fds = fds.into_iter();
        let Some(fd) = fds.next() else {
            return Err(Error::Descriptors {
                segment: "(none)".into(),
                what: "no descriptor given".into(),
            });
        };
        let label = format!("fd:{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        let missing = |what: String| Error::Descriptors {
            segment: label.as_str().into(),
            what,
        };
        let seals = rustix::fs::fcntl_get_seals(&fd);
        if let Ok(s) = seals {
            // A memfd whose seals can still change (a file of /dev/shm reads as
            // sealed against sealing, and is attached as a named ring's file).
            if !s.contains(SealFlags::SEAL) && !s.contains(SealFlags::SHRINK | SealFlags::GROW) {
                return Err(Error::Unsealed(label.into()));
            }
        }
        let mut seg = match seals {
            Ok(seals) if seals.contains(SealFlags::SHRINK | SealFlags::GROW) => {
                let flags =
                    Self::probe(fd.as_fd(), &label, &Backing::Memfd, ProtFlags::READ)?.flags;
                if flags & FLAG_LOCK_FILE == 0 {
                    return Err(missing(
                        "a memfd ring must name its lock file in its identity line, and this \
                         one does not (written by another process?)"
                            .into(),
                    ));
                }
                let Some(locks) = fds.next() else {
                    return Err(missing(
                        "the ring's lock file descriptor is missing: hand over every \
                         descriptor Segment::descriptors lists, in its order"
                            .into(),
                    ));
                };
                let locks = Self::lock_file_from(locks, fd.as_fd(), &label)?;
                Self::attach(locks, Some(fd), label.clone(), Backing::Memfd, false)?
            }
            _ => {
                let writable = rustix::fs::fcntl_getfl(&fd)
                    .map(|f| f.contains(rustix::fs::OFlags::RDWR))
                    .unwrap_or(false);
                let locks = files::register(fd, writable, &label)?;
                let seg = Self::attach(
                    locks,
                    None,
                    label.clone(),
                    Backing::Named { created: false },
                    false,
                )?;
                if seg.geo.flags & FLAG_LOCK_FILE != 0 {
                    return Err(missing(
                        "a named ring's file says it has a separate lock file".into(),
                    ));
                }
                seg
            }
        };
        if seg.uses_eventfd() {
            seg.eventfd = fds.next();
        }
        let extra = fds.count();
        if extra > 0 {
            return Err(missing(format!(
                "{extra} descriptor(s) more than the ring has (segment{}{})",
                if seg.geo.flags & FLAG_LOCK_FILE != 0 {
                    ", lock file"
                } else {
                    ""
                },
                if seg.uses_eventfd() { ", eventfd" } else { "" }
            )));
        }
        Ok(Arc::new(seg))
    }

    /// A received lock file: a memfd sealed so that it can never hold bytes (or
    /// grow into a second segment), not the segment itself.
    fn lock_file_from(
        fd: OwnedFd,
        segment: BorrowedFd<'_>,
        label: &str,
    ) -> Result<Arc<files::LockFile>> {
        let bad = |what: &str| Error::Descriptors {
            segment: label.into(),
            what: format!("the descriptor given as the ring's lock file {what}"),
        };
        match rustix::fs::fcntl_get_seals(&fd) {
            Ok(seals) if seals.contains(LOCK_FILE_SEALS) => {}
            _ => return Err(bad("is not a sealed, empty memfd")),
        }
        if files::key_of(fd.as_fd(), label)? == files::key_of(segment, label)? {
            return Err(bad("is the segment itself"));
        }
        files::register(fd, true, label)
    }

    /// The ring's descriptors, in the one order shmring hands them over (and
    /// [`Segment::from_descriptors`] takes them): the segment; for a memfd ring,
    /// its lock file; for an eventfd ring, its eventfd. A producer needs all of
    /// them. (A read-only observer gets [`Segment::read_only_fd`] alone, and
    /// nothing it can lock.)
    pub fn descriptors(&self) -> Vec<BorrowedFd<'_>> {
        let mut v = vec![self.fd()];
        if self.geo.flags & FLAG_LOCK_FILE != 0 {
            if let Some(l) = self.locks.as_ref().and_then(|l| l.writable()) {
                v.push(l);
            }
        }
        v.extend(self.eventfd());
        v
    }

    /// Sends [`Segment::descriptors`] over a connected Unix socket (`SCM_RIGHTS`).
    pub fn send(&self, sock: impl AsFd) -> std::io::Result<()> {
        crate::sys::fdpass::send_fds(sock, &self.descriptors())
    }

    /// Receives a ring's descriptors sent with [`Segment::send`] and attaches.
    pub fn receive(sock: impl AsFd) -> Result<Arc<Segment>> {
        let fds = crate::sys::fdpass::recv_fds(sock).map_err(|e| os("recvmsg", "(socket)", e))?;
        Self::from_descriptors(fds)
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

    /// Maps a sealed memfd read-only (`PROT_READ`), with no lock file: for
    /// observers that must never write into the ring. The result is not an
    /// `Arc<Segment>`, so no producer or consumer (which write) can be made from
    /// it; wrap it (see [`ReadOnlySegment`]).
    pub(crate) fn attach_read_only(fd: OwnedFd) -> Result<Segment> {
        let label = format!("fd:{} (read-only)", std::os::fd::AsRawFd::as_raw_fd(&fd));
        match rustix::fs::fcntl_get_seals(&fd) {
            Ok(seals) if seals.contains(SealFlags::SHRINK | SealFlags::GROW) => {}
            _ => return Err(Error::Unsealed(label.into())),
        }
        let geo = Self::probe(fd.as_fd(), &label, &Backing::Memfd, ProtFlags::READ)?;
        Self::map_file(None, Some(fd), geo, label, Backing::Memfd, ProtFlags::READ)
    }

    /// Validates the ring in `data` (the segment itself for a memfd ring, else the
    /// lock file, which is the segment) and maps it.
    fn attach(
        locks: Arc<files::LockFile>,
        data: Option<OwnedFd>,
        name: String,
        backing: Backing,
        read_only: bool,
    ) -> Result<Segment> {
        let prot = if read_only {
            ProtFlags::READ
        } else {
            ProtFlags::READ | ProtFlags::WRITE
        };
        let fd = match &data {
            Some(d) => d.as_fd(),
            None => match (read_only, locks.writable()) {
                (false, Some(w)) => w,
                (false, None) => {
                    return Err(Error::Descriptors {
                        segment: name.into(),
                        what: "the descriptor is read-only; a producer or consumer needs one \
                               opened for reading and writing"
                            .into(),
                    })
                }
                (true, _) => locks.fd(),
            },
        };
        let geo = Self::probe(fd, &name, &backing, prot)?;
        let seg = Self::map_file(Some(locks), data, geo, name, backing, prot)?;
        if read_only {
            return Ok(seg);
        }
        seg.settle_geometry()
    }

    /// A writer's last check before it trusts the geometry it read: the identity
    /// line is believed at attach, and a peer may have written one that describes
    /// a ring of the same size with another claim log or slot table (the consumer
    /// repairs it within a liveness interval). So the claim log must agree with the
    /// cursors under this geometry; while it does not, the identity line is watched
    /// for up to [`GEOMETRY_WAIT`]: once the consumer rewrites it, the ring is
    /// mapped again with the geometry it gives. A log that stays inconsistent under
    /// an unchanged line is the ring's own state (the consumer resets it): accepted.
    fn settle_geometry(mut self) -> Result<Segment> {
        let start = std::time::Instant::now();
        loop {
            if self.log_agrees() {
                return Ok(self);
            }
            if !self.identity_intact() {
                let (locks, data) = (self.locks.take(), self.data.take());
                let (name, backing) = (std::mem::take(&mut self.name), self.backing.clone());
                drop(self);
                let locks = locks.expect("a writer's segment has a lock file");
                let fd = match &data {
                    Some(d) => d.as_fd(),
                    None => locks.writable().expect("checked at attach"),
                };
                let prot = ProtFlags::READ | ProtFlags::WRITE;
                let geo = Self::probe(fd, &name, &backing, prot)?;
                self = Self::map_file(Some(locks), data, geo, name, backing, prot)?;
                continue;
            }
            if start.elapsed() >= GEOMETRY_WAIT {
                return Ok(self);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Does the claim log agree with the ring's cursors under our geometry? Every
    /// entry from the read cursor to the write cursor holds its claim, every one
    /// after holds its previous generation (or a claim made since). A few looks, as
    /// claims move on while we read.
    fn log_agrees(&self) -> bool {
        let sh = self.shared();
        let n = self.geo.log_entries as u64;
        (0..3).any(|_| {
            // Acquire, as the consumer's audit.
            let r = sh.read.load(Ordering::Acquire);
            let w = sh.write.load(Ordering::Acquire);
            let (rs, ws) = (crate::layout::cursor_seq(r), crate::layout::cursor_seq(w));
            let in_flight = crate::layout::seq_diff(ws, rs);
            if in_flight > n
                || crate::layout::pos_diff(
                    crate::layout::cursor_pos(w),
                    crate::layout::cursor_pos(r),
                ) > sh.cap_units
            {
                return false;
            }
            (0..n).all(|d| {
                let j = (rs + d) & crate::layout::SEQ_MASK;
                let stamp = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire)).stamp;
                stamp == j
                    || (d >= in_flight && stamp == j.wrapping_sub(n) & crate::layout::SEQ_MASK)
            })
        })
    }

    /// Validates the control block of the ring in `fd`: every size comes from
    /// untrusted memory, so the control block is mapped alone first.
    fn probe(
        fd: BorrowedFd<'_>,
        name: &str,
        backing: &Backing,
        prot: ProtFlags,
    ) -> Result<Geometry> {
        let st = rustix::fs::fstat(fd).map_err(|e| os("fstat", name, e))?;
        let size = st.st_size as u64;
        if size < CONTROL_SIZE {
            return Err(Error::LayoutMismatch {
                segment: name.into(),
                field: "file size",
                expected: CONTROL_SIZE.to_string(),
                found: size.to_string(),
            });
        }
        let probe = Mapping::new(fd, CONTROL_SIZE as usize, name, prot)?;
        // Declared after `probe`, so dropped (unregistered) before it is unmapped.
        let guard = probe.guard(backing, name)?;
        // SAFETY: the mapping is CONTROL_SIZE bytes, page aligned, and Control fits.
        let c = unsafe { &*(probe.ptr.as_ptr() as *const Control) };
        let geo = Self::validate(c, size, name);
        if guard.as_ref().is_some_and(|g| g.tripped()) {
            return Err(Error::LayoutMismatch {
                segment: name.into(),
                field: "file size",
                expected: CONTROL_SIZE.to_string(),
                found: "the file was truncated while attaching".into(),
            });
        }
        geo
    }

    /// The geometry at least two of the three identity lines give (a peer's one
    /// write changes at most one line), each line validated on its own; with no two
    /// agreeing, the first line's own error (or, all three valid and different,
    /// that they disagree).
    fn validate(c: &Control, file_size: u64, name: &str) -> Result<Geometry> {
        let lines = [
            &c.identity.0,
            &c.identity_copies[0].0,
            &c.identity_copies[1].0,
        ];
        let [a, b, d] = lines.map(|id| Self::validate_line(id, file_size, name));
        let agree = |x: &Result<Geometry>, y: &Result<Geometry>| match (x, y) {
            (Ok(g), Ok(h)) => (g == h).then_some(*g),
            _ => None,
        };
        if let Some(g) = agree(&a, &b).or(agree(&a, &d)).or(agree(&b, &d)) {
            return Ok(g);
        }
        a?;
        Err(Error::LayoutMismatch {
            segment: name.into(),
            field: "identity lines",
            expected: "two of the three identity lines agreeing".into(),
            found: "three different geometries".into(),
        })
    }

    /// Validates one identity line against the file's size.
    fn validate_line(id: &Identity, file_size: u64, name: &str) -> Result<Geometry> {
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
        if geo.flags & !(FLAG_EVENTFD | FLAG_HUGE_PAGES | FLAG_LOCK_FILE) != 0 {
            return Err(mismatch(
                "flags",
                format!(
                    "a subset of {:#x}",
                    FLAG_EVENTFD | FLAG_HUGE_PAGES | FLAG_LOCK_FILE
                ),
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

    /// Maps the whole ring from `data` (a memfd ring's segment) or the lock file
    /// (a named ring's, which is the segment).
    fn map_file(
        locks: Option<Arc<files::LockFile>>,
        data: Option<OwnedFd>,
        geo: Geometry,
        name: String,
        backing: Backing,
        prot: ProtFlags,
    ) -> Result<Segment> {
        let len = geo.total_size as usize;
        let fd = match (&data, &locks) {
            (Some(d), _) => d.as_fd(),
            (None, Some(l)) => l
                .writable()
                .filter(|_| prot.contains(ProtFlags::WRITE))
                .unwrap_or(l.fd()),
            (None, None) => unreachable!("a segment is mapped from a descriptor"),
        };
        let m = Mapping::new(fd, len, &name, prot)?;
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
            locks,
            data,
            read_only: std::sync::OnceLock::new(),
            max_record: std::sync::atomic::AtomicU64::new(geo.max_record),
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

    /// Rewrites the identity lines (line 0 and its copy) from our validated
    /// geometry: at creation, and when the consumer finds a peer changed one.
    /// Relaxed stores: the creator publishes them with its Release store of the
    /// magic; at a repair, a peer that attaches concurrently reads each field once
    /// and gets either value (and waits while the two lines disagree).
    fn write_identity(&self) {
        for id in self.identities() {
            write_identity_fields(id, &self.geo);
        }
    }

    fn identities(&self) -> [&Identity; 3] {
        let c = self.control();
        [
            &c.identity.0,
            &c.identity_copies[0].0,
            &c.identity_copies[1].0,
        ]
    }

    /// Do both identity lines still describe our geometry? (Each field loaded once.)
    pub(crate) fn identity_intact(&self) -> bool {
        self.identities().iter().all(|id| {
            id.magic.load(Ordering::Relaxed) == MAGIC && identity_fields_are(id, &self.geo)
        })
    }

    /// The largest payload a producer of this mapping may reserve.
    pub(crate) fn max_record(&self) -> u64 {
        self.max_record.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A producer refused as too large looks again: `max_record` is the one
    /// identity field no offset depends on, so a line a peer wrote before we
    /// attached (then repaired by the consumer) cannot be told from the real one
    /// at attach. If the line now says more, and every other field is ours, that
    /// is taken (within the ring's limit). Returns the limit now.
    pub(crate) fn refresh_max_record(&self) -> u64 {
        let id = &self.control().identity.0;
        let g = &self.geo;
        // Each field loaded once (Relaxed after the magic's Acquire).
        let same = id.magic.load(Ordering::Acquire) == MAGIC
            && id.version.load(Ordering::Relaxed) == LAYOUT_VERSION
            && id.capacity.load(Ordering::Relaxed) == g.capacity
            && id.log_entries.load(Ordering::Relaxed) == g.log_entries
            && id.max_producers.load(Ordering::Relaxed) == g.max_producers
            && id.flags.load(Ordering::Relaxed) == g.flags
            && id.data_offset.load(Ordering::Relaxed) == g.data_offset
            && id.total_size.load(Ordering::Relaxed) == g.total_size;
        let line = id.max_record.load(Ordering::Relaxed);
        let copies = &self.control().identity_copies;
        if same
            && copies
                .iter()
                .all(|c| c.0.max_record.load(Ordering::Relaxed) == line)
            && line <= Geometry::largest_record(g.capacity)
            && line > self.max_record()
        {
            self.max_record
                .store(line, std::sync::atomic::Ordering::Relaxed);
        }
        self.max_record()
    }

    /// Rewrites the identity lines, each magic last (Release, as at creation).
    pub(crate) fn restore_identity(&self) {
        self.write_identity();
        for id in self.identities() {
            id.magic.store(MAGIC, Ordering::Release);
        }
    }

    /// Keep a named segment after this `Segment` is dropped.
    pub fn persist(&self) {
        self.persist
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The segment's descriptor (a memfd for [`Segment::create_memfd`]). A
    /// producer in another process needs [`Segment::descriptors`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        match (&self.data, &self.locks) {
            (Some(d), _) => d.as_fd(),
            (None, Some(l)) => l.writable().unwrap_or(l.fd()),
            (None, None) => unreachable!("a segment holds a descriptor"),
        }
    }

    /// A read-only descriptor of the segment (`O_RDONLY`, re-opened through
    /// `/proc/self/fd`), for observers: the kernel refuses a writable shared mapping
    /// of it, and it gives no access to the lock file. Opened once and kept.
    pub fn read_only_fd(&self) -> Result<BorrowedFd<'_>> {
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
            Mode::empty(),
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

    /// A named segment's file shorter than the ring (a peer truncated it, maybe
    /// only partly, so no page we touched has faulted yet): [`Error::Truncated`].
    /// One `fstat`; consumers and taps ask every liveness interval. A sealed
    /// memfd cannot shrink: always `Ok`.
    pub fn check_size(&self) -> Result<()> {
        if self.truncated() {
            return Err(self.truncated_error());
        }
        if self.backing == Backing::Memfd {
            return Ok(());
        }
        match rustix::fs::fstat(self.fd()) {
            Ok(st) if (st.st_size as u64) < self.geo.total_size => Err(self.truncated_error()),
            _ => Ok(()),
        }
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

/// Writes the fields of an identity line from `g` (the magic is the caller's).
fn write_identity_fields(id: &Identity, g: &Geometry) {
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

/// Does an identity line's every field (magic aside) describe `g`? Each loaded once.
fn identity_fields_are(id: &Identity, g: &Geometry) -> bool {
    id.version.load(Ordering::Relaxed) == LAYOUT_VERSION
        && id.control_size.load(Ordering::Relaxed) as u64 == CONTROL_SIZE
        && id.capacity.load(Ordering::Relaxed) == g.capacity
        && id.max_record.load(Ordering::Relaxed) == g.max_record
        && id.log_entries.load(Ordering::Relaxed) == g.log_entries
        && id.max_producers.load(Ordering::Relaxed) == g.max_producers
        && id.flags.load(Ordering::Relaxed) == g.flags
        && id.data_offset.load(Ordering::Relaxed) == g.data_offset
        && id.total_size.load(Ordering::Relaxed) == g.total_size
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
        if self.backing == (Backing::Named { created: true })
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
