//! Rings' counters in the Prometheus text exposition format (version 0.0.4), encoded
//! by the `prometheus` crate: the format every Prometheus-compatible scraper reads and
//! `promtool check metrics` checks. The metric names, kinds and help texts are the
//! core's ([`shmring::Stats::fields`]): a counter `records_committed` becomes
//! `shmring_records_committed_total`, a gauge `occupancy` becomes `shmring_occupancy`;
//! a field in nanoseconds is served in seconds, Prometheus' base unit
//! (`oldest_pending_age_ns` becomes the gauge `shmring_oldest_pending_age_seconds`).
//! Every sample has the label `ring`. The core keeps no per-stream counters in shared
//! memory, so there is no `stream` label.

use prometheus::core::Collector;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use shmring::{Field, FieldKind, Stats};

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
    /// The family for the core's field `f`: its name with the suffix its type and
    /// unit call for.
    fn new(f: &Field) -> Metric {
        // The help texts are sentences; Prometheus' are phrases without a full stop.
        let help = f.help.trim_end_matches('.');
        let opts = |name: String| Opts::new(name, help).namespace("shmring");
        let made = match (f.kind, f.unit) {
            (FieldKind::Counter, _) => {
                IntCounterVec::new(opts(format!("{}_total", f.name)), &["ring"])
                    .map(Metric::Counter)
            }
            (FieldKind::Gauge, Field::NANOSECONDS) => {
                let stem = f.name.strip_suffix("_ns").unwrap_or(f.name);
                GaugeVec::new(opts(format!("{stem}_seconds")), &["ring"]).map(Metric::Seconds)
            }
            (FieldKind::Gauge | FieldKind::Flag, _) => {
                IntGaugeVec::new(opts(f.name.to_string()), &["ring"]).map(Metric::Gauge)
            }
        };
        made.expect("the core's field names are valid metric names")
    }

    fn set(&self, ring: &str, value: u64) {
        match self {
            Metric::Counter(c) => c.with_label_values(&[ring]).inc_by(value),
            Metric::Gauge(g) => g
                .with_label_values(&[ring])
                .set(i64::try_from(value).unwrap_or(i64::MAX)),
            Metric::Seconds(g) => g.with_label_values(&[ring]).set(value as f64 / 1e9),
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
    // The list of metrics is the core's: a default snapshot names every field.
    let metrics: Vec<Metric> = Stats::default().fields().map(|f| Metric::new(&f)).collect();
    let register = |c: Box<dyn Collector>| {
        registry
            .register(c)
            .expect("the core's field names are distinct");
    };
    register(Box::new(readable.clone()));
    for m in &metrics {
        register(m.collector());
    }
    for r in readings {
        let Ok(info) = &r.result else {
            readable.with_label_values(&[&r.ring]).set(0);
            continue;
        };
        readable.with_label_values(&[&r.ring]).set(1);
        for (m, f) in metrics.iter().zip(info.stats.fields()) {
            m.set(&r.ring, f.value);
        }
    }
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("writing to a String cannot fail")
}
