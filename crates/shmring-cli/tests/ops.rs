//! Operator tools and first-use errors: `top --once/--json` over rings in several
//! states (named, and served on sockets), `stat --prometheus`, `rm`, stale rings after SIGKILL, and the messages
//! and exit codes of bad input. (The Prometheus output is also parsed by a real
//! parser in python/tests/test_cli_metrics.py.)

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::handoff::{Listener, ListenerOptions};
use shmring::{Address, Config, Consumer, ConsumerOptions, Meta, Segment, Snapshot};

mod common;

use common::{assert_fails_with as assert_fails, run, run_line, Proc, Ring, PATIENCE};

/// A unique ring name for these tests, removed from /dev/shm on drop.
fn new_ring(tag: &str) -> Ring {
    Ring::new("opstest", tag)
}

/// The prefix every ring of this test process starts with.
fn prefix() -> String {
    format!("shmring-opstest-{}-", std::process::id())
}

fn start_recorder(ring: &str, out: &Path) -> Proc {
    let rec = Proc::spawn_line(&format!(
        "record --create {} --out {} --progress",
        ring,
        out.display()
    ));
    assert_eq!(rec.expect("ready")["ring"], ring);
    rec
}

/// A recorder killed with SIGKILL: its ring stays behind with no consumer.
fn stale_ring(tag: &str) -> Ring {
    let ring = new_ring(tag);
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, dir.path());
    rec.kill();
    assert!(ring.path().exists(), "a killed recorder leaves its ring");
    ring
}

fn by_ring<'a>(rows: &'a [Value], ring: &Ring) -> &'a Value {
    rows.iter()
        .find(|r| r["ring"] == ring.0.as_str())
        .unwrap_or_else(|| panic!("no row for {}: {rows:?}", ring.0))
}

