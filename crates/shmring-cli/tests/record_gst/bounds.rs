//! The encoder's bounds: files per stream, frame rates it takes, and an encoder
//! that falls behind (it drops frames, never holds the ring).

use super::*;

/// A stream whose frames alternate between two sizes makes at most the recorder's
/// parts per stream, not a file per frame; the frames past them are counted, and
/// every file it made plays.
#[test]
fn encode_bounds_its_files_per_stream() {
    let ring = ring_name("gst-parts");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    let (seg, mut p) = blocking_producer(&ring);
    let (a, b) = (video_of(64, 48, (30, 1)), video_of(96, 64, (30, 1)));
    let t0 = shmring::now_ns();
    for i in 0..300u64 {
        let f = if i % 2 == 0 { &a } else { &b };
        let ts = t0 + i * 33_333_333;
        p.send(f, Meta::new(0, kind::VIDEO).with_timestamp(ts))
            .unwrap();
    }
    p.end_stream(0, kind::VIDEO).unwrap();
    drop((p, seg));
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    let files = mp4s(dir.path());
    let parts = done["parts_per_stream"].as_u64().expect("the bound");
    assert_eq!(files.len() as u64, parts, "{err}");
    let v = done["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "video")
        .unwrap();
    assert_eq!(v["received"], parts, "one frame in each file: {err}");
    assert_eq!(v["unsupported"], 300 - parts, "{err}");
    for f in &files {
        let got = probe(f).unwrap_or_else(|e| panic!("{e}\n{err}"));
        assert_eq!((got[0].codec.as_str(), got[0].frames), ("h264", 1), "{f:?}");
    }
}

/// Nominal frame rates outside 1/1000 to 1000 frames per second are refused by
/// `--encode` (counted, said once); the bounds themselves and the other streams
/// are recorded, and every file plays.
#[test]
fn encode_refuses_frame_rates_outside_its_bounds() {
    let ring = ring_name("gst-rates");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    let (seg, mut p) = blocking_producer(&ring);
    // Stream 0: 1/2147483647 fps; 1: 1/1001 fps; 2: the slowest, 1/1000; 3: the
    // fastest, 1000/1; 4: 30/1.
    let rates = [
        (1, i32::MAX as u32),
        (1, 1001),
        (1, 1000),
        (1000, 1),
        (30, 1),
    ];
    let t0 = shmring::now_ns();
    for i in 0..10u64 {
        for (s, &fps) in rates.iter().enumerate() {
            let ts = t0 + i * 40_000_000;
            p.send(
                &video_of(64, 48, fps),
                Meta::new(s as u32, kind::VIDEO).with_timestamp(ts),
            )
            .unwrap();
        }
    }
    for s in 0..rates.len() as u32 {
        p.end_stream(s, kind::VIDEO).unwrap();
    }
    drop((p, seg));
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    let video = |id: u64| {
        done["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["kind"] == "video" && s["stream"] == id)
            .unwrap_or_else(|| panic!("stream {id}: {err}"))
            .clone()
    };
    for id in [0, 1] {
        assert_eq!(video(id)["received"], 0, "{err}");
        assert_eq!(video(id)["unsupported"], 10, "{err}");
        assert!(!dir.path().join(format!("stream-{id}.mp4")).exists());
    }
    for id in [2, 3, 4] {
        assert_eq!(video(id)["received"], 10, "{err}");
        let got = probe(&dir.path().join(format!("stream-{id}.mp4")))
            .unwrap_or_else(|e| panic!("{e}\n{err}"));
        assert_eq!(
            (got[0].codec.as_str(), got[0].frames),
            ("h264", 10),
            "stream {id}: {got:?}"
        );
    }
    assert_eq!(mp4s(dir.path()).len(), 3, "{err}");
    assert!(!err.contains("CRITICAL"), "{err}");
    let said = err.lines().filter(|l| l.contains("frame rate")).count();
    assert_eq!(said, 1, "said once: {err}");
}

/// Three live 1080p30 participants (stamped with the clock, written as the clock
/// goes) at x264's `medium` preset: more than two cores encode. The recorder
/// drops the frames an encoder has no room for (counted, said once per
/// participant) instead of waiting for it, which held the ring (the recording
/// stalled with the ring full): every frame is either in its file or counted, the
/// audio is all there, and every file plays.
#[test]
fn an_encoder_that_falls_behind_drops_frames_and_never_holds_the_ring() {
    let ring = ring_name("gst-behind");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &["--preset", "medium"]);
    let (seg, mut p) = blocking_producer(&ring);
    let (w, h) = (1920, 1080);
    let vhd = MediaHeader::video(Format::I420, w, h, 0, SEQUENCE_AUTO)
        .unwrap()
        .with_frame_rate(30, 1)
        .unwrap();
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, SEQUENCE_AUTO).unwrap();
    let (mut v, mut a) = (vec![0u8; vhd.payload_len()], vec![0u8; ahd.payload_len()]);
    vhd.write_to(&mut v).unwrap();
    ahd.write_to(&mut a).unwrap();
    let (frames, packets) = (90u64, 300u64);
    let start = Instant::now();
    for k in 0..packets {
        std::thread::sleep(
            (start + Duration::from_millis(10 * k)).saturating_duration_since(Instant::now()),
        );
        let ts = shmring::now_ns();
        for stream in 0..3 {
            if k % 10 < 3 && k * 3 / 10 < frames {
                // A bar that moves, so that every frame is worth encoding.
                let o = vhd.offset[0] as usize + (k as usize * 64) % (w as usize * 8);
                v[o..o + 64].fill(235);
                p.send(&v, Meta::new(stream, kind::VIDEO).with_timestamp(ts))
                    .unwrap();
            }
            p.send(&a, Meta::new(stream, kind::AUDIO).with_timestamp(ts))
                .unwrap();
        }
    }
    for stream in 0..3 {
        p.end_stream(stream, kind::VIDEO).unwrap();
        p.end_stream(stream, kind::AUDIO).unwrap();
    }
    drop((p, seg));
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    let find = |k: &str, id: u64| {
        done["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["kind"] == k && s["stream"] == id)
            .unwrap_or_else(|| panic!("{k} stream {id}: {err}"))
            .clone()
    };
    let mut behind = 0;
    for id in 0..3u64 {
        let (video, audio) = (find("video", id), find("audio", id));
        let received = video["received"].as_u64().unwrap();
        let dropped = video["dropped"].as_u64().expect("frames dropped, counted");
        assert_eq!(
            received + dropped,
            frames,
            "every frame written or counted: {err}"
        );
        behind += (dropped > 0) as usize;
        assert_eq!(audio["received"], packets, "{err}");
        let got = probe(&dir.path().join(format!("stream-{id}.mp4")))
            .unwrap_or_else(|e| panic!("{e}\n{err}"));
        assert_eq!(
            (got[0].codec.as_str(), got[0].frames),
            ("h264", received),
            "{err}"
        );
        assert_eq!(got[1].codec, "aac");
    }
    eprintln!("{err}");
    assert!(behind > 0, "no encoder fell behind: {err}");
    let said = err.lines().filter(|l| l.contains("fell behind;")).count();
    assert_eq!(said, behind, "once per participant that fell behind: {err}");
}
