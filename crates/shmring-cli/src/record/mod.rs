//! `shmring record`: create a ring and record it to files.
//!
//! stdout carries machine-readable lines (one JSON object per line): `{"ready":..}`
//! once the ring exists, `{"progress":..}` with `--progress`, and `{"recorded":..}`
//! at the end. The human summary goes to stderr.
//!
//! The folder, in the order a record goes through it:
//! - `source`: how the recorder reaches its ring (creates a named ring, serves a
//!   memfd ring on a socket, or opens one by address);
//! - `receive`: the frame path, from the ring into the recorder until the run ends;
//! - [`recorder`]: one record in, written to its stream's file;
//! - [`output`]: the files (Y4M, WAV, or H.264 MP4 through an `ffmpeg` child);
//! - `gst_encode` (feature `gst`): `record --encode` in process, one MP4 per
//!   participant;
//! - `progress` and `summary`: what a run says while it records and at its end;
//! - `websocket`: the same recorder fed by WebSocket connections instead of a ring
//!   (`--websocket`: the receiver of `shmring bench --workload bot`'s WebSocket
//!   row).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shmring::handoff::ListenerStats;
use shmring::media::{Format, MediaHeader};
use shmring::Config;

use crate::cli::RecordArgs;
use crate::record::output::{ffmpeg_available, repair_dir};
use crate::record::recorder::{Recorder, RecorderOptions};
use crate::{fail, stop_flag, CmdError};

#[cfg(feature = "gst")]
pub mod gst_encode;
pub mod output;
mod progress;
mod receive;
pub mod recorder;
mod source;
mod summary;
mod websocket;

use progress::Watch;
use summary::Totals;

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
    check_args(&a)?;
    let mut new_dirs = NewDirs::missing(&a.out);
    let mut rec = Recorder::new(RecorderOptions {
        dir: a.out.clone(),
        fps: (a.fps, 1),
        encode: a.encode,
        preset: a.preset,
        verbose: true,
    })
    .map_err(|m| fail(1, m))?;
    if let Some(addr) = &a.websocket {
        let _writing = claim_output(&a.out, &mut rec);
        websocket::run(addr, rec, &stop, a.seconds)?;
        new_dirs.keep();
        return Ok(());
    }
    let cfg = usable_ring_config(a.capacity_mib)?;
    let src = source::open(&a, &cfg)?;
    let seg = src.seg.clone();
    rec.set_liveness(move |slot| seg.producer_alive(slot));
    let mut reader = source::reader(&a, &src.seg, &stop)?;
    // Held for the whole run: another recorder on the same directory leaves its
    // files alone, and this one finishes those a killed recorder left (before it
    // says it is ready: no record is read before).
    let _writing = claim_output(&a.out, &mut rec);
    source::announce(&src, &reader, a.ready_file.as_deref())?;

    let mut watch = Watch::new(a.progress);
    let deadline = a
        .seconds
        .map(|s| watch.start() + Duration::from_secs_f64(s.max(0.0)));
    let mut read = Read::default();
    let mut end = receive::receive(
        &src,
        &mut reader,
        &mut rec,
        &mut watch,
        &mut read,
        &stop,
        deadline,
    );
    if end.write_error.is_none() && end.ring_error.is_none() {
        let line = watch.line(&reader);
        end.write_error = receive::drain(&src, &mut reader, line, &mut rec, &mut read).err();
    }
    let elapsed = watch.finish();
    let summary = rec.finish(end.write_error.as_ref());
    watch.report_health(&src.seg, &reader);
    let totals = Totals {
        elapsed,
        read,
        consumer_resets: reader.counts().map_or(0, |c| c.resets),
        st: src.seg.stats(),
        line: watch.line(&reader),
        peak: watch.peak,
        owner_gone: end.owner_gone,
    };
    drop(reader);
    summary::report(&src, &summary, &totals);
    src.close();
    if let Some(w) = end.write_error {
        return Err(fail(
            1,
            format!("{w}; recording stopped, files cut back to their last whole frame"),
        ));
    }
    if let Some(r) = end.ring_error {
        return Err(fail(1, format!("reading the ring failed: {r}")));
    }
    new_dirs.keep();
    Ok(())
}

/// Claims the output directory `dir` for this run (an `flock` on it, dropped
/// with the returned descriptor, or by the kernel when the process dies) and
/// finishes the files a recorder that was killed left there (`NAME.part`); the
/// files found are kept, new ones take other names. Another recorder writing
/// into `dir` now is said, and its files are left alone.
fn claim_output(dir: &Path, rec: &mut Recorder) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
        eprintln!(
            "shmring record: another shmring record is writing into {}; its unfinished \
             files there are left alone",
            dir.display()
        );
        return None;
    }
    let repaired = repair_dir(dir);
    if !repaired.is_empty() {
        rec.keep_existing_files();
        let said: Vec<String> = repaired
            .iter()
            .map(|r| match &r.note {
                None => format!("{} ({} kept)", r.path.display(), r.units),
                Some(n) => format!("{} (left as it is: {n})", r.path.display()),
            })
            .collect();
        eprintln!(
            "shmring record: finished {} file(s) a recorder that was stopped left unfinished in \
             {}: {}; new files take other names",
            repaired.len(),
            dir.display(),
            said.join(", ")
        );
    }
    Some(fd)
}

/// The checks on `a` that need no ring and no output directory.
fn check_args(a: &RecordArgs) -> Result<(), CmdError> {
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
    Ok(())
}

/// [`ring_config`] for `capacity_mib`, or the error that says which sizes the core
/// accepts.
fn usable_ring_config(capacity_mib: u64) -> Result<Config, CmdError> {
    let cfg = ring_config(capacity_mib);
    if cfg.geometry().is_err() {
        let (lo, hi) = usable_mib();
        return Err(fail(
            2,
            format!(
                "--capacity-mib {capacity_mib}: not a usable ring size; the ring must hold two 1080p \
                 frames: a power of two from {lo} to {hi} MiB"
            ),
        ));
    }
    Ok(cfg)
}
