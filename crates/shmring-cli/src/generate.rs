//! Man pages and shell completions, generated from the command-line definition
//! ([`crate::cli::Cli`], with `bench`'s own arguments from the shmring-bench crate),
//! so they always describe the options this build takes.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::{fail, CmdError};

/// The whole command: [`Cli`], with the `bench` subcommand's arguments (parsed by
/// shmring-bench itself) in place of its pass-through.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("bench", |old| {
        // The one-line summary is the top-level list's; bench's own description
        // becomes the page's.
        let mut bench = shmring_bench::command().name("bench");
        if let Some(long) = bench.get_about().cloned() {
            bench = bench.long_about(long);
        }
        match old.get_about() {
            Some(short) => bench.about(short.clone()),
            None => bench,
        }
    })
}

/// `shmring completions SHELL`: the completion script on `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<(), CmdError> {
    let mut cmd = command();
    clap_complete::generate(shell, &mut cmd, "shmring", out);
    out.flush()
        .map_err(|e| fail(1, format!("cannot write the completion script: {e}")))
}

/// `shmring manpages DIR`: `shmring.1` and one page per visible subcommand
/// (`shmring-record.1`, ...) in `dir`.
pub fn manpages(dir: &Path) -> Result<(), CmdError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(1, format!("cannot create {}: {e}", dir.display())))?;
    clap_mangen::generate_to(command(), dir).map_err(|e| {
        fail(
            1,
            format!("cannot write the man pages into {}: {e}", dir.display()),
        )
    })
}
