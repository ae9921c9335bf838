//! `shmring bench` end to end: every transport moves frames with every checksum
//! verified, corruption is caught, the JSON is complete, bad input is refused.
//! The bench runs as `shmring-bench` (what `shmring bench` runs), beside its
//! worker program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use shmring_bench::report::{JSON_FIELDS, SCALE_JSON_FIELDS};
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

/// The shared-memory segments in /dev/shm whose name has `tag` (the bench's rings
/// are memfds; a named segment left behind would show here).
fn shm_left(tag: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(tag))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn scale_producers_runs_every_count_and_size_with_every_record_checked() {
    let dir = Scratch::new("scale-producers");
    let (json, svg) = (dir.path("out.json"), dir.path("out.svg"));
    let o = bench_with(
        &dir,
        "--scale producers --counts 1,2 --size 4096,100000 --mode both --frames 6 \
         --transports shmring,floor",
        &[("--json", &json), ("--plot", &svg)],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let rows = rows(&json);
    assert_eq!(
        rows.len(),
        2 * 2 * 2 * 2,
        "transports x counts x sizes x modes"
    );
    for t in ["shmring", "floor"] {
        for count in [1u64, 2] {
            for size in [4096u64, 100_000] {
                for mode in ["rated", "unthrottled"] {
                    let r = rows
                        .iter()
                        .find(|r| {
                            r["transport"] == t
                                && r["count"] == count
                                && r["frame_bytes"] == size
                                && r["mode"] == mode
                        })
                        .unwrap_or_else(|| panic!("no {t} {count} {size} {mode} row"));
                    assert_eq!(r["workload"], "producers", "{r}");
                    for f in JSON_FIELDS.iter().chain(SCALE_JSON_FIELDS) {
                        assert!(r.get(*f).is_some(), "field {f} missing in {r}");
                    }
                    assert_eq!(r["error"], Value::Null, "{r}");
                    // Every thread sent 6 records; every one arrived with its checksum good.
                    assert_eq!(r["frames"], 6 * count, "{r}");
                    assert_eq!(r["bytes"], 6 * count * size, "{r}");
                    assert!(r["cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{r}");
                    // Threads in two processes at most; the floor is one.
                    let procs = if t == "floor" { 1 } else { count };
                    assert_eq!(r["processes"], procs, "{r}");
                    assert_eq!(r["lat_p99_us"].is_number(), t == "shmring", "{r}");
                    if t == "shmring" {
                        assert_eq!(r["allocs_per_frame_producer"], 0.0, "{r}");
                        assert!(r["fds_producer"].as_f64().unwrap() >= 3.0, "{r}");
                        assert!(r["fds_consumer"].as_f64().unwrap() >= 3.0, "{r}");
                    }
                    assert!(r["cpu_vs_floor"].is_number(), "{r}");
                }
            }
        }
    }
    let table = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("transport"))
        .count();
    assert_eq!(table, 4, "a table per size and mode:\n{}", o.stdout);
    let plot = std::fs::read_to_string(&svg).expect("the plot");
    assert!(
        plot.starts_with("<svg")
            && plot.contains("CPU seconds per GiB against producer threads on one ring")
            && plot.contains("p99 latency against producer threads")
            && plot.contains("shmring 4096 B rated at 2"),
        "{plot}"
    );
    assert!(shm_left("shmring-bench").is_empty());
}

#[test]
fn scale_producers_with_processes_gives_each_thread_its_own() {
    let dir = Scratch::new("scale-processes");
    let json = dir.path("out.json");
    let o = bench_with(
        &dir,
        "--scale producers --processes --counts 3 --size 4096 --mode unthrottled --frames 5 \
         --transports shmring",
        &[("--json", &json)],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let rows = rows(&json);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r["count"].as_u64(), r["processes"].as_u64()),
        (Some(3), Some(3)),
        "{r}"
    );
    assert_eq!(
        (r["frames"].as_u64(), r["bytes"].as_u64()),
        (Some(15), Some(15 * 4096))
    );
}

#[test]
fn a_corrupted_record_of_one_producer_thread_is_detected() {
    let dir = Scratch::new("scale-corrupt");
    let o = bench_with(
        &dir,
        "--scale producers --counts 2 --size 4096 --mode unthrottled --frames 6 \
         --transports shmring --corrupt-every 3",
        &[],
    );
    // 2 threads of 6 records, every third damaged.
    assert_caught("shmring", &o, "4 of 12 frames failed their checksum");
}

