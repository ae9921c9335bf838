//! The ring's *lock file* as this process holds it: its descriptors and the roles
//! this process holds on it.
//!
//! Liveness is a POSIX record lock on one byte of the lock file per role (see
//! [`crate::sys::lock`]). A memfd ring's lock file is a second memfd, created with
//! the ring and handed only to processes that may write the ring (producers,
//! tethered consumers, a consumer taking over): a process given a read-only
//! descriptor of the ring has no descriptor of the lock file, so it can neither
//! take a lock anyone looks at nor hold one anyone needs. A named ring's lock file
//! is the segment file itself: a named ring is shared by processes of one user,
//! who can open it writable anyway.
//!
//! Record locks belong to the process, and the kernel drops every lock a process
//! holds on a file when the process closes *any* descriptor of that file. So this
//! process keeps one entry per lock file (keyed by device and inode): the
//! descriptors it was handed, which it closes only while it holds no role there,
//! and the roles themselves ([`LocalRoles`]), which it remembers in private memory
//! because a process cannot see its own record locks.
//!
//! A ring in this process's heap has no lock file: its entry holds the in-process
//! table of [`crate::sys::lock::Table`] instead, and is in no registry (nothing of
//! it can be handed over, so nothing arrives twice).
//!
//! Descriptors stay bounded: a named ring already open here is never opened again
//! (see [`lookup`]); a lock file descriptor that arrives while one is open is
//! closed at once when the process holds no role there, and otherwise when it
//! holds none any more.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::{os, Result};

/// A file's identity: (device, inode).
pub(crate) type FileKey = (u64, u64);

/// One lock file as this process holds it.
pub(crate) struct LockFile {
    key: FileKey,
    /// A writable descriptor (locks are taken through it).
    rw: OnceLock<OwnedFd>,
    /// A read-only descriptor, for a named ring opened only to read it.
    ro: OnceLock<OwnedFd>,
    /// Descriptors of the same file handed to us while we held a role on it
    /// (closing one would have dropped our locks). Closed once we hold none.
    extra: Mutex<Vec<OwnedFd>>,
    local: LocalRoles,
    /// An in-process ring's locks (it has no descriptor).
    table: Option<Box<crate::sys::lock::Table>>,
}

/// Serialises slot, consumer-role and tether-line changes within this process
/// against the lock file's record of the roles held here.
static ATTACH: Mutex<()> = Mutex::new(());

pub(crate) fn attach_guard() -> std::sync::MutexGuard<'static, ()> {
    ATTACH.lock().unwrap_or_else(|p| p.into_inner())
}

static FILES: Mutex<Vec<(FileKey, Weak<LockFile>)>> = Mutex::new(Vec::new());

fn files() -> std::sync::MutexGuard<'static, Vec<(FileKey, Weak<LockFile>)>> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key of the file `fd` refers to.
pub(crate) fn key_of(fd: BorrowedFd<'_>, name: &str) -> Result<FileKey> {
    let st = rustix::fs::fstat(fd).map_err(|e| os("fstat", name, e))?;
    Ok(key_of_stat(&st))
}

/// The key of a file from its `stat`.
#[allow(clippy::unnecessary_cast)] // the field types differ between targets
pub(crate) fn key_of_stat(st: &rustix::fs::Stat) -> FileKey {
    (st.st_dev as u64, st.st_ino as u64)
}

/// The entry for the file at `key`, if this process holds it open.
pub(crate) fn lookup(key: FileKey) -> Option<Arc<LockFile>> {
    let mut files = files();
    files.retain(|(_, w)| w.strong_count() > 0);
    files
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
}

/// The lock files this process holds a role on (a hand-off hello names them).
pub(crate) fn held_keys() -> Vec<FileKey> {
    files()
        .iter()
        .filter_map(|(k, w)| w.upgrade().filter(|l| l.local.any()).map(|_| *k))
        .collect()
}

/// Does this process hold the file `fd` refers to as a ring's lock file?
pub(crate) fn held_here(fd: BorrowedFd<'_>) -> bool {
    key_of(fd, "").is_ok_and(|k| lookup(k).is_some())
}

/// An `O_PATH` descriptor of the file `fd` refers to: it names the file without
/// opening it, and closing it drops no record lock (the kernel looks for locks to
/// drop only when a descriptor that opened the file is closed). `None` where
/// `/proc` is not mounted.
pub(crate) fn path_only(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(
        link.as_str(),
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// Is `fd` an `O_PATH` descriptor (see [`path_only`])?
pub(crate) fn is_path_only(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::PATH))
}

/// The entry of the file an `O_PATH` descriptor names, with a writable
/// descriptor: this process's own if it holds the file (no descriptor is made),
/// else the file opened again for reading and writing.
pub(crate) fn held(fd: BorrowedFd<'_>, name: &str) -> Result<Arc<LockFile>> {
    if let Some(l) = lookup(key_of(fd, name)?).filter(|l| l.writable().is_some()) {
        return Ok(l);
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let rw = rustix::fs::open(
        link.as_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| os("open again (/proc/self/fd)", name, e))?;
    register(rw, true, name)
}

/// Registers a descriptor of a lock file (`writable`: opened read-write). If this
/// process already holds the file, the descriptor joins its entry: kept if the
/// entry lacks one of its kind, closed at once if it has one and no role is held,
/// kept aside until no role is held otherwise.
pub(crate) fn register(fd: OwnedFd, writable: bool, name: &str) -> Result<Arc<LockFile>> {
    let key = key_of(fd.as_fd(), name)?;
    let mut files = files();
    files.retain(|(_, w)| w.strong_count() > 0);
    if let Some(h) = files
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        drop(files);
        h.adopt(fd, writable);
        return Ok(h);
    }
    let h = Arc::new(LockFile {
        key,
        rw: OnceLock::new(),
        ro: OnceLock::new(),
        extra: Mutex::new(Vec::new()),
        local: LocalRoles::default(),
        table: None,
    });
    h.adopt(fd, writable);
    files.push((key, Arc::downgrade(&h)));
    Ok(h)
}

