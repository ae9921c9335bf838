//! Audio and video captured together play together, and video far ahead of its
//! audio does not stall the recorder.

use super::*;

/// When things happen in a file as a player shows them: the first video frame
/// brighter than mid-grey, and the first audio sample louder than half scale, in
/// seconds on the file's timeline (decoded by ffmpeg, as a player would).
fn onsets(path: &Path) -> (f64, f64) {
    let video = Command::new("ffmpeg")
        .args(["-v", "info", "-copyts", "-i"])
        .arg(path)
        .args(["-map", "0:v", "-vf", "showinfo", "-f", "null", "-"])
        .output()
        .expect("ffmpeg runs");
    let log = String::from_utf8_lossy(&video.stderr);
    let field = |l: &str, key: &str| -> Option<f64> {
        let at = l.find(key)? + key.len();
        l[at..]
            .trim_start_matches(['[', ' '])
            .split([' ', ']'])
            .next()?
            .parse()
            .ok()
    };
    let flash = log
        .lines()
        .filter(|l| l.contains("showinfo") && l.contains("pts_time:"))
        .find(|l| field(l, "mean:").is_some_and(|y| y > 128.0))
        .and_then(|l| field(l, "pts_time:"))
        .unwrap_or_else(|| panic!("no bright frame in {}: {log}", path.display()));
    let audio = Command::new("ffmpeg")
        .args(["-v", "error", "-copyts", "-i"])
        .arg(path)
        .args([
            "-map", "0:a", "-f", "s16le", "-ac", "1", "-ar", "48000", "-",
        ])
        .output()
        .expect("ffmpeg runs");
    let first = audio
        .stdout
        .chunks_exact(2)
        .position(|s| i16::from_le_bytes([s[0], s[1]]).unsigned_abs() > 8000)
        .expect("a loud sample");
    let start = probe_start(path, "a");
    (flash, start + first as f64 / 48000.0)
}

/// The start time of the file's first stream of type `v` or `a`.
fn probe_start(path: &Path, which: &str) -> f64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", which])
        .args(["-show_entries", "stream=start_time", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a start time")
}

/// A flash and a tone that start at the same capture time are at the same time in
/// the file, within one audio packet (10 ms): the AAC encoder's priming (1024
/// samples, 21 ms, which players play) does not put the audio late, and a
/// participant whose video starts after its audio (stream 1: 120 ms) keeps its
/// video's times (the muxer starts every track at the file's start).
#[test]
fn audio_and_video_captured_together_play_together() {
    let ring = ring_name("gst-sync");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    let (seg, mut p) = blocking_producer(&ring);
    let vhd = MediaHeader::video(Format::I420, W, H, 0, SEQUENCE_AUTO)
        .unwrap()
        .with_frame_rate(25, 1)
        .unwrap();
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 1, 480, 0, SEQUENCE_AUTO).unwrap();
    let (mut v, mut a) = (vec![0u8; vhd.payload_len()], vec![0u8; ahd.payload_len()]);
    vhd.write_to(&mut v).unwrap();
    ahd.write_to(&mut a).unwrap();
    let t0 = shmring::now_ns();
    // 2 s: dark frames and silence, then from 1 s on white frames and a loud tone.
    for k in 0..200u64 {
        let ts = t0 + k * 10_000_000;
        let on = k >= 100;
        let o = ahd.offset[0] as usize;
        for (n, s) in a[o..].chunks_exact_mut(2).enumerate() {
            let x = if on {
                (n as f64 * std::f64::consts::TAU / 48.0).sin() * 20000.0
            } else {
                0.0
            };
            s.copy_from_slice(&(x as i16).to_le_bytes());
        }
        let o = vhd.offset[0] as usize;
        v[o..o + (W * H) as usize].fill(if on { 235 } else { 16 });
        v[o + (W * H) as usize..].fill(128);
        for stream in [0, 1] {
            p.send(&a, Meta::new(stream, kind::AUDIO).with_timestamp(ts))
                .unwrap();
            let first_frame = if stream == 0 { 0 } else { 12 };
            if k % 4 == 0 && k >= first_frame {
                p.send(&v, Meta::new(stream, kind::VIDEO).with_timestamp(ts))
                    .unwrap();
            }
        }
    }
    for stream in [0, 1] {
        p.end_stream(stream, kind::VIDEO).unwrap();
        p.end_stream(stream, kind::AUDIO).unwrap();
    }
    drop((p, seg));
    rec.signal(SIGINT);
    let (_, err) = rec.finish("recorded");
    for stream in [0, 1] {
        let path = dir.path().join(format!("stream-{stream}.mp4"));
        let streams = probe(&path).unwrap_or_else(|e| panic!("{e}\n{err}"));
        // Every frame once (stream 1's first from the file's start), no more.
        let frames = if stream == 0 { 50 } else { 47 };
        assert_eq!(
            (streams[0].codec.as_str(), streams[0].frames),
            ("h264", frames)
        );
        assert_eq!(streams[1].codec, "aac");
        let (flash, tone) = onsets(&path);
        eprintln!("stream {stream}: flash at {flash:.4} s, tone at {tone:.4} s");
        assert!(
            (tone - flash).abs() <= 0.010,
            "stream {stream}: the tone plays {:.1} ms after the flash",
            (tone - flash) * 1000.0
        );
    }
}

/// A participant's video comes into the ring well ahead of its audio (4 s of
/// video, then its audio), stamped ahead of the clock: the muxer waits for the
/// audio, which is in the ring behind the video the recorder holds. The recorder
/// drops the frames the stuck encoder has no room for instead of waiting for it
/// (which ended the recording with an error after 60 s), reads on, and the file
/// has every audio packet and the frames it counted.
#[test]
fn video_far_ahead_of_its_audio_does_not_stall_the_recorder() {
    let ring = ring_name("gst-ahead");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path(), &[]);
    let (seg, mut p) = blocking_producer(&ring);
    let t0 = shmring::now_ns() + 1_000_000;
    let v = video_of(W, H, (25, 1));
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, SEQUENCE_AUTO).unwrap();
    let mut a = vec![0u8; ahd.payload_len()];
    ahd.write_to(&mut a).unwrap();
    let audio = |p: &mut shmring::Producer, k: u64| {
        let meta = Meta::new(0, kind::AUDIO).with_timestamp(t0 + k * 10_000_000);
        p.send(&a, meta).unwrap()
    };
    // The file starts with both tracks (its first 40 ms of audio), then the video
    // runs 4 s ahead of the rest.
    for k in 0..4 {
        audio(&mut p, k);
    }
    for k in 0..100u64 {
        let meta = Meta::new(0, kind::VIDEO).with_timestamp(t0 + k * 40_000_000);
        p.send(&v, meta).unwrap();
    }
    for k in 4..400 {
        audio(&mut p, k);
    }
    p.end_stream(0, kind::VIDEO).unwrap();
    p.end_stream(0, kind::AUDIO).unwrap();
    drop((p, seg));
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    let streams = done["streams"].as_array().unwrap();
    let video = streams.iter().find(|s| s["kind"] == "video").unwrap();
    let audio = streams.iter().find(|s| s["kind"] == "audio").unwrap();
    let received = video["received"].as_u64().unwrap();
    eprintln!("{err}");
    assert_eq!(received + video["dropped"].as_u64().unwrap(), 100, "{err}");
    assert_eq!(audio["received"], 400, "{err}");
    let got = probe(&dir.path().join("stream-0.mp4")).unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert_eq!((got[0].codec.as_str(), got[0].frames), ("h264", received));
    assert_eq!(got[1].codec, "aac");
}
