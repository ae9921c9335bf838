//! CPU time and memory of a process, from `/proc` and `getrusage`.

use std::time::Instant;

/// Memory of a process, in KiB (from `/proc/PID/status`).
pub use shmring_bench::ProcMemory as Memory;

pub fn memory(pid: u32) -> Option<Memory> {
    shmring_bench::proc_memory(Some(pid))
}

pub fn own_memory() -> Option<Memory> {
    shmring_bench::proc_memory(None)
}

/// CPU seconds of `pid` so far (exact where the kernel keeps schedstat).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    shmring_bench::cpu_ns(pid).map(|ns| ns as f64 / 1e9)
}

/// This process's user + system CPU seconds and peak RSS (KiB) from `getrusage`.
pub fn own_usage() -> (f64, u64) {
    let r = shmring_bench::rusage(false);
    (r.cpu_s(), r.max_rss_kb)
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
        // The per-thread run times shrink when a thread exits (its time leaves
        // /proc/PID/task): never let the total go back, so no interval is negative.
        let cpu = cpu_seconds(self.pid)?.max(self.last.map_or(0.0, |(_, c)| c));
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
    fn cpu_percent_is_never_negative() {
        let mut m = CpuMeter::new(std::process::id());
        m.sample();
        // As if a thread had exited with a second of CPU time since the last look.
        m.last = m.last.map(|(t, c)| (t, c + 1.0));
        let pct = m.sample().unwrap();
        assert!(pct >= 0.0, "{pct}");
        assert!(m.average().unwrap() >= 0.0);
    }

    #[test]
    fn reads_own_process() {
        let m = memory(std::process::id()).unwrap();
        assert!(m.rss_kb > 0 && m.private_kb() > 0);
        assert!(cpu_seconds(std::process::id()).is_some());
        // The status parser's own cases are in shmring_bench::sys.
    }
}
