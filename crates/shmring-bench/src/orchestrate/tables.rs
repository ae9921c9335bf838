//! The results table, the ratios between transports and the goals.

use super::{Plan, GIB};
use crate::report::{Row, WorkerReport};

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
    let per = |a: Option<u64>, n: u64| a.map(|a| if n > 0 { a as f64 / n as f64 } else { 0.0 });
    row.allocs_per_frame_producer = per(p.allocs, p.frames);
    row.allocs_per_frame_consumer = match c {
        Some(c) => per(c.allocs, c.frames),
        None => per(p.allocs_reader, p.frames),
    };
    row.rss_producer_kib = Some(p.maxrss_kib);
    row.rss_consumer_kib = c.map(|c| c.maxrss_kib);
    if rated && plan.frames.is_none() && row.error.is_none() {
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

pub(super) fn add_ratios(rows: &mut [Row]) {
    let find = |rows: &[Row], t: &str, w: &str, m: &str| {
        rows.iter()
            .find(|r| r.transport == t && r.workload == w && r.mode == m && r.cpu_s_per_gib > 0.0)
            .map(|r| r.cpu_s_per_gib)
    };
    let snapshot = rows.to_vec();
    for r in rows.iter_mut() {
        if r.cpu_s_per_gib <= 0.0 {
            continue;
        }
        if crate::python::is_py(&r.transport) {
            // Receiver-only figures: compared with shmring's own Python row.
            r.cpu_vs_shmring =
                find(&snapshot, "py-shmring", &r.workload, &r.mode).map(|s| r.cpu_s_per_gib / s);
            continue;
        }
        r.cpu_vs_shmring =
            find(&snapshot, "shmring", &r.workload, &r.mode).map(|s| r.cpu_s_per_gib / s);
        r.cpu_vs_floor =
            find(&snapshot, "floor", &r.workload, &r.mode).map(|s| r.cpu_s_per_gib / s);
    }
}

pub(super) fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => "-".into(),
    }
}

pub(super) fn print_table(rows: &[Row], rate: f64) {
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in rows {
        let g = (r.workload.clone(), r.mode.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (w, m) in groups {
        let size = rows
            .iter()
            .find(|r| r.workload == w)
            .map_or(0, |r| r.frame_bytes);
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
        println!(
            "{:<13} {:>8} {:>7} {:>10} {:>9} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>6} {:>6} {:>8} {:>8}",
            "transport", "frames", "GB/s", "frames/s", "CPU s/GiB", "xshmring", "xfloor", "CPU%",
            "p50 us", "p99 us", "p99.9 us", "alc/fP", "alc/fC", "RSS P MiB", "RSS C MiB"
        );
        for r in rows.iter().filter(|r| r.workload == w && r.mode == m) {
            let mib = |k: Option<u64>| opt(k.map(|k| k as f64 / 1024.0), 1);
            println!(
                "{:<13} {:>8} {:>7.3} {:>10.0} {:>9.3} {:>8} {:>8} {:>7.1} {:>9} {:>9} {:>9} {:>6} {:>6} {:>8} {:>8}{}",
                r.transport,
                r.frames,
                r.gbps,
                r.frames_per_s,
                r.cpu_s_per_gib,
                opt(r.cpu_vs_shmring, 2),
                opt(r.cpu_vs_floor, 2),
                r.cpu_pct_at_rate,
                opt(r.lat_p50_us, 1),
                opt(r.lat_p99_us, 1),
                opt(r.lat_p999_us, 1),
                opt(r.allocs_per_frame_producer, 2),
                opt(r.allocs_per_frame_consumer, 2),
                mib(r.rss_producer_kib),
                mib(r.rss_consumer_kib),
                if r.error.is_some() { "  FAILED" } else { "" }
            );
        }
        if rows
            .iter()
            .any(|r| r.workload == w && r.mode == m && crate::python::is_py(&r.transport))
        {
            println!(
                "  py-*: CPU of the receiving Python process only; xshmring is against py-shmring"
            );
        }
        for r in rows.iter().filter(|r| r.workload == w && r.mode == m) {
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

pub(super) fn print_goals(rows: &[Row]) {
    let get = |t: &str, w: &str, m: &str| {
        rows.iter()
            .find(|r| r.transport == t && r.workload == w && r.mode == m && r.error.is_none())
    };
    let mut lines = Vec::new();
    for m in ["rated", "unthrottled"] {
        if let Some(s) = get("shmring", "video", m) {
            if let Some(f) = get("floor", "video", m) {
                let x = s.cpu_s_per_gib / f.cpu_s_per_gib;
                lines.push(format!(
                    "video {m}: shmring CPU/GiB = {x:.2}x floor (goal <= 1.2x): {}",
                    met(x <= 1.2)
                ));
            }
            for (t, goal) in [("uds", 10.0), ("websocket", 50.0)] {
                if let Some(o) = get(t, "video", m) {
                    let x = o.cpu_s_per_gib / s.cpu_s_per_gib;
                    let mut l = format!(
                        "video {m}: {t} CPU/GiB = {x:.1}x shmring (goal >= {goal}x): {}",
                        met(x >= goal)
                    );
                    // The same ratio without the work every transport shares (floor).
                    if let Some(f) = get("floor", "video", m) {
                        let ot = o.cpu_s_per_gib - f.cpu_s_per_gib;
                        let os = s.cpu_s_per_gib - f.cpu_s_per_gib;
                        if os > 0.0 {
                            l += &format!("; transport cost alone (minus floor): {:.1}x", ot / os);
                        } else {
                            l += "; shmring costs nothing measurable above floor";
                        }
                    }
                    lines.push(l);
                }
            }
            if let (Some(p), Some(c)) = (s.allocs_per_frame_producer, s.allocs_per_frame_consumer) {
                lines.push(format!("video {m}: shmring heap allocations per frame {p:.4} producer, {c:.4} consumer (goal 0): {}", met(p == 0.0 && c == 0.0)));
            }
        }
    }
    if let (Some(s), Some(i)) = (
        get("shmring", "audio", "unthrottled"),
        get("iceoryx2", "audio", "unthrottled"),
    ) {
        let x = s.frames_per_s / i.frames_per_s;
        lines.push(format!(
            "audio unthrottled: shmring {:.0} msgs/s = {x:.2}x iceoryx2 (goal >= 2x): {}",
            s.frames_per_s,
            met(x >= 2.0)
        ));
    }
    // At a fixed rate both move the same records: compare what each record costs.
    if let (Some(s), Some(i)) = (
        get("shmring", "audio", "rated"),
        get("iceoryx2", "audio", "rated"),
    ) {
        lines.push(format!(
            "audio rated: CPU per GiB shmring {:.3} s, iceoryx2 {:.3} s ({:.2}x)",
            s.cpu_s_per_gib,
            i.cpu_s_per_gib,
            i.cpu_s_per_gib / s.cpu_s_per_gib
        ));
    }
    if !lines.is_empty() {
        println!("\ngoals:");
        for l in lines {
            println!("  {l}");
        }
    }
}

pub(super) fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}
