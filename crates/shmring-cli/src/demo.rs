//! `shmring demo`: a recorder and a producer in two processes on a fresh ring, a
//! live status line, and a summary. Children are stopped and the ring removed on
//! every way out (end, Ctrl-C, error, panic).

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::media::Format;
use shmring_host::{ChildGuard, CpuMeter};

use crate::cli::DemoArgs;
use crate::procinfo;
use crate::produce::{parse_audio, parse_video};
use crate::record::recorder::check_output_dir;
use crate::ringref::Watched;
use crate::{fail, mb, stop_flag, CmdError};

/// Removes the ring NAME when dropped if it is stale: the recorder removes it
/// itself unless it was killed, and a ring someone else holds (the name was
/// taken) is left alone.
struct RingGuard(String);

impl Drop for RingGuard {
    fn drop(&mut self) {
        let _ = shmring::remove_stale(&self.0);
    }
}

#[derive(Default)]
struct Shared {
    ready: bool,
    progress: Option<Value>,
    final_json: Option<Value>,
    stderr: String,
}

/// Reads a child's JSON lines (stdout) and keeps its stderr.
fn readers(
    child: &mut Child,
    key: &'static str,
    shared: Arc<Mutex<Shared>>,
    ready: Option<mpsc::Sender<()>>,
) -> Vec<JoinHandle<()>> {
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let sh = shared.clone();
    let a = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let mut s = sh.lock().unwrap_or_else(|p| p.into_inner());
            if v.get("ready").is_some() {
                s.ready = true;
                if let Some(tx) = &ready {
                    let _ = tx.send(());
                }
            } else if let Some(p) = v.get("progress") {
                s.progress = Some(p.clone());
            } else if let Some(f) = v.get(key) {
                s.final_json = Some(f.clone());
            }
        }
    });
    let b = std::thread::spawn(move || {
        let mut buf = String::new();
        let _ = BufReader::new(err).read_to_string(&mut buf);
        shared.lock().unwrap_or_else(|p| p.into_inner()).stderr = buf;
    });
    vec![a, b]
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64().unwrap_or(0)
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().unwrap_or(0.0)
}

