//! `shmring record --encode` built with the `gst` feature encodes in process: no
//! ffmpeg on PATH, and the MP4 holds every frame the producer sent.
#![cfg(feature = "gst")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_shmring");

/// Kills and reaps on drop; unlinks the ring.
struct Guard(Vec<Child>, String);

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(format!("/dev/shm/{}", self.1));
    }
}

#[test]
fn encode_runs_in_process_and_keeps_every_frame() {
    let ring = format!("gst-encode-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    // An empty PATH: no ffmpeg child can be started.
    let empty = tempfile::tempdir().unwrap();
    let mut guard = Guard(vec![], ring.clone());
    let rec = Command::new(EXE)
        .args([
            "record",
            "--encode",
            "--seconds",
            "6",
            "--create",
            &ring,
            "--out",
        ])
        .arg(dir.path())
        .env("PATH", empty.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    guard.0.push(rec);
    let until = Instant::now() + Duration::from_secs(60);
    while !std::path::Path::new(&format!("/dev/shm/{ring}")).exists() {
        assert!(
            Instant::now() < until,
            "the recorder never created its ring"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let prod = Command::new(EXE)
        .args([
            "produce",
            "--ring",
            &ring,
            "--video",
            "320x240@30",
            "--audio",
            "48000x2",
        ])
        .args(["--seconds", "1"])
        .output()
        .unwrap();
    assert!(
        prod.status.success(),
        "{}",
        String::from_utf8_lossy(&prod.stderr)
    );
    let produced: serde_json::Value = String::from_utf8_lossy(&prod.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("produced").is_some())
        .expect("a produced line");
    let sent = produced["produced"]["video"][0]["sent"]
        .as_u64()
        .expect("sent");
    assert!(sent > 0);
    let rec = guard.0.pop().unwrap();
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let mp4 = dir.path().join("video-0.mp4");
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=nb_read_frames,codec_name",
            "-of",
            "csv=p=0",
        ])
        .arg(&mp4)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    let counted = String::from_utf8_lossy(&probe.stdout);
    assert_eq!(counted.trim(), format!("h264,{sent}"), "{err}");
    assert!(
        dir.path().join("audio-0.wav").exists(),
        "audio is still recorded"
    );
}
