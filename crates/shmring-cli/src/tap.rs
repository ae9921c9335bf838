//! `shmring tap RING`: watch a ring read-only with a [`shmring::Tap`], taking every
//! n-th record as it goes by; with `--out DIR`, a PNG thumbnail of each video frame
//! taken. The ring is mapped read-only, so nothing here can slow or change it: the
//! tap never holds space, and a record overwritten while it was read is counted
//! lost, never shown.
//!
//! stdout carries one JSON object per line: `{"ready":..}` once the tap is placed
//! at the newest record, and `{"tapped":..}` at the end. The summary goes to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::media::{self, kind, MediaRecord};
use shmring::{Tap, TapOptions};

use crate::cli::TapArgs;
use crate::record::recorder::{check_output_dir, kind_name};
use crate::record::NewDirs;
use crate::ringref::open_read_only;
use crate::{fail, stop_flag, CmdError};

/// What was done with one record taken.
enum Taken {
    /// Not a video frame, or no `--out`.
    Counted,
    /// A thumbnail of this size is in the scratch buffer.
    Thumb(u32, u32),
    /// A video record whose media header was rejected.
    Malformed(String),
}

/// Checks the arguments the parser cannot.
fn check(a: &TapArgs) -> Result<(), CmdError> {
    if a.every == 0 {
        return Err(fail(2, "--every 0: expected at least 1 (1: every record)"));
    }
    if a.thumb_width == 0 {
        return Err(fail(2, "--thumb-width 0: expected at least 1 pixel"));
    }
    crate::check_seconds(a.seconds)?;
    if a.count == Some(0) {
        return Err(fail(2, "--count 0: expected at least 1"));
    }
    Ok(())
}

pub fn run(a: TapArgs) -> Result<(), CmdError> {
    check(&a)?;
    let stop = stop_flag()?;
    // A failed start leaves no directory behind.
    let mut new_dirs = a.out.as_deref().map(NewDirs::missing);
    if let Some(dir) = &a.out {
        check_output_dir(dir).map_err(|m| fail(1, m))?;
    }
    let ro = open_read_only(a.ring.name.as_deref(), a.ring.connect.as_deref())
        .map_err(|m| fail(1, m))?;
    let label = match (&a.ring.name, &a.ring.connect) {
        (_, Some(p)) => p.display().to_string(),
        (n, None) => n.clone().unwrap_or_default(),
    };
    let mut tap = Tap::new(
        ro,
        TapOptions {
            every: a.every,
            filter: shmring::Filter {
                kind: a.kind.map(|k| k.kind()),
                stream: a.stream,
            },
            ..Default::default()
        },
    );
    {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(
            o,
            "{}",
            json!({"ready": {"ring": label, "pid": std::process::id()}})
        );
        let _ = o.flush();
    }
    if let Some(d) = &mut new_dirs {
        d.keep();
    }

    let start = Instant::now();
    let deadline = a.seconds.map(|s| start + Duration::from_secs_f64(s));
    let wait = Some(Duration::from_millis(100));
    let mut scratch: Vec<u8> = Vec::new();
    let (mut taken, mut thumbs, mut malformed) = (0u64, 0u64, 0u64);
    let mut first_malformed: Option<String> = None;
    let mut ended_by = "stopped";
    let mut error = None;
    let out = a.out.clone();
    let max_w = a.thumb_width;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            ended_by = "seconds";
            break;
        }
        if a.count.is_some_and(|c| taken >= c) {
            ended_by = "count";
            break;
        }
        // The thumbnail is made from the record in place; the tap keeps it only if
        // the record was still intact once it was made.
        let r = tap.next_with(wait, |payload, meta| {
            if out.is_none() || meta.kind != kind::VIDEO {
                return Taken::Counted;
            }
            match media::read(meta.kind, payload) {
                Ok(MediaRecord::Frame(hd)) => {
                    match crate::thumb::scale(&hd, payload, max_w, &mut scratch) {
                        Some((w, h)) => Taken::Thumb(w, h),
                        None => Taken::Counted,
                    }
                }
                // An end of stream has no picture.
                Ok(MediaRecord::End(_)) => Taken::Counted,
                Err(e) => Taken::Malformed(e.to_string()),
            }
        });
        match r {
            Ok(Some((frame, what))) => {
                taken += 1;
                match what {
                    Taken::Counted => {}
                    Taken::Thumb(w, h) => {
                        let path = thumb_path(out.as_ref(), taken, frame.meta.stream);
                        if let Err(e) = crate::thumb::write_png(&path, w, h, &scratch) {
                            error = Some(format!("writing {}: {e}", path.display()));
                            break;
                        }
                        thumbs += 1;
                    }
                    Taken::Malformed(m) => {
                        malformed += 1;
                        first_malformed.get_or_insert_with(|| {
                            format!(
                                "stream {} ({}): {m}",
                                frame.meta.stream,
                                kind_name(frame.meta.kind)
                            )
                        });
                    }
                }
            }
            Ok(None) => {
                // Nothing is coming: a ring whose consumer is gone has no producer
                // able to write to it any more.
                if !tap.segment().stats().consumer_attached {
                    ended_by = "consumer gone";
                    break;
                }
            }
            Err(e) => {
                error = Some(format!("reading the ring failed: {e}"));
                break;
            }
        }
    }
    let st = tap.stats();
    let elapsed = start.elapsed().as_secs_f64();
    let mut j = crate::json::object(&st);
    j["ring"] = json!(label);
    j["taken"] = json!(taken);
    j["thumbnails"] = json!(thumbs);
    j["malformed"] = json!(malformed);
    j["first_malformed"] = json!(first_malformed);
    j["ended_by"] = json!(ended_by);
    j["elapsed_s"] = json!(elapsed);
    j["out"] = json!(a.out.as_ref().map(|p| p.display().to_string()));
    {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{}", json!({ "tapped": j }));
        let _ = o.flush();
    }
    let e = &mut std::io::stderr().lock();
    let _ = writeln!(
        e,
        "shmring tap: ring {label} for {elapsed:.1} s: {} records taken, {} lost ({} torn), {} passed over (--every/--kind/--stream), {} jumps to the newest record, lag {} records",
        st.delivered, st.lost, st.torn, st.filtered, st.skips, st.lag
    );
    if let Some(dir) = &a.out {
        let _ = writeln!(
            e,
            "  {thumbs} thumbnails written to {}{}",
            dir.display(),
            match &first_malformed {
                Some(m) => format!("; {malformed} malformed video records skipped (first: {m})"),
                None => String::new(),
            }
        );
    }
    if ended_by == "consumer gone" {
        let _ = writeln!(e, "  the ring's consumer is gone: nothing more can arrive");
    }
    match error {
        Some(m) => Err(fail(1, m)),
        None => Ok(()),
    }
}

/// The file of the `n`-th record taken, a frame of `stream`.
fn thumb_path(dir: Option<&PathBuf>, n: u64, stream: u32) -> PathBuf {
    let name = format!("{n:06}-video-{stream}.png");
    match dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    }
}