pub fn run(a: DemoArgs) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    let video = parse_video(&a.media.video).map_err(|m| fail(2, m))?;
    let audio = parse_audio(&a.media.audio).map_err(|m| fail(2, m))?;
    if !(a.seconds > 0.0 && a.seconds <= 86400.0) {
        return Err(fail(
            2,
            format!(
                "--seconds {}: expected more than 0, at most 86400",
                a.seconds
            ),
        ));
    }
    announce_output(&a, video, audio);
    check_output_dir(&a.out).map_err(|m| fail(1, m))?;
    let out_dir: PathBuf = std::fs::canonicalize(&a.out).unwrap_or(a.out.clone());
    let exe = std::env::current_exe()
        .map_err(|e| fail(1, format!("cannot find the shmring executable: {e}")))?;
    // By default the recorder serves a sealed memfd on a socket in a private
    // directory (removed with the socket on every way out) and the producer
    // connects to it; `--create NAME` uses a named ring.
    let (ring, _ring_guard, _sock_dir) = match &a.create {
        Some(name) => (name.clone(), Some(RingGuard(name.clone())), None),
        None => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("shmring-demo-{}-", std::process::id()))
                .tempdir()
                .map_err(|e| fail(1, format!("cannot create the socket directory: {e}")))?;
            (
                dir.path().join("ring.sock").display().to_string(),
                None,
                Some(dir),
            )
        }
    };
    let (rflag, pflag) = if a.create.is_some() {
        ("--create", "--ring")
    } else {
        ("--listen", "--connect")
    };

    let mut rcmd = Command::new(&exe);
    rcmd.args(["record", rflag, &ring, "--progress", "--out"])
        .arg(&out_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if a.encode {
        rcmd.arg("--encode");
    }
    let mut rchild = rcmd.spawn().map_err(|e| {
        fail(
            1,
            format!("cannot start the recorder ({}): {e}", exe.display()),
        )
    })?;
    let rshared = Arc::new(Mutex::new(Shared::default()));
    let (tx, rx) = mpsc::channel();
    let mut threads = readers(&mut rchild, "recorded", rshared.clone(), Some(tx));
    let mut rec = ChildGuard::new(rchild).with_drop_grace(Duration::from_secs(3));

    // Wait for the ring.
    let t0 = Instant::now();
    loop {
        if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            return Err(fail(130, "interrupted"));
        }
        if rec.exited().is_some() || t0.elapsed() > Duration::from_secs(10) {
            rec.terminate(Duration::from_secs(1));
            for t in threads.drain(..) {
                let _ = t.join();
            }
            let err = rshared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stderr
                .clone();
            return Err(fail(
                1,
                format!(
                    "the recorder did not start: {}",
                    err.trim().replace('\n', "; ")
                ),
            ));
        }
    }

    let secs = format!("{}", a.seconds);
    let m = &a.media;
    let streams = m.streams.to_string();
    let mut pchild = Command::new(&exe)
        .args([
            "produce", pflag, &ring, "--video", &m.video, "--audio", &m.audio,
        ])
        .args(["--streams", &streams, "--seconds", &secs])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(1, format!("cannot start the producer: {e}")))?;
    let pshared = Arc::new(Mutex::new(Shared::default()));
    threads.extend(readers(&mut pchild, "produced", pshared.clone(), None));
    let mut prod = ChildGuard::new(pchild).with_drop_grace(Duration::from_secs(3));

    let seg = if a.create.is_some() {
        Watched::open(Some(&ring), None).ok()
    } else {
        Watched::open(None, Some(Path::new(&ring))).ok()
    };
    let tty = std::io::stdout().is_terminal();
    println!(
        "shmring demo: recorder pid {} and producer pid {} on {} {ring}; {} s of {} video x{} + {} audio into {}",
        rec.pid(),
        prod.pid(),
        if a.create.is_some() { "ring" } else { "socket" },
        a.seconds,
        a.media.video,
        a.media.streams,
        a.media.audio,
        out_dir.display()
    );
    let (mut rcpu, mut pcpu) = (CpuMeter::new(rec.pid()), CpuMeter::new(prod.pid()));
    let (mut r_peak_kb, mut p_peak_kb) = (0u64, 0u64);
    let start = Instant::now();
    let mut last = (0.0f64, 0u64, 0u64, 0u64);
    let mut rates = (0.0f64, 0.0f64, 0.0f64);
    let mut ticks = 0u64;
    let interrupted = loop {
        if stop.load(Ordering::Relaxed) {
            break true;
        }
        if prod.exited().is_some() || rec.exited().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed().as_millis() / 500 <= ticks as u128 {
            continue;
        }
        ticks += 1;
        let (rc, pc) = (rcpu.sample(), pcpu.sample());
        let rm = procinfo::memory(rec.pid()).map_or(0, |m| m.rss_without_shmem_kb());
        let pm = procinfo::memory(prod.pid()).map_or(0, |m| m.rss_without_shmem_kb());
        let show = |pct: Option<f64>, kb: u64| {
            if kb == 0 {
                "exited".to_string()
            } else {
                format!(
                    "CPU {:4.1}% RSS {:.1} MiB",
                    pct.unwrap_or(0.0),
                    kb as f64 / 1024.0
                )
            }
        };
        r_peak_kb = r_peak_kb.max(rm);
        p_peak_kb = p_peak_kb.max(pm);
        let prog = rshared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .progress
            .clone()
            .unwrap_or(Value::Null);
        let (vf, ap, by, t) = (
            u(&prog, &["video_frames"]),
            u(&prog, &["audio_packets"]),
            u(&prog, &["bytes"]),
            f(&prog, &["elapsed_s"]),
        );
        // Rates over the recorder's own clock, between distinct progress reports.
        if t > last.0 + 0.2 {
            let dt = t - last.0;
            rates = (
                (vf - last.1.min(vf)) as f64 / dt,
                (ap - last.2.min(ap)) as f64 / dt,
                mb(by - last.3.min(by)) / dt,
            );
            last = (t, vf, ap, by);
        }
        let (fps, aps, mbs) = rates;
        let st = seg.as_ref().map(|s| s.stats()).unwrap_or_default();
        // A reset (a peer scribbled the ring; the recorder reset it and went on)
        // is rare and worth seeing: shown once there has been one.
        let resets = match st.resets {
            0 => String::new(),
            n => format!("  resets {n}"),
        };
        let line = format!(
            "{:5.1} s  video {vf} ({fps:4.1} fps)  audio {ap} ({aps:3.0}/s)  {mbs:6.1} MB/s  ring {:5.1}/{} MiB  drops {}{resets}  | recorder {} | producer {}",
            start.elapsed().as_secs_f64(),
            st.occupancy as f64 / (1 << 20) as f64,
            st.capacity >> 20,
            st.drops_full,
            show(rc, rm),
            show(pc, pm),
        );
        let mut o = std::io::stdout().lock();
        if tty {
            // One line, even in a narrow terminal.
            let line: String = line.chars().take(term_width().saturating_sub(1)).collect();
            let _ = write!(o, "\r\x1b[2K{line}");
        } else if ticks.is_multiple_of(2) {
            let _ = writeln!(o, "{line}");
        }
        let _ = o.flush();
    };
    if tty {
        println!();
    }
    let (ravg, pavg) = (rcpu.average(), pcpu.average());
    // The producer ends by itself; then the recorder drains the ring and finishes.
    let grace = if interrupted {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(a.seconds as u64 + 10)
    };
    if interrupted {
        prod.signal(libc::SIGTERM);
    }
    let pstatus = prod
        .wait_for(grace)
        .or_else(|| prod.terminate(Duration::from_secs(1)));
    let rstatus = rec.terminate(Duration::from_secs(10));
    drop(seg);
    for t in threads {
        let _ = t.join();
    }
    let rs = std::mem::take(&mut *rshared.lock().unwrap_or_else(|p| p.into_inner()));
    let ps = std::mem::take(&mut *pshared.lock().unwrap_or_else(|p| p.into_inner()));
    summary(
        &rs,
        &ps,
        (ravg, pavg),
        (r_peak_kb, p_peak_kb),
        &out_dir,
        start.elapsed(),
    );
    let ok = |s: Option<std::process::ExitStatus>| s.is_some_and(|s| s.success());
    if interrupted {
        return Err(fail(
            130,
            "interrupted; the files above are complete up to the stop",
        ));
    }
    if !ok(pstatus) {
        return Err(fail(
            1,
            format!(
                "the producer failed ({}): {}",
                pstatus.map_or("killed".into(), |s| s.to_string()),
                ps.stderr.trim().replace('\n', "; ")
            ),
        ));
    }
    if !ok(rstatus) {
        return Err(fail(
            1,
            format!(
                "the recorder failed ({}): {}",
                rstatus.map_or("killed".into(), |s| s.to_string()),
                rs.stderr.trim().replace('\n', "; ")
            ),
        ));
    }
    Ok(())
}

