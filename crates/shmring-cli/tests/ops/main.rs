//! Operator tools and first-use errors, one file per concept: `top` (rings in
//! several states, named and served on sockets), `stat` (`--prometheus`, `--json`,
//! the exporter), `lifecycle` (`rm`, stale rings after SIGKILL, a producer whose
//! recorder is gone, `demo`) and `input` (the messages and exit codes of bad
//! input). Their shared helpers are here. (The Prometheus output is also parsed by
//! a real parser in python/tests/test_cli_metrics.py.)

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::handoff::{Listener, ListenerOptions};
use shmring::{Address, Config, Consumer, ConsumerOptions, Meta, Segment, Snapshot};

#[path = "../common/mod.rs"]
mod common;
mod input;
mod lifecycle;
mod stat;
mod top;

use common::{assert_fails_with as assert_fails, run, run_line, Proc, Ring, PATIENCE};

/// A unique ring name for these tests, removed from /dev/shm on drop.
fn new_ring(tag: &str) -> Ring {
    Ring::new("opstest", tag)
}

/// The prefix every ring of this test process starts with.
fn prefix() -> String {
    format!("shmring-opstest-{}-", std::process::id())
}

fn start_recorder(ring: &str, out: &Path) -> Proc {
    let rec = Proc::spawn_line(&format!(
        "record --create {} --out {} --progress",
        ring,
        out.display()
    ));
    assert_eq!(rec.expect("ready")["ring"], ring);
    rec
}

/// A recorder killed with SIGKILL: its ring stays behind with no consumer.
fn stale_ring(tag: &str) -> Ring {
    let ring = new_ring(tag);
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, dir.path());
    rec.kill();
    assert!(ring.path().exists(), "a killed recorder leaves its ring");
    ring
}

fn by_ring<'a>(rows: &'a [Value], ring: &Ring) -> &'a Value {
    rows.iter()
        .find(|r| r["ring"] == ring.0.as_str())
        .unwrap_or_else(|| panic!("no row for {}: {rows:?}", ring.0))
}

/// `stat` reads the ring at `address` and `produce` writes into it.
fn stat_and_produce(address: &str) {
    for o in [
        run(&["stat", "--json", address]),
        run_line(&format!(
            "produce --ring {address} --video 64x48@30 --seconds 0.1"
        )),
    ] {
        assert!(
            o.status.success(),
            "{address}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The named ring `ring` (1 MiB) made here, with its consumer and a producer that
/// sent `n` records of `body` (stream 0, kind 0).
fn with_records(
    ring: &Ring,
    n: usize,
    body: &[u8],
) -> (std::sync::Arc<Segment>, Consumer, shmring::Producer) {
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut producer = seg.producer().unwrap();
    for _ in 0..n {
        producer.send(body, Meta::new(0, 0)).unwrap();
    }
    (seg, consumer, producer)
}
