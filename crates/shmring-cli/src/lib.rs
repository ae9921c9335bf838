//! The `shmring` command's library: argument definitions and the `record`,
//! `produce`, `demo`, `stat`, `tap`, `top`, `exporter` and `rm` commands, and the man
//! pages and completions generated from the definition. The recorder's per-record path
//! ([`record::recorder::Recorder::process`]) is public so it can be driven and measured
//! in-process.

pub mod cli;
pub mod demo;
pub mod exporter;
pub mod generate;
pub mod json;
pub mod metrics;
pub mod pattern;
pub mod procinfo;
pub mod produce;
pub mod record;
pub mod ringref;
pub mod rings;
pub mod rm;
pub mod stat;
pub mod tap;
pub mod thumb;
pub mod top;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A command failed: the message (one line) and the exit code.
#[derive(Debug)]
pub struct CmdError {
    pub code: u8,
    pub msg: String,
}

/// A failure with exit code `code`.
pub fn fail(code: u8, msg: impl Into<String>) -> CmdError {
    CmdError {
        code,
        msg: msg.into(),
    }
}

/// Checks an optional `--seconds` limit: more than 0, at most 1000000.
pub fn check_seconds(seconds: Option<f64>) -> Result<(), CmdError> {
    match seconds {
        Some(s) if !(s > 0.0 && s <= 1e6) => Err(fail(
            2,
            format!("--seconds {s}: expected more than 0, at most 1000000"),
        )),
        _ => Ok(()),
    }
}

/// A flag set by SIGINT, SIGTERM or SIGHUP ([`shmring_host::stop_flag`]).
pub fn stop_flag() -> Result<Arc<AtomicBool>, CmdError> {
    shmring_host::stop_flag().map_err(|e| fail(1, e))
}

/// Megabytes (10^6) for messages.
pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}
