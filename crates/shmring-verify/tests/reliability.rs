//! Short runs of every reliability experiment (the binary, as a user runs it). Each
//! asserts on the JSON summary: properties held, and the counts that prove them.
//! Durations here are failure guards only.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use shmring_host::ChildGuard;

const BIN: &str = env!("CARGO_BIN_EXE_shmring-verify");

/// Runs `shmring-verify ARGS --json`; returns the summary and the whole output.
/// `shmring-verify` with the words of `args` (split at spaces) and `--json`.
fn verify(args: &str, guard: Duration) -> (Value, String) {
    // Killed if the test fails or the guard runs out (its own children die with it:
    // they are spawned with PR_SET_PDEATHSIG).
    let mut run = ChildGuard::spawn(
        Command::new(BIN)
            .args(args.split_whitespace())
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    )
    .expect("start shmring-verify");
    let pid = run.pid();
    let mut out = run.take_stdout().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let status = run
        .wait_or_kill(guard)
        .unwrap_or_else(|| panic!("shmring-verify {args:?} did not finish within {guard:?}"));
    let text = reader.join().expect("reader");
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("shmring-verify-{pid}-")))
        .collect();
    assert!(
        leftovers.is_empty(),
        "segments left in /dev/shm: {leftovers:?}"
    );
    let summary: Value = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary in:\n{text}"));
    assert!(
        status.success() && summary["ok"] == true,
        "shmring-verify {args:?} failed ({status}):\n{text}"
    );
    (summary, text)
}

fn fig(v: &Value, k: &str) -> u64 {
    v["figures"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("figure {k} missing in {v}"))
}

/// The chaos run for 60 s (`make test-hostile` runs it for 10 minutes): every
/// invariant its checker knows holds, and the faults really happened.
#[test]
fn chaos_60s() {
    let (v, _) = verify("chaos --seconds 60", Duration::from_secs(900));
    assert!(
        fig(&v, "kills") > 0 && fig(&v, "stops") > 0,
        "no fault: {v}"
    );
    assert!(fig(&v, "records_delivered") > 0, "no traffic: {v}");
    assert_eq!((fig(&v, "torn"), fig(&v, "lost")), (0, 0));
}

#[test]
fn killstorm_short() {
    let (v, _) = verify(
        "killstorm --cycles 30 --producers 4 --resume-budget-ms 20000",
        Duration::from_secs(300),
    );
    assert_eq!(fig(&v, "kills"), 30);
    let mid = fig(&v, "kills_mid_reservation");
    assert!(mid > 0, "no kill landed mid-reservation: {v}");
    // Kills land at an exact moment (the victim is stopped and its state read) unless
    // a victim stayed at an ambiguous moment for 500 tries; then a range is allowed.
    let ambiguous = fig(&v, "kills_at_ambiguous_moment");
    let abandoned = fig(&v, "stats_abandoned");
    assert!(
        (mid..=mid + ambiguous).contains(&abandoned),
        "abandoned {abandoned} vs {mid} kills mid-reservation (+{ambiguous} ambiguous)"
    );
    assert_eq!(fig(&v, "records_lost"), 0);
    assert_eq!(fig(&v, "records_uncommitted_delivered"), 0);
    assert_eq!(fig(&v, "records_committed"), fig(&v, "records_received"));
    assert!(fig(&v, "records_received") > 0);
}

#[test]
fn scribble_short() {
    let (v, _) = verify("scribble --seconds 1 --rounds 1", Duration::from_secs(300));
    // Every region: records produced after the scribbler stopped arrived, and
    // from then on every record exactly once (the report's checks).
    for region in ["cursors", "control", "slots", "log", "identity"] {
        let ms = v["figures"][format!("{region}_recover_max_ms")].as_f64();
        assert!(
            ms.is_some_and(|t| t >= 0.0),
            "{region}: records never flowed again: {v}"
        );
        assert!(fig(&v, &format!("{region}_records_after")) > 0, "{region}");
    }
}

#[test]
fn consumer_crash_short() {
    let (v, _) = verify(
        "consumer-crash --cycles 3 --block-slack-ms 20000",
        Duration::from_secs(300),
    );
    assert_eq!(fig(&v, "consumer_kills"), 3);
    assert_eq!(fig(&v, "records_lost"), 0);
    assert!(fig(&v, "no_consumer_errors") > 0);
    assert!(fig(&v, "redelivered") <= 3 * fig(&v, "hold_limit"));
    assert_eq!(
        fig(&v, "deliveries"),
        fig(&v, "records_committed") + fig(&v, "redelivered")
    );
}

#[test]
fn soak_short() {
    let (v, _) = verify(
        "soak --seconds 8 --rate 40 --warmup 4 --capacity 8388608",
        Duration::from_secs(300),
    );
    assert_eq!(
        fig(&v, "records_sent"),
        fig(&v, "records_received") + fig(&v, "records_dropped_full")
    );
    assert!(fig(&v, "records_received") > 0);
    assert!(fig(&v, "rss_worst_drift_kib") <= 1024);
}

#[test]
fn sigbus_seals_and_truncation() {
    let (v, _) = verify("sigbus", Duration::from_secs(120));
    assert!(v["figures"]["named_truncated"]
        .as_str()
        .unwrap()
        .starts_with("TRUNCATED"));
    assert_eq!(v["figures"]["foreign_sigbus"], "process killed by SIGBUS");
}

#[test]
fn permissions() {
    let (v, text) = verify("perms", Duration::from_secs(120));
    assert_eq!(v["figures"]["mode"], "0600");
    let other = v["figures"]["other_user_check"].as_str().unwrap();
    if other.starts_with("skipped") {
        eprintln!("other-user check skipped: {text}");
    } else {
        assert!(other.ends_with("EACCES"), "{other}");
    }
}

#[test]
fn bad_arguments_fail_cleanly() {
    let out = Command::new(BIN)
        .args(["killstorm", "--cycles", "many"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cycles"));
}
