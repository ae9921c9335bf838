//! Several readers on one ring from the command line: `record --tethered` beside
//! the ring's own recorder, `tap` (read-only, thumbnails), the tethered consumers
//! in `stat --json` and `top`, and the errors of each.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::{Address, Config, Consumer, ConsumerOptions, Listener, ListenerOptions, Meta};

mod common;
use common::{assert_fails_with, ring_name, run, run_line, Proc, Ring, PATIENCE};

/// `shmring record --create RING EXTRA` (the ring's own consumer), once its ring
/// exists.
fn owner(ring: &Ring, out: &Path, extra: &[&str]) -> Proc {
    let args = [
        "record",
        "--create",
        &ring.0,
        "--out",
        out.to_str().unwrap(),
    ];
    let p = Proc::spawn(&[&args[..], extra].concat());
    assert_eq!(p.expect("ready")["tethered"], false);
    p
}

/// `shmring stat --json RING`.
fn stat(ring: &Ring) -> Value {
    let o = run(&["stat", "--json", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `stat --json` once `done` holds (within PATIENCE).
fn stat_until(ring: &Ring, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + PATIENCE;
    loop {
        let s = stat(ring);
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < until, "never reached: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `shmring record --tethered RING` once it is ready (taken on by the ring's
/// consumer); its `ready` line.
fn tethered(ring: &Ring, out: &Path) -> (Proc, Value) {
    let p = Proc::spawn_line(&format!(
        "record --tethered {} --out {}",
        ring.0,
        out.display()
    ));
    let ready = p.expect("ready");
    assert_eq!(ready["tethered"], true);
    (p, ready)
}

/// Runs `shmring produce` into `ring` (`--ring NAME` or `--connect PATH`) to the
/// end; returns its `produced` line.
fn produce(ring: [&str; 2], video: &str, audio: &str, seconds: &str) -> Value {
    let args = [
        &["produce"][..],
        &ring,
        &["--video", video, "--audio", audio, "--seconds", seconds],
    ];
    Proc::spawn(&args.concat()).finish("produced").0
}

/// Stops a recorder with SIGINT; returns its `recorded` line and stderr.
fn finish(p: &mut Proc) -> (Value, String) {
    p.signal(libc::SIGINT);
    p.finish("recorded")
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_tethered_recorder_beside_the_owner_records_every_frame() {
    let ring = ring_name("tethered");
    let (own_dir, teth_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut own = owner(&ring, own_dir.path(), &[]);
    // Ready once the ring's consumer has taken it on: it reads every record after.
    let (mut teth, ready) = tethered(&ring, teth_dir.path());
    assert_eq!(stat(&ring)["tethered_consumers"], 1);

    let produced = produce(["--ring", &ring.0], "320x240@30", "48000x2", "1");
    let sent = n(&produced["video"][0]["sent"]) + n(&produced["audio"]["sent"]);
    assert!(sent > 0);
    // Each stream also ends with an end-of-stream record.
    let ends = [&produced["video"][0], &produced["audio"]]
        .iter()
        .filter(|v| v["ended"] == true)
        .count() as u64;
    assert_eq!(ends, 2);
    let sent = sent + ends;
    let s = stat_until(&ring, |s| {
        s["records_consumed"] == s["records_committed"]
            && s["tethers"][0]["records_consumed"] == s["records_committed"]
    });
    assert_eq!(n(&s["records_committed"]), sent);
    let t = &s["tethers"][0];
    assert_eq!((n(&t["lag_records"]), n(&t["lag_bytes"])), (0, 0), "{t}");
    assert_eq!(t["bytes_consumed"], s["bytes_consumed"]);
    assert_eq!(n(&t["pid"]), n(&ready["pid"]));

    // The owner stops; the tethered recorder ends by itself after it.
    let (ro, _) = finish(&mut own);
    assert_eq!(n(&ro["ring"]["records_consumed"]), sent);
    assert!(!ring.path().exists(), "the owner removes its ring");
    let (rt, err) = teth.finish("recorded");
    assert!(err.contains("as tethered consumer"), "{err}");
    assert!(err.contains("the ring's consumer ended"), "{err}");
    assert_eq!(n(&rt["ring"]["records_consumed"]), sent);
    assert_eq!(rt["ring"]["tether"]["line"], t["line"]);
    // Both wrote the same files, byte for byte.
    for f in ["video-0.y4m", "audio-0.wav"] {
        let a = std::fs::read(own_dir.path().join(f)).unwrap();
        let b = std::fs::read(teth_dir.path().join(f)).unwrap();
        assert!(a.len() > 1000, "{f}: {} bytes", a.len());
        assert!(a == b, "{f} differs");
    }
    let video = rt["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "video")
        .unwrap();
    assert_eq!(video["received"], produced["video"][0]["sent"]);
}

#[test]
fn stat_and_top_show_each_tethered_consumer_with_its_lag() {
    let ring = ring_name("lag");
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    // The stall limit is the ring's consumer's: far away, so nothing here is
    // detached however slowly the test runs.
    let opts = ConsumerOptions {
        tether_stall_limit: Duration::from_secs(3600),
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let reader = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    // The ring's consumer takes the reader on at its next look at the ring.
    assert!(consumer.try_next().unwrap().is_none());
    let mut producer = seg.producer().unwrap();
    for i in 0..5u8 {
        producer.send(&[i; 1000], Meta::new(0, 0)).unwrap();
    }
    for _ in 0..5 {
        drop(consumer.try_next().unwrap().unwrap());
    }
    for _ in 0..2 {
        drop(reader.try_next().unwrap().unwrap());
    }

    let s = stat(&ring);
    assert_eq!(s["tethered_consumers"], 1);
    let ts = s["tethers"].as_array().unwrap();
    assert_eq!(ts.len(), 1, "{s}");
    let t = &ts[0];
    assert_eq!(n(&t["pid"]), std::process::id() as u64);
    assert_eq!(t["requested"], false);
    assert_eq!((n(&t["records_consumed"]), n(&t["lag_records"])), (2, 3));
    assert!(n(&t["lag_bytes"]) > 0 && n(&t["bytes_consumed"]) > 0, "{t}");
    assert_eq!(n(&t["lost"]), 0);
    let line = n(&t["line"]);

    let o = run(&["top", "--json", "--interval", "0.1", "--ring", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["tethers"][0]["lag_records"], 3, "{rows:?}");
    let o = run(&["top", "--once", "--interval", "0.1", "--ring", &ring.0]);
    let table = String::from_utf8(o.stdout).unwrap();
    let want = format!(
        "{}: tethered line {line} pid {}: lag 3 records",
        ring.0,
        std::process::id()
    );
    assert!(table.contains(&want), "{want:?} not in\n{table}");
    assert!(
        table.lines().next().unwrap().contains("TETHERED"),
        "{table}"
    );
    let o = run(&["stat", "--count", "1", "--interval", "0.05", &ring.0]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains(&format!("tethered line {line} pid")),
        "{text}"
    );

    // Caught up: no lag, and as much read as the ring's consumer.
    for _ in 0..3 {
        drop(reader.try_next().unwrap().unwrap());
    }
    let s = stat(&ring);
    let t = &s["tethers"][0];
    assert_eq!((n(&t["records_consumed"]), n(&t["lag_records"])), (5, 0));
    assert_eq!(t["bytes_consumed"], s["bytes_consumed"]);
    drop(reader);
    assert_eq!(stat(&ring)["tethers"], serde_json::json!([]));
}

#[test]
fn stat_over_a_socket_shows_a_tethered_consumer_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ring.sock");
    let seg = Address::memfd("readers-sock", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        tether_stall_limit: Duration::from_secs(3600),
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let _listener = Listener::bind(&seg, &sock, ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let reader = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    assert!(consumer.try_next().unwrap().is_none());
    let mut producer = seg.producer().unwrap();
    for i in 0..4u8 {
        producer.send(&[i; 100], Meta::new(0, 0)).unwrap();
    }
    drop(reader.try_next().unwrap().unwrap());
    let o = run(&["stat", "--json", "--connect", sock.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &s["tethers"][0];
    assert_eq!(
        (n(&t["records_consumed"]), n(&t["lag_records"])),
        (1, 3),
        "{s}"
    );
    assert_eq!(n(&t["pid"]), std::process::id() as u64);
}

#[test]
fn tap_every_third_frame_writes_that_many_thumbnails() {
    let ring = ring_name("tap");
    let rec_dir = tempfile::tempdir().unwrap();
    let thumbs = tempfile::tempdir().unwrap();
    let out = thumbs.path().join("thumbs");
    let mut own = owner(&ring, rec_dir.path(), &[]);
    let mut tap = Proc::spawn_line(&format!(
        "tap {} --every 3 --kind video --count 4 --thumb-width 160 --out {}",
        ring.0,
        out.display()
    ));
    tap.expect("ready");
    // 30 frames of 640x360 and 100 audio packets: the tap takes 4 of every third
    // frame and stops by itself.
    produce(["--ring", &ring.0], "640x360@30", "48000x2", "1");
    let (t, err) = tap.finish("tapped");
    assert_eq!((n(&t["taken"]), n(&t["thumbnails"])), (4, 4), "{t}");
    assert_eq!(n(&t["delivered"]), 4);
    assert_eq!(t["ended_by"], "count");
    // Passed over: two of every three frames, and every audio packet seen.
    assert!(n(&t["filtered"]) >= 8, "{t}");
    assert!(err.contains("4 records taken"), "{err}");

    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = (1..=4).map(|i| format!("{i:06}-video-0.png")).collect();
    assert_eq!(names, want);
    for name in &names {
        let f = std::fs::File::open(out.join(name)).unwrap();
        let mut r = png::Decoder::new(std::io::BufReader::new(f))
            .read_info()
            .unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (160, 90), "{name}");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        // The test pattern is not one flat colour.
        assert!(buf.iter().any(|&b| b != buf[0]), "{name} is flat");
    }
    // The tap wrote nothing to the ring: it lists no reader but the recorder's,
    // which reads everything.
    let s = stat_until(&ring, |s| s["records_consumed"] == s["records_committed"]);
    assert_eq!(s["tethered_consumers"], 0);
    finish(&mut own);
}

#[test]
fn tap_observes_a_ring_served_on_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cam.sock");
    let sock_s = sock.to_str().unwrap();
    let out = dir.path().join("rec");
    let mut own = Proc::spawn(&["record", "--listen", sock_s, "--out", out.to_str().unwrap()]);
    own.expect("ready");
    let mut tap = Proc::spawn_line(&format!("tap --connect {} --kind audio --count 5", sock_s));
    tap.expect("ready");
    produce(["--connect", sock_s], "none", "48000x2", "0.5");
    let (t, _) = tap.finish("tapped");
    assert_eq!((n(&t["taken"]), n(&t["thumbnails"])), (5, 0), "{t}");
    finish(&mut own);
}

#[test]
fn a_stopped_tethered_recorder_is_expelled_and_says_so() {
    let ring = ring_name("detach");
    let (own_dir, teth_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut own = owner(&ring, own_dir.path(), &["--tether-stall-ms", "50"]);
    let (mut teth, _) = tethered(&ring, teth_dir.path());
    teth.signal(libc::SIGSTOP);
    produce(["--ring", &ring.0], "320x240@30", "none", "0.3");
    // The ring's consumer expels the reader that stopped releasing.
    stat_until(&ring, |s| s["tethers_detached"] == 1);
    teth.signal(libc::SIGCONT);
    // Its files are finished and its summary given all the same.
    teth.expect("recorded");
    let (code, err) = teth.wait();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .contains("this tethered consumer was detached"),
        "{err}"
    );
    finish(&mut own);
}

#[test]
fn readers_fail_cleanly_on_a_ring_without_consumer_or_no_ring() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let out_s = out.to_str().unwrap();

    // A ring whose recorder was killed: no live consumer.
    let stale = ring_name("stale");
    {
        let mut rec = Proc::spawn(&["record", "--create", &stale.0, "--out", out_s]);
        rec.expect("ready");
        rec.kill();
    }
    std::fs::remove_dir_all(&out).unwrap();
    let o = run(&["record", "--tethered", &stale.0, "--out", out_s]);
    assert_fails_with(&o, 1, &["has no live consumer", &stale.0]);
    assert!(!out.exists(), "a failed start leaves no directory behind");

    // A file that is no ring.
    let garbage = ring_name("garbage");
    std::fs::write(garbage.path(), vec![0x5au8; 65536]).unwrap();
    let o = run(&["record", "--tethered", &garbage.0, "--out", out_s]);
    assert_fails_with(&o, 1, &["not a shmring ring"]);
    let o = run(&["tap", &garbage.0]);
    assert_fails_with(&o, 1, &["not a shmring ring"]);

    // No such ring.
    let missing = ring_name("missing");
    let o = run(&["tap", &missing.0, "--count", "1", "--out", out_s]);
    assert_fails_with(&o, 1, &["does not exist"]);
    assert!(!out.exists(), "a failed start leaves no directory behind");
    let o = run(&["record", "--tethered", &missing.0, "--out", out_s]);
    assert_fails_with(&o, 1, &["does not exist"]);

    // Bad arguments.
    for (args, needle) in [
        (&["tap", "x", "--every", "0"][..], "--every 0"),
        (&["tap", "x", "--count", "0"][..], "--count 0"),
        (&["tap", "x", "--seconds", "-1"][..], "--seconds -1"),
        (&["tap", "x", "--thumb-width", "0"][..], "--thumb-width 0"),
        (
            &[
                "record",
                "--create",
                "x",
                "--out",
                out_s,
                "--tether-stall-ms",
                "0",
            ][..],
            "--tether-stall-ms 0",
        ),
    ] {
        // One line naming the option and the value refused.
        let (option, value) = needle.split_once(' ').unwrap();
        let o = run(args);
        assert_fails_with(&o, 2, &[option, value]);
    }
    assert!(!out.exists());
}

#[test]
fn a_tethered_recorder_is_refused_when_every_line_is_taken() {
    let ring = ring_name("full");
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let _consumer = seg.consumer().unwrap();
    let mut lines = Vec::new();
    let err = loop {
        match Consumer::tethered(seg.clone(), ConsumerOptions::default()) {
            Ok(c) => lines.push(c),
            Err(e) => break e,
        }
        assert!(lines.len() <= 64, "no end to tether lines");
    };
    assert!(matches!(err, shmring::Error::NoTetherLine { .. }), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let o = run_line(&format!(
        "record --tethered {} --out {}",
        ring.0,
        dir.path().display()
    ));
    assert_fails_with(&o, 1, &["tethered consumer lines are in use"]);
}
