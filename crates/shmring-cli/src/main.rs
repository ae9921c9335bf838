//! The `shmring` command.

use std::process::ExitCode;

use clap::Parser;
use shmring_cli::cli::{Cli, Cmd};

/// A bad command line exits 2 with clap's message, less its closing pointer to
/// `--help`: a value refused is then one line naming the option, the value and
/// the range. Help and version print as clap prints them.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    let text = e.render().to_string();
    let text = text
        .trim_end()
        .trim_end_matches("For more information, try '--help'.")
        .trim_end();
    eprintln!("{text}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `bench` lives in the shmring-bench crate and parses its own arguments; its
    // workers are another program, `shmring-bench-worker`, which counts allocations.
    if args.first().map(String::as_str) == Some("bench") {
        return code(shmring_bench::run(&args[1..]));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
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
