//! `shmring stat NAME`: a ring's counters, live or as one JSON object.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::Stats;

use crate::cli::StatArgs;
use crate::ringref::Watched;
use crate::{fail, mb, stop_flag, CmdError};

/// Every counter of `s`, as JSON.
pub fn stats_json(name: &str, s: &Stats) -> serde_json::Value {
    json!({
        "ring": name,
        "capacity": s.capacity,
        "records_committed": s.records_committed,
        "bytes_committed": s.bytes_committed,
        "records_aborted": s.records_aborted,
        "drops_full": s.drops_full,
        "producer_waits": s.producer_waits,
        "producer_wakes": s.producer_wakes,
        "records_consumed": s.records_consumed,
        "bytes_consumed": s.bytes_consumed,
        "abandoned": s.abandoned,
        "skipped_aborted": s.skipped_aborted,
        "corruption": s.corruption,
        "consumer_waits": s.consumer_waits,
        "consumer_wakes": s.consumer_wakes,
        "peak_occupancy": s.peak_occupancy,
        "occupancy": s.occupancy,
        "records_in_flight": s.records_in_flight,
        "resets": s.resets,
        "reaped_slots": s.reaped_slots,
        "producers": s.producers,
        "consumer_attached": s.consumer_attached,
    })
}

pub fn run(a: StatArgs) -> Result<(), CmdError> {
    let seg = Watched::open(a.name.as_deref(), a.connect.as_deref()).map_err(|m| fail(1, m))?;
    let label = match (&a.name, &a.connect) {
        (_, Some(p)) => p.display().to_string(),
        (n, None) => n.clone().unwrap_or_default(),
    };
    if a.json {
        println!("{}", stats_json(&label, &seg.stats()));
        return Ok(());
    }
    if !(a.interval >= 0.05 && a.interval <= 3600.0) {
        return Err(fail(
            2,
            format!("--interval {}: expected 0.05 to 3600 seconds", a.interval),
        ));
    }
    let stop = stop_flag()?;
    let tty = std::io::stdout().is_terminal();
    let mut prev = seg.stats();
    let mut t_prev = Instant::now();
    let mut n = 0u64;
    println!(
        "ring {label}: capacity {} MiB, max record {} KiB, {} producer slots",
        seg.geometry().capacity >> 20,
        seg.geometry().max_record >> 10,
        seg.geometry().max_producers
    );
    while !stop.load(Ordering::Relaxed) && a.count.is_none_or(|c| n < c) {
        let until = Instant::now() + Duration::from_secs_f64(a.interval);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
        }
        let s = seg.stats();
        let dt = t_prev.elapsed().as_secs_f64().max(1e-9);
        t_prev = Instant::now();
        let line = format!(
            "committed {} ({:.0}/s, {:.1} MB/s)  consumed {} ({:.0}/s)  occupancy {:.1}/{} MiB (peak {:.1})  drops {}  abandoned {}  corruption {}  waits p{}/c{}  producers {}{}",
            s.records_committed,
            (s.records_committed - prev.records_committed.min(s.records_committed)) as f64 / dt,
            mb(s.bytes_committed - prev.bytes_committed.min(s.bytes_committed)) / dt,
            s.records_consumed,
            (s.records_consumed - prev.records_consumed.min(s.records_consumed)) as f64 / dt,
            s.occupancy as f64 / (1 << 20) as f64,
            s.capacity >> 20,
            s.peak_occupancy as f64 / (1 << 20) as f64,
            s.drops_full,
            s.abandoned,
            s.corruption,
            s.producer_waits,
            s.consumer_waits,
            s.producers,
            if s.consumer_attached { "" } else { "  (no consumer)" }
        );
        let mut o = std::io::stdout().lock();
        if tty {
            let _ = write!(o, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(o, "{line}");
        }
        let _ = o.flush();
        prev = s;
        n += 1;
    }
    if tty {
        println!();
    }
    Ok(())
}
