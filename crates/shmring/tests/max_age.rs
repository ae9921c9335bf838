//! `ConsumerOptions::max_age`: a consumer releases unread, and counts in
//! `filtered`, each record older than the limit when it reaches it; the others
//! arrive whole and in order. Timestamps are the producer's word: every boundary
//! value of the field, and ages either side of the limit.

use std::time::Duration;

use shmring::{Address, Config, Consumer, ConsumerOptions, Meta};

/// A memfd ring and its consumer with `max_age`.
fn ring(max_age: Option<Duration>) -> (std::sync::Arc<shmring::Segment>, Consumer) {
    let seg = Address::Memfd {
        label: "max-age".into(),
        config: Config::with_capacity(1 << 16),
    }
    .open()
    .unwrap();
    let c = Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            max_age,
            ..Default::default()
        },
    )
    .unwrap();
    (seg, c)
}

/// Sends record `i` stamped `ts`, then every record the consumer hands out (their
/// numbers).
fn received(
    seg: &std::sync::Arc<shmring::Segment>,
    c: &Consumer,
    stamped: &[(u32, u64)],
) -> Vec<u32> {
    let mut p = seg.producer().unwrap();
    for &(i, ts) in stamped {
        let mut m = Meta::new(0, 0);
        m.timestamp_ns = ts;
        p.send(&i.to_le_bytes(), m).unwrap();
    }
    let mut got = Vec::new();
    while let Some(f) = c.try_next().unwrap() {
        got.push(u32::from_le_bytes(f.payload()[..4].try_into().unwrap()));
    }
    got
}

#[test]
fn records_older_than_the_limit_are_released_unread_and_counted() {
    let limit = Duration::from_secs(10);
    let (seg, c) = ring(Some(limit));
    let now = shmring::now_ns();
    let ten_s = limit.as_nanos() as u64;
    // The ages below need the monotonic clock past 21 s (time since boot).
    assert!(now > 21 * 1_000_000_000, "booted {now} ns ago");
    let stamped = [
        (0, 0),                                         // the clock's start: old
        (1, now),                                       // fresh
        (2, now.saturating_sub(2 * ten_s)),             // old
        (3, u64::MAX),                                  // ahead of now: age 0
        (4, now + ten_s),                               // ahead of now
        (5, now.saturating_sub(ten_s / 2)),             // within the limit
        (6, 1),                                         // old
        (7, now.saturating_sub(ten_s + 1_000_000_000)), // just past the limit, by 1 s
    ];
    assert_eq!(received(&seg, &c, &stamped), vec![1, 3, 4, 5]);
    let st = seg.stats();
    assert_eq!((st.records_consumed, st.records_filtered), (4, 4));
    // The space of the ones released unread came back: the ring is empty.
    assert_eq!(st.records_in_flight, 0);
    assert_eq!(st.occupancy, 0);
}

#[test]
fn without_a_limit_every_record_arrives_however_old() {
    let (seg, c) = ring(None);
    let stamped: Vec<(u32, u64)> = [0, 1, u64::MAX, u64::MAX / 2]
        .into_iter()
        .enumerate()
        .map(|(i, ts)| (i as u32, ts))
        .collect();
    assert_eq!(received(&seg, &c, &stamped), vec![0, 1, 2, 3]);
    assert_eq!(seg.stats().records_filtered, 0);
}

#[test]
fn a_tethered_consumer_applies_its_own_limit_and_counts_on_its_line() {
    let (seg, owner) = ring(None);
    let tethered = Consumer::tethered(
        seg.clone(),
        ConsumerOptions {
            max_age: Some(Duration::from_secs(10)),
            ..Default::default()
        },
    )
    .unwrap();
    // Taken on by the ring's consumer at its next look.
    assert!(owner.try_next().unwrap().is_none());
    while !tethered.adopted().unwrap() {
        assert!(owner.try_next().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(1));
    }
    let now = shmring::now_ns();
    let got = received(&seg, &owner, &[(0, 1), (1, now), (2, 2)]);
    assert_eq!(got, vec![0, 1, 2], "the ring's consumer has no limit");
    let mut kept = Vec::new();
    while let Some(f) = tethered.try_next().unwrap() {
        kept.push(u32::from_le_bytes(f.payload()[..4].try_into().unwrap()));
    }
    assert_eq!(kept, vec![1]);
    let line = tethered.tether_info().unwrap();
    assert_eq!(line.records_filtered, 2);
}

#[test]
fn a_readers_counts_say_what_its_consumer_released_unread() {
    let seg = Address::memfd("max-age-reader", Config::with_capacity(1 << 16))
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        max_age: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let mut reader =
        shmring::Reader::consume(seg.clone(), shmring::ReaderKind::Consumer, opts).unwrap();
    let mut p = seg.producer().unwrap();
    let mut old = Meta::new(0, 0);
    old.timestamp_ns = 1;
    p.send(b"old", old).unwrap();
    p.send(b"new", Meta::new(0, 0)).unwrap();
    let mut buf = Vec::new();
    let f = reader
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .unwrap();
    assert_eq!(f.payload(&buf), b"new");
    drop(f);
    assert_eq!(reader.counts().unwrap().filtered, 1);
}
