//! `shmring bench --workload bot` end to end: the whole bot on both transports,
//! the real `shmring record --encode` as the receiver of each, and the Python
//! receiver on both; nothing left behind. Needs the bench's worker program beside
//! `shmring` (`cargo build -p shmring-bench`; a workspace build makes both).
#![cfg(feature = "gst")]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;
use shmring_testkit::ChildGuard;

/// One bot run with these extra arguments: its rows and its stdout, after
/// checking it succeeded and left nothing behind.
fn bench_bot(extra: &[&str]) -> (Vec<Value>, String) {
    let worker = Path::new(EXE).with_file_name("shmring-bench-worker");
    assert!(
        worker.is_file(),
        "{} is missing: build it with `cargo build -p shmring-bench`",
        worker.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bot.json");
    let mut cmd = Command::new(EXE);
    cmd.args(["bench", "--workload", "bot", "--participants", "1"])
        .args(["--seconds", "2"])
        .args(extra)
        .arg("--json")
        .arg(&json)
        // Its temporary directories go here, to be looked for afterwards.
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let bench = ChildGuard::spawn_tied(&mut cmd, &[]).unwrap();
    let pid = bench.pid();
    let out = bench.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // No output directory and no ring left behind.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "bot.json")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let tag = format!("shmring-bench-bot-{pid}-");
    let rings: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&tag))
        .collect();
    assert!(rings.is_empty(), "{rings:?}");
    (rows, stdout)
}

/// Row `t`, which ran without an error, with a positive CPU figure for each part.
fn row<'a>(rows: &'a [Value], t: &str) -> &'a Value {
    let r = rows
        .iter()
        .find(|r| r["transport"] == t)
        .unwrap_or_else(|| panic!("no {t} row: {rows:?}"));
    assert_eq!(r["workload"], "bot");
    assert_eq!(r["error"], Value::Null, "{r}");
    assert_eq!(r["participants"], 1);
    for k in [
        "cpu_s_per_bot_minute_producer",
        "cpu_s_per_bot_minute_receiver",
        "cpu_s_per_bot_minute",
    ] {
        assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
    }
    r
}

#[test]
fn the_bot_runs_on_the_ring_and_on_the_websocket_and_reports_both() {
    let (rows, stdout) = bench_bot(&[]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for t in ["shmring", "websocket"] {
        let r = row(&rows, t);
        assert!(r["frames_encoded"].as_u64().unwrap() > 0, "{r}");
        assert!(r["frames_dropped"].is_u64(), "{r}");
    }
    let ring = rows.iter().find(|r| r["transport"] == "shmring").unwrap();
    assert!(ring["saved_whole"].is_f64(), "{ring}");
    assert!(stdout.contains("against the WebSocket"), "{stdout}");
}

/// The checkout's Python with the shmring package (`make venv`), or
/// `SHMRING_PYTHON`, as the bench finds it.
fn venv_python() -> Option<PathBuf> {
    let p = std::env::var_os("SHMRING_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"));
    p.is_file().then_some(p)
}

#[test]
fn the_python_receiver_takes_every_frame_over_the_ring_and_the_websocket() {
    if venv_python().is_none() {
        eprintln!(
            "skipped: no Python with the shmring package: run `make venv` (or set SHMRING_PYTHON)"
        );
        return;
    }
    let (rows, stdout) = bench_bot(&["--transports", "py-shmring,py-websocket"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for t in ["py-shmring", "py-websocket"] {
        let r = row(&rows, t);
        // Received, not encoded: the Python receiver has no encoder.
        assert!(r["frames_received"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["frames_encoded"], Value::Null, "{r}");
    }
    let ring = rows
        .iter()
        .find(|r| r["transport"] == "py-shmring")
        .unwrap();
    assert!(ring["saved_whole"].is_f64(), "{ring}");
    assert!(
        stdout.contains("against the WebSocket (py-websocket)"),
        "{stdout}"
    );
}
