//! `shmring-bench-worker`: one side of one transport of `shmring bench`, in its own
//! process (the bench starts it; it is no command of its own). It counts its heap
//! allocations, for the bench's allocations per frame: the `shmring` command
//! itself runs on the system allocator.

use std::process::ExitCode;

/// One relaxed atomic add per allocation.
#[global_allocator]
static ALLOC: shmring_host::CountingAlloc = shmring_host::CountingAlloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(shmring_bench::worker(&args).clamp(0, 255) as u8)
}
