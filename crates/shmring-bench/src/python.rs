//! The Python rows, `py-websocket` and `py-shmring`: the story's own before/after.
//! A Python process receives the same 1080p I420 stream through the `websockets`
//! library (client→server, masked, fragmented at 131,000 bytes as Chromium does) and
//! through the shmring Python package. The work is done by
//! `python/bench/py_transport_bench.py`; its CPU figures are the receiving Python
//! process's only, so these rows are compared with each other, not with the others.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::report::Row;
use crate::transport::Transport;

const SCRIPT: &str = "python/bench/py_transport_bench.py";
/// The Python receiver of the bot workload's `py-shmring` and `py-websocket` rows.
const BOT_SCRIPT: &str = "python/bench/py_bot_receiver.py";

/// The checkout the `shmring` binary was built in (or the current directory's).
fn repo_root() -> Option<PathBuf> {
    let from_exe = std::env::current_exe().ok();
    let from_cwd = std::env::current_dir().ok();
    [from_exe, from_cwd]
        .into_iter()
        .flatten()
        .flat_map(|p| p.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .find(|d| d.join(SCRIPT).is_file())
}

/// `SHMRING_PYTHON`, else the checkout's `.venv` (made by `make test`), else python3.
fn python(root: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("SHMRING_PYTHON") {
        return p.into();
    }
    let venv = root.join(".venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        "python3".into()
    }
}

/// The interpreter and the script of the bot workload's Python receiver.
pub(crate) fn bot_receiver() -> Result<(PathBuf, PathBuf), String> {
    let root = repo_root()
        .ok_or_else(|| format!("cannot find {BOT_SCRIPT} (run from the shmring checkout)"))?;
    Ok((python(&root), root.join(BOT_SCRIPT)))
}

/// Runs one Python row; errors are reported in the row.
pub fn run_py(t: Transport, workload: &str, mode: &str, seconds: f64, rate_mbps: f64) -> Row {
    let mut row = Row::empty(t, workload, mode, crate::work::FRAME_1080P_I420 as u64);
    if workload != "video" {
        row.error = Some(format!("{t} runs the video workload only"));
        return row;
    }
    let Some(root) = repo_root() else {
        row.error = Some(format!(
            "{t}: cannot find {SCRIPT} (run from the shmring checkout)"
        ));
        return row;
    };
    let py = python(&root);
    let out = Command::new(&py)
        .arg(root.join(SCRIPT))
        .args(["--transports", t.name(), "--workloads", mode])
        .args(["--seconds", &seconds.to_string()])
        .args(["--rate-mbps", &rate_mbps.to_string()])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            row.error = Some(format!("{t}: cannot run {}: {e}", py.display()));
            return row;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    let Some(v) = parsed.filter(|_| out.status.success()) else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("no output");
        row.error = Some(format!(
            "{t} failed ({}; needs the shmring Python package and websockets: `make venv`): {last}",
            out.status
        ));
        return row;
    };
    let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    row.frames = f("frames") as u64;
    row.bytes = f("bytes") as u64;
    row.seconds = f("seconds");
    if row.seconds > 0.0 {
        row.gbps = row.bytes as f64 / row.seconds / 1e9;
        row.frames_per_s = row.frames as f64 / row.seconds;
    }
    row.cpu_s_consumer = f("cpu_s");
    row.cpu_s_per_gib = f("cpu_s_per_gib");
    row.cpu_pct_at_rate = if mode == "rated" {
        f("cpu_pct")
    } else {
        row.cpu_s_per_gib * rate_mbps * 1e6 / (1u64 << 30) as f64 * 100.0
    };
    row
}
