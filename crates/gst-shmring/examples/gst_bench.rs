//! GStreamer's `shmsink → shmsrc` against `shmringsink → shmringsrc`, and the same
//! pipeline in one process as the floor: 1080p I420 from `videotestsrc` (which
//! writes every byte of every frame) to an `appsink` whose reader reads every byte.
//!
//! ```text
//! cargo run --release -p gst-shmring --example gst_bench -- [--seconds S] [--runs N]
//! ```
//!
//! Each case runs its producer and consumer as child processes of this one; CPU
//! is user + system time of both (getrusage of the reaped children), per GiB the
//! consumer received; MB/s is from the start of the case to the consumer's last
//! frame (start-up included). `rated` paces the producer at 48 frames/s (149
//! MB/s); `unthrottled` lets it run flat out. A producer still running 10 s after
//! its consumer is done is killed, and the row says so.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use gst::prelude::*;

const W: u32 = 1920;
const H: u32 = 1080;
const FPS: u32 = 48;

fn caps() -> String {
    format!("video/x-raw,format=I420,width={W},height={H},framerate={FPS}/1")
}

fn init() {
    gst::init().expect("GStreamer initialises");
    gstshmring::plugin_register_static().expect("elements register");
}

/// Reads every byte of `frames` buffers from the appsink `out`; prints the count.
fn consume(pipeline: &gst::Element, frames: u64) -> Result<(), String> {
    let sink = pipeline
        .downcast_ref::<gst::Bin>()
        .and_then(|b| b.by_name("out"))
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or("no appsink named out")?;
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|e| format!("consumer does not start: {e}"))?;
    let (mut got, mut bytes, mut sum) = (0u64, 0u64, 0u64);
    while got < frames {
        let Some(s) = sink.try_pull_sample(gst::ClockTime::from_seconds(30)) else {
            break;
        };
        let b = s.buffer().ok_or("sample without buffer")?;
        let map = b.map_readable().map_err(|_| "unmappable buffer")?;
        let (words, rest) = map.as_slice().split_at(map.len() / 8 * 8);
        for c in words.chunks_exact(8) {
            sum = sum.wrapping_add(u64::from_ne_bytes(c.try_into().expect("8 bytes")));
        }
        for &x in rest {
            sum = sum.wrapping_add(x as u64);
        }
        bytes += map.len() as u64;
        got += 1;
    }
    let _ = pipeline.set_state(gst::State::Null);
    println!("frames={got} bytes={bytes} sum={sum:x}");
    Ok(())
}

fn role(args: &[String]) -> Result<(), String> {
    init();
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or(format!("missing {k}"))
    };
    let frames: u64 = get("--frames")?.parse().map_err(|_| "bad --frames")?;
    let live = get("--live")? == "true";
    let path = get("--path")?;
    let src = format!(
        "videotestsrc is-live={live} num-buffers={frames} ! {}",
        caps()
    );
    let desc = match args[0].as_str() {
        "floor" => format!("{src} ! appsink name=out sync=false"),
        "shm-producer" => format!(
            "{src} ! shmsink socket-path={path} wait-for-connection=true sync=false shm-size={}",
            64 << 20
        ),
        "shm-consumer" => format!(
            "shmsrc socket-path={path} is-live=true do-timestamp=true ! {} ! appsink name=out sync=false",
            caps()
        ),
        "ring-producer" => format!("{src} ! shmringsink ring={path} sync=false"),
        "ring-consumer" => {
            format!("shmringsrc ring={path} ! appsink name=out sync=false max-buffers=2")
        }
        r => return Err(format!("unknown role {r}")),
    };
    let p = gst::parse::launch(&desc).map_err(|e| format!("{desc}: {e}"))?;
    if args[0].ends_with("producer") {
        p.set_state(gst::State::Playing)
            .map_err(|e| format!("producer does not start: {e}"))?;
        let bus = p.bus().expect("bus");
        let msg = bus.timed_pop_filtered(
            gst::ClockTime::from_seconds(600),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        );
        let _ = p.set_state(gst::State::Null);
        match msg.as_ref().map(|m| m.view()) {
            Some(gst::MessageView::Eos(_)) => Ok(()),
            Some(gst::MessageView::Error(e)) => Err(e.error().to_string()),
            _ => Err("producer did not finish".into()),
        }
    } else {
        consume(&p, frames)
    }
}

