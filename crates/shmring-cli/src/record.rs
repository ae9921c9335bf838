//! `shmring record`: create a ring and record it to files.
//!
//! stdout carries machine-readable lines (one JSON object per line): `{"ready":..}`
//! once the ring exists, `{"progress":..}` with `--progress`, and `{"recorded":..}`
//! at the end. The human summary goes to stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::handoff::ListenerStats;
use shmring::media::{Format, MediaHeader};
use shmring::{Config, Consumer, ConsumerOptions, Listener, Segment, TetherInfo};
use shmring_bench::status::{Look, StatusLine};

use crate::cli::RecordArgs;
use crate::output::ffmpeg_available;
use crate::recorder::{Recorder, RecorderOptions, WriteError};
use crate::ringref::listener_options;
use crate::{fail, mb, procinfo, stop_flag, CmdError};

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// What the hand-off listener did (`--listen`).
pub fn handoff_json(s: &ListenerStats) -> serde_json::Value {
    crate::json::object(s)
}

/// The ring the recorder creates: `capacity_mib` MiB, records up to a quarter of it
/// and never less than one 1080p I420 frame with its media header.
pub fn ring_config(capacity_mib: u64) -> Config {
    let frame = MediaHeader::video(Format::I420, 1920, 1080, 0, 0)
        .expect("1080p I420 is within the media limits")
        .payload_len() as u64;
    Config::for_records(capacity_mib << 20, frame)
}

/// Says on stderr what changed in the ring's health since `seen`: resets (a peer
/// wrote something no honest producer writes; the consumer reset the ring and
/// recording went on) and claims held open past the overtake limit.
fn report_health(seg: &Segment, consumer: &shmring::Consumer, seen: &mut shmring::Health) {
    let h = consumer.health();
    if h.resets != seen.resets {
        eprintln!(
            "shmring record: ring {}: corruption detected ({}); the ring was reset and recording goes on ({} resets)",
            seg.name(),
            h.last_corruption.unwrap_or("unknown"),
            h.resets
        );
    }
    if h.stalled_claims != seen.stalled_claims {
        // The kernel proves which pid holds the slot, not who wrote the claim.
        let holder = match seg.stats().oldest_pending_pid {
            0 => " (its holder is unknown)".to_string(),
            pid => format!(" (which pid {pid} holds)"),
        };
        match h.oldest_pending {
            Some((slot, age)) => eprintln!(
                "shmring record: ring {}: a reservation naming producer slot {slot}{holder} has been open for {} ms; records behind it are recorded meanwhile",
                seg.name(),
                age.as_millis()
            ),
            None => eprintln!(
                "shmring record: ring {}: a reservation stayed open past the limit and was overtaken",
                seg.name()
            ),
        }
    }
    *seen = h;
}