/// `stat` reads the ring at `address` and `produce` writes into it.
fn stat_and_produce(address: &str) {
    for o in [
        run(&["stat", "--json", address]),
        run_line(&format!(
            "produce --ring {address} --video 64x48@30 --seconds 0.1"
        )),
    ] {
        assert!(
            o.status.success(),
            "{address}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The named ring `ring` (1 MiB) made here, with its consumer and a producer that
/// sent `n` records of `body` (stream 0, kind 0).
fn with_records(
    ring: &Ring,
    n: usize,
    body: &[u8],
) -> (std::sync::Arc<Segment>, Consumer, shmring::Producer) {
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut producer = seg.producer().unwrap();
    for _ in 0..n {
        producer.send(body, Meta::new(0, 0)).unwrap();
    }
    (seg, consumer, producer)
}

#[test]
fn top_shows_every_ring_and_the_error_of_each_bad_one_and_no_other_file() {
    // Healthy: a consumer in this process, a producer thread writing throughout.
    let healthy = new_ring("healthy");
    let (seg, consumer, producer) = with_records(&healthy, 10, &[7u8; 1000]);
    for _ in 0..4 {
        drop(consumer.try_next().unwrap().unwrap());
    }
    let busy = Arc::new(AtomicBool::new(true));
    let extra = Address::named(&healthy.0).open().unwrap();
    let writer = {
        let busy = busy.clone();
        std::thread::spawn(move || {
            let mut p = extra.producer().unwrap();
            let mut n = 0u64;
            while busy.load(Ordering::Relaxed) {
                // The consumer above does not read: keep room for the 6 unread.
                if p.try_reserve(64)
                    .is_ok_and(|r| r.commit(Meta::new(1, 0)).is_ok())
                {
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    // Garbage: random-looking bytes.
    let garbage = new_ring("garbage");
    let bytes: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(garbage.path(), bytes).unwrap();
    // Another program's small file.
    let small = new_ring("small");
    std::fs::write(small.path(), b"some other program's state").unwrap();
    // Dead consumer: its recorder was killed.
    let dead = stale_ring("dead");
    // Truncated by another program after it was made.
    let cut = new_ring("cut");
    let c = Address::create(&cut.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    c.persist();
    drop(c);
    std::fs::OpenOptions::new()
        .write(true)
        .open(cut.path())
        .unwrap()
        .set_len(4096)
        .unwrap();

    // The truncated ring's row has an error: the report is whole, the exit status 1.
    let o = run(&["top", "--json", "--interval", "0.3", "--prefix", &prefix()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("1 of 3 rings could not be read"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let h = by_ring(&rows, &healthy);
    assert_eq!(h["error"], Value::Null);
    assert_eq!(h["stats"]["consumer_attached"], true);
    assert_eq!(h["stats"]["records_consumed"], 4);
    assert!(h["stats"]["records_committed"].as_u64().unwrap() >= 10);
    assert_eq!(h["stats"]["producers"], 2);
    assert_eq!(h["stats"]["capacity"], 1 << 20);
    assert!(h["records_per_s"].as_f64().unwrap() > 0.0, "{h}");
    assert!(h["mb_per_s"].as_f64().unwrap() > 0.0, "{h}");
    // Files that are not shmring rings are not listed.
    for other in [&garbage, &small] {
        assert!(
            rows.iter().all(|r| r["ring"] != other.0.as_str()),
            "{} listed: {rows:?}",
            other.0
        );
    }
    let d = by_ring(&rows, &dead);
    assert_eq!(d["error"], Value::Null);
    assert_eq!(d["stats"]["consumer_attached"], false);
    let t = by_ring(&rows, &cut);
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("the file is 4096 bytes but its header describes a ring of"),
        "{t}"
    );

    // The plain table: one row per ring, errors on their own row.
    let o = run(&["top", "--once", "--interval", "0.1", "--prefix", &prefix()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let table = String::from_utf8(o.stdout).unwrap();
    let line = |r: &Ring| {
        table
            .lines()
            .find(|l| l.starts_with(&r.0))
            .unwrap_or_else(|| panic!("no line for {} in\n{table}", r.0))
            .to_string()
    };
    assert!(table.starts_with("RING"), "{table}");
    assert!(line(&healthy).ends_with("alive"), "{table}");
    assert!(line(&dead).ends_with("gone"), "{table}");
    assert!(line(&cut).contains("error: "), "{table}");
    assert!(
        !table.contains(&garbage.0) && !table.contains(&small.0),
        "{table}"
    );

    // Named, a file that is not a ring says so.
    let o = run(&["top", "--json", "--interval", "0.1", "--ring", &garbage.0]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let g = by_ring(&rows, &garbage);
    assert!(
        g["error"]
            .as_str()
            .unwrap()
            .contains("not a shmring ring (bad magic"),
        "{g}"
    );

    busy.store(false, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    drop((consumer, producer, seg));
}

/// A Unix socket that is not a shmring consumer: it answers every connection with
/// an HTTP error and hangs up. Stopped on drop.
struct PlainSocket {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PlainSocket {
    fn bind(path: &Path) -> PlainSocket {
        use std::io::Write;
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let mut reply = b"HTTP/1.0 400 Bad Request\r\n\r\n".to_vec();
                        reply.resize(256, b' ');
                        let _ = c.write_all(&reply);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        PlainSocket {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PlainSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The row of the ring served on `sock`.
fn by_socket<'a>(rows: &'a [Value], sock: &Path) -> &'a Value {
    let name = sock.display().to_string();
    rows.iter()
        .find(|r| r["ring"] == name.as_str())
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

#[test]
fn top_observes_rings_on_sockets_beside_named_rings() {
    let dir = tempfile::tempdir().unwrap();
    // A named ring with a consumer, beside the sockets.
    let named = new_ring("beside");
    let nseg = Address::create(&named.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let _nconsumer = nseg.consumer().unwrap();

    // Served on a socket by this process: a producer holds a reservation open while
    // another sends 10 records, which the consumer delivers past it (overtaking).
    let live = dir.path().join("live.sock");
    let seg = Address::memfd("ops-live", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            overtake_after: Some(Duration::from_millis(20)),
            liveness_interval: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    let listener = Listener::bind(&seg, &live, ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let mut video = seg.producer().unwrap();
    let mut audio = seg.producer().unwrap();
    let video_slot = video.slot();
    let held = video.reserve(10_000).unwrap();
    for i in 0..10u8 {
        audio.send(&[i; 1000], Meta::new(2, 0)).unwrap();
    }
    for _ in 0..10 {
        let f = consumer.next_timeout(Some(PATIENCE)).unwrap();
        assert_eq!(f.expect("delivered past the held claim").stream(), 2);
    }

    // A socket whose consumer was killed: the file stays, nothing accepts.
    let dead = dir.path().join("dead.sock");
    let out = tempfile::tempdir().unwrap();
    let mut rec = Proc::spawn_line(&format!(
        "record --listen {} --out {} --progress",
        dead.display(),
        out.path().display()
    ));
    rec.expect("ready");
    rec.kill();
    assert!(dead.exists(), "a killed recorder leaves its socket");

    // A socket that is not a shmring consumer at all.
    let plain = dir.path().join("plain.sock");
    let _plain = PlainSocket::bind(&plain);

    let sockets = dir.path().to_str().unwrap();
    let o = run_line(&format!(
        "top --json --interval 0.1 --ring {} --sockets {}",
        named.0, sockets
    ));
    // Two rows have errors: the report is whole, the exit status 1.
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let n = by_ring(&rows, &named);
    assert_eq!(
        (n["source"].as_str(), &n["error"]),
        (Some("shm"), &Value::Null)
    );
    let l = by_socket(&rows, &live);
    assert_eq!(l["source"], "socket");
    assert_eq!(l["error"], Value::Null, "{l}");
    let st = &l["stats"];
    assert_eq!(st["records_committed"], 10);
    assert_eq!(st["records_consumed"], 10);
    assert_eq!(st["consumer_attached"], true);
    assert_eq!(st["stalled_claims"], 1, "{st}");
    assert!(st["oldest_pending_age_ns"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["oldest_pending_slot"], video_slot);
    assert_eq!(st["oldest_pending_pid"], std::process::id());
    let d = by_socket(&rows, &dead)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(d.starts_with("consumer gone"), "{d}");
    let p = by_socket(&rows, &plain)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(p.contains("not a shmring hand-off reply"), "{p}");

    // The plain table, sorted by the oldest claim: the held one comes first, with
    // its slot and pid; the errors are on their own rows.
    let o = run_line(&format!(
        "top --once --interval 0.1 --sort claim --ring {} --sockets {}",
        named.0, sockets
    ));
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let table = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("RESETS") && lines[0].contains("OLDEST CLAIM"),
        "{table}"
    );
    assert!(lines[1].starts_with(&live.display().to_string()), "{table}");
    let claim = format!("s slot {video_slot} pid {}", std::process::id());
    assert!(lines[1].contains(&claim), "{claim:?} not in\n{table}");
    assert!(lines[1].ends_with("alive"), "{table}");
    let row = |p: &Path| {
        let name = p.display().to_string();
        lines
            .iter()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| panic!("no line for {name} in\n{table}"))
            .to_string()
    };
    assert!(row(&dead).contains("error: consumer gone"), "{table}");
    assert!(row(&plain).contains("error: hand-off over"), "{table}");

    held.commit(Meta::new(1, 0)).unwrap();
    drop(listener);
    assert!(!live.exists(), "the listener removes its socket");
}

#[test]
fn top_says_a_ring_that_never_existed_is_not_found_and_exits_1() {
    let never = new_ring("never");
    let o = run(&["top", "--json", "--interval", "0.05", "--ring", &never.0]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let e = by_ring(&rows, &never)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        format!("not found (no /dev/shm/{})", never.0),
        "{rows:?}"
    );
    let o = run(&["top", "--once", "--interval", "0.05", "--ring", &never.0]);
    assert_eq!(o.status.code(), Some(1));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("error: not found"), "{table}");
    // Every ring readable: status 0.
    let (_seg, _c, _p) = with_records(&never, 1, b"x");
    let o = run(&["top", "--once", "--interval", "0.05", "--ring", &never.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_negative_or_fractional_number_names_the_option_and_its_range() {
    for (line, option, range) in [
        (
            "record --create x --out /nonexistent --fps -30",
            "--fps",
            "from 1 to 4294967295",
        ),
        (
            "record --create x --out /nonexistent --capacity-mib -1",
            "--capacity-mib",
            "from 1 to",
        ),
        (
            "record --create x --out /nonexistent --capacity-mib 1.5",
            "--capacity-mib",
            "from 1 to",
        ),
        ("tap x --every -1", "--every", "from 1 to 4294967295"),
        ("tap x --stream -2", "--stream", "from 0 to 4294967295"),
        ("produce --ring x --block-ms -5", "--block-ms", "from 0 to"),
        ("produce --ring x --streams -1", "--streams", "from 0 to"),
        ("stat x --count -1", "--count", "from 0 to"),
    ] {
        let o = run_line(line);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{line}: {err}");
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            err.contains(&format!("invalid value '{value}' for '{option}"))
                && err.contains(&format!("expected a whole number {range}")),
            "{line}: {err}"
        );
    }
    // A negative number of seconds is a value too (and refused by its own check).
    let o = run_line("top --once --interval -1");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--interval -1"));
}

#[test]
fn a_named_ring_of_another_user_says_how_to_share_a_ring() {
    let ring = new_ring("perm");
    let (_seg, _c, _p) = with_records(&ring, 1, b"x");
    // As root, another uid; otherwise a file this user may not open.
    // SAFETY: geteuid has no preconditions.
    let o = if unsafe { libc::geteuid() } == 0 {
        std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(common::EXE)
            .args(["stat", "--json", &ring.0])
            .output()
            .unwrap()
    } else {
        std::fs::set_permissions(
            ring.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o000),
        )
        .unwrap();
        run(&["stat", "--json", &ring.0])
    };
    assert_fails(
        &o,
        1,
        &[
            &ring.0,
            "Permission denied",
            "--listen",
            "--allow-uid",
            "--connect",
        ],
    );
}

#[test]
fn top_without_a_terminal_says_to_use_once() {
    assert_fails(&run(&["top"]), 2, &["needs a terminal", "--once"]);
    assert_fails(
        &run(&["top", "--once", "--interval", "0"]),
        2,
        &["--interval 0"],
    );
}

/// `promtool check metrics` (Prometheus' own linter) accepts `text`. promtool comes
/// from $PROMTOOL, PATH, or target/tools/bin (where `scripts/deps.sh test` puts it).
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/bin/promtool");
    let exe = std::env::var_os("PROMTOOL")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("promtool"))
                    .find(|f| f.is_file())
            })
        })
        .or_else(|| tools.is_file().then_some(tools))
        .expect("promtool not found: run scripts/deps.sh test (or set PROMTOOL)");
    let mut child = std::process::Command::new(&exe)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn stat_prometheus_prints_the_cores_counters_with_the_ring_label() {
    let ring = new_ring("prom");
    let (seg, consumer, producer) = with_records(&ring, 5, &[1u8; 100]);
    drop(consumer.try_next().unwrap().unwrap());
    let o = run(&["stat", "--prometheus", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let label = format!("{{ring=\"{}\"}}", ring.0);
    for (name, v) in [
        ("shmring_records_committed_total", 5),
        ("shmring_bytes_committed_total", 500),
        ("shmring_records_consumed_total", 1),
        ("shmring_records_in_flight", 4),
        ("shmring_consumer_attached", 1),
        ("shmring_capacity_bytes", 1 << 20),
        ("shmring_ring_readable", 1),
    ] {
        let want = format!("{name}{label} {v}\n");
        assert!(text.contains(&want), "{want:?} not in\n{text}");
    }
    // Every counter and gauge of the core is there, with its type; a field in
    // nanoseconds in seconds, Prometheus' base unit.
    for f in seg.stats().fields() {
        let ty = match f.kind {
            shmring::FieldKind::Counter => "counter",
            _ => "gauge",
        };
        let name = match f.unit {
            shmring::Field::NANOSECONDS => format!("{}_seconds", &f.name[..f.name.len() - 3]),
            // A gauge in bytes says so in its name, as Prometheus names units.
            shmring::Field::BYTES
                if f.kind == shmring::FieldKind::Gauge && !f.name.ends_with("_bytes") =>
            {
                format!("{}_bytes", f.name)
            }
            _ => f.name.to_string(),
        };
        // Prometheus' text format: a counter's family is named as its samples.
        let name = match f.kind {
            shmring::FieldKind::Counter => format!("{name}_total"),
            _ => name,
        };
        assert!(
            text.contains(&format!("# TYPE shmring_{name} {ty}\n")),
            "{name} missing"
        );
        assert!(text.contains(&format!("# HELP shmring_{name} ")), "{name}");
    }
    assert!(
        text.contains(&format!("shmring_oldest_pending_age_seconds{label} 0\n")),
        "{text}"
    );
    assert!(!text.contains("_ns"), "{text}");
    promtool_accepts(&text);
    drop((consumer, producer, seg));

    let garbage = new_ring("promgarbage");
    std::fs::write(garbage.path(), vec![0xa5u8; 8192]).unwrap();
    assert_fails(
        &run(&["stat", "--prometheus", &garbage.0]),
        1,
        &[&garbage.0, "not a shmring ring"],
    );
}

#[test]
fn stat_prometheus_serves_every_tethered_consumer_by_line() {
    let ring = new_ring("promtether");
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let tethered = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    assert!(
        consumer.try_next().unwrap().is_none(),
        "adopts the tethered consumer"
    );
    let mut producer = seg.producer().unwrap();
    for _ in 0..3 {
        producer.send(&[1u8; 100], Meta::new(0, 0)).unwrap();
    }
    drop(tethered.try_next().unwrap().unwrap());
    let o = run(&["stat", "--prometheus", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("line=\"0\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} of line 0 in\n{text}"))
    };
    assert_eq!(sample("shmring_tether_records_consumed_total"), 1);
    assert_eq!(sample("shmring_tether_lag_records"), 2);
    assert_eq!(sample("shmring_tether_requested"), 0);
    // Every field of the core's list but the line, which is the label.
    for f in tethered.segment().tethers()[0].fields() {
        let family = match f.kind {
            shmring::FieldKind::Counter => format!("shmring_tether_{}_total", f.name),
            _ => format!("shmring_tether_{}", f.name),
        };
        assert_eq!(
            text.contains(&format!("# TYPE {family} ")),
            f.name != "line",
            "{family}"
        );
    }
    promtool_accepts(&text);
}

#[test]
fn stat_on_random_bytes_says_not_a_ring() {
    let ring = new_ring("random");
    let bytes = shmring_testkit::Rng(7).bytes(1 << 20);
    std::fs::write(ring.path(), bytes).unwrap();
    for args in [&["stat", &ring.0][..], &["stat", "--json", &ring.0][..]] {
        let o = run(args);
        assert_fails(&o, 1, &[&ring.0, "not a shmring ring (bad magic"]);
        assert!(o.stdout.is_empty(), "no counters printed");
    }
}

#[test]
fn a_stale_ring_is_named_removed_by_rm_or_replaced() {
    let ring = stale_ring("stale");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new").join("out");
    let out_s = out.to_str().unwrap();
    assert_fails(
        &run(&["record", "--create", &ring.0, "--out", out_s]),
        1,
        &[
            &ring.0,
            "already exists but its owner is gone",
            &format!("shmring rm {}", ring.0),
            "--replace-stale",
        ],
    );
    assert!(
        !dir.path().join("new").exists(),
        "a failed record leaves no empty directories"
    );

    // --replace-stale takes the name over.
    let mut rec = Proc::spawn_line(&format!(
        "record --create {} --out {} --replace-stale",
        ring.0, out_s
    ));
    rec.expect("ready");
    // Now the ring is in use: rm and --replace-stale refuse.
    assert_fails(&run(&["rm", &ring.0]), 1, &[&ring.0, "consumer is alive"]);
    assert_fails(
        &run_line(&format!(
            "record --create {} --out {} --replace-stale",
            ring.0, out_s
        )),
        1,
        &[&ring.0, "already exists and its consumer is alive"],
    );
    assert!(ring.path().exists());
    rec.kill();

    // Killed again: rm removes it.
    let o = run(&["rm", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("removed ring"));
    assert!(!ring.path().exists());
    assert_fails(&run(&["rm", &ring.0]), 1, &[&ring.0, "does not exist"]);

    // Not a ring: left alone.
    std::fs::write(ring.path(), b"not a ring").unwrap();
    assert_fails(
        &run(&["rm", &ring.0]),
        1,
        &[&ring.0, "not a shmring ring", "not removed"],
    );
    assert_fails(
        &run_line(&format!(
            "record --create {} --out {} --replace-stale",
            ring.0, out_s
        )),
        1,
        &[&ring.0, "already exists", "not made by shmring"],
    );
    assert!(ring.path().exists());
}

#[test]
fn seconds_are_range_checked_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let out_s = out.to_str().unwrap();
    let ring = new_ring("seconds");
    for bad in ["-1", "0", "nan"] {
        assert_fails(
            &run_line(&format!(
                "record --create {} --out {} --seconds {}",
                ring.0, out_s, bad
            )),
            2,
            &[
                &format!("--seconds {}", bad.replace("nan", "NaN")),
                "expected more than 0",
            ],
        );
        assert_fails(
            &run(&["produce", "--ring", &ring.0, "--seconds", bad]),
            2,
            &["--seconds", "expected more than 0"],
        );
        assert_fails(
            &run(&["demo", "--out", out_s, "--seconds", bad]),
            2,
            &["--seconds", "expected more than 0"],
        );
    }
    assert!(!out.exists());
    assert!(!ring.path().exists());
}

#[test]
fn video_sizes_say_which_part_is_wrong() {
    for (video, needle) in [
        (
            "100000x100000@30",
            "width \"100000\" is not a whole number from 1 to 16384",
        ),
        (
            "1920x0@30",
            "height \"0\" is not a whole number from 1 to 16384",
        ),
        (
            "1920x1080@0",
            "frame rate \"0\" is not a whole number from 1 to 1000",
        ),
        ("1920x1080@fast", "frame rate \"fast\""),
        ("1920x1080", "expected WIDTHxHEIGHT@FPS"),
        ("32x8@30", "too small to carry the frame number"),
    ] {
        assert_fails(
            &run(&["produce", "--ring", "x", "--video", video]),
            2,
            &[&format!("--video {video:?}"), needle],
        );
    }
}

#[test]
fn capacity_errors_speak_mib() {
    let ring = new_ring("mib");
    let dir = tempfile::tempdir().unwrap();
    let o = run_line(&format!(
        "record --capacity-mib 12 --create {} --out {}",
        ring.0,
        dir.path().display()
    ));
    assert_fails(
        &o,
        2,
        &["--capacity-mib 12", "a power of two from 8 to 2048 MiB"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("bytes"), "{err}");
}

#[test]
fn the_producer_stops_when_the_recorder_is_gone() {
    let ring = new_ring("gone");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, dir.path());
    let mut prod = Proc::spawn_line(&format!(
        "produce --ring {} --video 320x240@30 --audio none --seconds 600",
        ring.0
    ));
    let until = Instant::now() + PATIENCE;
    while rec.expect("progress")["video_frames"].as_u64().unwrap() < 3 {
        assert!(Instant::now() < until);
    }
    rec.kill();
    let produced = prod.expect("produced");
    let (code, err) = prod.wait();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("has no live consumer any more"), "{err}");
    let st = Address::named(&ring.0).open().unwrap().stats();
    let v = &produced["video"][0];
    // Everything counted as sent was committed while the recorder lived, and the
    // producer stopped at once: it did not fill the ring for nobody.
    assert_eq!(v["sent"].as_u64().unwrap(), st.records_committed);
    assert_eq!(st.drops_full, 0);
    assert!(v["sent"].as_u64().unwrap() < 600 * 30);
    // And a ring without a consumer is refused from the start.
    assert_fails(
        &run(&["produce", "--ring", &ring.0, "--seconds", "1"]),
        1,
        &[&ring.0, "no live consumer", "shmring rm"],
    );
}

#[test]
fn produce_seconds_is_wall_time() {
    let ring = new_ring("wall");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, dir.path());
    // 1080p at 1000 fps for 0.5 s: 500 frames are due. Whether this machine draws
    // them all in time or not, every due frame is either attempted or counted as
    // missed, and the run ends at 0.5 s of wall time either way.
    let mut prod = Proc::spawn_line(&format!(
        "produce --ring {} --video 1920x1080@1000 --audio none --seconds 0.5",
        ring.0
    ));
    let produced = prod.expect("produced");
    let (code, err) = prod.wait();
    assert_eq!(code, Some(0), "{err}");
    let v = &produced["video"][0];
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(n("attempted") + n("missed"), 500, "{v}");
    // Frames not made in time are said, never silently dropped.
    assert_eq!(
        n("missed") > 0,
        err.contains("not made in time"),
        "{v} {err}"
    );
    rec.kill();
}

#[test]
fn demo_says_where_it_writes_and_what_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo-out");
    let args = [
        "demo",
        "--seconds",
        "0.3",
        "--video",
        "320x240@30",
        "--out",
        out.to_str().unwrap(),
    ];
    let first = run(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = String::from_utf8(first.stdout).unwrap();
    let announce = text.lines().next().unwrap();
    assert!(
        announce.contains(&format!("writing about 1.1 MB into {}", out.display()))
            && announce.contains("--out DIR")
            && announce.contains("make demo DEMO_OUT=DIR"),
        "{text}"
    );
    assert!(!text.contains("replacing"), "{text}");
    let second = run(&args);
    assert!(second.status.success());
    let text = String::from_utf8(second.stdout).unwrap();
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains("replacing the previous run's audio-0.wav, video-0.y4m"),
        "{text}"
    );
}

#[test]
fn exporter_that_cannot_listen_says_where() {
    assert_fails(
        &run(&["exporter", "--listen", "127.0.0.1:99999"]),
        1,
        &["cannot listen on 127.0.0.1:99999"],
    );
}

#[test]
fn every_command_takes_a_ring_address() {
    let ring = new_ring("address");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, &dir.path().join("named"));
    let forms = [
        ring.0.clone(),
        format!("shm:{}", ring.0),
        format!("/dev/shm/{}", ring.0),
    ];
    for text in &forms {
        stat_and_produce(text);
    }
    rec.kill();

    // A ring served on a socket, by unix:PATH and by its path.
    let sock = dir.path().join("ring.sock");
    let s = sock.to_str().unwrap();
    let listen = Proc::spawn(&[
        "record",
        "--listen",
        s,
        "--out",
        dir.path().join("sock").to_str().unwrap(),
    ]);
    listen.expect("ready");
    for text in [format!("unix:{s}"), s.to_string()] {
        stat_and_produce(&text);
    }
    drop(listen);

    // Bad text: what is wrong, and which forms there are.
    assert_fails(
        &run(&["stat", "fd:3,x"]),
        1,
        &["\"x\" is not a descriptor number", "unix:PATH"],
    );
    assert_fails(
        &run(&["produce", "--ring", "cam:0", "--seconds", "0.1"]),
        2,
        &["unknown form \"cam\"", "shm:cam:0"],
    );
    assert_fails(&run(&["stat", "create:x"]), 1, &["reads an existing ring"]);
}

#[test]
fn stat_json_has_a_schema_version_and_its_keys_are_documented() {
    let ring = new_ring("schema");
    let (seg, _consumer, _producer) = with_records(&ring, 2, b"xy");
    let o = run(&["stat", "--json", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema_version"], 1, "{v}");
    assert_eq!(v["ring"], ring.0.as_str());
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/OPERATIONS.md"),
    )
    .unwrap();
    let schema = doc
        .split("### The schema of `stat --json`")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/OPERATIONS.md has the schema of stat --json");
    let tether_keys: Vec<&str> = shmring::TetherInfo::default()
        .fields()
        .map(|f| f.name)
        .collect();
    for key in v
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .chain(seg.stats().fields().map(|f| f.name))
        .chain(tether_keys)
    {
        assert!(
            schema.contains(&format!("`{key}`")),
            "{key} is not in the schema of docs/OPERATIONS.md"
        );
    }
}

#[test]
fn a_ring_too_big_for_dev_shm_is_refused_at_once_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let mut cmd = match shmring_testkit::small_shm::command(20, 60, common::EXE) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED a_ring_too_big_for_dev_shm_is_refused_at_once_saying_why: {why}");
            return;
        }
    };
    // /dev/shm is 20 MiB: a 64 MiB ring does not fit.
    let o = cmd
        .args([
            "record",
            "--create",
            "big",
            "--capacity-mib",
            "64",
            "--out",
            &out,
        ])
        .args(["--seconds", "5"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_fails(
        &o,
        1,
        &[
            "cannot create ring \"big\"",
            "not enough room in /dev/shm",
            "needs 64.",
            "20.0 MiB free of 20.0 MiB",
            "--shm-size",
            "medium: Memory",
        ],
    );
}
