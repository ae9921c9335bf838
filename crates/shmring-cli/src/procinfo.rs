//! CPU time and memory of a process, from `/proc` and `getrusage`.

use std::time::Instant;

/// Memory of a process, in KiB (from `/proc/PID/status`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub rss_kb: u64,
    /// Anonymous memory: heap, stacks.
    pub anon_kb: u64,
    /// File-backed pages: the program and its libraries.
    pub file_kb: u64,
    /// Shared memory mapped (the ring).
    pub shmem_kb: u64,
}

impl Memory {
    /// Resident memory that is the process's own: everything but the shared ring.
    pub fn private_kb(&self) -> u64 {
        self.anon_kb + self.file_kb
    }
}

pub fn memory(pid: u32) -> Option<Memory> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

pub fn own_memory() -> Option<Memory> {
    parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn parse_status(s: &str) -> Option<Memory> {
    let mut m = Memory::default();
    let mut seen = false;
    for line in s.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v: u64 = match v.trim().trim_end_matches(" kB").trim().parse() {
            Ok(v) => v,
            Err(_) => continue,
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

/// CPU seconds of `pid` so far (exact where the kernel keeps schedstat).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    shmring_bench::cpu_ns(pid).map(|ns| ns as f64 / 1e9)
}

/// This process's user + system CPU seconds and peak RSS (KiB) from `getrusage`.
pub fn own_usage() -> (f64, u64) {
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_maxrss as u64)
}

/// CPU % of a process between samples.
pub struct CpuMeter {
    pid: u32,
    last: Option<(Instant, f64)>,
    pub first: Option<(Instant, f64)>,
}

impl CpuMeter {
    pub fn new(pid: u32) -> CpuMeter {
        CpuMeter {
            pid,
            last: None,
            first: None,
        }
    }

    /// CPU % (of one core) since the previous call.
    pub fn sample(&mut self) -> Option<f64> {
        let now = Instant::now();
        let cpu = cpu_seconds(self.pid)?;
        self.first.get_or_insert((now, cpu));
        let pct = self.last.map(|(t, c)| {
            let dt = now.duration_since(t).as_secs_f64();
            if dt > 0.0 {
                100.0 * (cpu - c) / dt
            } else {
                0.0
            }
        });
        self.last = Some((now, cpu));
        pct
    }

    /// Average CPU % over everything sampled.
    pub fn average(&self) -> Option<f64> {
        let ((t0, c0), (t1, c1)) = (self.first?, self.last?);
        let dt = t1.duration_since(t0).as_secs_f64();
        (dt > 0.0).then(|| 100.0 * (c1 - c0) / dt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let m = memory(std::process::id()).unwrap();
        assert!(m.rss_kb > 0 && m.private_kb() > 0);
        assert!(cpu_seconds(std::process::id()).is_some());
        assert!(
            parse_status("VmRSS:\t  1234 kB\nRssAnon:\t 10 kB\n")
                .unwrap()
                .rss_kb
                == 1234
        );
    }
}
