//! `shmring bench --scale`: how the cost grows with the producer threads on one
//! ring (`producers`), and with rings side by side (`rings`). Every run is the
//! meeting's: a thread per stream in producer processes, one consumer reading and
//! checking every byte, on the same workers; a row per transport and count.

use super::*;
use crate::args::ScaleArg;
use crate::kit::histogram_of;
use crate::meeting::{MAX_THREADS, VIDEO_BYTES};

/// The most rings side by side.
const MAX_RINGS: u32 = 64;
const PRODUCER_COUNTS: &[u32] = &[1, 2, 4, 8, 16, 32, 64];
const RING_COUNTS: &[u32] = &[1, 4, 16, 64];
/// The two series of `--scale producers`: small records, and 1280x720 I420 frames.
const SIZES: &[usize] = &[AUDIO_RECORD, VIDEO_BYTES];

/// What `--scale` runs.
pub(super) struct Scale {
    what: ScaleArg,
    counts: Vec<u32>,
    /// Record sizes (producers).
    sizes: Vec<usize>,
    /// Each sending thread a process of its own (producers).
    processes: bool,
}

/// The `--scale` options checked (None: no `--scale`).
pub(super) fn options(a: &BenchArgs) -> Result<Option<Scale>, String> {
    let Some(what) = a.scale else {
        if a.counts.is_some() || a.size.is_some() || a.processes {
            return Err("--counts, --size and --processes apply to --scale only".into());
        }
        return Ok(None);
    };
    let max = match what {
        ScaleArg::Producers => MAX_THREADS,
        ScaleArg::Rings => MAX_RINGS,
    };
    let counts = match &a.counts {
        None if what == ScaleArg::Producers => PRODUCER_COUNTS.to_vec(),
        None => RING_COUNTS.to_vec(),
        Some(v) => {
            let bad = || {
                format!(
                    "--counts must list counts from 1 to {max}, comma separated, not {:?}",
                    v.join(",")
                )
            };
            let mut list = Vec::new();
            for w in v.iter().map(|w| w.trim()) {
                match w.parse::<u32>() {
                    Ok(n) if (1..=max).contains(&n) => {
                        if !list.contains(&n) {
                            list.push(n)
                        }
                    }
                    _ => return Err(bad()),
                }
            }
            if list.is_empty() {
                return Err(bad());
            }
            list
        }
    };
    if what == ScaleArg::Rings && (a.size.is_some() || a.processes) {
        return Err(
            "--size and --processes apply to --scale producers (a ring carries a \
                    meeting participant's streams)"
                .into(),
        );
    }
    let sizes = match &a.size {
        None if what == ScaleArg::Producers => SIZES.to_vec(),
        None => vec![VIDEO_BYTES],
        Some(v) => {
            let mut list = Vec::new();
            for w in v.iter().map(|w| w.trim()) {
                match w.parse::<usize>() {
                    Ok(n) if n > 0 => list.push(n),
                    _ => {
                        return Err(format!(
                            "--size must list record sizes in bytes (1 or more), comma \
                             separated, not {:?}",
                            v.join(",")
                        ))
                    }
                }
            }
            list
        }
    };
    Ok(Some(Scale {
        what,
        counts,
        sizes,
        processes: a.processes,
    }))
}

/// The records `scale` puts on a ring, named for the message of a --ring-mib too
/// small for them.
pub(super) fn records(scale: &Scale) -> Vec<(&'static str, usize)> {
    let name = match scale.what {
        ScaleArg::Producers => "--size",
        ScaleArg::Rings => "video",
    };
    scale.sizes.iter().map(|&z| (name, z)).collect()
}

/// The transports of `--scale`: those a thread per stream runs on (the meeting's).
fn carries_streams(t: Transport) -> bool {
    t.set() == Set::Default && t != Transport::Wakeup
}

/// Its transports: those named, or by default shmring, the floor (producers) and
/// iceoryx2 when built in.
pub(super) fn transports(
    scale: &Scale,
    named: Option<Vec<Transport>>,
) -> Result<Vec<Transport>, String> {
    match named {
        Some(list) => {
            if let Some(t) = list.iter().find(|t| !carries_streams(**t)) {
                let ok: Vec<&str> = Transport::ALL
                    .iter()
                    .filter(|s| s.transport.built() && carries_streams(s.transport))
                    .map(|s| s.name)
                    .collect();
                return Err(format!(
                    "--scale has no {t} row (it runs {})",
                    ok.join(", ")
                ));
            }
            Ok(list)
        }
        None => {
            let mut v = vec![Transport::Shmring];
            if scale.what == ScaleArg::Producers {
                v.push(Transport::Floor);
            }
            if Transport::Iceoryx2.built() {
                v.push(Transport::Iceoryx2);
            }
            Ok(v)
        }
    }
}

