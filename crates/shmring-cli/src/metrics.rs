//! Rings' counters in the Prometheus text exposition format (version 0.0.4), encoded
//! by the `prometheus` crate: the format every Prometheus-compatible scraper reads and
//! `promtool check metrics` checks. The metric names, kinds and help texts are the
//! core's ([`shmring::Stats::fields`]): a counter `records_committed` becomes
//! `shmring_records_committed_total`, a gauge `producers` becomes `shmring_producers`;
//! a gauge in bytes ends in `_bytes` (`occupancy` becomes `shmring_occupancy_bytes`);
//! a field in nanoseconds is served in seconds, Prometheus' base unit
//! (`oldest_pending_age_ns` becomes the gauge `shmring_oldest_pending_age_seconds`).
//! Every sample has the label `ring`. Each tethered consumer's fields (the core's
//! [`shmring::TetherInfo`] list) are served as `shmring_tether_*` families with the
//! labels `ring` and `line` (`lag_records` becomes `shmring_tether_lag_records`).
//! The core keeps no per-stream counters in shared memory, so there is no `stream`
//! label.

use prometheus::core::Collector;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use shmring::{Field, FieldKind, Snapshot, Stats, TetherInfo};

use crate::rings::Reading;

/// The `Content-Type` of [`encode_readings`]' output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric family per field of the core's counters.
enum Metric {
    Counter(IntCounterVec),
    Gauge(IntGaugeVec),
    /// A gauge in nanoseconds, served in seconds.
    Seconds(GaugeVec),
}

impl Metric {
    /// The family for the core's field `f`: `prefix` and its name, with the suffix
    /// its type and unit call for, and the `labels` of every sample.
    fn new(prefix: &str, f: &Field, labels: &[&str]) -> Metric {
        // The help texts are sentences; Prometheus' are phrases without a full stop.
        let help = f.help.trim_end_matches('.');
        let opts = |name: String| Opts::new(format!("{prefix}{name}"), help).namespace("shmring");
        let made = match (f.kind, f.unit) {
            (FieldKind::Counter, _) => {
                IntCounterVec::new(opts(format!("{}_total", f.name)), labels).map(Metric::Counter)
            }
            (FieldKind::Gauge, Field::NANOSECONDS) => {
                let stem = f.name.strip_suffix("_ns").unwrap_or(f.name);
                GaugeVec::new(opts(format!("{stem}_seconds")), labels).map(Metric::Seconds)
            }
            // A size ends in its unit, as Prometheus names them (`occupancy` is
            // served as `shmring_occupancy_bytes`).
            (FieldKind::Gauge, Field::BYTES) if !f.name.ends_with("_bytes") => {
                IntGaugeVec::new(opts(format!("{}_bytes", f.name)), labels).map(Metric::Gauge)
            }
            (FieldKind::Gauge | FieldKind::Flag, _) => {
                IntGaugeVec::new(opts(f.name.to_string()), labels).map(Metric::Gauge)
            }
        };
        made.expect("the core's field names are valid metric names")
    }

    fn set(&self, labels: &[&str], value: u64) {
        match self {
            Metric::Counter(c) => c.with_label_values(labels).inc_by(value),
            Metric::Gauge(g) => g
                .with_label_values(labels)
                .set(i64::try_from(value).unwrap_or(i64::MAX)),
            Metric::Seconds(g) => g.with_label_values(labels).set(value as f64 / 1e9),
        }
    }

    fn collector(&self) -> Box<dyn Collector> {
        match self {
            Metric::Counter(c) => Box::new(c.clone()),
            Metric::Gauge(g) => Box::new(g.clone()),
            Metric::Seconds(g) => Box::new(g.clone()),
        }
    }
}

/// One scrape: every ring that could be read with all its counters and gauges, and
/// `shmring_ring_readable` (1 or 0) for every ring found, readable or not.
pub fn encode_readings(readings: &[Reading]) -> String {
    let registry = Registry::new();
    let readable = IntGaugeVec::new(
        Opts::new(
            "ring_readable",
            "1 if the ring could be opened, validated and read in this scrape, else 0",
        )
        .namespace("shmring"),
        &["ring"],
    )
    .expect("a valid metric name");
    // The lists of metrics are the core's: a default snapshot names every field.
    let metrics: Vec<Metric> = Stats::default()
        .fields()
        .map(|f| Metric::new("", &f, &["ring"]))
        .collect();
    // A tethered consumer's line is its label, not a sample.
    let tether_metrics: Vec<Metric> = TetherInfo::default()
        .fields()
        .filter(|f| f.name != "line")
        .map(|f| Metric::new("tether_", &f, &["ring", "line"]))
        .collect();
    let register = |c: Box<dyn Collector>| {
        registry
            .register(c)
            .expect("the core's field names are distinct");
    };
    register(Box::new(readable.clone()));
    for m in metrics.iter().chain(&tether_metrics) {
        register(m.collector());
    }
    for r in readings {
        let Ok(info) = &r.result else {
            readable.with_label_values(&[&r.ring]).set(0);
            continue;
        };
        readable.with_label_values(&[&r.ring]).set(1);
        for (m, f) in metrics.iter().zip(info.stats.fields()) {
            m.set(&[&r.ring], f.value);
        }
        for t in &info.tethers {
            let line = t.line.to_string();
            let fields = t.fields().filter(|f| f.name != "line");
            for (m, f) in tether_metrics.iter().zip(fields) {
                m.set(&[&r.ring, &line], f.value);
            }
        }
    }
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("writing to a String cannot fail")
}
