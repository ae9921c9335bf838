//! `shmring bench` end to end: every transport moves frames with every checksum
//! verified, corruption is caught, the JSON is complete, bad input is refused.
//! The bench runs as `shmring-bench` (what `shmring bench` runs), beside its
//! worker program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use shmring_bench::report::JSON_FIELDS;
use shmring_bench::serde_json::{self, Value};
use shmring_bench::transport::{Set, Transport};
use shmring_host::ChildGuard;

/// Every transport of this build that carries frames with checksums, from the
/// bench's own list: all but the wake-up row (no payload) and the Python receivers
/// (they need Python; `python/tests` run them).
fn transports() -> Vec<&'static str> {
    Transport::ALL
        .iter()
        .filter(|s| s.transport.built() && s.set != Set::Python && s.transport != Transport::Wakeup)
        .map(|s| s.name)
        .collect()
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p =
            std::env::temp_dir().join(format!("shmring-bench-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn bench(dir: &Scratch, args: &[&str]) -> Outcome {
    let out = dir.path("stdout");
    let err = dir.path("stderr");
    // Killed if the test ends early.
    let mut bench = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_shmring-bench"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap()),
    )
    .expect("start shmring bench");
    let status = bench
        .wait_or_kill(Duration::from_secs(300))
        .unwrap_or_else(|| panic!("shmring bench {args:?} did not finish"));
    Outcome {
        code: status.code(),
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
    }
}

/// `shmring bench` with the words of `args` (split at spaces), then each path
/// option (`--json FILE`, ...).
fn bench_with(dir: &Scratch, args: &str, paths: &[(&str, &Path)]) -> Outcome {
    let mut v: Vec<&str> = args.split_whitespace().collect();
    for (flag, path) in paths {
        v.extend([*flag, path.to_str().expect("a UTF-8 scratch path")]);
    }
    bench(dir, &v)
}

fn rows(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the --json file");
    match serde_json::from_str(&text).expect("valid JSON") {
        Value::Array(v) => v,
        other => panic!("expected an array, got {other}"),
    }
}

fn row<'a>(rows: &'a [Value], transport: &str, workload: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["transport"] == transport && r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {transport} {workload} row in {rows:?}"))
}

