//! `shmring stat NAME`: a ring's counters, live or as one JSON object.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::{Stats, TetherInfo};

use crate::cli::StatArgs;
use crate::ringref::Watched;
use crate::{fail, mb, stop_flag, CmdError};

/// The version of `stat --json`'s object (its `schema_version` key; the schema is
/// in docs/OPERATIONS.md). Keys may be added within a version; a key removed or
/// renamed, or a meaning changed, makes a new one.
pub const STAT_JSON_SCHEMA: u32 = 1;

/// Every counter of `s`, as JSON (the core's field list), after the ring's name.
pub fn stats_json(name: &str, s: &Stats) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("ring".into(), json!(name));
    m.extend(crate::json::fields(s));
    serde_json::Value::Object(m)
}

/// One tethered consumer as JSON (the core's field list).
pub fn tether_json(t: &TetherInfo) -> serde_json::Value {
    crate::json::object(t)
}

/// Every tethered consumer, as a JSON list.
pub fn tethers_json(ts: &[TetherInfo]) -> serde_json::Value {
    serde_json::Value::Array(ts.iter().map(tether_json).collect())
}

/// One tethered consumer in words: `line 0 pid 123: lag 3 records (1.2 MB), ...`.
pub fn tether_words(t: &TetherInfo) -> String {
    let pid = match t.pid {
        0 => String::new(),
        p => format!(" pid {p}"),
    };
    if t.requested {
        return format!(
            "line {}{pid}: waiting to be taken on by the ring's consumer",
            t.line
        );
    }
    format!(
        "line {}{pid}: lag {} records ({:.1} MB), consumed {} ({:.1} MB), lost {}",
        t.line,
        t.lag_records,
        mb(t.lag_bytes),
        t.records_consumed,
        mb(t.bytes_consumed),
        t.lost
    )
}

pub fn run(a: StatArgs) -> Result<(), CmdError> {
    let seg =
        Watched::open(a.ring.name.as_deref(), a.ring.connect.as_deref()).map_err(|m| fail(1, m))?;
    let label = match (&a.ring.name, &a.ring.connect) {
        (_, Some(p)) => p.display().to_string(),
        (n, None) => n.clone().unwrap_or_default(),
    };
    if a.json {
        let mut j = stats_json(&label, &seg.stats());
        j["schema_version"] = json!(STAT_JSON_SCHEMA);
        j["tethers"] = tethers_json(&seg.tethers());
        println!("{j}");
        return Ok(());
    }
    if a.prometheus {
        // The ring was opened above (by name or descriptors, or observed on its
        // socket); read it once more as one scrape.
        let reading = crate::rings::Reading {
            ring: label.clone(),
            source: match &seg {
                Watched::Observed(_) => "socket",
                Watched::Named(_) => "shm",
            },
            result: match &seg {
                Watched::Named(s) => crate::rings::read(s),
                Watched::Observed(_) => Ok(crate::rings::RingInfo {
                    stats: seg.stats(),
                    max_record: seg.geometry().max_record,
                    max_producers: seg.geometry().max_producers,
                    tethers: seg.tethers(),
                }),
            },
        };
        if let Err(e) = &reading.result {
            return Err(fail(1, format!("ring {label:?}: {e}")));
        }
        print!("{}", crate::metrics::encode_readings(&[reading]));
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
    // Lines of tethered consumers shown below the status line (a terminal only).
    let mut below = 0;
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
        let held = match (s.oldest_pending_age_ns, s.oldest_pending_pid) {
            (0, _) => String::new(),
            (age, 0) => format!(
                "  oldest open claim {} ms (names slot {}; its holder is unknown)",
                age / 1_000_000,
                s.oldest_pending_slot
            ),
            // The kernel proves which pid holds the slot, not who wrote the claim.
            (age, pid) => format!(
                "  oldest open claim {} ms (names slot {}, which pid {pid} holds)",
                age / 1_000_000,
                s.oldest_pending_slot
            ),
        };
        let line = format!(
            "committed {} ({:.0}/s, {:.1} MB/s)  consumed {} ({:.0}/s)  occupancy {:.1}/{} MiB (peak {:.1})  drops {}  abandoned {}  corruption {}  resets {}  overtaken {}{held}  waits p{}/c{}  producers {}{}",
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
            s.resets,
            s.stalled_claims,
            s.producer_waits,
            s.consumer_waits,
            s.producers,
            match (s.consumer_attached, a.ring.connect.is_some()) {
                (true, _) => String::new(),
                (false, false) => format!(
                    "  (no live consumer: a ring left by a killed recorder is removed with \
                     `shmring rm {}`)",
                    label
                ),
                (false, true) => "  (the consumer that served this socket is gone)".into(),
            }
        );
        let tethers = seg.tethers();
        let mut o = std::io::stdout().lock();
        if tty {
            // The status line, and one line per tethered consumer below it (the
            // cursor is brought back up to the status line for the next update).
            let _ = write!(o, "\r\x1b[J{line}");
            for t in &tethers {
                let _ = write!(o, "\n  tethered {}", tether_words(t));
            }
            if !tethers.is_empty() {
                let _ = write!(o, "\x1b[{}A", tethers.len());
            }
            below = tethers.len();
        } else {
            let _ = writeln!(o, "{line}");
            for t in &tethers {
                let _ = writeln!(o, "  tethered {}", tether_words(t));
            }
        }
        let _ = o.flush();
        // A ring observed over its socket lives as long as its consumer: once that
        // is gone nothing will change any more.
        if a.ring.connect.is_some() && !s.consumer_attached {
            if tty {
                println!("{}", "\n".repeat(below));
            }
            return Err(fail(1, format!("{label}: the consumer is gone")));
        }
        prev = s;
        n += 1;
    }
    if tty {
        println!("{}", "\n".repeat(below));
    }
    Ok(())
}
