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

use std::os::fd::{AsRawFd, BorrowedFd};

/// First lock byte: the consumer's. Producer slot `i` uses `LOCK_BASE + 1 + i`.
pub const LOCK_BASE: i64 = 1 << 40;

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
pub fn try_lock(fd: BorrowedFd<'_>, byte: i64) -> std::io::Result<bool> {
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
pub fn unlock(fd: BorrowedFd<'_>, byte: i64) {
    let fl = flock(libc::F_UNLCK as libc::c_short, byte);
    // SAFETY: as in `try_lock`.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &fl) };
}

/// Does another process hold a write lock on `byte`? (Asked as "could we take a
/// read lock?", so read locks, which read-only descriptors can take, are never
/// seen.) Errors count as "held": when in doubt, a producer is alive.
pub fn held_by_other(fd: BorrowedFd<'_>, byte: i64) -> bool {
    let mut fl = flock(libc::F_RDLCK as libc::c_short, byte);
    // SAFETY: as in `try_lock`; the kernel writes into `fl`, which we own.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLK, &mut fl) };
    r != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}

/// The pid of the process holding the lock on `byte`, as the kernel reports it to
/// us: `None` when nobody holds it, and 0 for a holder in another pid namespace.
pub fn holder_pid(fd: BorrowedFd<'_>, byte: i64) -> Option<u32> {
    // A read-lock probe, as in `held_by_other`: only write locks are reported.
    let mut fl = flock(libc::F_RDLCK as libc::c_short, byte);
    // SAFETY: as in `held_by_other`.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLK, &mut fl) };
    if r != 0 || fl.l_type == libc::F_UNLCK as libc::c_short {
        return None;
    }
    Some(fl.l_pid.max(0) as u32)
}
