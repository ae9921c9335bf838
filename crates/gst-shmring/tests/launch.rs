//! The pipelines people write first, run as they write them: `gst-launch-1.0`
//! processes finding the plugin through `GST_PLUGIN_PATH` (a directory holding it
//! alone), default encoders, framerate caps, muxers; every file written is
//! checked with ffprobe. And a ring's media carried to a ring and a recording on
//! another host, over RTP/UDP between two network namespaces.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shmring_host::ChildGuard;

use common::RingName;

const LIMIT: Duration = Duration::from_secs(120);

/// A directory holding the plugin alone, and a registry of its own, as a user's
/// `GST_PLUGIN_PATH` would (the build's cdylib, next to this test).
struct PluginDir(tempfile::TempDir);

impl PluginDir {
    fn new() -> PluginDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let exe = std::env::current_exe().expect("the test's path");
        let built = exe
            .parent()
            .into_iter()
            .flat_map(|d| [d.join("libgstshmring.so"), d.join("../libgstshmring.so")])
            .find(|p| p.exists())
            .expect("the plugin is built beside the tests (cargo test -p gst-shmring)");
        std::fs::copy(&built, dir.path().join("libgstshmring.so")).expect("plugin copied");
        PluginDir(dir)
    }

    /// `gst-launch-1.0 -e ARGS` (EOS on interrupt), as a user runs it, with `env`.
    fn launch(&self, desc: &str, wrap: &[&str]) -> Proc {
        let mut cmd = if wrap.is_empty() {
            Command::new("gst-launch-1.0")
        } else {
            let mut c = Command::new(wrap[0]);
            c.args(&wrap[1..]).arg("gst-launch-1.0");
            c
        };
        cmd.arg("-e")
            .args(desc.split_whitespace())
            .env("GST_PLUGIN_PATH", self.0.path())
            .env("GST_REGISTRY", self.0.path().join("registry.bin"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Proc(ChildGuard::spawn(&mut cmd).expect("gst-launch-1.0 runs (install gstreamer1.0-tools)"))
    }
}

/// A gst-launch-1.0 process (the host kit's guard: killed and reaped on drop).
struct Proc(ChildGuard);

impl Proc {
    /// Waits for the end (failing after LIMIT): success and the output.
    fn finish(mut self) -> (bool, String) {
        if self.0.wait_for(LIMIT).is_none() {
            self.0.kill();
            panic!("gst-launch-1.0 still running after {LIMIT:?}");
        }
        let out = self.0.wait_with_output().expect("output");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// SIGINT (gst-launch-1.0 -e then sends EOS and ends).
    fn interrupt(&self) {
        self.0.interrupt();
    }
}

fn wrap(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// ffprobe of a file: (codec, frames decoded, frame rate) per stream, video first.
fn probe(path: &Path) -> Vec<(String, u64, String)> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames"])
        .args([
            "-show_entries",
            "stream=codec_type,codec_name,nb_read_frames,r_frame_rate",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    assert!(
        out.status.success(),
        "ffprobe {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut s: Vec<(String, String, u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[1].to_string(),
                f[0].to_string(),
                f.get(3).and_then(|v| v.parse().ok()).unwrap_or(0),
                f.get(2).unwrap_or(&"").to_string(),
            )
        })
        .collect();
    s.sort_by_key(|(t, ..)| t != "video");
    s.into_iter().map(|(_, c, n, r)| (c, n, r)).collect()
}

/// Video samples in a file, as its container counts them (no decoding).
fn samples(path: &Path) -> u64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    assert!(out.status.success(), "ffprobe {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe {}: {:?}", path.display(), out.stdout))
}

