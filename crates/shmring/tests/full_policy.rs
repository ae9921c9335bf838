//! What producers do when the ring is full: `FullPolicy::Fail` fails at once with
//! `Error::Full`, `FullPolicy::Block(t)` waits and fails with `Error::Timeout` while
//! the consumer holds everything (or `Error::NoConsumer` without a consumer), and
//! succeeds as soon as space is released. Every failed record is counted exactly
//! once in `drops_full`.

use std::time::Duration;

use shmring::{Address, Config, Error, FullPolicy, Meta, Segment};

/// 4000 payload bytes + 64 header bytes, rounded to 64: 4096 bytes per record, so a
/// 64 KiB ring holds exactly 16.
const LEN: usize = 4000;
const FIT: usize = 16;
const GUARD: Duration = Duration::from_secs(30);

fn ring() -> std::sync::Arc<Segment> {
    Address::memfd("full", Config::with_capacity(64 << 10))
        .open()
        .unwrap()
}

#[test]
fn fail_policy_returns_full_and_counts_each_drop() {
    let seg = ring();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.set_policy(FullPolicy::Fail);
    for i in 0..FIT {
        prod.send(&[i as u8; LEN], Meta::new(0, 0)).unwrap();
    }
    for k in 1..=5u64 {
        let e = prod.send(&[0; LEN], Meta::new(0, 0)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Full {
                    why: "no free bytes",
                    ..
                }
            ),
            "{e}"
        );
        let e = prod.try_reserve(LEN).err().expect("full");
        assert!(matches!(e, Error::Full { .. }), "{e}");
        assert_eq!(seg.stats().drops_full, 2 * k);
    }
    // A smaller record does not fit either: the ring is exactly full.
    assert!(matches!(prod.try_reserve(0), Err(Error::Full { .. })));
    assert_eq!(seg.stats().drops_full, 11);

    // Releasing the oldest frame makes room for exactly one more.
    let f = consumer.try_next().unwrap().unwrap();
    assert_eq!(f.payload(), &[0u8; LEN][..]);
    drop(f);
    prod.send(&[99; LEN], Meta::new(0, 0)).unwrap();
    assert!(matches!(prod.try_reserve(LEN), Err(Error::Full { .. })));
    let s = seg.stats();
    assert_eq!((s.drops_full, s.records_committed), (12, FIT as u64 + 1));
    assert_eq!(s.occupancy, (64 << 10) as u64);

    // Everything committed arrives, in order.
    let mut got = Vec::new();
    while let Some(f) = consumer.try_next().unwrap() {
        got.push(f.payload()[0]);
    }
    let want: Vec<u8> = (1..FIT as u8).chain([99]).collect();
    assert_eq!(got, want);
}

#[test]
fn fail_policy_when_the_claim_log_is_full() {
    let cfg = Config {
        capacity: 1 << 20,
        log_entries: Some(16),
        ..Config::default()
    };
    let seg = Address::memfd("full-log", cfg).open().unwrap();
    let _consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    for _ in 0..16 {
        prod.try_reserve(8)
            .unwrap()
            .commit(Meta::default())
            .unwrap();
    }
    let e = prod.try_reserve(8).err().expect("full");
    assert!(
        matches!(
            e,
            Error::Full {
                why: "too many records in flight",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(seg.stats().drops_full, 1);
}

#[test]
fn block_policy_times_out_while_the_consumer_holds_everything() {
    let seg = ring();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    for i in 0..FIT {
        prod.send(&[i as u8; LEN], Meta::new(0, 0)).unwrap();
    }
    // The consumer takes every record and holds on to all of them.
    let held: Vec<_> = std::iter::from_fn(|| consumer.try_next().unwrap()).collect();
    assert_eq!(held.len(), FIT);
    for k in 1..=3u64 {
        let e = prod
            .reserve_with(LEN, FullPolicy::Block(Duration::from_millis(30)))
            .err()
            .expect("no space while everything is held");
        assert!(
            matches!(
                e,
                Error::Timeout {
                    waiting_for: "free space",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(seg.stats().drops_full, k);
    }
    assert!(seg.stats().producer_waits >= 1, "the producer slept");

    // A producer blocked for space is woken by a release (not only by its timeout).
    let seg2 = seg.clone();
    let waiter = std::thread::spawn(move || {
        let mut p = seg2.producer().unwrap();
        p.reserve_with(LEN, FullPolicy::Block(GUARD))
            .map(|r| r.commit(Meta::new(1, 0)))
    });
    let waits = seg.stats().producer_waits;
    let t = std::time::Instant::now();
    while seg.stats().producer_waits == waits {
        assert!(t.elapsed() < GUARD, "the second producer never waited");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Releasing a frame that is not the oldest frees nothing: still blocked.
    let mut held = held;
    drop(held.remove(5));
    assert_eq!(
        seg.stats().occupancy,
        64 << 10,
        "the read cursor did not move"
    );
    assert!(!waiter.is_finished());
    drop(held.remove(0)); // the oldest: now there is room
    waiter.join().unwrap().unwrap().unwrap();
    let s = seg.stats();
    assert_eq!(s.drops_full, 3);
    assert_eq!(s.records_committed, FIT as u64 + 1);
    drop(held);
    let mut n = 0;
    while let Some(f) = consumer.try_next().unwrap() {
        assert_eq!(f.stream(), 1);
        n += 1;
    }
    assert_eq!(n, 1);
}

#[test]
fn block_policy_without_a_consumer_fails_with_no_consumer() {
    let seg = ring();
    let mut prod = seg.producer().unwrap();
    for _ in 0..FIT {
        prod.send(&[1; LEN], Meta::default()).unwrap();
    }
    prod.set_policy(FullPolicy::Block(Duration::from_millis(20)));
    let e = prod.send(&[1; LEN], Meta::default()).unwrap_err();
    assert!(matches!(e, Error::NoConsumer(_)), "{e}");
    assert_eq!(seg.stats().drops_full, 1);
    // A consumer that attaches later finds everything.
    let consumer = seg.consumer().unwrap();
    let mut n = 0;
    while consumer.try_next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, FIT);
}
