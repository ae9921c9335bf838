//! The `shmring` command end to end: record + produce in separate processes, the
//! files they leave, `stat --json`, `demo`, and bad input.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::media::{kind, Format, MediaHeader, MEDIA_HEADER_SIZE};
use shmring::{Address, Meta};
use shmring_cli::pattern::decode_frame_number;

mod common;
use common::{assert_fails, ring_name, run, run_line, wait_for, Proc, Ring, EXE, PATIENCE};

fn start_recorder(ring: &Ring, out: &Path) -> Proc {
    let rec = Proc::spawn_line(&format!(
        "record --create {} --out {} --progress",
        ring.0,
        out.display()
    ));
    let ready = rec.expect("ready");
    assert_eq!(ready["ring"], ring.0.as_str());
    assert!(ready["max_record"].as_u64().unwrap() >= 1920 * 1080 * 3 / 2 + 128);
    rec
}

struct Y4m {
    header: String,
    frames: Vec<u32>,
}

/// Parses a Y4M file with 4:2:0 frames; returns the header and decoded numbers.
fn read_y4m(path: &Path) -> Y4m {
    let b = std::fs::read(path).unwrap();
    let nl = b.iter().position(|&c| c == b'\n').unwrap();
    let header = String::from_utf8(b[..nl].to_vec()).unwrap();
    let dim = |p: char| -> usize {
        header
            .split(' ')
            .find_map(|t| t.strip_prefix(p))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (w, h) = (dim('W'), dim('H'));
    let frame = w * h + 2 * w.div_ceil(2) * h.div_ceil(2);
    let mut at = nl + 1;
    let mut frames = Vec::new();
    while at < b.len() {
        assert_eq!(&b[at..at + 6], b"FRAME\n", "frame marker at byte {at}");
        at += 6;
        assert!(at + frame <= b.len(), "incomplete last frame");
        frames.push(decode_frame_number(&b[at..at + w * h], w as u32, h as u32, w).unwrap());
        at += frame;
    }
    Y4m { header, frames }
}

/// Checks a PCM s16 WAV file's header; returns its data bytes.
fn read_wav(path: &Path, rate: u32, channels: u16) -> u64 {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[0..4], b"RIFF");
    assert_eq!(
        u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize,
        b.len() - 8
    );
    assert_eq!(&b[8..16], b"WAVEfmt ");
    assert_eq!(u16::from_le_bytes([b[20], b[21]]), 1, "PCM");
    assert_eq!(u16::from_le_bytes([b[22], b[23]]), channels);
    assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), rate);
    assert_eq!(u16::from_le_bytes([b[34], b[35]]), 16);
    assert_eq!(&b[36..40], b"data");
    let data = u32::from_le_bytes(b[40..44].try_into().unwrap()) as u64;
    assert_eq!(data, b.len() as u64 - 44);
    data
}

fn no_part_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name();
        assert!(!n.to_string_lossy().ends_with(".part"), "{n:?} left behind");
    }
}

