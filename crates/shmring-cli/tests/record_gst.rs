//! `shmring record --encode` built with the `gst` feature encodes in process (no
//! ffmpeg on PATH) and makes a meeting recording: one MP4 per stream id with its
//! H.264 video and AAC audio, timed by the records' capture timestamps. Every file
//! is checked with ffprobe.
//!
//! The producers here stamp capture times themselves and write as fast as the ring
//! takes records, so ten minutes of capture take seconds: the recorder times by
//! the timestamps, never by when records arrive.
#![cfg(feature = "gst")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use shmring::media::{kind, Format, MediaHeader, SEQUENCE_AUTO};
use shmring::{Address, FullPolicy, Meta, Segment};

const SIGINT: i32 = 2;

/// One frame at 25 fps, in seconds: the tolerance for lengths and offsets.
const FRAME_25: f64 = 0.040;

/// What ffprobe says of one stream of a file.
#[derive(Debug, Clone)]
struct Probed {
    codec: String,
    start: f64,
    duration: f64,
    /// Video: frames decoded (`-count_frames`).
    frames: u64,
}

/// ffprobe of every stream of `path` (video first), or the error it printed.
fn probe(path: &Path) -> Result<Vec<Probed>, String> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames"])
        .args([
            "-show_entries",
            "stream=codec_type,codec_name,start_time,duration,nb_read_frames",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "ffprobe {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut streams: Vec<(String, Probed)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            // codec_name,codec_type,start_time,duration,nb_read_frames
            let f: Vec<&str> = l.split(',').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(-1.0);
            (
                f[1].to_string(),
                Probed {
                    codec: f[0].to_string(),
                    start: num(2),
                    duration: num(3),
                    frames: f.get(4).and_then(|v| v.parse().ok()).unwrap_or(0),
                },
            )
        })
        .collect();
    streams.sort_by_key(|(t, _)| t != "video");
    Ok(streams.into_iter().map(|(_, p)| p).collect())
}

/// A participant of a test meeting: its video's capture intervals and audio.
#[derive(Clone)]
struct Source {
    stream: u32,
    /// The nominal frame rate written in the headers (0: variable).
    fps: (u32, u32),
    /// Capture interval before frame `k` (k ≥ 1), in ns.
    interval: fn(u64) -> u64,
    frames: u64,
    /// Audio packets of 10 ms of samples (48 kHz stereo), each stamped this long
    /// after the previous one (10 ms: the audio clock is the capture clock).
    audio_step_ns: Option<u64>,
    /// Send an end of stream for both kinds at the end.
    end: bool,
}

/// What a source sent.
#[derive(Debug, Clone, Copy)]
struct Sent {
    frames: u64,
    /// Capture span of the video: first to last frame, plus the last frame's
    /// interval.
    video_s: f64,
    packets: u64,
}

const W: u32 = 64;
const H: u32 = 48;

/// Writes every source's records into the ring, merged in capture order, as fast
/// as the ring takes them; capture times start at now.
fn produce(ring: &str, sources: &[Source]) -> Vec<Sent> {
    produce_at(ring, sources, None)
}