/// Runs every count of `scale` on every transport, `repeat` times interleaved; a
/// row per transport, size, mode and count (the medians of its runs).
pub(super) fn run(
    scale: &Scale,
    transports: &[Transport],
    modes: &[&str],
    plan: &Plan,
    repeat: u32,
) -> (Vec<Row>, bool) {
    let modes: &[&str] = match scale.what {
        ScaleArg::Producers => modes,
        // A meeting participant's rate.
        ScaleArg::Rings => &["rated"],
    };
    let per_run_ms = (plan.seconds * 1000.0) as u64;
    let total = (scale.sizes.len() * modes.len() * scale.counts.len() * transports.len()) as u64
        * u64::from(repeat);
    let mut bar = progress(total, per_run_ms);
    let started = Instant::now();
    let (mut done, mut failed) = (0u64, false);
    let mut rows = Vec::new();
    for &size in &scale.sizes {
        for &mode in modes {
            let mut runs: Vec<Vec<Vec<Row>>> =
                vec![vec![Vec::new(); scale.counts.len()]; transports.len()];
            for rep in 0..repeat {
                for (ci, &count) in scale.counts.iter().enumerate() {
                    for (ti, &t) in transports.iter().enumerate() {
                        let nth = if repeat > 1 {
                            format!(" (run {} of {repeat})", rep + 1)
                        } else {
                            String::new()
                        };
                        let what = match scale.what {
                            ScaleArg::Producers => format!("{count} threads, {size} B, {mode}"),
                            ScaleArg::Rings => format!("{count} rings"),
                        };
                        bar.set(
                            format!(
                                "run {} of {total}: {t} {what}{nth} ({:.0} s so far)",
                                done + 1,
                                started.elapsed().as_secs_f64()
                            ),
                            true,
                        );
                        let progress = (&bar, done * per_run_ms, per_run_ms);
                        let row = match scale.what {
                            ScaleArg::Producers => {
                                producers(t, count, size, mode, scale.processes, plan, progress)
                            }
                            ScaleArg::Rings => rings(t, count, plan, progress),
                        };
                        done += 1;
                        bar.set_position(done * per_run_ms);
                        if let Some(e) = &row.error {
                            bar.suspend(|| eprintln!("shmring bench: {t} ({what}{nth}): {e}"));
                            failed = true;
                        }
                        runs[ti][ci].push(row);
                    }
                }
            }
            // By transport, then count: a series each.
            rows.extend(runs.into_iter().flatten().map(combine));
        }
    }
    bar.finish();
    (rows, failed)
}

/// `count` sending threads of `size`-byte records on one ring.
fn producers(
    t: Transport,
    count: u32,
    size: usize,
    mode: &str,
    own_process: bool,
    plan: &Plan,
    progress: (&StatusLine, u64, u64),
) -> Row {
    let rated = mode == "rated";
    let procs = if t.is_floor() {
        1
    } else if own_process {
        count
    } else {
        count.min(meeting::PRODUCERS)
    };
    let mut args = worker_args(t, size, if rated { plan.rate_bps } else { 0.0 }, plan);
    args.extend([
        "--threads".into(),
        count.to_string(),
        "--producers".into(),
        procs.to_string(),
    ]);
    let mut row = Row {
        count: Some(count),
        processes: Some(procs),
        ..Row::empty(t, "producers", mode, size as u64)
    };
    let mut tl = Timeline::default();
    let res = launch(t, (size, procs), &args, plan).and_then(|mut run| {
        let fail = |e: String| -> Failure { Box::new((e, None, None)) };
        run.start().map_err(fail)?;
        let mut one = [run];
        supervise(&mut one, plan, progress, &mut tl).map_err(fail)?;
        let [mut run] = one;
        (row.fds_producer, row.fds_consumer) = run.descriptors();
        if let Some(st) = run.ring.as_ref().map(|r| r.stats()) {
            row.ring_producer_waits = Some(st.producer_waits);
            row.ring_consumer_waits = Some(st.consumer_waits);
            row.ring_peak_occupancy = Some(st.peak_occupancy);
        }
        run.gather()
    });
    match res {
        Ok((p, c)) => fill_row(&mut row, &p, c.as_ref(), rated, plan),
        Err(b) => {
            let (e, p, c) = *b;
            if let Some(p) = p {
                fill_row(&mut row, &p, c.as_ref(), rated, plan);
            }
            row.error = Some(e);
        }
    }
    row
}