fn children_cpu() -> f64 {
    shmring_host::rusage(true).cpu_s()
}

/// What one case measured.
struct Measured {
    mbs: f64,
    cpu_per_gib: f64,
    frames: u64,
    /// The producer did not end within [`GRACE`] after the consumer had all its
    /// frames, and was killed.
    producer_hung: bool,
}

/// How long a producer may take to end after its consumer is done.
const GRACE: Duration = Duration::from_secs(10);

/// Waits for `p` up to [`GRACE`], then kills it; whether it had to be killed.
fn reap(mut p: std::process::Child) -> bool {
    let until = Instant::now() + GRACE;
    while Instant::now() < until {
        if let Ok(Some(_)) = p.try_wait() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = p.kill();
    let _ = p.wait();
    true
}

/// Runs one case.
fn case(name: &str, frames: u64, live: bool) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let tag = format!("gstbench-{}-{name}", std::process::id());
    let path = if name == "shm" {
        std::env::temp_dir()
            .join(&tag)
            .to_string_lossy()
            .into_owned()
    } else {
        tag.clone()
    };
    let spawn = |r: &str| {
        Command::new(&exe)
            .args(["--role", r, "--frames", &frames.to_string()])
            .args(["--live", &live.to_string(), "--path", &path])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| e.to_string())
    };
    let cpu0 = children_cpu();
    // The ring outlives both processes of the ring case (the consumer opens it).
    let seg = if name == "ring" {
        Some(
            shmring::Address::create(&tag, shmring::Config::default())
                .open()
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    let start = Instant::now();
    let (consumer, producer) = match name {
        "floor" => (spawn("floor")?, None),
        "shm" => {
            // shmsink listens; shmsrc connects.
            let p = spawn("shm-producer")?;
            std::thread::sleep(Duration::from_millis(300));
            (spawn("shm-consumer")?, Some(p))
        }
        _ => {
            let c = spawn("ring-consumer")?;
            std::thread::sleep(Duration::from_millis(300));
            (c, Some(spawn("ring-producer")?))
        }
    };
    let out = consumer.wait_with_output().map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let producer_hung = producer.map(reap).unwrap_or(false);
    drop(seg);
    if name == "shm" {
        let _ = std::fs::remove_file(&path);
    }
    let cpu = children_cpu() - cpu0;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (got, bytes) = (field("frames="), field("bytes="));
    if !out.status.success() || bytes == 0 {
        return Err(format!("consumer failed: {text}"));
    }
    let gib = bytes as f64 / (1u64 << 30) as f64;
    Ok(Measured {
        mbs: bytes as f64 / secs / 1e6,
        cpu_per_gib: cpu / gib,
        frames: got,
        producer_hung,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--role") {
        return match role(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gst_bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let opt = |k: &str, d: u64| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (seconds, runs) = (opt("--seconds", 8), opt("--runs", 1));
    println!("| mode | pipeline | frames | MB/s | CPU s/GiB (both processes) | × in-process |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (mode, live, frames) in [
        ("rated 149 MB/s", true, seconds * FPS as u64),
        ("unthrottled", false, seconds * FPS as u64 * 3),
    ] {
        for _ in 0..runs {
            let mut floor = None;
            for (name, label) in [
                ("floor", "videotestsrc ! appsink, one process"),
                ("shm", "shmsink → shmsrc"),
                ("ring", "shmringsink → shmringsrc"),
            ] {
                match case(name, frames, live) {
                    Ok(m) => {
                        let f = *floor.get_or_insert(m.cpu_per_gib);
                        let note = if m.producer_hung {
                            " (producer hung after its reader left; killed)"
                        } else {
                            ""
                        };
                        println!(
                            "| {mode} | {label}{note} | {} | {:.0} | {:.3} | {:.2} |",
                            m.frames,
                            m.mbs,
                            m.cpu_per_gib,
                            m.cpu_per_gib / f
                        );
                    }
                    Err(e) => println!("| {mode} | {label} | – | – | failed: {e} | – |"),
                }
            }
        }
    }
    ExitCode::SUCCESS
}
