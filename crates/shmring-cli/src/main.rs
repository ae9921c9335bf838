//! The `shmring` command.

use std::process::ExitCode;

use clap::Parser;
use shmring_cli::cli::{Cli, Cmd};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `bench` lives in the shmring-bench crate and parses its own arguments; its
    // workers are another program, `shmring-bench-worker`, which counts allocations.
    if args.first().map(String::as_str) == Some("bench") {
        return code(shmring_bench::run(&args[1..]));
    }
    let cli = Cli::parse();
    let (name, r) = match cli.cmd {
        Cmd::Record(a) => ("record", shmring_cli::record::run(a)),
        Cmd::Produce(a) => ("produce", shmring_cli::produce::run(a)),
        Cmd::Demo(a) => ("demo", shmring_cli::demo::run(a)),
        Cmd::Stat(a) => ("stat", shmring_cli::stat::run(a)),
        Cmd::Tap(a) => ("tap", shmring_cli::tap::run(a)),
        Cmd::Top(a) => ("top", shmring_cli::top::run(a)),
        Cmd::Exporter(a) => ("exporter", shmring_cli::exporter::run(a)),
        Cmd::Rm(a) => ("rm", shmring_cli::rm::run(a)),
        Cmd::Bench { args } => return code(shmring_bench::run(&args)),
        Cmd::Completions { shell } => (
            "completions",
            shmring_cli::generate::completions(shell, &mut std::io::stdout().lock()),
        ),
        Cmd::Manpages { dir } => ("manpages", shmring_cli::generate::manpages(&dir)),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmring {name}: {}", e.msg);
            ExitCode::from(e.code.max(1))
        }
    }
}

fn code(c: i32) -> ExitCode {
    ExitCode::from(c.clamp(0, 255) as u8)
}
