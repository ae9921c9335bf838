//! `shmring-bench ARGS...`: `shmring bench ARGS...` as a program of its own, built
//! beside `shmring-bench-worker` so that this crate's tests run the bench end to end.
//! It is not installed: `shmring bench` is the command.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(shmring_bench::run(&args).clamp(0, 255) as u8)
}
