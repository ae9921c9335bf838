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
    let r = shmring_host::rusage(false);
    (r.cpu_s(), r.max_rss_kb)
}
