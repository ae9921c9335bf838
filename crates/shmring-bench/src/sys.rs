//! Small OS helpers: rusage, absolute sleeps, descriptor inheritance, /proc sampling.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// (user s, system s, max RSS KiB) of this process.
pub fn rusage_self() -> (f64, f64, u64) {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_maxrss as u64)
}

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

/// CPU time in nanoseconds and RSS (KiB) of a process, from /proc.
pub fn sample_proc(pid: u32) -> Option<(u64, u64)> {
    let cpu = cpu_ns(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some((cpu, rss))
}

/// CPU time of a process so far, in nanoseconds: the sum of its threads'
/// `schedstat` run times (exact), falling back to the utime + stime of `stat`,
/// which counts whole clock ticks (10 ms): too coarse for 100 ms samples of a
/// process using a few percent of a core.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    if let Some(ns) = schedstat_ns(pid) {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" closing the command name: state is field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(((utime + stime) as f64 * 1e9 / clock_ticks_per_s()) as u64)
}

/// Sum over `/proc/PID/task/*/schedstat` of the first field (ns on a CPU).
fn schedstat_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let s = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

pub fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only queries.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}
