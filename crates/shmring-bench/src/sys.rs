//! Small OS helpers of the bench: absolute sleeps, descriptor inheritance, pipes.
//! (CPU time and memory of processes: `shmring_host::usage`.)

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Sleeps until CLOCK_MONOTONIC reaches `ns` (the clock of `shmring::now_ns`).
pub fn sleep_until_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: plain syscall with a valid timespec.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            return;
        }
    }
}

/// A copy of `fd` that a spawned child inherits (no close-on-exec), closed on drop.
pub struct Inheritable(OwnedFd);

impl Inheritable {
    pub fn new(fd: &impl AsRawFd) -> io::Result<Self> {
        // SAFETY: F_DUPFD returns a new descriptor without FD_CLOEXEC, which we own.
        let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 3) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `n` is a fresh descriptor nobody else owns.
        Ok(Inheritable(unsafe { OwnedFd::from_raw_fd(n) }))
    }
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Takes ownership of an inherited descriptor number given on the command line,
/// after checking it is open.
pub fn adopt_fd(n: i32) -> Result<OwnedFd, String> {
    // SAFETY: F_GETFD only queries.
    if n < 3 || unsafe { libc::fcntl(n, libc::F_GETFD) } < 0 {
        return Err(format!("--fd {n} is not an open inherited descriptor"));
    }
    // SAFETY: the parent passed this descriptor to us alone; we take it over.
    unsafe {
        libc::fcntl(n, libc::F_SETFD, libc::FD_CLOEXEC);
        Ok(OwnedFd::from_raw_fd(n))
    }
}

/// A pipe (read end, write end), both close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Grows a pipe's buffer (best effort, up to the system maximum).
pub fn grow_pipe(fd: &impl AsRawFd, bytes: i32) {
    // SAFETY: F_SETPIPE_SZ on a pipe we hold; failure is harmless.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) };
}
