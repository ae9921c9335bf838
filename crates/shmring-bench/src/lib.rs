//! `shmring bench`: shmring against the transports people use today (Unix and TCP
//! sockets, pipes, a browser-style WebSocket, optionally iceoryx2, and the Python
//! receiver of the story: `py-websocket` against `py-shmring`), with the same
//! decoder-like writer and encoder-like reader on every transport.
//!
//! The `shmring` binary calls [`run`] for `shmring bench ...`; each side of a
//! transport runs in its own process, a `shmring-bench-worker` (installed beside
//! `shmring`, or in `../libexec/shmring/`), which calls [`worker`]. The worker counts
//! heap allocations per frame with `shmring_host::CountingAlloc` as its global
//! allocator; run under any other allocator, they are reported as unavailable.
//!
//! `--workload bot` measures a whole meeting bot instead: a producer worker in the
//! role of the browser, and the real `shmring record --encode` as its receiver,
//! fed by a ring or (`record --websocket`, reading [`wire`]) by a WebSocket.

mod args;
mod bot;
#[cfg(feature = "iceoryx2")]
mod ice;
mod kit;
mod meeting;
mod orchestrate;
mod plot;
mod python;
pub mod report;
mod sys;
/// The list of transports.
pub mod transport;
mod twocore;
mod wakeup;
/// The stream transports' frame header and the browser-style WebSocket.
pub mod wire;
mod work;
mod worker;

/// For tools and tests that read the `--json` output.
pub use serde_json;
pub use work::{checksum, expected_checksum, fill_frame, FRAME_1080P_I420};

/// `shmring bench ARGS...`; returns the process exit code.
pub fn run(args: &[String]) -> i32 {
    orchestrate::run(args)
}

/// The arguments of `shmring bench` (for its man page and completions).
pub fn command() -> clap::Command {
    <args::BenchArgs as clap::CommandFactory>::command()
}

/// `shmring-bench-worker ARGS...`: one side of a transport, in its own process.
pub fn worker(args: &[String]) -> i32 {
    worker::worker_main(args)
}
