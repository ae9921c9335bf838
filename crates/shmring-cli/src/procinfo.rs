//! This process's own CPU time and memory, as the commands' summaries give them
//! (the readers are `shmring_host::usage`).

/// Memory of this process, in KiB (from `/proc/self/status`).
pub fn own_memory() -> Option<shmring_host::ProcMemory> {
    shmring_host::proc_memory(None)
}

/// Memory of process `pid`, in KiB (from `/proc/PID/status`).
pub fn memory(pid: u32) -> Option<shmring_host::ProcMemory> {
    shmring_host::proc_memory(Some(pid))
}

/// This process's user + system CPU seconds and peak RSS (KiB) from `getrusage`.
pub fn own_usage() -> (f64, u64) {
    (
        shmring_host::rusage(false).cpu_s(),
        shmring_host::own_peak_rss_kb(),
    )
}

/// Peaks of this process's memory, in KiB, the ring not counted: what is
/// resident ([`ProcMemory::rss_without_shmem_kb`](shmring_host::ProcMemory):
/// heap and stacks, and the program's and libraries' pages, most of them shared
/// with other processes), what is private (pages no other process maps:
/// [`shmring_host::private_memory`]), and heap and stacks (`RssAnon`).
#[derive(Debug, Default, Clone, Copy)]
pub struct PeakMemory {
    pub rss_kb: u64,
    pub private_kb: u64,
    pub anon_kb: u64,
}

impl PeakMemory {
    /// The memory now.
    pub fn now() -> PeakMemory {
        let mut p = PeakMemory::default();
        p.sample();
        p
    }

    /// Takes the memory now into the peaks.
    pub fn sample(&mut self) {
        if let Some(m) = own_memory() {
            self.rss_kb = self.rss_kb.max(m.rss_without_shmem_kb());
            self.anon_kb = self.anon_kb.max(m.anon_kb);
        }
        if let Some(private) = shmring_host::private_memory(None) {
            self.private_kb = self.private_kb.max(private);
        }
    }
}
