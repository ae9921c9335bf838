//! The `shmring` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // `bench` and its hidden worker live in the shmring-bench crate.
        Some("bench") => ExitCode::from(shmring_bench::run(&args[1..]) as u8),
        Some("bench-worker") => ExitCode::from(shmring_bench::worker(&args[1..]) as u8),
        _ => {
            eprintln!("usage: shmring <demo|produce|record|stat|bench> ...");
            ExitCode::from(2)
        }
    }
}
