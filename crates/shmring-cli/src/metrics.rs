//! Rings' counters in the OpenMetrics / Prometheus text format, encoded by the
//! `prometheus-client` crate. The metric names, kinds and help texts are the core's
//! ([`shmring::Stats::fields`]): a counter `records_committed` becomes
//! `shmring_records_committed_total`, a gauge `occupancy` becomes
//! `shmring_occupancy`; a field in nanoseconds is served in seconds, Prometheus'
//! base unit (`oldest_pending_age_ns` becomes the float gauge
//! `shmring_oldest_pending_age_seconds`). Every sample has the label `ring`. The
//! core keeps no per-stream counters in shared memory, so there is no `stream`
//! label.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use shmring::{Field, FieldKind, Stats};

use crate::rings::Reading;

/// The `Content-Type` of [`encode_readings`]' output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

enum Metric {
    Counter(Family<Labels, Counter>),
    Gauge(Family<Labels, Gauge<u64, std::sync::atomic::AtomicU64>>),
    /// A gauge in nanoseconds, served in seconds.
    Seconds(Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>),
}

/// One scrape: every ring that could be read with all its counters and gauges, and
/// `shmring_ring_readable` (1 or 0) for every ring found, readable or not.
pub fn encode_readings(readings: &[Reading]) -> String {
    let mut registry = Registry::with_prefix("shmring");
    let readable = Family::<Labels, Gauge<u64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "ring_readable",
        "1 if the ring could be opened, validated and read in this scrape, else 0",
        readable.clone(),
    );
    // The list of metrics is the core's: a default snapshot names every field.
    let metrics: Vec<Metric> = Stats::default()
        .fields()
        .map(|f| {
            let m = match (f.kind, f.unit) {
                (FieldKind::Counter, _) => Metric::Counter(Family::default()),
                (FieldKind::Gauge, Field::NANOSECONDS) => Metric::Seconds(Family::default()),
                (FieldKind::Gauge | FieldKind::Flag, _) => Metric::Gauge(Family::default()),
            };
            // The encoder ends the help text with its own full stop.
            let help = f.help.trim_end_matches('.');
            match &m {
                Metric::Counter(c) => registry.register(f.name, help, c.clone()),
                Metric::Gauge(g) => registry.register(f.name, help, g.clone()),
                // The encoder appends the unit to the name: `_ns` becomes `_seconds`.
                Metric::Seconds(g) => {
                    let stem = f.name.strip_suffix("_ns").unwrap_or(f.name);
                    registry.register_with_unit(stem, help, Unit::Seconds, g.clone())
                }
            }
            m
        })
        .collect();
    for r in readings {
        let labels: Labels = vec![("ring".into(), r.ring.clone())];
        let Ok(info) = &r.result else {
            readable.get_or_create(&labels).set(0);
            continue;
        };
        readable.get_or_create(&labels).set(1);
        for (m, f) in metrics.iter().zip(info.stats.fields()) {
            match m {
                Metric::Counter(c) => {
                    c.get_or_create(&labels).inc_by(f.value);
                }
                Metric::Gauge(g) => {
                    g.get_or_create(&labels).set(f.value);
                }
                Metric::Seconds(g) => {
                    g.get_or_create(&labels).set(f.value as f64 / 1e9);
                }
            }
        }
    }
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}
