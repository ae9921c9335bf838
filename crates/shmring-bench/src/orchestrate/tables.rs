//! The results tables (every workload, mode and `--repeat` goes through here), the
//! ratios between transports, and the medians of repeated runs.

use super::{Plan, GIB};
use crate::report::{Row, WorkerReport};
use crate::transport::{Set, Transport};

pub(super) fn fill_row(
    row: &mut Row,
    p: &WorkerReport,
    c: Option<&WorkerReport>,
    rated: bool,
    plan: &Plan,
) {
    // For floor one report holds both halves.
    let recv = c.unwrap_or(p);
    row.frames = recv.frames;
    row.bytes = recv.bytes;
    row.seconds = recv.end_ns.saturating_sub(p.start_ns) as f64 / 1e9;
    if row.seconds > 0.0 {
        row.gbps = row.bytes as f64 / row.seconds / 1e9;
        row.frames_per_s = row.frames as f64 / row.seconds;
    }
    // CPU of the measured loops (falls back to the whole process if missing).
    pub(super) fn loop_cpu(r: &WorkerReport) -> f64 {
        if r.loop_cpu_s > 0.0 {
            r.loop_cpu_s
        } else {
            r.utime_s + r.stime_s
        }
    }
    row.cpu_s_producer = loop_cpu(p);
    row.cpu_s_consumer = c.map_or(0.0, loop_cpu);
    let cpu = row.cpu_s_producer + row.cpu_s_consumer;
    if row.bytes > 0 {
        row.cpu_s_per_gib = cpu / (row.bytes as f64 / GIB);
    }
    row.cpu_pct_at_rate = if rated {
        if row.seconds > 0.0 {
            cpu / row.seconds * 100.0
        } else {
            0.0
        }
    } else {
        row.cpu_s_per_gib * plan.rate_bps / GIB * 100.0
    };
    let us = |v: Option<u64>| v.map(|n| n as f64 / 1000.0);
    row.lat_p50_us = us(recv.lat_p50_ns);
    row.lat_p99_us = us(recv.lat_p99_ns);
    row.lat_p999_us = us(recv.lat_p999_ns);
    let at = |v: Option<[u64; 3]>, i: usize| v.map(|l| l[i] as f64 / 1000.0);
    row.lat_audio_p50_us = at(recv.lat_audio_ns, 0);
    row.lat_audio_p99_us = at(recv.lat_audio_ns, 1);
    row.lat_video_p50_us = at(recv.lat_video_ns, 0);
    row.lat_video_p99_us = at(recv.lat_video_ns, 1);
    if row.is(Transport::Floor) {
        // Written and read by the same thread: there is nothing in between to time.
        row.lat_p50_us = None;
        row.lat_p99_us = None;
        row.lat_p999_us = None;
        row.lat_audio_p50_us = None;
        row.lat_audio_p99_us = None;
        row.lat_video_p50_us = None;
        row.lat_video_p99_us = None;
    }
    if row.workload == "meeting" && row.is(Transport::Wakeup) {
        // The wake-up row carries no kind: its latency stands beside both.
        (row.lat_audio_p50_us, row.lat_audio_p99_us) = (row.lat_p50_us, row.lat_p99_us);
        (row.lat_video_p50_us, row.lat_video_p99_us) = (row.lat_p50_us, row.lat_p99_us);
    }
    let per = |a: Option<u64>, n: u64| a.map(|a| if n > 0 { a as f64 / n as f64 } else { 0.0 });
    row.allocs_per_frame_producer = per(p.allocs, p.frames);
    row.allocs_per_frame_consumer = match c {
        Some(c) => per(c.allocs, c.frames),
        None => per(p.allocs_reader, p.frames),
    };
    row.rss_producer_kib = Some(p.maxrss_kib);
    row.rss_consumer_kib = c.map(|c| c.maxrss_kib);
    if rated && plan.frames.is_none() && row.error.is_none() && row.frame_bytes > 0 {
        let achieved = row.bytes as f64 / row.seconds.max(1e-9);
        if achieved < 0.9 * plan.rate_bps {
            row.error = Some(format!(
                "could not sustain {:.0} MB/s: moved {:.0} MB/s",
                plan.rate_bps / 1e6,
                achieved / 1e6
            ));
        }
    }
}

