//! `shmring record --encode` built with the `gst` feature encodes in process (no
//! ffmpeg on PATH) and makes a meeting recording: one MP4 per stream id with its
//! H.264 video and AAC audio, timed by the records' capture timestamps. Every file
//! is checked with ffprobe. One file per concept: `participants`, `sync` (audio
//! with video), `endings` (SIGINT, a full disk, a killed recorder), `bounds`
//! (what the encoder takes and refuses) and `websocket` (the same recorder fed by a
//! WebSocket); their shared helpers are here.
//!
//! The producers here stamp capture times themselves and write as fast as the ring
//! takes records, so ten minutes of capture take seconds: the recorder times by
//! the timestamps, never by when records arrive.
#![cfg(feature = "gst")]

#[path = "../common/mod.rs"]
mod common;

mod bounds;
mod endings;
mod participants;
mod sync;
mod websocket;

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

/// `ms` milliseconds, in nanoseconds (capture timestamps).
fn at(ms: u64) -> u64 {
    ms * 1_000_000
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