#[test]
fn scale_rings_runs_rings_side_by_side_with_memory_and_descriptors_per_ring() {
    let dir = Scratch::new("scale-rings");
    let (json, svg) = (dir.path("out.json"), dir.path("out.svg"));
    let o = bench_with(
        &dir,
        "--scale rings --counts 1,2 --frames 5 --transports shmring",
        &[("--json", &json), ("--plot", &svg)],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let rows = rows(&json);
    assert_eq!(rows.len(), 2);
    // A ring: one participant, a video and an audio stream of 5 records each.
    let ring_bytes = 5 * (1280 * 720 * 3 / 2 + 480 * 2 * 2);
    for rings in [1u64, 2] {
        let r = rows
            .iter()
            .find(|r| r["count"] == rings)
            .unwrap_or_else(|| panic!("no row of {rings} rings"));
        for f in JSON_FIELDS.iter().chain(SCALE_JSON_FIELDS) {
            assert!(r.get(*f).is_some(), "field {f} missing in {r}");
        }
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(
            (r["workload"].as_str(), r["mode"].as_str()),
            (Some("rings"), Some("rated"))
        );
        assert_eq!(r["frames"], rings * 10, "{r}");
        assert_eq!(r["bytes"], rings * ring_bytes, "{r}");
        assert_eq!(r["processes"], rings, "{r}");
        for f in [
            "lat_p50_us",
            "lat_p99_us",
            "cpu_pct_per_ring",
            "fds_producer",
            "fds_consumer",
        ] {
            assert!(r[f].as_f64().is_some_and(|v| v > 0.0), "{f}: {r}");
        }
        assert!(r["rss_producer_kib"].as_u64().unwrap() > 0, "{r}");
        assert!(r["rss_consumer_kib"].as_u64().unwrap() > 0, "{r}");
        let per = r["cpu_pct_per_ring"].as_f64().unwrap();
        let all = r["cpu_pct_at_rate"].as_f64().unwrap();
        assert!((per * rings as f64 - all).abs() < 1e-6, "{r}");
    }
    let header = o
        .stdout
        .lines()
        .find(|l| l.starts_with("transport"))
        .unwrap();
    for c in [
        "rings",
        "CPU%/ring",
        "RSS P MiB",
        "fds P",
        "fds C",
        "p99 us",
    ] {
        assert!(header.contains(c), "{c} missing: {header}");
    }
    let plot = std::fs::read_to_string(&svg).expect("the plot");
    assert!(plot.contains("against rings side by side"), "{plot}");
    assert!(shm_left("shmring-bench").is_empty());
}

#[test]
fn bad_scale_arguments_are_refused_before_anything_runs() {
    let dir = Scratch::new("scale-args");
    let json = dir.path("out.json");
    let j = json.to_str().unwrap();
    for (args, says) in [
        (
            &["--scale", "producers", "--counts", "0"][..],
            "--counts must list counts from 1 to 64",
        ),
        (
            &["--scale", "producers", "--counts", ""][..],
            "--counts must list counts from 1 to 64",
        ),
        (
            &["--scale", "producers", "--counts", "1,65"][..],
            "not \"1,65\"",
        ),
        (
            &["--scale", "rings", "--counts", "2,x"][..],
            "--counts must list counts from 1 to 64",
        ),
        (&["--scale", "rings", "--counts", "100"][..], "not \"100\""),
        (
            &["--scale", "producers", "--size", "0"][..],
            "--size must list record sizes",
        ),
        (
            &["--scale", "rings", "--processes"][..],
            "apply to --scale producers",
        ),
        (&["--counts", "4"][..], "apply to --scale only"),
        (
            &["--scale", "producers", "--transports", "wakeup"][..],
            "--scale has no wakeup row",
        ),
        (
            &["--scale", "producers", "--size", "20000000"][..],
            "cannot hold two --size records of 20000000 bytes",
        ),
    ] {
        let mut v = args.to_vec();
        v.extend(["--frames", "2", "--json", j]);
        let o = bench(&dir, &v);
        assert_eq!(o.code, Some(2), "{args:?}: {}\n{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(!json.exists(), "{args:?}: no run, no results");
    }
}
