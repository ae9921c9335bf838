//! Behaviour of the core that other suites found (the reliability suite, the C
//! ABI's tests) and that the design tightened: pinned down here, with the core.

use std::sync::atomic::Ordering;
use std::time::Duration;

use shmring::layout::{Identity, LAYOUT_VERSION, MAGIC};
use shmring::{Address, Config, ConsumerOptions, Error, Meta, Segment};
use shmring_testkit::Peer;

/// Commits two records, then damages the stamp of the first one's claim-log entry
/// (as a hostile producer may). Returns the segment and consumer state after.
fn scribbled_stamp(opts: ConsumerOptions) -> (std::sync::Arc<Segment>, shmring::Consumer) {
    let seg = Address::memfd("finding-stamp", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = shmring::Consumer::with_options(seg.clone(), opts).unwrap();
    let mut prod = seg.producer().unwrap();
    let mut r = prod.reserve(100).unwrap();
    let first = r.seq();
    r.payload().fill(1);
    r.commit(Meta::new(0, 0)).unwrap();
    prod.send(&[2u8; 100], Meta::new(0, 0)).unwrap();
    Peer::new(&seg)
        .entry(first)
        .fetch_xor(1 << 40, Ordering::SeqCst); // one stamp bit
    (seg, consumer)
}

/// A log entry at the peek cursor that is not stamped for it while the write
/// cursor is already past it cannot be the work of an honest producer (the entry
/// CAS precedes the cursor CAS, and helpers move the cursor only after seeing the
/// stamp), so the consumer reports `Error::Corrupt` to an application that
/// resets by hand, instead of waiting forever.
#[test]
fn scribbled_stamp_is_reported_as_corruption() {
    let manual = ConsumerOptions {
        auto_reset: false,
        ..Default::default()
    };
    let (_seg, consumer) = scribbled_stamp(manual);
    let r = consumer.next_timeout(Some(Duration::from_millis(200)));
    assert!(matches!(r, Err(Error::Corrupt { .. })), "got {r:?}");
}

/// By default the consumer resets by itself, counts it, and records flow again.
#[test]
fn scribbled_stamp_is_recovered_from() {
    let (seg, consumer) = scribbled_stamp(ConsumerOptions::default());
    let r = consumer.next_timeout(Some(Duration::from_millis(200)));
    assert!(matches!(r, Ok(None)), "got {r:?}");
    assert_eq!(consumer.resets(), 1);
    let st = seg.stats();
    assert!(st.corruption >= 1 && st.resets == 1, "{st:?}");
    let mut prod = seg.producer().unwrap();
    prod.send(b"after", Meta::new(0, 0)).unwrap();
    let f = consumer.next_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(f.expect("a record after the reset").payload(), b"after");
}

/// The identity fields of `line` as (name, value), 32-bit fields widened.
fn identity_of(line: &Identity) -> Vec<(&'static str, u64)> {
    let r = Ordering::SeqCst;
    vec![
        ("magic", line.magic.load(r)),
        ("version", line.version.load(r).into()),
        ("control_size", line.control_size.load(r).into()),
        ("capacity", line.capacity.load(r)),
        ("max_record", line.max_record.load(r)),
        ("log_entries", line.log_entries.load(r).into()),
        ("max_producers", line.max_producers.load(r).into()),
        ("flags", line.flags.load(r).into()),
        ("data_offset", line.data_offset.load(r)),
        ("total_size", line.total_size.load(r)),
    ]
}

/// The consumer validated the layout when it attached and owns the ring, so
/// `reset` rewrites the identity lines (line 0 and both copies) from its own copy
/// (magic last), and new producers can attach again.
#[test]
fn reset_restores_identity_line() {
    let seg = Address::memfd("finding-identity", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let mut consumer = seg.consumer().unwrap();
    let peer = Peer::new(&seg);
    let pristine = identity_of(peer.identity(0));
    let g = *seg.geometry();
    assert_eq!(
        pristine,
        [
            ("magic", MAGIC),
            ("version", LAYOUT_VERSION.into()),
            ("control_size", shmring::layout::CONTROL_SIZE),
            ("capacity", g.capacity),
            ("max_record", g.max_record),
            ("log_entries", g.log_entries.into()),
            ("max_producers", g.max_producers.into()),
            ("flags", g.flags.into()),
            ("data_offset", g.data_offset),
            ("total_size", g.total_size),
        ]
    );
    // A peer overwrites the magic of line 0 and the capacity of both copies (as a
    // hostile producer may): no two lines agree any more.
    peer.identity(0).magic.fetch_xor(0xff, Ordering::SeqCst);
    for copy in [1, 2] {
        peer.identity(copy).capacity.fetch_add(64, Ordering::SeqCst);
    }
    assert!(
        Address::Descriptors(dup(&seg)).open().is_err(),
        "a broken identity"
    );
    consumer.reset().unwrap();
    // The consumer itself carries on (it validated the layout when it attached).
    assert!(consumer.try_next().unwrap().is_none());
    for line in 0..3 {
        assert_eq!(
            identity_of(peer.identity(line)),
            pristine,
            "identity line {line}"
        );
    }
    let again = Address::Descriptors(dup(&seg))
        .open()
        .expect("attach after reset");
    drop(again.producer().expect("a producer after reset"));
}

/// Copies of the ring's descriptors, to attach as another process would.
fn dup(seg: &Segment) -> Vec<std::os::fd::OwnedFd> {
    seg.descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect()
}

/// `try_next()` after an aborted claim (found by the C ABI's tests): a committed
/// record right behind the aborted one is ready, so a non-blocking poll returns it
/// (skips do not count against a zero timeout), and a caller polling with
/// `try_next` / `shmring_consumer_next(c, 0, ..)` never sees an "empty" ring that
/// is not empty.
#[test]
fn try_next_skips_an_aborted_claim_and_returns_the_next_record() {
    let seg = Address::memfd("skip-aborted", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    p.reserve(100).unwrap().abort();
    p.send(b"after", Meta::new(1, 0)).unwrap();
    let f = consumer.try_next().unwrap();
    assert_eq!(f.as_deref(), Some(&b"after"[..]));
}