/// Says, before anything is written, where the files go, about how much, how to
/// send them elsewhere, and which files of a previous run will be replaced.
fn announce_output(a: &DemoArgs, video: Option<(u32, u32, u32)>, audio: Option<(u32, u32)>) {
    let secs = a.seconds;
    let y4m_frame = |w: u32, h: u32| Format::I420.plane_table(w, h).bytes() + 6;
    let video_bytes = video.map_or(0.0, |(w, h, fps)| {
        a.media.streams as f64 * secs * fps as f64 * y4m_frame(w, h) as f64
    });
    let audio_bytes = audio.map_or(0.0, |(rate, ch)| secs * rate as f64 * ch as f64 * 2.0);
    let amount = |b: f64| {
        if b >= 1e8 {
            format!("about {:.2} GB", b / 1e9)
        } else {
            format!("about {:.1} MB", b / 1e6)
        }
    };
    let size = if a.encode {
        format!("{} of audio and an H.264 MP4", amount(audio_bytes))
    } else {
        amount(video_bytes + audio_bytes)
    };
    let shown = std::path::absolute(&a.out).unwrap_or_else(|_| a.out.clone());
    println!(
        "shmring demo: writing {size} into {} (elsewhere: `shmring demo --out DIR`, or `make demo DEMO_OUT=DIR`)",
        shown.display()
    );
    let old: Vec<String> = std::fs::read_dir(&a.out)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            (n.starts_with("video-") || n.starts_with("audio-"))
                && [".y4m", ".wav", ".mp4"].iter().any(|x| n.ends_with(x))
        })
        .collect();
    if !old.is_empty() {
        let mut old = old;
        old.sort();
        println!(
            "shmring demo: replacing the previous run's {} there",
            old.join(", ")
        );
    }
}

