//! Behaviour of the core found by the reliability suite that the design could
//! tighten; both are now the core's behaviour.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shmring::{Config, ConsumerOptions, Error, Meta, Segment};

/// Commits two records, then damages the stamp of the first one's claim-log entry
/// (as a hostile producer may). Returns the segment and consumer state after.
fn scribbled_stamp(opts: ConsumerOptions) -> (std::sync::Arc<Segment>, shmring::Consumer) {
    let seg = Segment::create_memfd("finding-stamp", &Config::with_capacity(1 << 20)).unwrap();
    let consumer = shmring::Consumer::with_options(seg.clone(), opts).unwrap();
    let mut prod = seg.producer().unwrap();
    let mut r = prod.reserve(100).unwrap();
    let first = r.seq();
    r.payload().fill(1);
    r.commit(Meta::new(0, 0)).unwrap();
    prod.send(&[2u8; 100], Meta::new(0, 0)).unwrap();
    let g = *seg.geometry();
    let (base, _) = seg.mapping();
    let idx = first % g.log_entries as u64;
    // SAFETY: the claim log lies inside the mapping; entries are 8-byte aligned
    // atomics, and a peer writing them is exactly what the threat model allows.
    let entry = unsafe { &*(base.add((g.log_offset + 8 * idx) as usize) as *const AtomicU64) };
    entry.fetch_xor(1 << 40, Ordering::SeqCst); // one stamp bit
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

/// Overwrites the segment's magic (line 0 of the control block, which only the
/// creator writes), as a hostile producer may, then resets the ring.
fn scribbled_identity_then_reset() -> std::sync::Arc<Segment> {
    let seg = Segment::create_memfd("finding-identity", &Config::with_capacity(1 << 20)).unwrap();
    let mut consumer = seg.consumer().unwrap();
    let (base, _) = seg.mapping();
    // SAFETY: the magic is the first 8 bytes of the mapping (an atomic u64); a peer
    // writing it is what the threat model allows.
    let magic = unsafe { &*(base as *const AtomicU64) };
    magic.fetch_xor(0xff, Ordering::SeqCst);
    consumer.reset().unwrap();
    // The consumer itself carries on (it validated the layout when it attached).
    assert!(consumer.try_next().unwrap().is_none());
    seg
}

/// The consumer validated the layout when it attached and owns the ring, so
/// `reset` rewrites the identity line from its own copy (magic last), and new
/// producers can attach again.
#[test]
fn reset_restores_identity_line() {
    let seg = scribbled_identity_then_reset();
    let fds = seg
        .descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect();
    let again = Segment::from_descriptors(fds).expect("attach after reset");
    drop(again.producer().expect("a producer after reset"));
}