#[test]
fn every_transport_moves_frames_with_checksums_verified() {
    let dir = Scratch::new("all");
    let json = dir.path("out.json");
    let all = transports();
    let list = all.join(",");
    let o = bench_with(
        &dir,
        &format!(
            "--transports {} --workload all --mode unthrottled --frames 12 --ring-mib 16",
            list
        ),
        &[("--json", &json)],
    );
    assert_eq!(
        o.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        o.stdout,
        o.stderr
    );
    let rows = rows(&json);
    assert_eq!(rows.len(), all.len() * 2);
    for t in &all {
        for (w, size) in [("video", 3_110_400u64), ("audio", 4096)] {
            let r = row(&rows, t, w);
            // The consumer counts a frame only once its checksum and sequence number
            // were checked; a bad one makes the run fail (see the test below).
            assert_eq!(r["frames"], 12, "{t} {w}: {r}");
            assert_eq!(r["bytes"], 12 * size, "{t} {w}: {r}");
            assert_eq!(r["error"], Value::Null, "{t} {w}: {r}");
            assert!(r["cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{t} {w}: {r}");
        }
        assert!(
            o.stdout.lines().any(|l| l.starts_with(t)),
            "{t} missing from the table:\n{}",
            o.stdout
        );
    }
}

/// The run failed, and said which transport found how many damaged frames.
fn assert_caught(t: &str, o: &Outcome, what: &str) {
    assert_ne!(
        o.code,
        Some(0),
        "{t}: corruption went unnoticed:\n{}\n{}",
        o.stdout,
        o.stderr
    );
    assert!(
        o.stderr.contains(t) && o.stderr.contains(what),
        "{t}: unexpected message:\n{}",
        o.stderr
    );
}

#[test]
fn a_corrupted_frame_is_detected_on_every_transport() {
    for t in transports() {
        let dir = Scratch::new(&format!("corrupt-{t}"));
        let json = dir.path("out.json");
        let o = bench_with(&dir, &format!("--transports {} --workload video --mode unthrottled --frames 6 --ring-mib 16 --corrupt-every 3", t), &[("--json", &json)]);
        assert_caught(t, &o, "2 of 6 frames failed their checksum");
        let rows = rows(&json);
        assert!(row(&rows, t, "video")["error"].is_string());
    }
}

#[test]
fn json_has_every_field_for_every_transport_asked() {
    let dir = Scratch::new("json");
    let json = dir.path("out.json");
    let svg = dir.path("out.svg");
    let o = bench_with(&dir, "--transports shmring,uds,floor,floor-2core --workload video --mode both --frames 4 --ring-mib 16", &[("--json", &json), ("--plot", &svg)]);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let rows = rows(&json);
    assert_eq!(rows.len(), 8, "4 transports x 2 modes");
    for r in &rows {
        let obj = r.as_object().expect("an object");
        for f in JSON_FIELDS {
            assert!(obj.contains_key(*f), "field {f} missing in {r}");
        }
        assert_eq!(r["frames"], 4);
    }
    // Ratios against shmring: 1 for shmring itself.
    assert_eq!(row(&rows, "shmring", "video")["cpu_vs_shmring"], 1.0);
    // ... and against each floor: 1 for the floor itself.
    assert_eq!(row(&rows, "floor", "video")["cpu_vs_floor"], 1.0);
    assert_eq!(
        row(&rows, "floor-2core", "video")["cpu_vs_floor_2core"],
        1.0
    );
    assert!(row(&rows, "shmring", "video")["cpu_vs_floor_2core"].is_number());
    let plot = std::fs::read_to_string(&svg).expect("the plot");
    assert!(
        plot.starts_with("<svg")
            && plot.contains("CPU seconds per GiB")
            && plot.contains("RSS over time")
    );
}

#[test]
fn unknown_transport_is_named_and_the_others_still_run() {
    let dir = Scratch::new("unknown");
    let json = dir.path("out.json");
    let o = bench_with(
        &dir,
        "--transports pipe,carrier-pigeon --workload audio --mode unthrottled --frames 5",
        &[("--json", &json)],
    );
    assert_ne!(o.code, Some(0));
    assert!(
        o.stderr.contains("unknown transport \"carrier-pigeon\""),
        "{}",
        o.stderr
    );
    let rows = rows(&json);
    assert_eq!(rows.len(), 1);
    assert_eq!(row(&rows, "pipe", "audio")["frames"], 5);
}

#[test]
fn a_ring_of_two_frames_carries_video_and_a_smaller_one_is_refused_by_name() {
    // 8 MiB holds two 1080p frames: the ring's max_record is raised to one frame.
    let dir = Scratch::new("ring8");
    let json = dir.path("out.json");
    let run = |mib: &str| {
        let args = [
            "--transports",
            "shmring,pipe",
            "--workload",
            "video",
            "--mode",
            "unthrottled",
            "--frames",
            "6",
            "--ring-mib",
            mib,
            "--json",
            json.to_str().unwrap(),
        ];
        bench(&dir, &args)
    };
    let o = run("8");
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    assert_eq!(row(&rows(&json), "shmring", "video")["frames"], 6);
    // 4 MiB cannot: one message before anything runs, naming the smallest that can.
    std::fs::remove_file(&json).unwrap();
    let o = run("4");
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("--ring-mib 4: a ring of 4 MiB cannot hold two video records")
            && o.stderr.contains("use --ring-mib 8 or more")
            && o.stderr.contains("nothing was run"),
        "{}",
        o.stderr
    );
    assert!(!json.exists(), "no run, no results");
}