/// Is it a Python receiver's row (its figures the receiving process's only)?
fn python(r: &Row) -> bool {
    Transport::named(&r.transport).is_some_and(|t| t.set() == Set::Python)
}

/// Do two rows measure the same thing (workload, mode, and for `--scale` the
/// count and record size)?
fn alike(a: &Row, b: &Row) -> bool {
    a.workload == b.workload
        && a.mode == b.mode
        && a.count == b.count
        && (a.count.is_none() || a.frame_bytes == b.frame_bytes)
}

pub(super) fn add_ratios(rows: &mut [Row]) {
    let find = |rows: &[Row], t: Transport, r: &Row| {
        rows.iter()
            .find(|o| o.is(t) && alike(o, r) && o.cpu_s_per_gib > 0.0)
            .map(|o| o.cpu_s_per_gib)
    };
    let snapshot = rows.to_vec();
    for r in rows.iter_mut() {
        if r.cpu_s_per_gib <= 0.0 {
            continue;
        }
        if python(r) {
            // Receiver-only figures: compared with shmring's own Python row.
            r.cpu_vs_shmring =
                find(&snapshot, Transport::PyShmring, r).map(|s| r.cpu_s_per_gib / s);
            continue;
        }
        r.cpu_vs_shmring = find(&snapshot, Transport::Shmring, r).map(|s| r.cpu_s_per_gib / s);
        let floor = find(&snapshot, Transport::Floor, r);
        r.cpu_vs_floor = floor.map(|f| r.cpu_s_per_gib / f);
        r.cpu_s_per_gib_above_floor = floor.map(|f| r.cpu_s_per_gib - f);
        let two = find(&snapshot, Transport::Floor2Core, r);
        r.cpu_vs_floor_2core = two.map(|f| r.cpu_s_per_gib / f);
        r.cpu_s_per_gib_above_floor_2core = two.map(|f| r.cpu_s_per_gib - f);
    }
}

/// The median of the values present (None if there are none).
pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// [smallest, largest] of the values present.
pub(super) fn range(v: &[f64]) -> Option<[f64; 2]> {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo <= hi).then_some([lo, hi])
}