/// A tethered consumer of `seg`, once the ring's consumer has taken it on (it reads
/// every record from then on). Waits for that as long as the ring's consumer lives.
fn tethered(
    seg: &std::sync::Arc<Segment>,
    name: &str,
    opts: ConsumerOptions,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Consumer, CmdError> {
    let c = Consumer::tethered(seg.clone(), opts).map_err(|e| match e {
        shmring::Error::NoConsumer(_) => fail(
            1,
            format!(
                "ring {name:?} has no live consumer: a tethered recorder reads beside the \
                 ring's own consumer (e.g. `shmring record --create {name}`), which must be running"
            ),
        ),
        e => fail(1, format!("cannot attach to ring {name:?}: {e}")),
    })?;
    let start = Instant::now();
    let mut said = false;
    while !c
        .adopted()
        .map_err(|e| fail(1, format!("ring {name:?}: {e}")))?
    {
        if stop.load(Ordering::Relaxed) {
            return Err(fail(
                1,
                format!("ring {name:?}: stopped before the ring's consumer took this reader on"),
            ));
        }
        if !seg.consumer_alive() {
            return Err(fail(
                1,
                format!("ring {name:?}: its consumer went away before it took this reader on"),
            ));
        }
        if !said && start.elapsed() >= Duration::from_secs(2) {
            said = true;
            eprintln!(
                "shmring record: ring {name:?}: waiting for the ring's consumer to take this reader on"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(c)
}

/// A tethered recorder's line as the ring lists it (once the line is gone, as
/// `seen` last); `None` for the ring's consumer.
fn line_of(consumer: &Consumer, seen: &mut Option<TetherInfo>) -> Option<TetherInfo> {
    if consumer.is_tethered() {
        *seen = consumer.tether_info().or(*seen);
    }
    *seen
}

/// Records and bytes this recorder read, counted by itself (the ring's counters
/// are statistics a peer can write).
#[derive(Debug, Default, Clone, Copy)]
struct Read {
    records: u64,
    bytes: u64,
}

impl Read {
    fn add(&mut self, len: usize) {
        self.records += 1;
        self.bytes += len as u64;
    }
}

/// Directories a run creates for its output, removed again (each only if empty)
/// when the run fails, so a failed run leaves no empty directories behind.
pub(crate) struct NewDirs(Vec<PathBuf>);

impl NewDirs {
    /// The ancestors of `dir` (and `dir`) that do not exist yet, deepest first.
    pub(crate) fn missing(dir: &Path) -> NewDirs {
        NewDirs(
            dir.ancestors()
                .filter(|d| !d.as_os_str().is_empty())
                .take_while(|d| !d.exists())
                .map(Path::to_path_buf)
                .collect(),
        )
    }
    /// The run succeeded: keep them.
    pub(crate) fn keep(&mut self) {
        self.0.clear();
    }
}

impl Drop for NewDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            // Fails, and keeps the directory, unless it is empty.
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Ring sizes in MiB the recorder accepts, from the core's rules: every power of
/// two whose ring holds two 1080p frames.
fn usable_mib() -> (u64, u64) {
    let ok: Vec<u64> = (0..16)
        .map(|k| 1u64 << k)
        .filter(|&m| ring_config(m).geometry().is_ok())
        .collect();
    (
        ok.first().copied().unwrap_or(0),
        ok.last().copied().unwrap_or(0),
    )
}

pub fn run(a: RecordArgs) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    if a.listen.is_none() && !(a.allow_uid.is_empty() && a.allow_gid.is_empty()) {
        return Err(fail(2, "--allow-uid and --allow-gid need --listen PATH"));
    }
    if a.fps == 0 {
        return Err(fail(2, "--fps must be at least 1"));
    }
    if a.tether_stall_ms == 0 {
        return Err(fail(2, "--tether-stall-ms 0: expected at least 1"));
    }
    crate::check_seconds(a.seconds)?;
    // Built with the `gst` feature, --encode runs in process (no ffmpeg).
    if a.encode && !cfg!(feature = "gst") && !ffmpeg_available() {
        return Err(fail(
            2,
            "--encode needs ffmpeg, which was not found on PATH: install ffmpeg, or record Y4M without --encode",
        ));
    }
    let mut new_dirs = NewDirs::missing(&a.out);
    let mut rec = Recorder::new(RecorderOptions {
        dir: a.out.clone(),
        fps: (a.fps, 1),
        encode: a.encode,
        preset: a.preset,
        verbose: true,
    })
    .map_err(|m| fail(1, m))?;
    let cfg = ring_config(a.capacity_mib);
    if cfg.geometry().is_err() {
        let (lo, hi) = usable_mib();
        return Err(fail(
            2,
            format!(
                "--capacity-mib {}: not a usable ring size; the ring must hold two 1080p \
                 frames: a power of two from {lo} to {hi} MiB",
                a.capacity_mib
            ),
        ));
    }
    let opts = shmring::ConsumerOptions {
        overtake_after: (a.overtake_after_ms > 0)
            .then(|| Duration::from_millis(a.overtake_after_ms)),
        tether_stall_limit: Duration::from_millis(a.tether_stall_ms),
        ..Default::default()
    };
    // A named ring, or a sealed memfd served on a socket by one listener thread
    // (never on the frame path below), or an existing named ring read beside its
    // own consumer.
    let (seg, label, listener) = match (&a.create, &a.listen, &a.tethered) {
        (_, _, Some(name)) => {
            let seg = Segment::open_named(name)
                .map_err(|e| fail(1, crate::ringref::named_error(name, e)))?;
            (seg, name.clone(), None)
        }
        (_, Some(path), None) => {
            let seg = Segment::create_memfd("shmring-record", &cfg)
                .map_err(|e| fail(1, format!("cannot create a memfd ring: {e}")))?;
            let l = Listener::bind(&seg, path, listener_options(&a.allow_uid, &a.allow_gid))
                .and_then(|l| l.spawn())
                .map_err(|e| fail(1, format!("cannot listen on {}: {e}", path.display())))?;
            (seg, path.display().to_string(), Some(l))
        }
        (Some(name), None, None) => {
            let create = || Segment::create_named(name, &cfg);
            let seg = match create() {
                Err(shmring::Error::Exists(_)) => {
                    let (why, stale) = crate::rings::why_exists(name);
                    if !(stale && a.replace_stale) {
                        return Err(fail(1, format!("cannot create ring: {why}")));
                    }
                    eprintln!(
                        "shmring record: ring {name:?} was left by a process that is gone; replacing it"
                    );
                    // Another recorder may replace it at the same moment: one of us
                    // gets "already exists" (and a live consumer) below.
                    let _ = Segment::unlink_named(name);
                    create()
                }
                r => r,
            }
            .map_err(|e| fail(1, format!("cannot create ring {name:?}: {e}")))?;
            (seg, name.clone(), None)
        }
        (None, None, None) => {
            return Err(fail(
                2,
                "give --create NAME, --listen PATH or --tethered NAME",
            ))
        }
    };
    let consumer = match &a.tethered {
        Some(name) => tethered(&seg, name, opts, &stop)?,
        None => shmring::Consumer::with_options(seg.clone(), opts)
            .map_err(|e| fail(1, format!("ring {}: {e}", seg.name())))?,
    };
    let geo = *seg.geometry();
    emit(json!({"ready": {"ring": label, "capacity": geo.capacity,
        "max_record": geo.max_record, "pid": std::process::id(),
        "tethered": consumer.is_tethered()}}));
    if let Some(p) = &a.ready_file {
        let mut tmp = p.as_os_str().to_owned();
        tmp.push(".tmp");
        let r = std::fs::write(&tmp, format!("{label}\n")).and_then(|_| std::fs::rename(&tmp, p));
        if let Err(e) = r {
            return Err(fail(
                1,
                format!("cannot write ready file {}: {e}", p.display()),
            ));
        }
    }

    let start = Instant::now();
    let deadline = a
        .seconds
        .map(|s| start + Duration::from_secs_f64(s.max(0.0)));
    let tick = Duration::from_millis(500);
    let mut next_tick = start + tick;
    let mut peak_private_kb = procinfo::own_memory().map_or(0, |m| m.private_kb());
    let mut seen = shmring::Health::default();
    let mut write_error: Option<WriteError> = None;
    let mut ring_error: Option<String> = None;
    let mut owner_gone = false;
    let mut line_seen = None;
    let mut read = Read::default();
    // What a person watching sees (the JSON lines of --progress are for programs):
    // redrawn in place on a terminal, a line every 10 s elsewhere.
    let mut status = (!a.progress)
        .then(|| StatusLine::new("shmring record", Duration::from_secs(10), Look::Spinner));
    let wait = Some(Duration::from_millis(100));
    'run: loop {
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        match consumer.next_timeout(wait) {
            Ok(Some(f)) => {
                read.add(f.len());
                // The frame is read in place and released when it goes out of scope.
                if let Err(e) = rec.process(f.meta(), f.payload()) {
                    write_error = Some(e);
                    break 'run;
                }
            }
            Ok(None) => rec.poll(),
            // Reported only when the consumer cannot reset by itself; it does once
            // the frames it waits for are released, which ours always are.
            Err(e @ shmring::Error::Corrupt { .. }) => eprintln!("shmring record: {e}"),
            Err(e) => {
                ring_error = Some(e.to_string());
                break 'run;
            }
        }
        let now = Instant::now();
        if now >= next_tick {
            next_tick = now + tick;
            rec.poll();
            report_health(&seg, &consumer, &mut seen);
            if let Some(m) = procinfo::own_memory() {
                peak_private_kb = peak_private_kb.max(m.private_kb());
            }
            // A tethered recorder ends with the ring's consumer: no producer can
            // write to a ring without one.
            if consumer.is_tethered() && !seg.consumer_alive() {
                owner_gone = true;
                break 'run;
            }
            let line = line_of(&consumer, &mut line_seen);
            let (records, bytes) = (read.records, read.bytes);
            if let Some(s) = &mut status {
                let st = seg.stats();
                let resets = match consumer.resets() {
                    0 => String::new(),
                    n => format!("  resets {n}"),
                };
                s.set(
                    format!(
                        "{label}: {:.0} s  video {}  audio {}  {records} records ({:.1} MB)  \
                         ring {:.1}/{} MiB  drops {}{resets}",
                        start.elapsed().as_secs_f64(),
                        rec.video_frames(),
                        rec.audio_packets(),
                        mb(bytes),
                        st.occupancy as f64 / f64::from(1 << 20),
                        st.capacity >> 20,
                        st.drops_full,
                    ),
                    false,
                );
            }
            if a.progress {
                let st = seg.stats();
                emit(json!({"progress": {
                    "video_frames": rec.video_frames(), "audio_packets": rec.audio_packets(),
                    "malformed": rec.malformed(), "records": records,
                    "bytes": bytes, "tether": line.as_ref().map(crate::stat::tether_json),
                    "occupancy": st.occupancy,
                    "drops_full": st.drops_full, "abandoned": st.abandoned,
                    "resets": st.resets, "stalled_claims": st.stalled_claims,
                    "private_rss_kb": peak_private_kb,
                    "handoff": listener.as_ref().map(|l| handoff_json(&l.stats())),
                    "elapsed_s": start.elapsed().as_secs_f64(),
                }}));
            }
        }
    }
    // Record what was committed before the stop (bounded: a producer still
    // running cannot keep us here).
    if write_error.is_none() && ring_error.is_none() {
        let mut left = match line_of(&consumer, &mut line_seen) {
            Some(line) => line.lag_records,
            None => seg.stats().records_in_flight,
        } + 16;
        while left > 0 {
            left -= 1;
            match consumer.try_next() {
                Ok(Some(f)) => {
                    read.add(f.len());
                    if let Err(e) = rec.process(f.meta(), f.payload()) {
                        write_error = Some(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
    }
    if let Some(s) = status {
        s.finish();
    }
    if let Some(m) = procinfo::own_memory() {
        peak_private_kb = peak_private_kb.max(m.private_kb());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let summary = rec.finish(write_error.as_ref());
    report_health(&seg, &consumer, &mut seen);
    let consumer_resets = consumer.resets();
    let st = seg.stats();
    let line = line_of(&consumer, &mut line_seen);
    let (records, bytes) = (read.records, read.bytes);
    drop(consumer);
    let (cpu_s, max_rss_kb) = procinfo::own_usage();

    let mut j = summary.to_json();
    j["ring"] = json!({
        "name": label, "records_consumed": records,
        "bytes_consumed": bytes, "records_committed": st.records_committed,
        "tether": line.as_ref().map(crate::stat::tether_json),
        "drops_full": st.drops_full, "abandoned": st.abandoned, "corruption": st.corruption,
        "resets": consumer_resets, "stalled_claims": st.stalled_claims,
        "peak_occupancy": st.peak_occupancy,
    });
    if let Some(l) = &listener {
        j["handoff"] = handoff_json(&l.stats());
    }
    j["elapsed_s"] = json!(elapsed);
    j["cpu_s"] = json!(cpu_s);
    j["cpu_percent"] = json!(if elapsed > 0.0 {
        100.0 * cpu_s / elapsed
    } else {
        0.0
    });
    j["peak_private_rss_kb"] = json!(peak_private_kb);
    j["max_rss_kb"] = json!(max_rss_kb);
    emit(json!({ "recorded": j }));

    // Human summary.
    let e = &mut std::io::stderr().lock();
    let _ = writeln!(
        e,
        "shmring record: ring {} for {elapsed:.1} s: {records} records ({:.1} MB) read{}",
        seg.name(),
        mb(bytes),
        match line {
            Some(t) => format!(
                " as tethered consumer (line {}; {} lost to ring resets)",
                t.line, t.lost
            ),
            None => String::new(),
        }
    );
    if owner_gone {
        let _ = writeln!(
            e,
            "  the ring's consumer ended, so the recording ends: nothing more can arrive"
        );
    }
    for s in &summary.streams {
        let _ = writeln!(
            e,
            "  {} stream {}: {} records, {} lost upstream, {} malformed{}",
            s.kind,
            s.stream,
            s.received,
            s.gaps,
            s.malformed,
            if s.restarts > 0 {
                format!(", sequence restarted {} times", s.restarts)
            } else {
                String::new()
            }
        );
        for f in &s.files {
            let unit = if s.kind == "video" {
                "frames"
            } else {
                "samples"
            };
            let _ = writeln!(
                e,
                "    {}: {} {unit}, {:.1} MB{}",
                f.path.display(),
                f.units,
                mb(f.bytes),
                f.note
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    if summary.malformed > 0 {
        let _ = writeln!(
            e,
            "  {} malformed media headers skipped (first: {})",
            summary.malformed,
            summary.first_malformed.as_deref().unwrap_or("?")
        );
    }
    if st.abandoned > 0 {
        let _ = writeln!(
            e,
            "  the ring reports {} records abandoned by producers that died mid-write",
            st.abandoned
        );
    }
    // The recorder's own writes (Y4M and WAV); an encoded file is written by its
    // muxer's sink, which the recorder does not count.
    if summary.writes.calls > 0 {
        let _ = writeln!(
            e,
            "  {} write calls, {:.0} KiB per write on average, {:.0} KiB at most",
            summary.writes.calls,
            summary.writes.average() as f64 / 1024.0,
            summary.writes.max as f64 / 1024.0
        );
    }
    let _ = writeln!(
        e,
        "  CPU {cpu_s:.2} s ({:.1}%), peak private RSS {:.1} MiB",
        if elapsed > 0.0 {
            100.0 * cpu_s / elapsed
        } else {
            0.0
        },
        peak_private_kb as f64 / 1024.0
    );
    if let Some(l) = listener {
        let h = l.stats();
        let _ = writeln!(
            e,
            "  hand-off on {label}: {} producers, {} observers, {} refused ({} by uid/gid), {} failed",
            h.producers,
            h.observers,
            h.refused(),
            h.refused_credentials,
            h.failed
        );
    }
    drop(seg);
    if let Some(w) = write_error {
        return Err(fail(
            1,
            format!("{w}; recording stopped, files cut back to their last whole frame"),
        ));
    }
    if let Some(r) = ring_error {
        return Err(fail(1, format!("reading the ring failed: {r}")));
    }
    new_dirs.keep();
    Ok(())
}