#[test]
fn bench_says_where_its_files_went_and_lists_every_transport() {
    let dir = Scratch::new("paths");
    let (json, svg) = (dir.path("r.json"), dir.path("r.svg"));
    let o = bench_with(
        &dir,
        "--transports pipe --workload audio --mode unthrottled --frames 10",
        &[("--json", &json), ("--plot", &svg)],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stdout
            .contains(&format!("results (JSON) written to {}", json.display())),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("plot (SVG) written to {}", svg.display())),
        "{}",
        o.stdout
    );
    let o = bench(&dir, &["--help"]);
    assert_eq!(o.code, Some(0));
    for t in [
        "shmring-copy",
        "websocket",
        "floor",
        "floor-2core",
        "py-websocket",
        "py-shmring",
    ] {
        assert!(o.stdout.contains(t), "{t} not in --help:\n{}", o.stdout);
    }
}

#[test]
fn a_rate_the_machine_cannot_sustain_is_reported() {
    let dir = Scratch::new("rate");
    // 10 TB/s: no transport moves that.
    let o = bench_with(
        &dir,
        "--transports pipe --workload video --mode rated --rate 10000000 --seconds 0.3",
        &[],
    );
    assert_ne!(o.code, Some(0));
    assert!(
        o.stderr.contains("pipe") && o.stderr.contains("could not sustain"),
        "{}",
        o.stderr
    );
}

#[test]
fn bad_arguments_are_refused() {
    let dir = Scratch::new("args");
    let o = bench(&dir, &["--rate", "0", "--frames", "1"]);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("--rate"), "{}", o.stderr);
    let o = bench(&dir, &["--workload", "smell"]);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("smell"), "{}", o.stderr);
}