/// One row for the runs of one transport, workload and mode: every figure the
/// median of the runs that completed, with the range of the main ones. A failed
/// run is named in the row's error.
pub(super) fn combine(runs: Vec<Row>) -> Row {
    let n = runs.len() as u32;
    let errors: Vec<String> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.error.as_ref().map(|e| {
                if n > 1 {
                    format!("run {} of {n}: {e}", i + 1)
                } else {
                    e.clone()
                }
            })
        })
        .collect();
    let good: Vec<&Row> = runs.iter().filter(|r| r.error.is_none()).collect();
    let pool: Vec<&Row> = if good.is_empty() {
        runs.iter().collect()
    } else {
        good
    };
    let Some(first) = pool.first() else {
        return Row::default();
    };
    let mut row = (*first).clone();
    let vals = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
        pool.iter().filter_map(|r| f(r)).collect()
    };
    let med = |f: &dyn Fn(&Row) -> Option<f64>| median(vals(f));
    let med0 = |f: &dyn Fn(&Row) -> f64| median(vals(&|r| Some(f(r)))).unwrap_or(0.0);
    row.frames = med0(&|r| r.frames as f64) as u64;
    row.bytes = med0(&|r| r.bytes as f64) as u64;
    row.seconds = med0(&|r| r.seconds);
    row.gbps = med0(&|r| r.gbps);
    row.frames_per_s = med0(&|r| r.frames_per_s);
    row.cpu_s_producer = med0(&|r| r.cpu_s_producer);
    row.cpu_s_consumer = med0(&|r| r.cpu_s_consumer);
    row.cpu_s_per_gib = med0(&|r| r.cpu_s_per_gib);
    row.cpu_pct_at_rate = med0(&|r| r.cpu_pct_at_rate);
    row.lat_p50_us = med(&|r| r.lat_p50_us);
    row.lat_p99_us = med(&|r| r.lat_p99_us);
    row.lat_p999_us = med(&|r| r.lat_p999_us);
    row.lat_audio_p50_us = med(&|r| r.lat_audio_p50_us);
    row.lat_audio_p99_us = med(&|r| r.lat_audio_p99_us);
    row.lat_video_p50_us = med(&|r| r.lat_video_p50_us);
    row.lat_video_p99_us = med(&|r| r.lat_video_p99_us);
    row.allocs_per_frame_producer = med(&|r| r.allocs_per_frame_producer);
    row.allocs_per_frame_consumer = med(&|r| r.allocs_per_frame_consumer);
    let kib = |f: &dyn Fn(&Row) -> Option<u64>| med(&|r| f(r).map(|k| k as f64)).map(|k| k as u64);
    row.rss_producer_kib = kib(&|r| r.rss_producer_kib);
    row.rss_consumer_kib = kib(&|r| r.rss_consumer_kib);
    row.ring_producer_waits = kib(&|r| r.ring_producer_waits);
    row.ring_consumer_waits = kib(&|r| r.ring_consumer_waits);
    row.ring_peak_occupancy = kib(&|r| r.ring_peak_occupancy);
    row.cpu_pct_per_ring = med(&|r| r.cpu_pct_per_ring);
    row.fds_producer = med(&|r| r.fds_producer);
    row.fds_consumer = med(&|r| r.fds_consumer);
    row.runs = n;
    let rng = |f: &dyn Fn(&Row) -> Option<f64>| range(&vals(f));
    row.cpu_s_per_gib_range = rng(&|r| Some(r.cpu_s_per_gib).filter(|c| *c > 0.0));
    row.gbps_range = rng(&|r| Some(r.gbps).filter(|g| *g > 0.0));
    row.lat_p50_us_range = rng(&|r| r.lat_p50_us);
    row.lat_p99_us_range = rng(&|r| r.lat_p99_us);
    row.lat_audio_p99_us_range = rng(&|r| r.lat_audio_p99_us);
    row.lat_video_p99_us_range = rng(&|r| r.lat_video_p99_us);
    row.error = (!errors.is_empty()).then(|| errors.join("; "));
    row
}

pub(super) fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => "-".into(),
    }
}

/// "lo-hi", or "-".
pub(super) fn span(v: Option<[f64; 2]>, prec: usize) -> String {
    match v {
        Some([lo, hi]) => format!("{lo:.prec$}-{hi:.prec$}"),
        None => "-".into(),
    }
}