#[test]
fn record_and_produce_end_to_end_with_stat() {
    let ring = ring_name("e2e");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    let mut prod = Proc::spawn_line(&format!(
        "produce --ring {} --video 320x240@30 --audio 48000x2 --streams 2 --seconds 2",
        ring.0
    ));
    let produced = prod.expect("produced");
    let (code, err) = prod.wait();
    assert_eq!(code, Some(0), "{err}");

    // Wait (bounded) until the recorder has consumed everything committed.
    let until = Instant::now() + PATIENCE;
    let stat = loop {
        let o = run(&["stat", "--json", &ring.0]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: Value = serde_json::from_slice(&o.stdout).unwrap();
        if s["records_consumed"] == s["records_committed"] || Instant::now() > until {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let video = produced["video"].as_array().unwrap();
    let audio = &produced["audio"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    let sent: u64 = video.iter().map(|v| n(v, "sent")).sum::<u64>() + n(audio, "sent");
    let dropped: u64 = video.iter().map(|v| n(v, "dropped")).sum::<u64>() + n(audio, "dropped");
    let vlen = MediaHeader::video(Format::I420, 320, 240, 0, 0)
        .unwrap()
        .payload_len() as u64;
    let alen = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0)
        .unwrap()
        .payload_len() as u64;
    // Each stream ends with an end-of-stream record (a bare media header).
    let ends = video
        .iter()
        .chain([audio])
        .filter(|v| v["ended"] == true)
        .count() as u64;
    assert_eq!(ends, 3);
    assert_eq!(n(&stat, "records_committed"), sent + ends);
    assert_eq!(n(&stat, "records_consumed"), sent + ends);
    assert_eq!(n(&stat, "drops_full"), dropped);
    assert_eq!(
        n(&stat, "bytes_committed"),
        video.iter().map(|v| n(v, "sent")).sum::<u64>() * vlen
            + n(audio, "sent") * alen
            + ends * MEDIA_HEADER_SIZE as u64
    );
    assert_eq!(n(&stat, "corruption"), 0);
    assert!(stat["consumer_attached"].as_bool().unwrap());

    rec.signal(libc::SIGINT);
    let recorded = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(!ring.path().exists(), "the recorder removes its ring");
    no_part_files(dir.path());

    for v in video {
        let s = n(v, "stream");
        assert_eq!(n(v, "attempted"), 60);
        let y = read_y4m(&dir.path().join(format!("video-{s}.y4m")));
        assert_eq!(y.header, "YUV4MPEG2 W320 H240 F30:1 Ip A1:1 C420jpeg");
        assert_eq!(y.frames.len() as u64, n(v, "attempted") - n(v, "dropped"));
        assert_eq!(y.frames.len() as u64, n(v, "sent"));
        assert!(y.frames.windows(2).all(|p| p[0] < p[1]), "{:?}", y.frames);
        let rs = recorded["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == "video" && r["stream"].as_u64() == Some(s))
            .unwrap();
        assert_eq!(n(rs, "received"), y.frames.len() as u64);
        assert_eq!(n(rs, "gaps"), n(v, "dropped"));
    }
    let data = read_wav(&dir.path().join("audio-0.wav"), 48000, 2);
    assert_eq!(data, n(audio, "samples_sent") * 4);
    assert_eq!(n(audio, "samples_sent"), n(audio, "sent") * 480);
    assert_eq!(recorded["malformed"], 0);
    assert!(n(&recorded, "write_calls") > 0);
    assert!(n(&recorded, "bytes_per_write_max") <= 320 * 240);
}

#[test]
fn malformed_media_headers_are_counted_skipped_and_reported() {
    let ring = ring_name("malformed");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    {
        let seg = Address::named(&ring.0).open().unwrap();
        let mut p = seg.producer().unwrap();
        let hd = MediaHeader::video(Format::I420, 64, 16, 0, 0).unwrap();
        let mut good = vec![0u8; hd.payload_len()];
        hd.write_to(&mut good).unwrap();
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&77u32.to_le_bytes()); // unknown format
        let m = Meta::new(5, kind::VIDEO);
        p.send(&good, m).unwrap();
        p.send(&bad, m).unwrap();
        p.send(&good[..100], m).unwrap(); // too short for a header
        p.send(&[0xffu8; 4096], Meta::new(6, kind::AUDIO)).unwrap();
        p.send(&good, m).unwrap();
        // Wait until the recorder has read all five.
        wait_for("the recorder to read all five", || {
            seg.stats().records_consumed >= 5
        });
    }
    rec.signal(libc::SIGTERM);
    let r = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r["malformed"], 3);
    assert!(err.contains("malformed media header"), "{err}");
    assert!(err.contains("unknown format 77"), "{err}");
    let y = read_y4m(&dir.path().join("video-5.y4m"));
    assert_eq!(y.frames.len(), 2);
    assert!(!dir.path().join("audio-6.wav").exists());
}

#[test]
fn a_killed_producer_does_not_stop_the_recorder() {
    let ring = ring_name("killed");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    let video = ["--video", "320x240@30", "--audio", "48000x1"];
    let mut a = Proc::spawn(
        &[
            &["produce", "--ring", &ring.0, "--seconds", "60"][..],
            &video,
        ]
        .concat(),
    );
    // Let frames flow, then kill the producer without warning.
    let until = Instant::now() + PATIENCE;
    while rec.expect("progress")["video_frames"].as_u64().unwrap() < 5 {
        assert!(Instant::now() < until);
    }
    a.kill();
    // The recorder goes on: a second producer's frames are recorded too.
    let mut b = Proc::spawn(
        &[
            &["produce", "--ring", &ring.0, "--seconds", "1"][..],
            &video,
        ]
        .concat(),
    );
    let pb = b.expect("produced");
    let (code, err) = b.wait();
    assert_eq!(code, Some(0), "{err}");
    let sent_b = pb["video"][0]["sent"].as_u64().unwrap();
    assert!(sent_b > 0);
    let until = Instant::now() + PATIENCE;
    loop {
        let s = Address::named(&ring.0).open().unwrap().stats();
        if s.records_consumed == s.records_committed || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    rec.signal(libc::SIGTERM);
    let r = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    no_part_files(dir.path());
    let y = read_y4m(&dir.path().join("video-0.y4m"));
    let vs = &r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "video")
        .unwrap();
    assert_eq!(y.frames.len() as u64, vs["received"].as_u64().unwrap());
    assert!(y.frames.len() as u64 >= 5 + sent_b);
    // The second producer's frames are the last ones, in order from 0.
    let tail = &y.frames[y.frames.len() - sent_b as usize..];
    assert_eq!(tail, (0..sent_b as u32).collect::<Vec<_>>().as_slice());
    assert!(vs["restarts"].as_u64().unwrap() >= 1);
    read_wav(&dir.path().join("audio-0.wav"), 48000, 1);
}

#[test]
fn record_stops_by_itself_after_seconds() {
    let ring = ring_name("seconds");
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let o = run_line(&format!(
        "record --create {} --out {} --seconds 0.3 --ready-file {}",
        ring.0,
        dir.path().display(),
        ready.display()
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&ready).unwrap().trim(), ring.0);
    let last: Value =
        serde_json::from_str(String::from_utf8(o.stdout).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(last["recorded"]["streams"], serde_json::json!([]));
    assert!(!ring.path().exists());
}

#[test]
fn demo_runs_two_processes_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(EXE)
        .args(["demo", "--seconds", "1.5", "--video", "320x240@30", "--out"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("summary"), "{out}");
    assert!(out.contains("45 frames sent, 45 received"), "{out}");
    assert!(out.contains("recorder: CPU"), "{out}");
    assert_eq!(read_y4m(&dir.path().join("video-0.y4m")).frames.len(), 45);
    read_wav(&dir.path().join("audio-0.wav"), 48000, 2);
    let prefix = format!("shmring-demo-{pid}-");
    for e in std::fs::read_dir("/dev/shm").unwrap() {
        let n = e.unwrap().file_name();
        assert!(
            !n.to_string_lossy().starts_with(&prefix),
            "{n:?} left in /dev/shm"
        );
    }
}

#[test]
fn unknown_ring_is_named() {
    let ring = ring_name("absent");
    assert_fails(
        &run(&["stat", "--json", &ring.0]),
        &[&ring.0, "does not exist"],
    );
    assert_fails(
        &run(&["produce", "--ring", &ring.0]),
        &[&ring.0, "does not exist"],
    );
}

#[test]
fn ring_of_another_layout_is_refused() {
    let ring = ring_name("foreign");
    std::fs::write(ring.path(), vec![0x5au8; 1 << 20]).unwrap();
    assert_fails(
        &run(&["stat", &ring.0]),
        &[&ring.0, "not a shmring ring (bad magic"],
    );
    assert_fails(
        &run(&["produce", "--ring", &ring.0, "--seconds", "1"]),
        &[&ring.0, "not a shmring ring"],
    );
    // A real ring whose layout version is not ours.
    let other = ring_name("version");
    let seg = Address::create(&other.0, shmring::Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(other.path())
            .unwrap();
        // In all three identity lines (line 0 and its copies), as a ring of another
        // layout would differ: whoever attaches takes what two of them say.
        let copies = std::mem::offset_of!(shmring::layout::Control, identity_copies) as u64;
        for line in [0, copies, copies + 64] {
            f.seek(SeekFrom::Start(line + 8)).unwrap();
            f.write_all(&99u32.to_le_bytes()).unwrap();
        }
    }
    assert_fails(
        &run(&["stat", "--json", &other.0]),
        &[&other.0, "layout version", "found 99"],
    );
    drop(seg);
}

#[test]
fn unusable_output_directory_fails_before_the_ring_exists() {
    let ring = ring_name("badout");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let out = file.join("out");
    let o = run_line(&format!(
        "record --create {} --out {}",
        ring.0,
        out.display()
    ));
    assert_fails(&o, &["output directory", "not-a-dir/out"]);
    assert!(!ring.path().exists());
}

#[test]
fn existing_ring_name_is_refused() {
    let ring = ring_name("exists");
    std::fs::write(ring.path(), b"").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = run_line(&format!(
        "record --create {} --out {}",
        ring.0,
        dir.path().display()
    ));
    assert_fails(&o, &[&ring.0, "already exists"]);
}

#[test]
fn a_ring_too_small_for_a_1080p_frame_is_refused() {
    for mib in ["4", "12"] {
        let ring = ring_name("small");
        let dir = tempfile::tempdir().unwrap();
        let o = run_line(&format!(
            "record --capacity-mib {} --create {} --out {}",
            mib,
            ring.0,
            dir.path().display()
        ));
        assert_eq!(o.status.code(), Some(2));
        assert_fails(&o, &[&format!("--capacity-mib {mib}:"), "two 1080p frames"]);
        assert!(!ring.path().exists());
    }
}

#[test]
#[cfg(not(feature = "gst"))] // with GStreamer, --encode needs no ffmpeg
fn encode_without_ffmpeg_says_so() {
    let ring = ring_name("noffmpeg");
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(EXE)
        .args(["record", "--encode", "--create", &ring.0, "--out"])
        .arg(dir.path())
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert_fails(&o, &["--encode needs ffmpeg"]);
    assert!(!ring.path().exists());
}

#[test]
fn bad_arguments_are_rejected() {
    assert_fails(
        &run(&["produce", "--ring", "x", "--video", "big"]),
        &["--video"],
    );
    assert_fails(
        &run(&["produce", "--ring", "x", "--audio", "44100x0"]),
        &["--audio"],
    );
    // Nothing to produce is a usage error (exit 2), before any ring is opened.
    let o = run_line("produce --ring x --video none --audio none");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to produce"));
    let o = run(&["frobnicate"]);
    assert!(!o.status.success());
}

#[test]
fn a_full_disk_stops_the_recording_with_whole_frames_only() {
    use std::os::unix::process::CommandExt;
    let ring = ring_name("full");
    let dir = tempfile::tempdir().unwrap();
    // A 16 MiB file size limit stands in for a full disk (writes fail with EFBIG).
    let mut cmd = Command::new(EXE);
    cmd.args([
        "record",
        "--capacity-mib",
        "8",
        "--create",
        &ring.0,
        "--out",
    ])
    .arg(dir.path())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 16 << 20,
                rlim_max: 16 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let mut rec = Proc::command(cmd);
    rec.expect("ready");
    let _prod = Proc::spawn_line(&format!(
        "produce --ring {} --video 640x480@30 --audio none --seconds 20",
        ring.0
    ));
    let r = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(1), "{err}");
    let last = err.trim().lines().last().unwrap();
    assert!(
        last.contains("video-0.y4m") && last.contains("File too large"),
        "{last}"
    );
    assert!(last.contains("whole frame"), "{last}");
    no_part_files(dir.path());
    let y = read_y4m(&dir.path().join("video-0.y4m"));
    let f = &r["streams"][0]["files"][0];
    assert_eq!(f["units"].as_u64().unwrap(), y.frames.len() as u64);
    assert!(f["note"].as_str().unwrap().contains("File too large"));
    assert!(y.frames.len() > 5, "{}", y.frames.len());
    assert!(y.frames.windows(2).all(|p| p[0] < p[1]));
}

#[test]
fn encode_writes_h264_mp4_when_ffmpeg_is_installed() {
    let has_ffmpeg = Command::new("ffmpeg")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_ffmpeg {
        eprintln!("ffmpeg is not installed: --encode not exercised");
        return;
    }
    let ring = ring_name("encode");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Proc::spawn_line(&format!(
        "record --encode --create {} --out {}",
        ring.0,
        dir.path().display()
    ));
    rec.expect("ready");
    let mut prod = Proc::spawn_line(&format!(
        "produce --ring {} --video 320x240@30 --audio none --seconds 1",
        ring.0
    ));
    let p = prod.expect("produced");
    assert_eq!(prod.wait().0, Some(0));
    let sent = p["video"][0]["sent"].as_u64().unwrap();
    let seg = Address::named(&ring.0).open().unwrap();
    wait_for("the recorder to read every frame sent", || {
        seg.stats().records_consumed >= sent
    });
    rec.signal(libc::SIGTERM);
    let r = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    no_part_files(dir.path());
    // In process (the `gst` feature): one file per stream id, video and audio muxed.
    let name = if cfg!(feature = "gst") {
        "stream-0.mp4"
    } else {
        "video-0.mp4"
    };
    let mp4 = std::fs::read(dir.path().join(name)).unwrap();
    assert_eq!(&mp4[4..8], b"ftyp");
    assert_eq!(r["streams"][0]["files"][0]["units"].as_u64(), Some(sent));
}

/// `demo --create NAME` where NAME is someone else's live ring: the demo fails
/// with the recorder's error, and that ring and its recorder are left as they were.
#[test]
fn demo_leaves_a_live_ring_of_the_same_name_alone() {
    let ring = ring_name("taken");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(EXE)
        .args([
            "demo",
            "--seconds",
            "1",
            "--video",
            "320x240@30",
            "--create",
        ])
        .arg(&ring.0)
        .arg("--out")
        .arg(out.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&ring.0), "{err}");
    assert!(ring.path().exists(), "the live ring was removed: {err}");
    assert!(rec.kid.exited().is_none(), "the live ring's recorder ended");
    // It still records: a producer's frames reach it.
    let mut p = Proc::spawn_line(&format!(
        "produce --ring {} --seconds 0.3 --video 320x240@30 --audio none",
        ring.0
    ));
    let (code, perr) = p.wait();
    assert_eq!(code, Some(0), "{perr}");
}

#[test]
fn interrupted_demo_stops_its_children_and_removes_its_ring() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(EXE);
    cmd.args(["demo", "--seconds", "60", "--video", "320x240@30", "--out"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut kid = shmring_testkit::ChildGuard::spawn_tied(&mut cmd, &[]).unwrap();
    let out = BufReader::new(kid.take_stdout().unwrap());
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut demo = Proc {
        kid,
        lines: mpsc::channel().1,
    };
    // The first line says where the files go; the next names the children.
    let first = loop {
        let l = lines.recv_timeout(PATIENCE).unwrap();
        if l.contains("recorder pid") {
            break l;
        }
    };
    let pid_after = |w: &str| -> u32 {
        let at = first.find(w).unwrap() + w.len();
        first[at..].split(' ').next().unwrap().parse().unwrap()
    };
    let (rpid, ppid) = (pid_after("recorder pid "), pid_after("producer pid "));
    // The demo serves its ring on a socket in a directory of its own by default.
    let sock = first
        .split(' ')
        .find(|t| t.ends_with("ring.sock;"))
        .map(|t| PathBuf::from(t.trim_end_matches(';')))
        .unwrap_or_else(|| panic!("no socket in {first:?}"));
    let sock_dir = sock.parent().unwrap().to_path_buf();
    assert!(sock.exists());
    // One status line means both children are running.
    let status = lines.recv_timeout(PATIENCE).unwrap();
    assert!(status.contains("fps"), "{status}");
    demo.signal(libc::SIGINT);
    let (code, err) = demo.wait();
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    for pid in [rpid, ppid] {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} still there"
        );
    }
    assert!(!sock_dir.exists(), "the socket's directory is removed");
    no_part_files(dir.path());
    assert!(!read_y4m(&dir.path().join("video-0.y4m")).frames.is_empty());
}