fn summary(
    rs: &Shared,
    ps: &Shared,
    cpu: (Option<f64>, Option<f64>),
    peak_kb: (u64, u64),
    out_dir: &Path,
    elapsed: Duration,
) {
    let null = Value::Null;
    let r = rs.final_json.as_ref().unwrap_or(&null);
    let p = ps.final_json.as_ref().unwrap_or(&null);
    println!("shmring demo: summary after {:.1} s", elapsed.as_secs_f64());
    let streams = r["streams"].as_array().cloned().unwrap_or_default();
    let received = |kind: &str, id: u64| {
        streams
            .iter()
            .find(|s| s["kind"] == kind && s["stream"].as_u64() == Some(id))
            .map(|s| (u(s, &["received"]), u(s, &["gaps"])))
            .unwrap_or((0, 0))
    };
    for v in p["video"].as_array().into_iter().flatten() {
        let id = u(v, &["stream"]);
        let (got, lost) = received("video", id);
        println!(
            "  video stream {id}: {} frames sent, {got} received, {} dropped by the producer (ring full), {lost} missing at the recorder",
            u(v, &["sent"]),
            u(v, &["dropped"])
        );
    }
    if p["audio"].is_object() {
        let a = &p["audio"];
        let (got, lost) = received("audio", u(a, &["stream"]));
        println!(
            "  audio stream {}: {} packets sent, {got} received, {} dropped by the producer, {lost} missing at the recorder",
            u(a, &["stream"]),
            u(a, &["sent"]),
            u(a, &["dropped"])
        );
    }
    let ring = &r["ring"];
    println!(
        "  ring: {:.1} MB in {} records, peak occupancy {:.1} MiB, {} abandoned, {} corruption, {} malformed headers",
        mb(u(ring, &["bytes_consumed"])),
        u(ring, &["records_consumed"]),
        u(ring, &["peak_occupancy"]) as f64 / (1 << 20) as f64,
        u(ring, &["abandoned"]),
        u(ring, &["corruption"]),
        u(r, &["malformed"])
    );
    println!(
        "  recorder: CPU {:.2} s ({:.1}% of a core; sampled {:.1}%), peak RSS without the ring {:.1} MiB (sampled {:.1} MiB); {} writes, {:.0} KiB per write",
        f(r, &["cpu_s"]),
        f(r, &["cpu_percent"]),
        cpu.0.unwrap_or(0.0),
        u(r, &["peak_rss_kb"]) as f64 / 1024.0,
        peak_kb.0 as f64 / 1024.0,
        u(r, &["write_calls"]),
        u(r, &["bytes_per_write_avg"]) as f64 / 1024.0
    );
    println!(
        "  producer: CPU {:.2} s ({:.1}% of a core; sampled {:.1}%), peak RSS without the ring {:.1} MiB",
        f(p, &["cpu_s"]),
        f(p, &["cpu_percent"]),
        cpu.1.unwrap_or(0.0),
        peak_kb.1 as f64 / 1024.0
    );
    println!("  files in {}:", out_dir.display());
    for s in &streams {
        for fl in s["files"].as_array().into_iter().flatten() {
            let unit = if s["kind"] == "video" {
                "frames"
            } else {
                "samples"
            };
            println!(
                "    {}  {} {unit}  {:.1} MB{}",
                fl["path"].as_str().unwrap_or("?"),
                u(fl, &["units"]),
                mb(u(fl, &["bytes"])),
                fl["note"]
                    .as_str()
                    .map(|n| format!("  ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    if r.is_null() {
        println!(
            "  the recorder gave no report: {}",
            rs.stderr.trim().replace('\n', "; ")
        );
    }
    if let Some(e) = r["error"].as_str() {
        println!("  recorder error: {e}");
    }
}

/// Columns of the terminal on stdout (200 if unknown).
fn term_width() -> usize {
    // SAFETY: an all-zero winsize is valid; TIOCGWINSZ writes one into it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: fd 1 and a valid, writable winsize.
    let r = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        200
    }
}
