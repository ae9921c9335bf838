//! Liveness through POSIX record locks on one byte of the ring's lock file per role
//! (see `segment::files`).
//!
//! A producer (or a consumer) holds a *write* lock on its byte for as long as it is
//! attached. The kernel drops a process's record locks when the process dies,
//! however it dies, and never because it is slow or stopped; and a lock carries no
//! pid, so the check works across PID namespaces. Record locks belong to the
//! process: they do not show up to `F_GETLK` in the process holding them, and they
//! are dropped when the process closes *any* descriptor of the file (see
//! `segment::files`, which keeps them open). The lock bytes lie far
//! beyond the end of the file; that is allowed.
//!
//! Only write locks count. A write lock needs a descriptor opened for writing; a
//! *read* lock needs only a readable one, which a read-only peer may have. So the
//! liveness probe asks `F_GETLK` about a *read* lock, which conflicts with write
//! locks only: whatever read locks others take, they never make a role look held.
//!
//! A ring in this process's heap (`Segment::create_in_process`) has no file: its
//! locks are a [`Table`] of one flag per lock byte, which a holder's death (the
//! test hook `Segment::kill_producer`, `kill_consumer`) clears as the kernel drops
//! a dead process's record locks.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// First lock byte: the consumer's. Producer slot `i` uses `LOCK_BASE + 1 + i`.
pub const LOCK_BASE: i64 = 1 << 40;

/// Lock bytes a ring uses: the consumer's, 256 producer slots, 8 tether lines.
const ROLES: usize = 1 + 256 + 8;

/// Where a ring's locks live: its lock file, or an in-process ring's table.
#[derive(Clone, Copy)]
pub enum Locks<'a> {
    /// Record locks on this descriptor of the lock file.
    File(BorrowedFd<'a>),
    /// An in-process ring's table.
    Table(&'a Table),
}

/// The locks of an in-process ring: one flag per lock byte, set while a holder of
/// this process holds the role. Each holder is its own "process": a role held is
/// held against every other holder, and the flag goes only when its holder gives
/// the role up or is killed (the test hook), never because it is slow.
pub struct Table {
    held: [AtomicBool; ROLES],
}

impl Default for Table {
    fn default() -> Self {
        Table {
            held: std::array::from_fn(|_| AtomicBool::new(false)),
        }
    }
}

impl Table {
    fn flag(&self, byte: i64) -> std::io::Result<&AtomicBool> {
        usize::try_from(byte - LOCK_BASE)
            .ok()
            .and_then(|i| self.held.get(i))
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))
    }
}

fn flock(kind: libc::c_short, byte: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Takes the lock on `byte` without waiting. `Ok(false)`: another process holds it.
pub fn try_lock(at: Locks<'_>, byte: i64) -> std::io::Result<bool> {
    let fd = match at {
        Locks::File(fd) => fd,
        // AcqRel: the holder's writes before giving the role up are visible to the
        // next, as the kernel's lock hand-over makes them.
        Locks::Table(t) => {
            return Ok(t
                .flag(byte)?
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok())
        }
    };
    let fl = flock(libc::F_WRLCK as libc::c_short, byte);
    // SAFETY: `fd` is a valid open descriptor for the call's duration and `fl` is a
    // fully initialised struct that outlives the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &fl) };
    if r == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EAGAIN) => Ok(false),
        _ => Err(err),
    }
}

/// Drops our lock on `byte`.
pub fn unlock(at: Locks<'_>, byte: i64) {
    let fd = match at {
        Locks::File(fd) => fd,
        Locks::Table(t) => {
            if let Ok(f) = t.flag(byte) {
                f.store(false, Ordering::Release);
            }
            return;
        }
    };
    let fl = flock(libc::F_UNLCK as libc::c_short, byte);
    // SAFETY: as in `try_lock`.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &fl) };
}

/// Does another process hold a write lock on `byte`? (Asked as "could we take a
/// read lock?", so read locks, which read-only descriptors can take, are never
/// seen.) Errors count as "held": when in doubt, a producer is alive. An
/// in-process ring's table answers for every holder, this process's included.
pub fn held_by_other(at: Locks<'_>, byte: i64) -> bool {
    let fd = match at {
        Locks::File(fd) => fd,
        Locks::Table(t) => return t.flag(byte).map_or(true, |f| f.load(Ordering::Acquire)),
    };
    let mut fl = flock(libc::F_RDLCK as libc::c_short, byte);
    // SAFETY: as in `try_lock`; the kernel writes into `fl`, which we own.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLK, &mut fl) };
    r != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}

/// The pid of the process holding the lock on `byte`, as the kernel reports it to
/// us: `None` when nobody holds it, and 0 for a holder in another pid namespace.
/// An in-process ring's holders are all this process.
pub fn holder_pid(at: Locks<'_>, byte: i64) -> Option<u32> {
    let fd = match at {
        Locks::File(fd) => fd,
        Locks::Table(_) => {
            return held_by_other(at, byte)
                .then(|| rustix::process::getpid().as_raw_nonzero().get() as u32)
        }
    };
    // A read-lock probe, as in `held_by_other`: only write locks are reported.
    let mut fl = flock(libc::F_RDLCK as libc::c_short, byte);
    // SAFETY: as in `held_by_other`.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLK, &mut fl) };
    if r != 0 || fl.l_type == libc::F_UNLCK as libc::c_short {
        return None;
    }
    Some(fl.l_pid.max(0) as u32)
}