/// A peer overwrites the ring's write cursor: the recorder finds it by itself,
/// resets the ring, says so, and records the next producer's frames with no
/// restart of anything.
#[test]
fn the_recorder_carries_on_after_a_peer_scribbles_the_ring() {
    let ring = ring_name("scribbled");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(ring.path())
            .unwrap();
        // The write cursor is the second cache line of the control block.
        f.write_all_at(&u64::MAX.to_le_bytes(), 64).unwrap();
    }
    // The recorder resets within its liveness interval; its progress lines say so.
    let until = Instant::now() + PATIENCE;
    while rec.expect("progress")["resets"].as_u64().unwrap_or(0) == 0 {
        assert!(Instant::now() < until, "no reset reported");
    }
    let mut p = Proc::spawn_line(&format!(
        "produce --ring {} --seconds 1 --video 320x240@30 --audio none",
        ring.0
    ));
    let sent = p.expect("produced")["video"][0]["sent"].as_u64().unwrap();
    let (code, err) = p.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(sent > 0);
    let until = Instant::now() + PATIENCE;
    while rec.expect("progress")["video_frames"].as_u64().unwrap() < sent {
        assert!(
            Instant::now() < until,
            "frames after the reset not recorded"
        );
    }
    rec.signal(libc::SIGTERM);
    let r = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("the ring was reset and recording goes on"),
        "{err}"
    );
    assert_eq!(r["ring"]["resets"].as_u64(), Some(1), "{r}");
    assert_eq!(
        read_y4m(&dir.path().join("video-0.y4m")).frames.len() as u64,
        sent
    );
}

#[test]
fn produce_participants_gives_each_stream_id_its_video_and_audio() {
    let ring = ring_name("participants");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring, dir.path());
    let mut prod = Proc::spawn_line(&format!("produce --ring {} --video 160x120@10 --audio 48000x1 --participants 2 --first-stream 3 --seconds 1", ring.0));
    let produced = prod.expect("produced");
    assert_eq!(prod.wait().0, Some(0));
    let ids = |k: &str| -> Vec<u64> {
        produced[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["stream"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids("video"), [3, 4]);
    assert_eq!(ids("audio"), [3, 4]);
    rec.signal(libc::SIGINT);
    let recorded = rec.expect("recorded");
    assert_eq!(rec.wait().0, Some(0));
    for s in [3, 4] {
        assert!(dir.path().join(format!("video-{s}.y4m")).exists());
        assert!(dir.path().join(format!("audio-{s}.wav")).exists());
    }
    // Each stream ended with its producer.
    for s in recorded["streams"].as_array().unwrap() {
        assert_eq!(s["ends"], 1, "{s}");
    }
}