impl LockFile {
    /// The file's identity.
    pub(crate) fn key(&self) -> FileKey {
        self.key
    }

    /// The locks of an in-process ring: a table, no descriptor, in no registry.
    pub(crate) fn in_process() -> Arc<LockFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Arc::new(LockFile {
            // No file has inode 0: a key no registered file shares.
            key: (u64::MAX, NEXT.fetch_add(1, Relaxed)),
            rw: OnceLock::new(),
            ro: OnceLock::new(),
            extra: Mutex::new(Vec::new()),
            local: LocalRoles::default(),
            table: Some(Box::default()),
        })
    }

    fn adopt(&self, fd: OwnedFd, writable: bool) {
        let slot = if writable { &self.rw } else { &self.ro };
        let Err(fd) = slot.set(fd) else {
            return;
        };
        // Under the attach mutex: no role can be taken while we decide.
        let _g = attach_guard();
        if self.local.any() {
            self.extra
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(fd);
        } // else: dropped here, closing it; we hold no lock on the file.
    }

    /// Where locks are taken and looked at: the writable descriptor if this
    /// process has it, else the read-only one (which can look, not lock); an
    /// in-process ring's table.
    pub(crate) fn fd(&self) -> crate::sys::lock::Locks<'_> {
        match &self.table {
            Some(t) => crate::sys::lock::Locks::Table(t),
            None => crate::sys::lock::Locks::File(
                self.file().expect("a lock file entry holds a descriptor"),
            ),
        }
    }

    /// The lock file's descriptor (writable if this process has one); `None` for
    /// an in-process ring's.
    pub(crate) fn file(&self) -> Option<BorrowedFd<'_>> {
        self.rw.get().or(self.ro.get()).map(|f| f.as_fd())
    }

    /// The read-only descriptor, if this process has one.
    pub(crate) fn read_only(&self) -> Option<BorrowedFd<'_>> {
        self.ro.get().map(|f| f.as_fd())
    }

    /// The writable descriptor, if this process has one.
    pub(crate) fn writable(&self) -> Option<BorrowedFd<'_>> {
        self.rw.get().map(|f| f.as_fd())
    }

    /// The roles this process holds on this lock file.
    pub(crate) fn local(&self) -> &LocalRoles {
        &self.local
    }

    /// After giving up a role (under the attach mutex): once this process holds no
    /// role here, the descriptors kept aside can be closed.
    pub(crate) fn close_extras_if_idle(&self) {
        if !self.local.any() {
            self.extra.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let mut files = files();
        files.retain(|(k, w)| *k != self.key || w.strong_count() > 0);
    }
}

/// Which roles of a ring this process holds: the producer slots of its own
/// producers, the consumer role and tether lines. Record locks cannot tell a
/// process its own locks, so the process remembers them here, in its private
/// memory, where no peer can forge them. After `fork` the child holds none of its
/// parent's locks: the record carries the fork generation it belongs to (see
/// [`crate::sys::forks`], no system call, so sandboxed producers may detach) and
/// reads as empty after one.
#[derive(Default)]
pub(crate) struct LocalRoles {
    /// 1 + the fork generation this record belongs to (0: never used).
    generation: AtomicU32,
    slots: [AtomicU64; 4],
    consumer: AtomicBool,
    /// Bit `j`: a tethered consumer of this process holds tether line `j`.
    tethers: AtomicU32,
}

impl LocalRoles {
    fn current(&self) -> bool {
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
    /// Does this process hold any role here?
    pub(crate) fn any(&self) -> bool {
        self.current()
            && (self.slots.iter().any(|w| w.load(Acquire) != 0)
                || self.consumer.load(Acquire)
                || self.tethers.load(Acquire) != 0)
    }
    /// Does a producer of this process hold `slot`?
    pub(crate) fn has_slot(&self, slot: u32) -> bool {
        self.current() && self.slots[(slot / 64) as usize].load(Acquire) & (1 << (slot % 64)) != 0
    }
    pub(crate) fn set_slot(&self, slot: u32, held: bool) {
        self.current();
        let w = &self.slots[(slot / 64) as usize];
        let bit = 1u64 << (slot % 64);
        if held {
            w.fetch_or(bit, AcqRel);
        } else {
            w.fetch_and(!bit, AcqRel);
        }
    }
    /// Is this process the ring's consumer?
    pub(crate) fn is_consumer(&self) -> bool {
        self.current() && self.consumer.load(Acquire)
    }
    pub(crate) fn set_consumer(&self, held: bool) {
        self.current();
        self.consumer.store(held, Release);
    }
    /// Does a tethered consumer of this process hold tether line `j`?
    pub(crate) fn has_tether(&self, j: u32) -> bool {
        self.current() && self.tethers.load(Acquire) & (1 << j) != 0
    }
    pub(crate) fn set_tether(&self, j: u32, held: bool) {
        self.current();
        if held {
            self.tethers.fetch_or(1 << j, AcqRel);
        } else {
            self.tethers.fetch_and(!(1 << j), AcqRel);
        }
    }
}
