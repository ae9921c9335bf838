//! `shmring bench`: shmring against the transports people use today (Unix and TCP
//! sockets, pipes, a browser-style WebSocket, optionally iceoryx2, and the Python
//! receiver of the story: `py-websocket` against `py-shmring`), with the same
//! decoder-like writer and encoder-like reader on every transport.
//!
//! The `shmring` binary calls [`run`] for `shmring bench ...` and [`worker`] for the
//! hidden `shmring bench-worker ...`: each side of a transport runs in its own
//! process, a copy of the same binary.
//!
//! Heap allocations per frame are measured with [`CountingAlloc`], which the binary
//! installs as its global allocator; without it they are reported as unavailable.

mod alloc;
mod args;
mod child;
#[cfg(feature = "iceoryx2")]
mod ice;
mod meeting;
mod orchestrate;
mod plot;
mod python;
pub mod report;
/// The live status line of long work (bench, and the recorder's).
pub mod status;
mod sys;
mod transports;
mod twocore;
mod wakeup;
mod work;

pub use alloc::{alloc_count, counting_installed, CountingAlloc};
/// The supervisor of child processes (bench workers, the demo's recorder and producer).
pub use child::ChildGuard;
/// For tools and tests that read the `--json` output.
pub use serde_json;
/// CPU time of a process (also the demo's status line).
pub use sys::{cpu_ns, proc_memory, rusage, ProcMemory, Rusage};
pub use work::{checksum, expected_checksum, fill_frame, FRAME_1080P_I420};

/// `shmring bench ARGS...`; returns the process exit code.
pub fn run(args: &[String]) -> i32 {
    orchestrate::run(args)
}

/// The arguments of `shmring bench` (for its man page and completions).
pub fn command() -> clap::Command {
    <args::BenchArgs as clap::CommandFactory>::command()
}

/// `shmring bench-worker ARGS...` (hidden): one side of a transport, in its own process.
pub fn worker(args: &[String]) -> i32 {
    transports::worker_main(args)
}
