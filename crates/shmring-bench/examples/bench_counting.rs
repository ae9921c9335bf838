//! `shmring bench` with heap allocations counted: the same entry points as the
//! `shmring` binary, with [`shmring_bench::CountingAlloc`] as the global allocator.
//!
//! `cargo run --release -p shmring-bench --example bench_counting -- bench --quick`

use std::process::ExitCode;

#[global_allocator]
static A: shmring_bench::CountingAlloc = shmring_bench::CountingAlloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("bench") => shmring_bench::run(&args[1..]),
        Some("bench-worker") => shmring_bench::worker(&args[1..]),
        _ => {
            eprintln!("usage: bench_counting <bench|bench-worker> ...");
            2
        }
    };
    ExitCode::from(code as u8)
}
