//! `shmring record`: create a ring and record it to files.
//!
//! stdout carries machine-readable lines (one JSON object per line): `{"ready":..}`
//! once the ring exists, `{"progress":..}` with `--progress`, and `{"recorded":..}`
//! at the end. The human summary goes to stderr.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::media::{Format, MediaHeader};
use shmring::{Config, Segment};

use crate::cli::RecordArgs;
use crate::output::ffmpeg_available;
use crate::recorder::{Recorder, RecorderOptions, WriteError};
use crate::{fail, mb, procinfo, stop_flag, CmdError};

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The ring the recorder creates: `capacity_mib` MiB, records up to a quarter of it
/// and never less than one 1080p I420 frame with its media header.
pub fn ring_config(capacity_mib: u64) -> Config {
    let frame = MediaHeader::video(Format::I420, 1920, 1080, 0, 0).payload_len() as u64;
    Config::for_records(capacity_mib << 20, frame)
}

pub fn run(a: RecordArgs) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    if a.fps == 0 {
        return Err(fail(2, "--fps must be at least 1"));
    }
    // Built with the `gst` feature, --encode runs in process (no ffmpeg).
    if a.encode && !cfg!(feature = "gst") && !ffmpeg_available() {
        return Err(fail(
            2,
            "--encode needs ffmpeg, which was not found on PATH: install ffmpeg, or record Y4M without --encode",
        ));
    }
    let mut rec = Recorder::new(RecorderOptions {
        dir: a.out.clone(),
        fps: (a.fps, 1),
        encode: a.encode,
        verbose: true,
    })
    .map_err(|m| fail(1, m))?;
    let cfg = ring_config(a.capacity_mib);
    if let Err(e) = cfg.geometry() {
        return Err(fail(
            2,
            format!(
                "--capacity-mib {}: {e} (the ring must hold two 1080p frames: a power of two, \
                 at least 8 MiB)",
                a.capacity_mib
            ),
        ));
    }
    let seg = Segment::create_named(&a.create, &cfg)
        .map_err(|e| fail(1, format!("cannot create ring {:?}: {e}", a.create)))?;
    let mut consumer = seg
        .consumer()
        .map_err(|e| fail(1, format!("ring {}: {e}", seg.name())))?;
    let geo = *seg.geometry();
    emit(json!({"ready": {"ring": a.create, "capacity": geo.capacity,
        "max_record": geo.max_record, "pid": std::process::id()}}));
    if let Some(p) = &a.ready_file {
        let mut tmp = p.as_os_str().to_owned();
        tmp.push(".tmp");
        let r =
            std::fs::write(&tmp, format!("{}\n", a.create)).and_then(|_| std::fs::rename(&tmp, p));
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
    let mut resets = 0u64;
    let mut write_error: Option<WriteError> = None;
    let mut ring_error: Option<String> = None;
    let wait = Some(Duration::from_millis(100));
    'run: loop {
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut corrupt = false;
        match consumer.next_timeout(wait) {
            Ok(Some(f)) => {
                // The frame is read in place and released when it goes out of scope.
                if let Err(e) = rec.process(f.meta(), f.payload()) {
                    write_error = Some(e);
                    break 'run;
                }
            }
            Ok(None) => {}
            Err(shmring::Error::Corrupt { .. }) => corrupt = true,
            Err(e) => {
                ring_error = Some(e.to_string());
                break 'run;
            }
        }
        if corrupt {
            // A producer wrote something no honest producer writes: start over.
            resets += 1;
            eprintln!(
                "shmring record: ring {}: corruption detected; the ring was reset and recording goes on",
                seg.name()
            );
            consumer.reset();
        }
        let now = Instant::now();
        if now >= next_tick {
            next_tick = now + tick;
            if let Some(m) = procinfo::own_memory() {
                peak_private_kb = peak_private_kb.max(m.private_kb());
            }
            if a.progress {
                let st = seg.stats();
                emit(json!({"progress": {
                    "video_frames": rec.video_frames(), "audio_packets": rec.audio_packets(),
                    "malformed": rec.malformed(), "records": st.records_consumed,
                    "bytes": st.bytes_consumed, "occupancy": st.occupancy,
                    "drops_full": st.drops_full, "abandoned": st.abandoned,
                    "private_rss_kb": peak_private_kb,
                    "elapsed_s": start.elapsed().as_secs_f64(),
                }}));
            }
        }
    }
    // Record what was committed before the stop (bounded: a producer still
    // running cannot keep us here).
    if write_error.is_none() && ring_error.is_none() {
        let mut left = seg.stats().records_in_flight + 16;
        while left > 0 {
            left -= 1;
            match consumer.try_next() {
                Ok(Some(f)) => {
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
    if let Some(m) = procinfo::own_memory() {
        peak_private_kb = peak_private_kb.max(m.private_kb());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let summary = rec.finish(write_error.as_ref());
    let st = seg.stats();
    drop(consumer);
    let (cpu_s, max_rss_kb) = procinfo::own_usage();

    let mut j = summary.to_json();
    j["ring"] = json!({
        "name": a.create, "records_consumed": st.records_consumed,
        "bytes_consumed": st.bytes_consumed, "records_committed": st.records_committed,
        "drops_full": st.drops_full, "abandoned": st.abandoned, "corruption": st.corruption,
        "resets": resets, "peak_occupancy": st.peak_occupancy,
    });
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
        "shmring record: ring {} for {elapsed:.1} s: {} records ({:.1} MB) read",
        seg.name(),
        st.records_consumed,
        mb(st.bytes_consumed)
    );
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
            "  {} records abandoned by producers that died mid-write",
            st.abandoned
        );
    }
    let _ = writeln!(
        e,
        "  {} write calls, {:.0} KiB per write on average, {:.0} KiB at most",
        summary.writes.calls,
        summary.writes.average() as f64 / 1024.0,
        summary.writes.max as f64 / 1024.0
    );
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
    Ok(())
}
