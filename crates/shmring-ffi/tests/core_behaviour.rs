//! Core behaviour the C ABI relies on, pinned down where it surprised us.

use shmring::{Config, Meta, Segment};

/// `try_next()` after an aborted claim: a committed record right behind the aborted
/// one is ready, so a non-blocking poll returns it (skips do not count against a
/// zero timeout), and a caller polling with `try_next` /
/// `shmring_consumer_next(c, 0, ..)` never sees an "empty" ring that is not empty.
#[test]
fn try_next_skips_an_aborted_claim_and_returns_the_next_record() {
    let seg = Segment::create_memfd("skip-aborted", &Config::with_capacity(1 << 20)).unwrap();
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    p.reserve(100).unwrap().abort();
    p.send(b"after", Meta::new(1, 0)).unwrap();
    let f = consumer.try_next().unwrap();
    assert_eq!(f.as_deref(), Some(&b"after"[..]));
}
