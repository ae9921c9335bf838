//! Making and attaching a segment: a memfd or named ring created with its lock
//! file, opened by name, or attached from received descriptors; its control block
//! probed and validated before anything else is mapped.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{MemfdFlags, Mode, SealFlags};
use rustix::mm::ProtFlags;

use super::mapping::Mapping;
use super::{files, reserve, Backing, Config, Segment};
use crate::error::{os, Error, Result};
use crate::layout::{Control, Geometry, CONTROL_SIZE, FLAG_EVENTFD, FLAG_LOCK_FILE};

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

/// Where named rings live.
const SHM_DIR: &str = "/dev/shm";

/// Opens the named ring `path` (`/NAME`) as the file it is: never through a
/// symbolic link, and only a regular file (a FIFO would block the open).
fn open_shm(path: &str, mode: rustix::fs::OFlags) -> Result<OwnedFd> {
    use rustix::fs::OFlags;
    let full = format!("{SHM_DIR}{path}");
    let not_a_ring = |what: &str| {
        os(
            "open",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{full} is {what}; a named ring is opened only as the file it is"),
            ),
        )
    };
    let fd = rustix::fs::open(
        full.as_str(),
        mode | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => not_a_ring("a symbolic link"),
        e => shm_open_err(path, e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| os("fstat", path, e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(not_a_ring("not a regular file"));
    }
    Ok(fd)
}

/// What the name `path` (`/NAME`) in /dev/shm is, itself (a link is not followed).
pub(super) fn named_file(path: &str) -> rustix::io::Result<rustix::fs::Stat> {
    let full = format!("{SHM_DIR}{path}");
    rustix::fs::statat(
        rustix::fs::CWD,
        full.as_str(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
}

/// What is wrong with `name` as a ring's name in /dev/shm, if anything: the one
/// rule, which [`crate::Address`] says about the address it was given. 1 to 200
/// bytes after an optional leading '/', no other '/', not `.` or `..`, no white
/// space or control characters (a name must survive a shell, a `gst-launch-1.0`
/// line and a log line as it is).
pub(crate) fn name_problem(name: &str) -> Option<String> {
    let n = name.strip_prefix('/').unwrap_or(name);
    if n.is_empty() {
        return Some("the ring name is empty".into());
    }
    if n.len() > 200 {
        return Some(format!("the ring name is {} bytes; at most 200", n.len()));
    }
    if n.contains('/') || n == "." || n == ".." {
        return Some(format!(
            "{name:?} is not a ring name (no '/' except a leading one, not . or ..)"
        ));
    }
    if n.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "{name:?} is not a ring name (no white space or control characters)"
        ));
    }
    None
}

fn shm_name(name: &str) -> Result<String> {
    match name_problem(name) {
        Some(why) => Err(Error::Config(format!("segment name {name:?}: {why}"))),
        None => Ok(format!("/{}", name.strip_prefix('/').unwrap_or(name))),
    }
}

impl Segment {
    /// Creates an anonymous segment backed by a memfd sealed against shrinking and
    /// growing, its memory reserved (a ring that does not fit is
    /// [`Error::NoSpace`]), with its lock file (a second sealed memfd that holds no bytes). Hand
    /// producers every descriptor of [`Segment::descriptors`] (inherit them, or
    /// [`Segment::send`] them; a [`crate::Listener`] does it for you).
    ///
    /// Under Miri, which has no `memfd_create`, this makes an in-process ring
    /// ([`Segment::create_in_process`]), so the suites run there unchanged.
    pub(crate) fn create_memfd(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        #[cfg(miri)]
        return Self::create_in_process(name, cfg);
        #[cfg_attr(miri, allow(unreachable_code))]
        let mut geo = cfg.geometry()?;
        geo.flags |= FLAG_LOCK_FILE;
        let label = format!("memfd:{name}");
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| os("memfd_create", &label, e))?;
        rustix::fs::ftruncate(&fd, geo.total_size).map_err(|e| os("ftruncate", &label, e))?;
        reserve::reserve(fd.as_fd(), geo.total_size, &label, reserve::Place::Memory)?;
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

