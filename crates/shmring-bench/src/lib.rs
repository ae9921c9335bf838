//! `shmring bench`: entry points called by the `shmring` binary.

/// `shmring bench ARGS...`; returns the process exit code.
pub fn run(_args: &[String]) -> i32 {
    eprintln!("shmring bench: not built yet");
    2
}

/// `shmring bench-worker ARGS...` (hidden): one side of a transport, in its own process.
pub fn worker(_args: &[String]) -> i32 {
    2
}
