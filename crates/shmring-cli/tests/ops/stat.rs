//! `stat --prometheus` (checked by promtool when it is installed), `stat --json`'s
//! schema, and the exporter.

use super::*;

/// `promtool check metrics` (Prometheus' own linter) accepts `text`. promtool comes
/// from $PROMTOOL, PATH, or target/tools/bin (where `scripts/deps.sh test` puts it).
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/bin/promtool");
    let exe = std::env::var_os("PROMTOOL")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("promtool"))
                    .find(|f| f.is_file())
            })
        })
        .or_else(|| tools.is_file().then_some(tools))
        .expect("promtool not found: run scripts/deps.sh test (or set PROMTOOL)");
    let mut child = std::process::Command::new(&exe)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn stat_prometheus_prints_the_cores_counters_with_the_ring_label() {
    let ring = new_ring("prom");
    let (seg, consumer, producer) = with_records(&ring, 5, &[1u8; 100]);
    drop(consumer.try_next().unwrap().unwrap());
    let o = run(&["stat", "--prometheus", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let label = format!("{{ring=\"{}\"}}", ring.0);
    for (name, v) in [
        ("shmring_records_committed_total", 5),
        ("shmring_bytes_committed_total", 500),
        ("shmring_records_consumed_total", 1),
        ("shmring_records_in_flight", 4),
        ("shmring_consumer_attached", 1),
        ("shmring_capacity_bytes", 1 << 20),
        ("shmring_ring_readable", 1),
    ] {
        let want = format!("{name}{label} {v}\n");
        assert!(text.contains(&want), "{want:?} not in\n{text}");
    }
    // Every counter and gauge of the core is there, with its type; a field in
    // nanoseconds in seconds, Prometheus' base unit.
    for f in seg.stats().fields() {
        let ty = match f.kind {
            shmring::FieldKind::Counter => "counter",
            _ => "gauge",
        };
        let name = match f.unit {
            shmring::Field::NANOSECONDS => format!("{}_seconds", &f.name[..f.name.len() - 3]),
            // A gauge in bytes says so in its name, as Prometheus names units.
            shmring::Field::BYTES
                if f.kind == shmring::FieldKind::Gauge && !f.name.ends_with("_bytes") =>
            {
                format!("{}_bytes", f.name)
            }
            _ => f.name.to_string(),
        };
        // Prometheus' text format: a counter's family is named as its samples.
        let name = match f.kind {
            shmring::FieldKind::Counter => format!("{name}_total"),
            _ => name,
        };
        assert!(
            text.contains(&format!("# TYPE shmring_{name} {ty}\n")),
            "{name} missing"
        );
        assert!(text.contains(&format!("# HELP shmring_{name} ")), "{name}");
    }
    assert!(
        text.contains(&format!("shmring_oldest_pending_age_seconds{label} 0\n")),
        "{text}"
    );
    assert!(!text.contains("_ns"), "{text}");
    promtool_accepts(&text);
    drop((consumer, producer, seg));

    let garbage = new_ring("promgarbage");
    std::fs::write(garbage.path(), vec![0xa5u8; 8192]).unwrap();
    assert_fails(
        &run(&["stat", "--prometheus", &garbage.0]),
        1,
        &[&garbage.0, "not a shmring ring"],
    );
}

#[test]
fn stat_prometheus_serves_every_tethered_consumer_by_line() {
    let ring = new_ring("promtether");
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let tethered = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    assert!(
        consumer.try_next().unwrap().is_none(),
        "adopts the tethered consumer"
    );
    let mut producer = seg.producer().unwrap();
    for _ in 0..3 {
        producer.send(&[1u8; 100], Meta::new(0, 0)).unwrap();
    }
    drop(tethered.try_next().unwrap().unwrap());
    let o = run(&["stat", "--prometheus", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("line=\"0\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} of line 0 in\n{text}"))
    };
    assert_eq!(sample("shmring_tether_records_consumed_total"), 1);
    assert_eq!(sample("shmring_tether_lag_records"), 2);
    assert_eq!(sample("shmring_tether_requested"), 0);
    // Every field of the core's list but the line, which is the label.
    for f in tethered.segment().tethers()[0].fields() {
        let family = match f.kind {
            shmring::FieldKind::Counter => format!("shmring_tether_{}_total", f.name),
            _ => format!("shmring_tether_{}", f.name),
        };
        assert_eq!(
            text.contains(&format!("# TYPE {family} ")),
            f.name != "line",
            "{family}"
        );
    }
    promtool_accepts(&text);
}

#[test]
fn stat_on_random_bytes_says_not_a_ring() {
    let ring = new_ring("random");
    let bytes = shmring_testkit::Rng(7).bytes(1 << 20);
    std::fs::write(ring.path(), bytes).unwrap();
    for args in [&["stat", &ring.0][..], &["stat", "--json", &ring.0][..]] {
        let o = run(args);
        assert_fails(&o, 1, &[&ring.0, "not a shmring ring (bad magic"]);
        assert!(o.stdout.is_empty(), "no counters printed");
    }
}

#[test]
fn exporter_that_cannot_listen_says_where() {
    assert_fails(
        &run(&["exporter", "--listen", "127.0.0.1:99999"]),
        1,
        &["cannot listen on 127.0.0.1:99999"],
    );
}

#[test]
fn stat_json_has_a_schema_version_and_its_keys_are_documented() {
    let ring = new_ring("schema");
    let (seg, _consumer, _producer) = with_records(&ring, 2, b"xy");
    let o = run(&["stat", "--json", &ring.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema_version"], 1, "{v}");
    assert_eq!(v["ring"], ring.0.as_str());
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/OPERATIONS.md"),
    )
    .unwrap();
    let schema = doc
        .split("### The schema of `stat --json`")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/OPERATIONS.md has the schema of stat --json");
    let tether_keys: Vec<&str> = shmring::TetherInfo::default()
        .fields()
        .map(|f| f.name)
        .collect();
    for key in v
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .chain(seg.stats().fields().map(|f| f.name))
        .chain(tether_keys)
    {
        assert!(
            schema.contains(&format!("`{key}`")),
            "{key} is not in the schema of docs/OPERATIONS.md"
        );
    }
}