/// A column: header, width, and the cell of a row.
pub(super) type Col = (&'static str, usize, Box<dyn Fn(&Row) -> String>);

pub(super) fn col(h: &'static str, w: usize, f: impl Fn(&Row) -> String + 'static) -> Col {
    (h, w, Box::new(f))
}

/// The columns of one table: the meeting shows latency per kind; `--repeat` adds
/// the range of CPU per GiB and of p99 latency beside their medians.
fn columns(meeting: bool, repeated: bool) -> Vec<Col> {
    let mut c = vec![col("frames", 9, |r| r.frames.to_string())];
    if meeting {
        c.push(col("MB/s", 7, |r| {
            per_byte(r, |r| format!("{:.1}", r.gbps * 1e3))
        }));
    } else {
        c.push(col("GB/s", 7, |r| {
            per_byte(r, |r| format!("{:.3}", r.gbps))
        }));
        c.push(col("frames/s", 10, |r| format!("{:.0}", r.frames_per_s)));
    }
    c.push(col("CPU s/GiB", 9, |r| {
        per_byte(r, |r| format!("{:.3}", r.cpu_s_per_gib))
    }));
    if repeated {
        c.push(col("range", 11, |r| span(r.cpu_s_per_gib_range, 3)));
    }
    c.extend([
        col("xshmring", 8, |r| opt(r.cpu_vs_shmring, 2)),
        col("xfloor", 6, |r| opt(r.cpu_vs_floor, 2)),
        col("x2core", 6, |r| opt(r.cpu_vs_floor_2core, 2)),
        col("above floor", 11, |r| opt(r.cpu_s_per_gib_above_floor, 3)),
        col("CPU%", 6, |r| {
            if r.frame_bytes == 0 && r.mode != "rated" {
                "-".into() // no bytes, so no CPU per GiB to price at the rate
            } else {
                format!("{:.1}", r.cpu_pct_at_rate)
            }
        }),
    ]);
    if meeting {
        c.extend([
            col("audio p50 us", 12, |r| opt(r.lat_audio_p50_us, 1)),
            col("audio p99 us", 12, |r| opt(r.lat_audio_p99_us, 1)),
        ]);
        if repeated {
            c.push(col("range", 13, |r| span(r.lat_audio_p99_us_range, 0)));
        }
        c.extend([
            col("video p50 us", 12, |r| opt(r.lat_video_p50_us, 1)),
            col("video p99 us", 12, |r| opt(r.lat_video_p99_us, 1)),
        ]);
        if repeated {
            c.push(col("range", 13, |r| span(r.lat_video_p99_us_range, 0)));
        }
    } else {
        c.extend(latency(repeated));
        c.push(col("p99.9 us", 9, |r| opt(r.lat_p999_us, 1)));
    }
    c.extend(memory());
    c
}

/// p50 and p99 latency, with the range of p99 over repeated runs.
fn latency(repeated: bool) -> Vec<Col> {
    let mut c = vec![
        col("p50 us", 9, |r| opt(r.lat_p50_us, 1)),
        col("p99 us", 9, |r| opt(r.lat_p99_us, 1)),
    ];
    if repeated {
        c.push(col("range", 13, |r| span(r.lat_p99_us_range, 0)));
    }
    c
}

/// Allocations per frame and resident memory of each side.
fn memory() -> Vec<Col> {
    let mib = |k: Option<u64>| opt(k.map(|k| k as f64 / 1024.0), 1);
    vec![
        col("alc/fP", 6, |r| opt(r.allocs_per_frame_producer, 2)),
        col("alc/fC", 6, |r| opt(r.allocs_per_frame_consumer, 2)),
        col("RSS P MiB", 9, move |r| mib(r.rss_producer_kib)),
        col("RSS C MiB", 9, move |r| mib(r.rss_consumer_kib)),
    ]
}

/// Figures per byte mean nothing for a row that moves no bytes (the wake-up row).
fn per_byte(r: &Row, f: impl Fn(&Row) -> String) -> String {
    if r.frame_bytes == 0 {
        "-".into()
    } else {
        f(r)
    }
}

pub(super) fn print_table(rows: &[Row], rate: f64, participants: u32) {
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in rows {
        let g = (r.workload.clone(), r.mode.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (w, m) in groups {
        let of = |r: &&Row| r.workload == w && r.mode == m;
        let group: Vec<&Row> = rows.iter().filter(of).collect();
        let meeting = w == "meeting";
        let runs = group.iter().map(|r| r.runs).max().unwrap_or(1);
        if meeting {
            println!(
                "\nmeeting ({}), at its real rate; CPU% measured",
                super::meeting::describe(participants)
            );
        } else {
            let size = group
                .iter()
                .map(|r| r.frame_bytes)
                .max()
                .unwrap_or_default();
            let how = if m == "rated" {
                format!("rated at {rate} MB/s")
            } else {
                "unthrottled".into()
            };
            println!(
                "\n{w} ({size}-byte frames), {how}; CPU% at rate: {}",
                if m == "rated" {
                    "measured"
                } else {
                    "CPU/GiB x rate"
                }
            );
        }
        if runs > 1 {
            println!("  median of {runs} interleaved runs; range: smallest-largest of the runs");
        }
        let cols = columns(meeting, runs > 1);
        print_rows(&cols, &group);
        if group.iter().any(|r| python(r)) {
            println!(
                "  py-*: CPU of the receiving Python process only; xshmring is against py-shmring"
            );
        }
        if group.iter().any(|r| r.is(Transport::Floor)) {
            println!(
                "  above floor: CPU s/GiB minus floor's (the same writing and reading, one process, no transport)"
            );
        }
        if group.iter().any(|r| r.is(Transport::Floor2Core)) {
            println!(
                "  x2core: CPU s/GiB over {}'s (the same writing and reading by two threads of one process pinned to two cores, each record handed over by pointer with a futex wake: the limit of any zero-copy transport between processes)",
                Transport::Floor2Core.name()
            );
        }
        if group.iter().any(|r| r.is(Transport::ShmringBudget)) {
            println!(
                "  shmring-budget: shmring whose consumer lets a record wait up to {} ms (ConsumerOptions::latency_budget): one wake-up serves many records",
                crate::transport::BUDGET_ROW.as_secs_f64() * 1e3
            );
        }
        if group.iter().any(|r| r.is(Transport::Wakeup)) {
            println!(
                "  {}: a futex ping-pong between two processes, no ring and no payload: the wake-up latency beneath every row",
                Transport::Wakeup
            );
        }
        for r in &group {
            if let (Some(pw), Some(cw), Some(peak)) = (
                r.ring_producer_waits,
                r.ring_consumer_waits,
                r.ring_peak_occupancy,
            ) {
                println!(
                    "  {}: producer waited for space {pw} times, consumer slept {cw} times, peak {:.1} MiB in the ring",
                    r.transport,
                    peak as f64 / (1u64 << 20) as f64
                );
            }
        }
    }
}

/// The tables of `--scale`: one per workload, record size and mode, a series per
/// transport (every count in a row of its own).
pub(super) fn print_scale(rows: &[Row], rate: f64) {
    let mut groups: Vec<(String, u64, String)> = Vec::new();
    for r in rows {
        let g = (r.workload.clone(), r.frame_bytes, r.mode.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (w, size, m) in groups {
        let group: Vec<&Row> = rows
            .iter()
            .filter(|r| r.workload == w && r.frame_bytes == size && r.mode == m)
            .collect();
        let runs = group.iter().map(|r| r.runs).max().unwrap_or(1);
        let rings = w == "rings";
        if rings {
            let (bps, _) = super::meeting::rate(1);
            println!(
                "\nrings side by side, each a producer process and a consumer process at a meeting \
                 participant's rate (1280x720@30 I420 + 10 ms 48 kHz stereo, {:.1} MB/s a ring); \
                 CPU% measured, of one core; RSS and fds: the mean per process; latency over \
                 every record of every ring",
                bps / 1e6
            );
        } else {
            let how = if m == "rated" {
                format!("rated at {rate} MB/s in all")
            } else {
                "unthrottled".into()
            };
            println!(
                "\nproducer threads on one ring, {size}-byte records, {how}; threads round robin \
                 over the producer processes (procs); one consumer"
            );
        }
        if runs > 1 {
            println!("  median of {runs} interleaved runs; range: smallest-largest of the runs");
        }
        let count = if rings { "rings" } else { "threads" };
        let mut cols = vec![
            col(count, 7, |r| r.count.map_or("-".into(), |c| c.to_string())),
            col("procs", 5, |r| {
                r.processes.map_or("-".into(), |c| c.to_string())
            }),
            col("frames", 9, |r| r.frames.to_string()),
            col("MB/s", 8, |r| format!("{:.1}", r.gbps * 1e3)),
            col("CPU s/GiB", 9, |r| format!("{:.3}", r.cpu_s_per_gib)),
        ];
        if runs > 1 {
            cols.push(col("range", 11, |r| span(r.cpu_s_per_gib_range, 3)));
        }
        cols.push(col("xfloor", 6, |r| opt(r.cpu_vs_floor, 2)));
        cols.push(col("CPU%", 6, |r| format!("{:.1}", r.cpu_pct_at_rate)));
        if rings {
            cols.push(col("CPU%/ring", 9, |r| opt(r.cpu_pct_per_ring, 1)));
        }
        cols.extend(latency(runs > 1));
        cols.extend(memory());
        cols.extend([
            col("fds P", 5, |r| opt(r.fds_producer, 0)),
            col("fds C", 5, |r| opt(r.fds_consumer, 0)),
        ]);
        print_rows(&cols, &group);
        if group.iter().any(|r| r.is(Transport::Floor)) {
            println!(
                "  floor: every thread writes and reads its own records in one process, no transport"
            );
        }
    }
}

/// A table's heading and its rows, the transport first.
pub(super) fn print_rows(cols: &[Col], group: &[&Row]) {
    let mut line = format!("{:<13}", "transport");
    for (h, wd, _) in cols {
        line += &format!(" {h:>wd$}");
    }
    println!("{line}");
    for r in group {
        let mut line = format!("{:<13}", r.transport);
        for (_, wd, f) in cols {
            line += &format!(" {:>wd$}", f(r));
        }
        if r.error.is_some() {
            line += "  FAILED";
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cpu: f64, p99: f64, error: Option<&str>) -> Row {
        Row {
            cpu_s_per_gib: cpu,
            lat_p99_us: Some(p99),
            error: error.map(str::to_string),
            ..Row::empty(Transport::Shmring, "video", "rated", 8)
        }
    }

    #[test]
    fn repeated_runs_give_the_median_and_the_range_of_the_runs_that_completed() {
        let r = combine(vec![
            run(0.3, 10.0, None),
            run(0.1, 30.0, None),
            run(0.2, 20.0, None),
        ]);
        assert_eq!(
            (r.runs, r.cpu_s_per_gib, r.lat_p99_us),
            (3, 0.2, Some(20.0))
        );
        assert_eq!(r.cpu_s_per_gib_range, Some([0.1, 0.3]));
        assert_eq!(r.lat_p99_us_range, Some([10.0, 30.0]));
        assert_eq!(r.error, None);
        let r = combine(vec![
            run(0.3, 10.0, None),
            run(9.0, 90.0, Some("lost")),
            run(0.1, 30.0, None),
        ]);
        assert_eq!(r.cpu_s_per_gib, 0.2, "median of the two that completed");
        assert_eq!(r.error.as_deref(), Some("run 2 of 3: lost"));
    }

    #[test]
    fn ratios_and_cost_above_floor() {
        let mut rows = vec![
            run(0.2, 1.0, None),
            run(0.5, 1.0, None),
            run(0.1, 1.0, None),
            run(0.16, 1.0, None),
        ];
        rows[1].transport = Transport::Uds.name().into();
        rows[2].transport = Transport::Floor.name().into();
        rows[3].transport = Transport::Floor2Core.name().into();
        add_ratios(&mut rows);
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(close(rows[1].cpu_vs_shmring, 2.5));
        assert!(close(rows[1].cpu_vs_floor, 5.0));
        assert!(close(rows[1].cpu_s_per_gib_above_floor, 0.4));
        assert!(close(rows[0].cpu_s_per_gib_above_floor, 0.1));
        assert!(close(rows[0].cpu_vs_floor_2core, 1.25));
        assert!(close(rows[1].cpu_s_per_gib_above_floor_2core, 0.34));
        assert!(close(rows[2].cpu_vs_floor_2core, 0.625));
    }
}