fn wait_for_ring(ring: &RingName) {
    let start = Instant::now();
    while !ring.exists() {
        assert!(start.elapsed() < LIMIT, "ring {} never created", ring.0);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// The blocker and what users write around it: x264enc with its defaults
/// into matroskamux; framerate caps and avimux; a video-only recording of a ring
/// that also carries audio; a consumer started long before its producer.
#[test]
fn first_pipelines_as_users_write_them() {
    let plugin = PluginDir::new();
    let dir = tempfile::tempdir().unwrap();
    let video =
        "videotestsrc num-buffers=90 ! video/x-raw,format=I420,width=640,height=360,framerate=30/1";
    let cases: [(&str, String, String, u64); 3] = [
        (
            "x264enc defaults ! matroskamux",
            "queue ! x264enc ! h264parse ! matroskamux".into(),
            "out.mkv".into(),
            90,
        ),
        (
            "framerate caps ! avimux",
            "video/x-raw,framerate=30/1 ! avimux".into(),
            "out.avi".into(),
            90,
        ),
        (
            "video-only recording of an A/V ring",
            "videoconvert ! x264enc tune=zerolatency ! mp4mux".into(),
            "out.mp4".into(),
            90,
        ),
    ];
    for (what, chain, name, frames) in cases {
        let ring = RingName::new("gst", "launch");
        let path = file(dir.path(), &name);
        let consumer = plugin.launch(
            &format!(
                "shmringsrc ring={} create=true ! {chain} ! filesink location={}",
                ring.0,
                path.display()
            ),
            &[],
        );
        wait_for_ring(&ring);
        let audio = if what.contains("A/V") {
            format!(
                " audiotestsrc num-buffers=300 samplesperbuffer=480 ! audio/x-raw,rate=48000,channels=2 ! shmringsink ring={} stream=1",
                ring.0
            )
        } else {
            String::new()
        };
        let producer = plugin.launch(
            &format!("{video} ! shmringsink ring={}{audio}", ring.0),
            &[],
        );
        let (ok, out) = producer.finish();
        assert!(ok, "{what}: producer: {out}");
        // The producer's end of stream ends the consumer's recording.
        let (ok, out) = consumer.finish();
        assert!(ok, "{what}: consumer: {out}");
        let p = probe(&path);
        eprintln!("{what}: {} {p:?}", path.display());
        assert_eq!(p[0].1, frames, "{what}: every frame: {p:?}");
        assert_eq!(p[0].2, "30/1", "{what}: the producer's frame rate: {p:?}");
    }
    // A consumer started long before its producer (eos-after counts from the
    // last producer, not from the start).
    let ring = RingName::new("gst", "early");
    let path = file(dir.path(), "early.mp4");
    let consumer = plugin.launch(
        &format!(
            "shmringsrc ring={} create=true eos-after=1000 ! videoconvert ! x264enc tune=zerolatency ! mp4mux ! filesink location={}",
            ring.0,
            path.display()
        ),
        &[],
    );
    wait_for_ring(&ring);
    std::thread::sleep(Duration::from_millis(2500));
    let producer = plugin.launch(
        &format!(
            "videotestsrc num-buffers=60 ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! shmringsink ring={}",
            ring.0
        ),
        &[],
    );
    assert!(producer.finish().0);
    let (ok, out) = consumer.finish();
    assert!(ok, "{out}");
    assert_eq!(probe(&path)[0].1, 60);
}

/// Caps changes mid-stream (the resolution up and down, the frame rate down)
/// from one producer, through the guide's default encoder (x264enc with its
/// look-ahead) into an MP4, alone and through a tee into two: every frame is in
/// every file, the producer keeps its pace and ends, the recordings end.
#[test]
fn caps_changes_are_recorded_whole_through_the_default_encoder_and_a_tee() {
    let plugin = PluginDir::new();
    let dir = tempfile::tempdir().unwrap();
    let encode = |name: &str| {
        format!(
            "queue ! videoconvert ! x264enc ! h264parse ! mp4mux ! filesink location={}",
            file(dir.path(), name).display()
        )
    };
    let cases = [
        (encode("one.mp4"), vec!["one.mp4"]),
        (
            format!(
                "tee name=t t. ! {} t. ! {}",
                encode("a.mp4"),
                encode("b.mp4")
            ),
            vec!["a.mp4", "b.mp4"],
        ),
    ];
    // 45 frames of 320x240 at 30/1, 45 of 1280x720 (23 of them fill the default
    // ring), 20 of 320x240 at 10/1.
    let shapes = [(320, 240, 30, 45), (1280, 720, 30, 45), (320, 240, 10, 20)];
    let frames: u64 = shapes.iter().map(|s| s.3).sum();
    for (chain, files) in cases {
        let ring = RingName::new("gst", "capschange");
        let consumer = plugin.launch(
            &format!("shmringsrc ring={} create=true ! {chain}", ring.0),
            &[],
        );
        wait_for_ring(&ring);
        let mut line = format!("concat name=c ! shmringsink ring={}", ring.0);
        for (w, h, fps, n) in shapes {
            line.push_str(&format!(
                " videotestsrc num-buffers={n} ! video/x-raw,format=I420,width={w},height={h},framerate={fps}/1 ! c."
            ));
        }
        let (ok, out) = plugin.launch(&line, &[]).finish();
        assert!(ok, "{chain}: producer: {out}");
        let (ok, out) = consumer.finish();
        assert!(ok, "{chain}: consumer: {out}");
        for name in files {
            let path = file(dir.path(), name);
            let p = probe(&path);
            eprintln!("{chain}: {name}: {p:?}");
            assert_eq!(p[0].0, "h264");
            // The samples the file holds (ffmpeg's decoder stumbles on the frame
            // after each size change of mp4mux's files, with or without a ring).
            assert_eq!(samples(&path), frames, "{name}: every frame");
        }
    }
}

/// One gst-launch-1.0 line records a two-participant meeting: a pad per stream
/// id and kind, each participant's H.264 (x264enc defaults) and AAC muxed into a
/// file of its own.
#[test]
fn one_launch_line_records_each_participant_to_its_own_file() {
    let plugin = PluginDir::new();
    let dir = tempfile::tempdir().unwrap();
    let ring = RingName::new("gst", "meeting");
    let mut line = format!("shmringdemux name=d ring={} create=true", ring.0);
    for p in 0..2 {
        line.push_str(&format!(
            " d.video_{p} ! queue ! videoconvert ! x264enc ! h264parse ! mp4mux name=m{p} ! filesink location={}\
             d.audio_{p} ! queue ! audioconvert ! avenc_aac ! m{p}.",
            file(dir.path(), &format!("p{p}.mp4")).display()
        ));
        line = line.replace(".mp4d.", ".mp4 d.");
    }
    let consumer = plugin.launch(&line, &[]);
    wait_for_ring(&ring);
    let producers: Vec<Proc> = (0..2)
        .map(|p| {
            plugin.launch(
                &format!(
                    "videotestsrc is-live=true num-buffers=60 ! video/x-raw,format=I420,width=640,height=360,framerate=30/1 ! shmringsink ring={r} stream={p} \
                     audiotestsrc is-live=true num-buffers=200 samplesperbuffer=480 ! audio/x-raw,rate=48000,channels=2 ! shmringsink ring={r} stream={p}",
                    r = ring.0
                ),
                &[],
            )
        })
        .collect();
    for p in producers {
        let (ok, out) = p.finish();
        assert!(ok, "{out}");
    }
    let (ok, out) = consumer.finish();
    assert!(ok, "{out}");
    for p in 0..2 {
        let got = probe(&file(dir.path(), &format!("p{p}.mp4")));
        eprintln!("participant {p}: {got:?}");
        assert_eq!(got[0].0, "h264");
        assert_eq!(got[0].1, 60, "participant {p}: every frame");
        assert_eq!(got[1].0, "aac", "participant {p}: its audio");
        assert!(got[1].1 > 0);
    }
}

/// Two network namespaces joined by a veth pair, removed on drop (even when the
/// test fails). `None` where namespaces are not permitted.
struct NetNs {
    a: String,
    b: String,
}

impl NetNs {
    fn create() -> Option<NetNs> {
        let tag = std::process::id() % 100_000;
        let ns = NetNs {
            a: format!("shmring-a-{tag}"),
            b: format!("shmring-b-{tag}"),
        };
        let ip = |args: &str| {
            Command::new("ip")
                .args(args.split_whitespace())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let (a, b) = (&ns.a, &ns.b);
        let (va, vb) = (format!("vsa{tag}"), format!("vsb{tag}"));
        let ok = ip(&format!("netns add {a}"))
            && ip(&format!("netns add {b}"))
            && ip(&format!("link add {va} type veth peer name {vb}"))
            && ip(&format!("link set {va} netns {a}"))
            && ip(&format!("link set {vb} netns {b}"))
            && ip(&format!("-n {a} addr add 10.199.7.1/24 dev {va}"))
            && ip(&format!("-n {b} addr add 10.199.7.2/24 dev {vb}"))
            && ip(&format!("-n {a} link set {va} up"))
            && ip(&format!("-n {b} link set {vb} up"))
            && ip(&format!("-n {a} link set lo up"))
            && ip(&format!("-n {b} link set lo up"));
        // Dropped on failure too: whatever was made is removed.
        ok.then_some(ns)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The recipe of the guide's "Beyond one host" (docs/GUIDE.md): host A's ring is read by a
/// pipeline that encodes and sends RTP over UDP; host B receives, decodes and
/// writes into its own ring, whose consumer records it. The two hosts are two
/// network namespaces joined by a veth pair (loopback where namespaces are not
/// permitted).
#[test]
fn a_rings_media_reaches_a_ring_on_another_host_over_rtp() {
    let plugin = PluginDir::new();
    let dir = tempfile::tempdir().unwrap();
    let ns = NetNs::create();
    let (in_a, in_b, host_b): (Vec<String>, Vec<String>, &str) = match &ns {
        Some(ns) => (
            vec!["ip".into(), "netns".into(), "exec".into(), ns.a.clone()],
            vec!["ip".into(), "netns".into(), "exec".into(), ns.b.clone()],
            "10.199.7.2",
        ),
        None => {
            eprintln!("network namespaces are not permitted here: host B is 127.0.0.1");
            (vec![], vec![], "127.0.0.1")
        }
    };
    let (ring_a, ring_b) = (
        RingName::new("gst", "host-a"),
        RingName::new("gst", "host-b"),
    );
    let recording = file(dir.path(), "host-b.mkv");
    // Host B: the recorder, then the receiver writing into its ring.
    let recorder = plugin.launch(
        &format!(
            "shmringsrc ring={} create=true ! queue ! videoconvert ! x264enc tune=zerolatency ! h264parse ! matroskamux ! filesink location={}",
            ring_b.0,
            recording.display()
        ),
        &wrap(&in_b),
    );
    wait_for_ring(&ring_b);
    let receiver = plugin.launch(
        &format!(
            "udpsrc port=5004 caps=application/x-rtp,media=video,encoding-name=H264,payload=96,clock-rate=90000 ! rtpjitterbuffer latency=200 ! rtph264depay ! h264parse ! avdec_h264 ! videoconvert ! video/x-raw,format=I420 ! shmringsink ring={}",
            ring_b.0
        ),
        &wrap(&in_b),
    );
    // Host A: the ring's consumer sends it; a producer writes into it.
    let sender = plugin.launch(
        &format!(
            "shmringsrc ring={} create=true ! videoconvert ! x264enc tune=zerolatency key-int-max=15 ! rtph264pay config-interval=-1 ! udpsink host={host_b} port=5004",
            ring_a.0
        ),
        &wrap(&in_a),
    );
    wait_for_ring(&ring_a);
    std::thread::sleep(Duration::from_millis(500));
    let producer = plugin.launch(
        &format!(
            "videotestsrc is-live=true num-buffers=90 ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! shmringsink ring={}",
            ring_a.0
        ),
        &wrap(&in_a),
    );
    let (ok, out) = producer.finish();
    assert!(ok, "producer: {out}");
    let (ok, out) = sender.finish();
    assert!(ok, "sender (ends with its producer): {out}");
    // UDP carries no end of stream: the receiver is stopped, and its sink's end
    // of stream ends the recording.
    std::thread::sleep(Duration::from_millis(500));
    receiver.interrupt();
    let (ok, out) = receiver.finish();
    assert!(ok, "receiver: {out}");
    let (ok, out) = recorder.finish();
    assert!(ok, "recorder: {out}");
    let p = probe(&recording);
    eprintln!("host B recorded {p:?}");
    assert_eq!(p[0].0, "h264");
    // RTP over UDP may lose what came before the receiver's first key frame.
    assert!(p[0].1 >= 60, "most of the 90 frames: {p:?}");
    drop(ns);
}