#[test]
fn the_meeting_reports_audio_and_video_latency_for_every_transport() {
    let dir = Scratch::new("meeting");
    let json = dir.path("out.json");
    // The meeting runs on every transport of the default set (the wake-up reference
    // included), not on the rows with a second reader.
    let meeting: Vec<&str> = Transport::default_set().map(Transport::name).collect();
    let list = meeting.join(",");
    let o = bench_with(
        &dir,
        &format!(
            "--quick --workload meeting --participants 3 --frames 8 --transports {}",
            list
        ),
        &[("--json", &json)],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let header = o
        .stdout
        .lines()
        .find(|l| l.starts_with("transport"))
        .unwrap_or_else(|| panic!("no table:\n{}", o.stdout));
    for c in [
        "audio p50 us",
        "audio p99 us",
        "video p50 us",
        "video p99 us",
    ] {
        assert!(header.contains(c), "{c} missing: {header}");
    }
    assert!(o.stdout.contains("3 participants"), "{}", o.stdout);
    let rows = rows(&json);
    assert_eq!(rows.len(), meeting.len());
    // 3 participants: 3 video and 3 audio streams of 8 records each.
    let bytes = 3 * 8 * (1280 * 720 * 3 / 2 + 480 * 2 * 2);
    for t in &meeting {
        let r = row(&rows, t, "meeting");
        assert_eq!(r["error"], Value::Null, "{t}: {r}");
        // Latency is the time between two processes: the floor has none.
        let timed = *t != "floor";
        assert_eq!(r["lat_audio_p99_us"].is_number(), timed, "{t}: {r}");
        assert_eq!(r["lat_video_p99_us"].is_number(), timed, "{t}: {r}");
        if *t == "wakeup" {
            assert_eq!(r["bytes"], 0, "{r}");
            assert!(r["frames"].as_u64().unwrap() > 0, "{r}");
        } else {
            assert_eq!(r["frames"], 6 * 8, "{t}: {r}");
            assert_eq!(r["bytes"], bytes, "{t}: {r}");
        }
        assert!(
            o.stdout.lines().any(|l| l.starts_with(t)),
            "{t} missing from the table:\n{}",
            o.stdout
        );
    }
}

#[test]
fn a_corrupted_meeting_record_is_detected() {
    for t in ["shmring", "pipe", "websocket", "floor", "floor-2core"] {
        let dir = Scratch::new(&format!("meeting-corrupt-{t}"));
        let o = bench_with(
            &dir,
            &format!(
                "--workload meeting --participants 2 --frames 6 --transports {} --corrupt-every 3",
                t
            ),
            &[],
        );
        // 4 streams of 6 records, every third damaged.
        assert_caught(t, &o, "8 of 24 frames failed their checksum");
    }
}

#[test]
fn the_output_states_measurements_not_goals_and_quick_runs_say_they_are_indicative() {
    let dir = Scratch::new("nogoals");
    let o = bench_with(&dir, "--quick --transports shmring,uds,websocket,floor,floor-2core --workload all --mode both --frames 4", &[]);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let text = o.stdout.to_lowercase();
    for w in ["goal", "not met"] {
        assert!(!text.contains(w), "{w:?} in the output:\n{}", o.stdout);
    }
    assert!(text.contains("indicative only"), "{}", o.stdout);
    let header = o
        .stdout
        .lines()
        .find(|l| l.starts_with("transport"))
        .unwrap();
    for c in ["xshmring", "xfloor", "x2core", "above floor"] {
        assert!(header.contains(c), "{c} missing: {header}");
    }
    // Without --quick, no such caveat.
    let o = bench_with(&dir, "--transports pipe --workload audio --frames 4", &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!o.stdout.contains("indicative"), "{}", o.stdout);
}

#[test]
fn repeat_reports_the_median_and_the_range_in_every_table() {
    let dir = Scratch::new("repeat");
    let json = dir.path("out.json");
    let o = bench_with(
        &dir,
        "--repeat 3 --transports shmring,pipe,floor --workload all --mode both --frames 10",
        &[("--json", &json)],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let tables = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("transport"))
        .count();
    assert_eq!(
        tables, 4,
        "video and audio, rated and unthrottled:\n{}",
        o.stdout
    );
    assert_eq!(
        o.stdout.matches("median of 3 interleaved runs").count(),
        4,
        "{}",
        o.stdout
    );
    for l in o.stdout.lines().filter(|l| l.starts_with("transport")) {
        assert!(l.contains("range"), "no range column: {l}");
    }
    let rows = rows(&json);
    assert_eq!(
        rows.len(),
        3 * 2 * 2,
        "one row per transport, workload and mode"
    );
    for r in &rows {
        assert_eq!(r["runs"], 3, "{r}");
        assert_eq!(r["frames"], 10, "{r}");
        let range = r["cpu_s_per_gib_range"].as_array().expect("a range");
        let (lo, hi) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
        let median = r["cpu_s_per_gib"].as_f64().unwrap();
        assert!(lo <= median && median <= hi, "{r}");
    }
}

#[test]
fn bad_repeat_and_participants_are_refused() {
    let dir = Scratch::new("badrepeat");
    for args in [
        &["--repeat", "0"][..],
        &["--workload", "meeting", "--participants", "0"][..],
        &["--workload", "meeting", "--participants", "65"][..],
    ] {
        let o = bench(&dir, args);
        assert_eq!(o.code, Some(2), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(args[args.len() - 2]), "{}", o.stderr);
    }
}

#[test]
fn long_work_says_each_run_as_it_starts_on_stderr_when_it_is_not_a_terminal() {
    // A line as each run starts (stderr is a file here).
    let dir = Scratch::new("status");
    let o = bench_with(
        &dir,
        // A rate any machine keeps, busy or not: the test is about the lines.
        "--quick --transports floor --workload audio --mode rated --rate 10",
        &[],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr
            .lines()
            .any(|l| l.starts_with("shmring bench: run 1 of 1: floor audio rated")),
        "{}",
        o.stderr
    );
}
