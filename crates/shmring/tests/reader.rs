//! One [`Reader`] over the three kinds: the ring's consumer, a tethered consumer and
//! a tap read the same records through the same calls; only the ring's consumer
//! may create its ring; a tap's losses and a consumer's holding show in the same
//! counts.

mod common;

use std::time::Duration;

use common::shm_name;
use shmring::{
    Address, Config, Error, Meta, Reader, ReaderFrame, ReaderKind, ReaderOptions, TapOptions,
};

const GUARD: Duration = Duration::from_secs(30);

fn opts(kind: ReaderKind) -> ReaderOptions {
    ReaderOptions {
        kind,
        ..Default::default()
    }
}

#[test]
fn every_kind_reads_the_same_records_through_the_same_calls() {
    let name = shm_name("reader-kinds");
    let mut readers = vec![Reader::open(
        Address::create(name.0.clone(), Config::with_capacity(1 << 20)),
        opts(ReaderKind::Consumer),
    )
    .unwrap()];
    for kind in [ReaderKind::Tethered, ReaderKind::Tap] {
        readers.push(Reader::open(Address::Named(name.0.clone()), opts(kind)).unwrap());
    }
    let kinds: Vec<_> = readers.iter().map(Reader::kind).collect();
    assert_eq!(kinds, ReaderKind::ALL);
    let mut p = Address::Named(name.0.clone())
        .open()
        .unwrap()
        .producer()
        .unwrap();
    for i in 0..20u32 {
        p.send(&i.to_le_bytes().repeat(i as usize + 1), Meta::new(i % 3, 0))
            .unwrap();
    }
    let mut buf = Vec::new();
    for r in &mut readers {
        for i in 0..20u32 {
            let f = r
                .next_into(&mut buf, Some(GUARD))
                .unwrap()
                .expect("a record");
            assert_eq!(f.meta().stream, i % 3, "{:?}", r.kind());
            assert_eq!(f.payload(&buf), i.to_le_bytes().repeat(i as usize + 1));
            assert_eq!(f.len(), 4 * (i as usize + 1));
            assert_eq!(
                matches!(f, ReaderFrame::Held(_)),
                r.kind().in_place(),
                "{:?}",
                r.kind()
            );
        }
        assert!(r
            .next_into(&mut buf, Some(Duration::ZERO))
            .unwrap()
            .is_none());
        assert_eq!(r.counts().unwrap().lost, 0);
        assert_eq!(r.geometry().unwrap().capacity, 1 << 20);
        assert_eq!(r.stats().unwrap().records_committed, 20);
    }
}

#[test]
fn only_the_rings_consumer_creates_its_ring() {
    let name = shm_name("reader-create");
    for kind in [ReaderKind::Tethered, ReaderKind::Tap] {
        let e = Reader::open(
            Address::create(name.0.clone(), Config::with_capacity(1 << 20)),
            opts(kind),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("a ring that exists"), "{e}");
        assert!(!name.exists(), "{kind}: nothing made");
    }
    for text in ["consumer", "tethered", "tap"] {
        assert_eq!(text.parse::<ReaderKind>().unwrap().to_string(), text);
    }
}

#[test]
fn a_taps_losses_and_filter_show_in_its_counts() {
    let name = shm_name("reader-tap");
    let mut ring = Reader::open(
        Address::create(name.0.clone(), Config::with_capacity(64 << 10)),
        opts(ReaderKind::Consumer),
    )
    .unwrap();
    let mut tap = Reader::open(
        Address::Named(name.0.clone()),
        ReaderOptions {
            kind: ReaderKind::Tap,
            tap: TapOptions {
                every: 2,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    let mut p = Address::Named(name.0.clone())
        .open()
        .unwrap()
        .producer()
        .unwrap();
    let mut buf = Vec::new();
    // Ten rings' worth while the tap looks away: it loses most, counted.
    for i in 0..160u32 {
        p.send(&[i as u8; 4000], Meta::new(0, 0)).unwrap();
        let f = ring.next_into(&mut buf, Some(GUARD)).unwrap().unwrap();
        drop(f);
    }
    let f = tap.next_into(&mut buf, Some(GUARD)).unwrap();
    let c = tap.counts().unwrap();
    assert!(c.lost > 100, "{c:?} {f:?}");
    assert_eq!(c.resets, 0, "a tap resets nothing: {c:?}");
    // Taken one in two from here.
    for _ in 0..10 {
        p.send(&[1; 100], Meta::new(0, 0)).unwrap();
        drop(ring.next_into(&mut buf, Some(GUARD)).unwrap().unwrap());
    }
    while tap
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .is_some()
    {}
    assert!(tap.counts().unwrap().filtered >= 4, "{:?}", tap.counts());
    assert_eq!(ring.counts().unwrap(), Default::default());
    assert!(ring.consumer().is_some() && ring.tap().is_none());
    assert!(tap.tap().is_some() && tap.consumer().is_none());
}
