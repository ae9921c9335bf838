//! A ring's life as an operator sees it: stale rings after SIGKILL (`rm`,
//! `--refuse-stale`), a producer whose recorder is gone, `produce --seconds`, and
//! `demo`.

use super::*;

#[test]
fn a_stale_ring_is_named_removed_by_rm_or_replaced() {
    let ring = stale_ring("stale");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new").join("out");
    let out_s = out.to_str().unwrap();
    // Kept when asked to: said, with the ways out.
    assert_fails(
        &run(&[
            "record",
            "--create",
            &ring.0,
            "--out",
            out_s,
            "--refuse-stale",
        ]),
        1,
        &[
            &ring.0,
            "already exists but its consumer is gone",
            &format!("shmring rm {}", ring.0),
            "--refuse-stale",
        ],
    );
    assert!(
        !dir.path().join("new").exists(),
        "a failed record leaves no empty directories"
    );

    // Creating takes the name over.
    let mut rec = Proc::spawn_line(&format!("record --create {} --out {}", ring.0, out_s));
    rec.expect("ready");
    // Now the ring is in use: rm and creating refuse.
    assert_fails(&run(&["rm", &ring.0]), 1, &[&ring.0, "consumer is alive"]);
    assert_fails(
        &run_line(&format!("record --create {} --out {}", ring.0, out_s)),
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
        &run_line(&format!("record --create {} --out {}", ring.0, out_s)),
        1,
        &[&ring.0, "already exists", "not made by shmring"],
    );
    assert!(ring.path().exists());
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