/// `count` rings side by side, each a meeting of one participant: a producer
/// process (a video and an audio thread) and a consumer process.
fn rings(t: Transport, count: u32, plan: &Plan, progress: (&StatusLine, u64, u64)) -> Row {
    let (bps, _) = meeting::rate(1);
    let mut args = worker_args(t, VIDEO_BYTES, bps, plan);
    args.extend([
        "--meeting".into(),
        "1".into(),
        "--producers".into(),
        "1".into(),
        "--histogram".into(),
    ]);
    let mut row = Row {
        count: Some(count),
        processes: Some(count),
        ..Row::empty(t, "rings", "rated", VIDEO_BYTES as u64)
    };
    let plan = Plan {
        rate_bps: bps * f64::from(count),
        ..plan.clone()
    };
    let mut errors = Vec::new();
    // Every consumer ready before any producer starts.
    let mut runs = Vec::new();
    for k in 0..count {
        match launch(t, (VIDEO_BYTES, 1), &args, &plan) {
            Ok(r) => runs.push(r),
            Err(b) => {
                errors.push(format!("ring {}: {}", k + 1, b.0));
                break;
            }
        }
    }
    if errors.is_empty() {
        for (k, r) in runs.iter_mut().enumerate() {
            if let Err(e) = r.start() {
                errors.push(format!("ring {}: {e}", k + 1));
                break;
            }
        }
    }
    let mut tl = Timeline::default();
    if errors.is_empty() {
        if let Err(e) = supervise(&mut runs, &plan, progress, &mut tl) {
            errors.push(e);
        }
    }
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    let (mut fds_p, mut fds_c) = (Vec::new(), Vec::new());
    for (k, r) in runs.iter_mut().enumerate() {
        let (fp, fc) = r.descriptors();
        fds_p.extend(fp);
        fds_c.extend(fc);
        let (p, c) = match r.gather() {
            Ok((p, c)) => (Some(p), c),
            Err(b) => {
                let (e, p, c) = *b;
                if errors.is_empty() {
                    errors.push(format!("ring {}: {e}", k + 1));
                }
                (p, c)
            }
        };
        sent.extend(p);
        got.extend(c);
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    if let Some(p) = sum_reports(&sent) {
        let c = sum_reports(&got);
        fill_row(&mut row, &p, c.as_ref(), true, &plan);
        // Memory per ring's process: the mean over the rings.
        let rss = |v: &[WorkerReport]| {
            mean(&v.iter().map(|r| r.maxrss_kib as f64).collect::<Vec<_>>()).map(|k| k as u64)
        };
        row.rss_producer_kib = rss(&sent);
        row.rss_consumer_kib = rss(&got).or(row.rss_consumer_kib);
        row.cpu_pct_per_ring = Some(row.cpu_pct_at_rate / f64::from(count));
        // Latency over every record of every ring.
        let mut h = crate::kit::histogram();
        for r in &got {
            if let Some(pairs) = &r.lat_hist {
                let _ = h.add(histogram_of(pairs));
            }
        }
        let us = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
        if !t.is_floor() {
            (row.lat_p50_us, row.lat_p99_us, row.lat_p999_us) = (us(0.5), us(0.99), us(0.999));
        }
        (row.lat_audio_p50_us, row.lat_audio_p99_us) = (None, None);
        (row.lat_video_p50_us, row.lat_video_p99_us) = (None, None);
    }
    (row.fds_producer, row.fds_consumer) = (mean(&fds_p), mean(&fds_c));
    if !errors.is_empty() {
        let mut e = errors.join("; ");
        if let Some(prev) = row.error.take() {
            e = format!("{e}; {prev}");
        }
        row.error = Some(e);
    }
    row
}
