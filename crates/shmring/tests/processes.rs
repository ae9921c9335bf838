//! Producers in child processes, one consumer in the test process, for each way of
//! sharing a ring: a memfd inherited across exec, a memfd sent over a Unix socket
//! (`send_fds`/`recv_fds`), and a named segment in /dev/shm. Every record arrives
//! exactly once, intact (checksum and content), in per-producer order. Also: the
//! guards used here leave no child process and no /dev/shm entry when a test fails.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use common::{consume_all, shm_name, spawn, Checker, Child};
use shmring::{Address, Config, Segment};

const ENTRY: &str = "child_process_entry";
const CHILDREN: u32 = 3;
const PER: u64 = 20_000;
const MAX: usize = 256 << 10;
const GUARD: Duration = Duration::from_secs(120);

/// Not a test: the body of child processes (returns at once in the test run).
#[test]
fn child_process_entry() {
    common::child_entry();
}

fn cfg() -> Config {
    Config {
        capacity: 4 << 20,
        max_record: Some(MAX as u64),
        ..Config::default()
    }
}

fn producer_env(seg: String, p: u32) -> Vec<(&'static str, String)> {
    vec![
        ("SHMRING_TEST_SEG", seg),
        ("P", p.to_string()),
        ("N", PER.to_string()),
        ("MAX", MAX.to_string()),
    ]
}

/// Consumes everything the children write, then checks they exited cleanly and
/// the counters agree.
fn consume_from(seg: &Arc<Segment>, children: &mut [Child], seed: u64) {
    let consumer = seg.consumer().unwrap();
    let mut ck = Checker::new(children.len(), MAX);
    consume_all(&consumer, &mut ck, PER, seed, 1 << 20);
    for c in children.iter_mut() {
        c.expect("DONE", GUARD);
        c.wait_ok(GUARD);
    }
    assert!(consumer.try_next().unwrap().is_none());
    let s = seg.stats();
    let total = PER * children.len() as u64;
    assert_eq!((s.records_committed, s.records_consumed), (total, total));
    assert_eq!((s.bytes_committed, s.bytes_consumed), (ck.bytes, ck.bytes));
    assert_eq!((s.abandoned, s.corruption, s.drops_full), (0, 0, 0));
    assert_eq!(s.producers, 0, "children detached cleanly");
    assert_eq!(s.occupancy, 0);
}

#[test]
fn memfd_inherited_across_exec() {
    let seg = Address::memfd("inherit", cfg()).open().unwrap();
    let (spec, fds) = common::inherit(&seg);
    let mut children: Vec<Child> = (0..CHILDREN)
        .map(|p| spawn(ENTRY, "produce", &producer_env(spec.clone(), p), &fds))
        .collect();
    consume_from(&seg, &mut children, 1);
}

/// CHILDREN producer processes, each sent the ring's descriptors over a socket of
/// its own.
fn producers_over_sockets(seg: &Segment) -> Vec<Child> {
    (0..CHILDREN)
        .map(|p| {
            let (ours, theirs) = UnixStream::pair().unwrap();
            let sfd = theirs.as_raw_fd();
            let env = producer_env(format!("sock:{sfd}"), p);
            let child = spawn(ENTRY, "produce", &env, &[sfd]);
            drop(theirs);
            seg.send(&ours).unwrap();
            child
        })
        .collect()
}

#[test]
fn memfd_sent_over_unix_socket() {
    let seg = Address::memfd("sendfds", cfg()).open().unwrap();
    let mut children = producers_over_sockets(&seg);
    consume_from(&seg, &mut children, 2);
}

/// A ring that wakes its consumer through an eventfd: producers get both
/// descriptors in one message, and the consumer sleeps on the eventfd.
#[test]
fn eventfd_ring_sent_over_unix_socket() {
    let cfg = Config {
        eventfd: true,
        ..cfg()
    };
    let seg = Address::memfd("sendfds-efd", cfg).open().unwrap();
    assert!(seg.eventfd().is_some(), "an eventfd ring has one");
    let mut children = producers_over_sockets(&seg);
    consume_from(&seg, &mut children, 4);
    assert!(
        seg.stats().consumer_waits > 0,
        "the consumer slept on the eventfd"
    );
}

#[test]
fn named_segment_opened_by_name() {
    let name = shm_name("named");
    let seg = Address::create(&name.0, cfg()).open().unwrap();
    assert!(name.exists());
    let mut children: Vec<Child> = (0..CHILDREN)
        .map(|p| {
            spawn(
                ENTRY,
                "produce",
                &producer_env(format!("name:{}", name.0), p),
                &[],
            )
        })
        .collect();
    consume_from(&seg, &mut children, 3);
    drop(seg);
    assert!(!name.exists(), "the creator unlinks its named segment");
}

/// A test that fails while it has a child process and a named segment leaves
/// neither behind: the guards kill and reap the child and unlink the name.
#[test]
fn failing_test_leaves_no_child_and_no_segment() {
    let name = shm_name("guard");
    let path = name.path();
    let mut pid = 0;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let seg = Address::create(&name.0, cfg()).open().unwrap();
        seg.persist(); // even a segment nobody unlinks is removed by the guard
        let child = spawn(
            ENTRY,
            "consume-idle",
            &[("SHMRING_TEST_SEG", format!("name:{}", name.0))],
            &[],
        );
        pid = child.pid;
        child.expect("ATTACHED", GUARD);
        assert!(!common::pid_gone(pid));
        let _keep = (seg, child);
        panic!("deliberate failure");
    }));
    assert!(r.is_err());
    assert!(
        pid > 0 && common::pid_gone(pid),
        "child {pid} was killed and reaped"
    );
    drop(name);
    assert!(!path.exists(), "{} was removed", path.display());
}