/// [`produce`], each record written when its capture time comes at `speed` times
/// real time (`None`: as fast as the ring takes them).
fn produce_at(ring: &str, sources: &[Source], speed: Option<f64>) -> Vec<Sent> {
    let seg = Address::named(ring).open().expect("the recorder's ring");
    let mut p = seg.producer().expect("a producer");
    p.set_policy(FullPolicy::Block(Duration::from_secs(30)));
    let base = shmring::now_ns() + 1_000_000;
    let vhd = |s: &Source| {
        MediaHeader::video(Format::I420, W, H, 0, SEQUENCE_AUTO)
            .unwrap()
            .with_frame_rate(s.fps.0, s.fps.1)
            .unwrap()
    };
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, SEQUENCE_AUTO).unwrap();
    let mut vbuf = vec![0u8; vhd(&sources[0]).payload_len()];
    let mut abuf = vec![0u8; ahd.payload_len()];
    // (next capture time, source index, is audio, index)
    let mut next: Vec<(u64, usize, bool, u64)> = Vec::new();
    let mut sent: Vec<Sent> = sources
        .iter()
        .map(|_| Sent {
            frames: 0,
            video_s: 0.0,
            packets: 0,
        })
        .collect();
    // As many packets as the video's capture span holds at the audio's clock.
    let audio_packets =
        |s: &Source| -> u64 { s.audio_step_ns.map_or(0, |step| s.capture_ns() / step) };
    for (i, s) in sources.iter().enumerate() {
        next.push((base, i, false, 0));
        if s.audio_step_ns.is_some() {
            next.push((base, i, true, 0));
        }
    }
    let mut last_video = vec![base; sources.len()];
    let start = Instant::now();
    while let Some(at) = (0..next.len()).min_by_key(|&j| next[j].0) {
        let (ts, si, audio, k) = next[at];
        if let Some(speed) = speed {
            let due = start + Duration::from_secs_f64((ts - base) as f64 / 1e9 / speed);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let s = &sources[si];
        if audio {
            let pts = ts - base;
            let h = MediaHeader { pts_ns: pts, ..ahd };
            h.write_to(&mut abuf).unwrap();
            let o = h.offset[0] as usize;
            for (n, v) in abuf[o..].chunks_exact_mut(2).enumerate() {
                // A 1 kHz tone, so the encoder has something to encode.
                let x = ((k * 480 + n as u64 / 2) as f64 * std::f64::consts::TAU / 48.0).sin();
                v.copy_from_slice(&((x * 8000.0) as i16).to_le_bytes());
            }
            p.send(&abuf, Meta::new(s.stream, kind::AUDIO).with_timestamp(ts))
                .expect("audio packet sent");
            sent[si].packets += 1;
            if k + 1 < audio_packets(s) {
                next[at] = (ts + s.audio_step_ns.unwrap(), si, true, k + 1);
            } else {
                next.swap_remove(at);
            }
        } else {
            let h = MediaHeader {
                pts_ns: ts - base,
                ..vhd(s)
            };
            h.write_to(&mut vbuf).unwrap();
            // A moving bar, so frames differ.
            let (o, ww) = (h.offset[0] as usize, W as usize);
            vbuf[o..o + ww * H as usize].fill(16);
            let x = (k as usize * 3) % ww;
            for r in 0..H as usize {
                vbuf[o + r * ww + x] = 235;
            }
            p.send(&vbuf, Meta::new(s.stream, kind::VIDEO).with_timestamp(ts))
                .expect("video frame sent");
            sent[si].frames += 1;
            last_video[si] = ts;
            if k + 1 < s.frames {
                next[at] = (ts + (s.interval)(k + 1), si, false, k + 1);
            } else {
                sent[si].video_s = (ts - base) as f64 / 1e9 + (s.interval)(k + 1) as f64 / 1e9;
                next.swap_remove(at);
            }
        }
    }
    for s in sources.iter().filter(|s| s.end) {
        p.end_stream(s.stream, kind::VIDEO).unwrap();
        if s.audio_step_ns.is_some() {
            p.end_stream(s.stream, kind::AUDIO).unwrap();
        }
    }
    sent
}

impl Source {
    /// Capture time the video spans, in ns.
    fn capture_ns(&self) -> u64 {
        (1..=self.frames).map(self.interval).sum()
    }
}

/// A recorder creating `ring` and recording `--encode` into `dir`.
fn recorder(ring: &Ring, dir: &Path, extra: &[&str]) -> Proc {
    let ready = dir.with_extension("ready");
    let _ = std::fs::remove_file(&ready);
    let mut args = vec!["record", "--encode", "--create", &ring.0];
    let out = dir.to_str().unwrap();
    let ready_s = ready.to_str().unwrap();
    args.extend(["--out", out, "--ready-file", ready_s]);
    args.extend(extra);
    let p = Proc::spawn(&args);
    p.expect("ready");
    p
}

fn wait_for(path: &Path) {
    let until = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol + 1e-6
}

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

fn at(ms: u64) -> u64 {
    ms * 1_000_000
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

/// Every `*.mp4` and `*.mp4.part` in `dir`, sorted.
fn mp4s(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".mp4") || n.ends_with(".mp4.part")
        })
        .collect();
    v.sort();
    v
}

/// A producer of the recorder's ring that waits for space rather than drop.
fn blocking_producer(ring: &Ring) -> (std::sync::Arc<Segment>, shmring::Producer) {
    let seg = Address::named(&ring.0).open().unwrap();
    let mut p = seg.producer().unwrap();
    p.set_policy(FullPolicy::Block(Duration::from_secs(30)));
    (seg, p)
}

/// A video frame of `w`x`h` at `fps`, numbered by the producer.
fn video_of(w: u32, h: u32, fps: (u32, u32)) -> Vec<u8> {
    let hd = MediaHeader::video(Format::I420, w, h, 0, SEQUENCE_AUTO)
        .unwrap()
        .with_frame_rate(fps.0, fps.1)
        .unwrap();
    let mut b = vec![0x80u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

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
