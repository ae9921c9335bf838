//! Small OS helpers: rusage, absolute sleeps, descriptor inheritance, /proc sampling.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// CPU time and peak memory from `getrusage`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Rusage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Peak resident set, KiB.
    pub max_rss_kb: u64,
}

impl Rusage {
    /// User + system CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// `getrusage` of this process (`children`: false) or of its reaped children
/// (true). All zero if the call fails.
pub fn rusage(children: bool) -> Rusage {
    let who = if children {
        libc::RUSAGE_CHILDREN
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Rusage::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Rusage {
        user_s: tv(ru.ru_utime),
        system_s: tv(ru.ru_stime),
        max_rss_kb: ru.ru_maxrss as u64,
    }
}

/// (user s, system s, max RSS KiB) of this process.
pub fn rusage_self() -> (f64, f64, u64) {
    let r = rusage(false);
    (r.user_s, r.system_s, r.max_rss_kb)
}

/// Memory of a process, in KiB, from `/proc/PID/status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProcMemory {
    /// VmRSS: everything resident.
    pub rss_kb: u64,
    /// RssAnon: heap, stacks.
    pub anon_kb: u64,
    /// RssFile: the program and its libraries.
    pub file_kb: u64,
    /// RssShmem: shared memory mapped (the ring).
    pub shmem_kb: u64,
}

impl ProcMemory {
    /// Resident memory that is the process's own: everything but shared memory.
    pub fn private_kb(&self) -> u64 {
        self.anon_kb + self.file_kb
    }
}

/// The memory of process `pid` (None: this process), from `/proc/PID/status`;
/// None if it cannot be read or has no VmRSS line.
pub fn proc_memory(pid: Option<u32>) -> Option<ProcMemory> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    parse_status(&std::fs::read_to_string(path).ok()?)
}

fn parse_status(s: &str) -> Option<ProcMemory> {
    let mut m = ProcMemory::default();
    let mut seen = false;
    for line in s.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let Ok(v) = v.trim().trim_end_matches("kB").trim().parse::<u64>() else {
            continue;
        };
        match k {
            "VmRSS" => {
                m.rss_kb = v;
                seen = true
            }
            "RssAnon" => m.anon_kb = v,
            "RssFile" => m.file_kb = v,
            "RssShmem" => m.shmem_kb = v,
            _ => {}
        }
    }
    seen.then_some(m)
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
    let rss = proc_memory(Some(pid)).map_or(0, |m| m.rss_kb);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parser_reads_the_memory_lines() {
        let s = "Name:\tx\nVmRSS:\t  1000 kB\nRssAnon:\t 300 kB\nRssFile:\t 200 kB\nRssShmem:\t 500 kB\n";
        let m = parse_status(s).expect("parsed");
        assert_eq!((m.rss_kb, m.private_kb(), m.shmem_kb), (1000, 500, 500));
        assert_eq!(parse_status("Name:\tx\n"), None);
        let short = parse_status("VmRSS:\t  1234 kB\nRssAnon:\t 10 kB\n").expect("parsed");
        assert_eq!(short.rss_kb, 1234);
        let own = proc_memory(None).expect("own /proc status");
        assert!(own.rss_kb > 0);
    }
}