    /// Creates a named segment (`/dev/shm/NAME`, mode 0600), its memory reserved in
    /// `/dev/shm` (a ring that does not fit there is [`Error::NoSpace`], and no
    /// file is left). It is unlinked when
    /// this `Segment` is dropped, unless [`Segment::persist`] is called. Its lock
    /// file is the segment file itself (see [`Segment::descriptors`]).
    pub(crate) fn create_named(name: &str, cfg: &Config) -> Result<Arc<Segment>> {
        let geo = cfg.geometry()?;
        let path = shm_name(name)?;
        let exists = || Error::Exists {
            segment: path.as_str().into(),
            occupant: crate::error::Occupant::Unknown,
        };
        if named_file(&path).is_ok() {
            return Err(exists());
        }
        // Made whole under a name nobody opens, then given its name in one step
        // (a rename that replaces nothing): a process that opens the name while
        // the ring is being made finds no file, never a short or unwritten one
        // (a sink started before its consumer waits for exactly that).
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = format!("/.shmring-creating-{}-{n}", std::process::id());
        let fd = rustix::shm::open(
            temp.as_str(),
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::EXCL | rustix::shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| os("shm_open", &path, e))?;
        let cleanup = |e: Error| {
            let _ = rustix::shm::unlink(temp.as_str());
            e
        };
        rustix::fs::ftruncate(&fd, geo.total_size)
            .map_err(|e| cleanup(os("ftruncate", &path, e)))?;
        reserve::reserve(fd.as_fd(), geo.total_size, &path, reserve::Place::ShmDir)
            .map_err(cleanup)?;
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
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            format!("{SHM_DIR}{temp}").as_str(),
            rustix::fs::CWD,
            format!("{SHM_DIR}{path}").as_str(),
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| {
            cleanup(match e {
                rustix::io::Errno::EXIST => exists(),
                e => os("rename", &path, e),
            })
        })?;
        seg.make_eventfd()?;
        Ok(Arc::new(seg))
    }

    /// Removes the named segment `/dev/shm/NAME` (the name is checked as by
    /// [`Address::Named`](crate::Address::Named)). Processes that have it mapped keep their mapping;
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
    pub(crate) fn open_named(name: &str) -> Result<Arc<Segment>> {
        let path = shm_name(name)?;
        let locks = match Self::named_open_here(&path)?.filter(|l| l.writable().is_some()) {
            Some(locks) => locks,
            None => {
                let fd = open_shm(&path, rustix::fs::OFlags::RDWR)?;
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
                let fd = open_shm(&path, rustix::fs::OFlags::RDONLY)?;
                files::register(fd, false, &path)?
            }
        };
        Self::attach(locks, None, path, Backing::Named { created: false }, true)
    }

    /// The entry of the file `/dev/shm/NAME` names now, if this process holds it
    /// open: a named ring open here is never opened again, since closing the new
    /// descriptor would drop this process's record locks on it.
    fn named_open_here(path: &str) -> Result<Option<Arc<files::LockFile>>> {
        match named_file(path) {
            // A link (or anything but a file): let the open say what is wrong.
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {
                Ok(files::lookup(files::key_of_stat(&st)))
            }
            Ok(_) => Ok(None),
            Err(rustix::io::Errno::NOENT) => Err(Error::NotFound(path.into())),
            Err(_) => Ok(None),
        }
    }

    /// Attaches from a ring's descriptors, in the one order shmring hands them over
    /// (see [`Segment::descriptors`]): the segment; for a memfd ring, its lock file;
    /// for a ring created with [`Config::eventfd`], its eventfd (which a consumer
    /// or a tap may leave out). The ring itself says which it has: a missing lock
    /// file or a descriptor too many is [`Error::Descriptors`].
    pub(crate) fn from_descriptors(fds: Vec<OwnedFd>) -> Result<Arc<Segment>> {
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
        // An O_PATH descriptor (an `fd:` address of a ring file this process
        // holds) stands for the file it names: a named ring's file.
        let path_only = files::is_path_only(fd.as_fd());
        let seals = if path_only {
            Err(rustix::io::Errno::BADF)
        } else {
            rustix::fs::fcntl_get_seals(&fd)
        };
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
                let locks = if path_only {
                    files::held(fd.as_fd(), &label)?
                } else {
                    files::register(fd, writable, &label)?
                };
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
        if files::key_of(fd.as_fd(), label)? == files::key_of(segment, label)? {
            return Err(bad("is the segment itself"));
        }
        // An O_PATH descriptor names a lock file this process holds (an `fd:`
        // address): its own descriptor is used, none is added. Registered before
        // it is checked: a copy of a file this process holds locks on is never
        // closed while the locks are needed.
        let locks = if files::is_path_only(fd.as_fd()) {
            files::held(fd.as_fd(), label)?
        } else {
            files::register(fd, true, label)?
        };
        match locks.file().map(rustix::fs::fcntl_get_seals) {
            Some(Ok(seals)) if seals.contains(LOCK_FILE_SEALS) => Ok(locks),
            _ => Err(bad("is not a sealed, empty memfd")),
        }
    }

    /// The ring's descriptors, in the one order shmring hands them over (and
    /// an [`Address::Descriptors`](crate::Address::Descriptors) takes them): the segment; for a memfd ring,
    /// its lock file; for an eventfd ring, its eventfd. A producer needs all of
    /// them. (A read-only observer gets [`Segment::read_only_fd`] alone, and
    /// nothing it can lock.) An in-process ring has none.
    pub fn descriptors(&self) -> Vec<BorrowedFd<'_>> {
        if let Backing::InProcess(_) = self.backing {
            return Vec::new();
        }
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
    /// An in-process ring has none to send (`InvalidInput`).
    pub fn send(&self, sock: impl AsFd) -> std::io::Result<()> {
        if let Backing::InProcess(_) = self.backing {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{}: an in-process ring has no descriptors to send",
                    self.name
                ),
            ));
        }
        crate::sys::fdpass::send_fds(sock, &self.descriptors())
    }

    /// Opens a named segment created with [`Config::eventfd`], with its eventfd
    /// ([`crate::Address::NamedEventfd`]).
    pub(crate) fn open_named_with_eventfd(name: &str, eventfd: OwnedFd) -> Result<Arc<Segment>> {
        let seg = Self::open_named(name)?;
        let mut seg = Arc::try_unwrap(seg).expect("fresh segment has one owner");
        seg.eventfd = Some(eventfd);
        Ok(Arc::new(seg))
    }

    pub(super) fn make_eventfd(&mut self) -> Result<()> {
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
    pub(super) fn attach(
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
                (true, _) => locks.file().expect("a named ring's lock file is its file"),
            },
        };
        let geo = Self::probe(fd, &name, &backing, prot)?;
        let seg = Self::map_file(Some(locks), data, geo, name, backing, prot)?;
        if read_only {
            return Ok(seg);
        }
        seg.settle_geometry()
    }

    /// Validates the control block of the ring in `fd`: every size comes from
    /// untrusted memory, so the control block is mapped alone first.
    pub(super) fn probe(
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
}
