//! `soak`: media-rate traffic (1080p I420 video frames and 4 KiB audio packets from
//! several producer processes) for a long time. Every record is verified; the
//! resident memory of every process is sampled each second and must stay flat
//! after warm-up; sent = received + counted drops, exactly.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring::{Address, Config};

use crate::child::spawn_producers;
use crate::common::{drained, read_rss, state, verify_record, Flags, Report, Rss, Watchdog};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Producer processes running at once (1..=64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Total rate, MB/s (10^6 bytes).
    #[arg(long, default_value_t = 150)]
    pub rate: u64,
    /// Length of the run.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Ring capacity in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub capacity: u64,
    /// Warm-up excluded from the memory figures (s); default: 10% of the run, at
    /// least 5 s.
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Allowed RSS drift after warm-up (bytes).
    #[arg(long, default_value_t = 1 << 20)]
    pub rss_tolerance: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

struct Series {
    name: String,
    pid: i32,
    samples: Vec<(f64, Rss)>,
}

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("soak");
    let seg = match Address::memfd("verify-soak", Config::with_capacity(a.capacity)).open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("soak: create segment: {e}");
            return 2;
        }
    };
    let flags = match Flags::create(a.producers as usize) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("soak: flag table: {e}");
            return 2;
        }
    };
    let consumer = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("soak: consumer: {e}");
            return 2;
        }
    };
    let fd = crate::child::RingFds::of(&seg);
    let per = a.rate * 1_000_000 / a.producers.max(1) as u64;
    let extra: Vec<String> = vec![
        format!("--rate={per}"),
        "--block-ms=0".into(),
        "--drop".into(),
    ];
    let mut producers = match spawn_producers(&fd, &flags, a.producers, &extra) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("soak: {e}");
            return 2;
        }
    };
    let mut series: Vec<Series> = Vec::with_capacity(producers.len() + 1);
    series.push(Series {
        name: "consumer (this process)".into(),
        pid: std::process::id() as i32,
        samples: Vec::with_capacity(a.seconds as usize + 8),
    });
    for (i, k) in producers.iter().enumerate() {
        series.push(Series {
            name: format!("producer {i}"),
            pid: k.pid() as i32,
            samples: Vec::with_capacity(a.seconds as usize + 8),
        });
    }
    let p = a.producers as usize;
    let mut last_seq: Vec<Option<u64>> = vec![None; p];
    let mut received = vec![0u64; p];
    let (mut bad, mut disorder, mut unknown, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut errors: Vec<String> = Vec::new();
    let wd = Watchdog::new("soak consumer call", Duration::from_secs(30));
    let started = Instant::now();
    let mut next_sample = started;
    let mut next_progress = started + Duration::from_secs(10);
    let run_for = Duration::from_secs(a.seconds);
    let mut stopping: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= next_sample && stopping.is_none() {
            let t = now.duration_since(started).as_secs_f64();
            for s in series.iter_mut() {
                if let Some(r) = read_rss(s.pid) {
                    s.samples.push((t, r));
                }
            }
            next_sample += Duration::from_secs(1);
        }
        if now >= next_progress {
            next_progress += Duration::from_secs(10);
            eprintln!(
                "soak: {:.0} s, {:.1} MB/s received, {} records",
                now.duration_since(started).as_secs_f64(),
                bytes as f64 / 1e6 / now.duration_since(started).as_secs_f64(),
                received.iter().sum::<u64>()
            );
        }
        if stopping.is_none() && now.duration_since(started) >= run_for {
            for i in 0..p {
                flags.line(i).stop.store(1, Ordering::SeqCst);
            }
            stopping = Some(now);
        }
        wd.arm();
        let r = consumer.next_timeout(Some(Duration::from_millis(100)));
        wd.disarm();
        match r {
            Ok(Some(f)) => match verify_record(f.payload()) {
                Ok((inst, s)) => {
                    bytes += f.len() as u64;
                    match last_seq.get_mut(inst as usize) {
                        None => unknown += 1,
                        Some(l) => {
                            if l.is_some_and(|q| s <= q) {
                                disorder += 1;
                            }
                            *l = Some(s);
                            received[inst as usize] += 1;
                        }
                    }
                }
                Err(_) => bad += 1,
            },
            Ok(None) => match stopping.map(|t| drained(&mut producers, &seg, t)) {
                None | Some(Ok(false)) => {}
                Some(Ok(true)) => break,
                Some(Err(e)) => {
                    errors.push(e);
                    break;
                }
            },
            Err(e) => {
                errors.push(e.to_string());
                break;
            }
        }
    }
    let elapsed = stopping.map_or(started.elapsed(), |t| t.duration_since(started));
    let done = (0..p)
        .filter(|&i| flags.line(i).state.load(Ordering::SeqCst) == state::DONE)
        .count();
    let sent: u64 = (0..p)
        .map(|i| flags.line(i).attempts.load(Ordering::SeqCst))
        .sum();
    let drops: u64 = (0..p)
        .map(|i| flags.line(i).timeouts.load(Ordering::SeqCst))
        .sum();
    let other: u64 = (0..p)
        .map(|i| flags.line(i).other_errors.load(Ordering::SeqCst))
        .sum();
    let committed: u64 = (0..p)
        .map(|i| flags.line(i).committed.load(Ordering::SeqCst))
        .sum();
    let got: u64 = received.iter().sum();
    let stats = seg.stats();

    rep.fig("seconds", (elapsed.as_secs_f64() * 10.0).round() / 10.0);
    rep.fig("producers", a.producers);
    rep.fig("target_mb_per_s", a.rate);
    rep.fig(
        "achieved_mb_per_s",
        (bytes as f64 / 1e6 / elapsed.as_secs_f64() * 10.0).round() / 10.0,
    );
    rep.fig("records_sent", sent);
    rep.fig("records_received", got);
    rep.fig("records_dropped_full", drops);
    rep.fig("bytes_received", bytes);
    rep.fig("stats_drops_full", stats.drops_full);
    rep.fig("stats_peak_occupancy", stats.peak_occupancy);

    let warm = a.warmup.unwrap_or((a.seconds / 10).max(5)) as f64;
    let mut worst = 0u64;
    let mut drift_figs = Vec::new();
    for s in &series {
        let after: Vec<&Rss> = s
            .samples
            .iter()
            .filter(|x| x.0 >= warm)
            .map(|x| &x.1)
            .collect();
        let span = |f: fn(&Rss) -> u64| -> (u64, u64, u64) {
            let lo = after.iter().map(|r| f(r)).min().unwrap_or(0);
            let hi = after.iter().map(|r| f(r)).max().unwrap_or(0);
            (lo, hi, hi - lo)
        };
        let (vlo, vhi, vd) = span(|r| r.vm_rss);
        let (plo, phi, pd) = span(|r| r.private);
        // VmRSS also counts the ring's shared pages, which grow as a process first
        // touches them (up to the ring's size) and say nothing of a leak; the check
        // is on the process's own memory.
        worst = worst.max(pd);
        drift_figs.push(serde_json::json!({
            "process": s.name, "samples_after_warmup": after.len(),
            "vm_rss_kib": [vlo / 1024, vhi / 1024], "vm_rss_drift_kib": vd / 1024,
            "private_kib": [plo / 1024, phi / 1024], "private_drift_kib": pd / 1024,
        }));
        rep.note(format!(
            "{}: {} samples after {warm} s; VmRSS {}..{} KiB (drift {} KiB); RssAnon+RssFile {}..{} KiB (drift {} KiB)",
            s.name,
            after.len(),
            vlo / 1024,
            vhi / 1024,
            vd / 1024,
            plo / 1024,
            phi / 1024,
            pd / 1024
        ));
    }
    rep.fig("rss", serde_json::Value::Array(drift_figs));
    rep.fig("rss_worst_drift_kib", worst / 1024);
    let enough = series
        .iter()
        .all(|s| s.samples.iter().filter(|x| x.0 >= warm).count() >= 2);
    rep.check(
        "memory flat after warm-up (every process)",
        enough && worst <= a.rss_tolerance,
        format!(
            "worst drift {} KiB, tolerance {} KiB{}",
            worst / 1024,
            a.rss_tolerance / 1024,
            if enough {
                ""
            } else {
                "; too few samples after warm-up"
            }
        ),
    );
    rep.check(
        "sent = received + counted drops",
        sent == got + drops
            && committed == got
            && stats.drops_full == drops
            && stats.records_committed == got
            && other == 0,
        format!(
            "sent {sent} = received {got} + dropped {drops}; committed {committed}; \
             Stats.drops_full {}, Stats.records_committed {}; other producer errors {other}",
            stats.drops_full, stats.records_committed
        ),
    );
    rep.check(
        "records intact and in order",
        bad == 0 && disorder == 0 && unknown == 0 && errors.is_empty(),
        format!("{bad} bad, {disorder} out of order, {unknown} unknown; errors {errors:?}"),
    );
    rep.check(
        "producers finish cleanly",
        done == p,
        format!("{done} of {p} producers stopped on request"),
    );
    rep.finish(a.json)
}
