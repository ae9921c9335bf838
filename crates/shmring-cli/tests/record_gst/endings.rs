//! How a recording ends: SIGINT, a full disk, a recorder killed mid-encode (the
//! next one finishes its files).

use super::*;

/// SIGINT while a participant is mid-stream: the file is finished (renamed, every
/// frame the recorder took in it).
#[test]
fn sigint_finishes_the_files() {
    let ring = ring_name("gst-sigint");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    fn fps30(_: u64) -> u64 {
        33_333_333
    }
    let source = Source {
        stream: 3,
        fps: (30, 1),
        interval: fps30,
        frames: 60,
        audio_step_ns: Some(at(10)),
        end: false,
    };
    let sent = produce(&ring.0, std::slice::from_ref(&source))[0];
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    let path = dir.path().join("stream-3.mp4");
    assert!(path.exists(), "finished and renamed: {err}");
    assert!(!dir.path().join("stream-3.mp4.part").exists());
    let received = done["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "video")
        .unwrap()["received"]
        .as_u64()
        .unwrap();
    assert_eq!(received, sent.frames, "{err}");
    let p = probe(&path).unwrap();
    assert_eq!(p[0].frames, received);
    assert_eq!(p[1].codec, "aac");
}

/// A small tmpfs mounted for one test, unmounted (and its directory removed) on
/// drop, even when the test fails.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(kib: u32) -> Option<SmallDisk> {
        let dir = std::env::temp_dir().join(format!("shmring-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The disk fills mid-recording: the recorder stops with the reason, and the file
/// it was writing plays up to its last whole fragment.
#[test]
fn a_full_disk_stops_the_recording_and_leaves_a_playable_file() {
    let Some(disk) = SmallDisk::mount(768) else {
        eprintln!("mounting a tmpfs is not permitted here: the full-disk case did not run");
        return;
    };
    let ring = ring_name("gst-full");
    let out = disk.0.join("rec");
    let mut rec = recorder(&ring, &out, &[]);
    fn noisy(_: u64) -> u64 {
        at(40)
    }
    // Ten minutes would need far more than the disk holds.
    let source = Source {
        stream: 4,
        fps: (25, 1),
        interval: noisy,
        frames: 25 * 600,
        audio_step_ns: Some(at(10)),
        end: true,
    };
    let ring_name = ring.0.clone();
    let producer = std::thread::spawn(move || {
        // The recorder stops reading when the disk is full: the producer's send
        // then fails, which ends the thread.
        std::panic::catch_unwind(|| produce(&ring_name, &[source])).is_ok()
    });
    let (code, err) = rec.wait();
    let _ = producer.join();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("No space left") || err.contains("space"),
        "{err}"
    );
    let part = out.join("stream-4.mp4.part");
    assert!(part.exists(), "{err}");
    let p = probe(&part).unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert_eq!(p[0].codec, "h264");
    assert!(p[0].frames >= 25, "a second of video at least: {p:?}");
}

/// `record --encode` killed with SIGKILL mid-recording leaves `stream-0.mp4.part`;
/// the next recorder on the same directory cuts it back to its last whole
/// fragment and names it `stream-0.mp4`, which plays.
#[test]
fn the_next_recorder_finishes_a_killed_encode() {
    let (ring, next) = (ring_name("gst-killed"), ring_name("gst-after-kill"));
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    fn fps25(_: u64) -> u64 {
        at(40)
    }
    // 20 s of capture at 4 times real time (an encoder of these frames keeps
    // up), not ended: the muxer writes a fragment a second, and its file sink
    // writes 64 KiB at a time.
    let source = Source {
        stream: 0,
        fps: (25, 1),
        interval: fps25,
        frames: 500,
        audio_step_ns: Some(at(10)),
        end: false,
    };
    produce_at(&ring.0, std::slice::from_ref(&source), Some(4.0));
    let part = dir.path().join("stream-0.mp4.part");
    // Wait for the writes to stop (the frames the encoder still holds stay there).
    let until = Instant::now() + PATIENCE;
    let mut last = (0, Instant::now());
    loop {
        let len = std::fs::metadata(&part).map_or(0, |m| m.len());
        if len != last.0 {
            last = (len, Instant::now());
        } else if len > 0 && last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        assert!(Instant::now() < until, "the encoder wrote nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    rec.kill();
    let mut again = recorder(&next, dir.path(), &["--seconds", "0.5"]);
    let (done, err) = again.finish("recorded");
    assert!(err.contains("finished 1 file(s)"), "{err}");
    assert!(!part.exists(), "{err}");
    let p = probe(&dir.path().join("stream-0.mp4")).unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert_eq!((p[0].codec.as_str(), p[1].codec.as_str()), ("h264", "aac"));
    assert!(p[0].frames >= 25, "a second at least: {p:?}");
    assert!(
        p[0].frames < 500,
        "the frames past the last whole fragment are cut: {p:?}"
    );
    assert_eq!(done["streams"].as_array().unwrap().len(), 0);
}
