//! One file per participant: every frame kept, each file as long as its capture,
//! audio with video over ten minutes.

use super::*;

#[test]
fn encode_runs_in_process_and_keeps_every_frame() {
    let ring = ring_name("gst-encode");
    let dir = tempfile::tempdir().unwrap();
    // An empty PATH: no ffmpeg child can be started.
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(EXE);
    cmd.args(["record", "--encode", "--seconds", "6", "--create", &ring.0])
        .arg("--out")
        .arg(dir.path())
        .env("PATH", empty.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut rec = Proc::command(cmd);
    rec.expect("ready");
    let prod = run_line(&format!(
        "produce --ring {} --video 320x240@30 --audio 48000x2 --seconds 1",
        ring.0
    ));
    assert!(
        prod.status.success(),
        "{}",
        String::from_utf8_lossy(&prod.stderr)
    );
    let produced = last_json(&prod);
    let sent = produced["produced"]["video"][0]["sent"]
        .as_u64()
        .expect("sent");
    assert!(sent > 0);
    let (_, err) = rec.finish("recorded");
    // One file for stream 0: its video and its audio, muxed.
    let streams = probe(&dir.path().join("stream-0.mp4")).unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert_eq!(streams[0].codec, "h264", "{err}");
    assert_eq!(streams[0].frames, sent, "{err}");
    assert_eq!(streams.len(), 2, "audio is still recorded: {streams:?}");
    assert_eq!(streams[1].codec, "aac");
}

/// 25 fps, 15 fps and a variable rate (intervals of 20 to 70 ms, as WebRTC
/// delivers) in one meeting: each participant's file is as long as its capture
/// (±1 frame), its audio starts with its video (±1 frame), and each file is
/// finished at its producer's end of stream while the recorder goes on.
#[test]
fn each_participant_gets_a_file_as_long_as_its_capture() {
    let ring = ring_name("gst-meeting");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    fn fps25(_: u64) -> u64 {
        at(40)
    }
    fn fps15(_: u64) -> u64 {
        66_666_667
    }
    fn variable(k: u64) -> u64 {
        at(20 + (k * 37 + k * k * 11) % 51)
    }
    let ten_ms = Some(at(10));
    let sources = [
        Source {
            stream: 0,
            fps: (25, 1),
            interval: fps25,
            frames: 150,
            audio_step_ns: ten_ms,
            end: true,
        },
        Source {
            stream: 1,
            fps: (15, 1),
            interval: fps15,
            frames: 90,
            audio_step_ns: ten_ms,
            end: true,
        },
        Source {
            stream: 2,
            fps: (0, 1),
            interval: variable,
            frames: 130,
            audio_step_ns: ten_ms,
            end: true,
        },
    ];
    let sent = produce(&ring.0, &sources);
    // Closed at the end of stream, with the recorder still running.
    for s in &sources {
        wait_for(&dir.path().join(format!("stream-{}.mp4", s.stream)));
    }
    for (s, got) in sources.iter().zip(&sent) {
        let path = dir.path().join(format!("stream-{}.mp4", s.stream));
        let p = probe(&path).unwrap();
        let (v, a) = (&p[0], &p[1]);
        eprintln!(
            "stream {} ({}/{} fps): capture {:.3} s, {} frames; ffprobe: video {} {} frames from {:.3} s for {:.3} s, audio {} from {:.3} s for {:.3} s",
            s.stream, s.fps.0, s.fps.1, got.video_s, got.frames, v.codec, v.frames, v.start,
            v.duration, a.codec, a.start, a.duration
        );
        assert_eq!((v.codec.as_str(), a.codec.as_str()), ("h264", "aac"));
        assert_eq!(v.frames, got.frames, "stream {}: every frame", s.stream);
        let frame = (s.interval)(got.frames) as f64 / 1e9;
        assert!(
            close(v.start + v.duration, got.video_s, frame),
            "stream {}: video lasts {:.3} s, the capture {:.3} s",
            s.stream,
            v.start + v.duration,
            got.video_s
        );
        assert!(
            close(v.start, a.start, frame.min(FRAME_25)),
            "stream {}: audio starts at {:.3} s, video at {:.3} s",
            s.stream,
            a.start,
            v.start
        );
        // Audio spans its capture too: 10 ms a packet (±1 AAC frame of 21 ms).
        assert!(close(a.duration, got.packets as f64 * 0.010, 0.022));
    }
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    for s in done["streams"].as_array().unwrap() {
        assert_eq!(
            s["ends"], 1,
            "every stream was ended by its producer: {err}"
        );
        assert_eq!(s["restarts"], 0, "{err}");
        assert_eq!(s["gaps"], 0, "{err}");
    }
}

/// Ten minutes of capture, produced in seconds: the audio device's clock runs
/// 0.1 % slow against the capture clock (10.01 ms of capture per 10 ms of samples,
/// 0.6 s over ten minutes). Timed by capture timestamps, the audio still ends with
/// the video.
#[test]
fn ten_minutes_of_capture_keep_audio_with_video() {
    let ring = ring_name("gst-drift");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    fn fps25(_: u64) -> u64 {
        at(40)
    }
    let source = Source {
        stream: 7,
        fps: (25, 1),
        interval: fps25,
        frames: 25 * 600,
        audio_step_ns: Some(10_010_000),
        end: true,
    };
    let sent = produce(&ring.0, std::slice::from_ref(&source))[0];
    let path = dir.path().join("stream-7.mp4");
    wait_for(&path);
    rec.signal(SIGINT);
    let (_, err) = rec.finish("recorded");
    let p = probe(&path).unwrap();
    let (v, a) = (&p[0], &p[1]);
    eprintln!(
        "10 min: capture {:.3} s, {} frames, {} packets; ffprobe: video {} frames from {:.3} s for {:.3} s, audio from {:.3} s for {:.3} s",
        sent.video_s, sent.frames, sent.packets, v.frames, v.start, v.duration, a.start, a.duration
    );
    assert_eq!(v.frames, sent.frames, "{err}");
    assert!(close(v.start + v.duration, sent.video_s, FRAME_25));
    assert!(close(a.start, v.start, FRAME_25));
    assert!(
        close(a.start + a.duration, v.start + v.duration, FRAME_25),
        "the audio ends at {:.3} s, the video at {:.3} s",
        a.start + a.duration,
        v.start + v.duration
    );
}
