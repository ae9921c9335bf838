//! A ring in this process's heap (`Segment::create_in_process`): everything above
//! the segment runs on it unchanged, it hands out no descriptor, and the test hook
//! that kills a holder without its `Drop` has the effects of a process's death:
//! a dead producer's claim is taken back and its slot freed, a dead consumer's role
//! is taken over, a dead tethered consumer is expelled. These run under Miri too
//! (`make test-miri`), where they are the crash tests.

use std::time::Duration;

use shmring::{
    Address, Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta, ReadOnlySegment, Segment,
    Tap, TapOptions,
};

/// Guards against a hang only (virtual time under Miri runs fast).
const GUARD: Duration = Duration::from_secs(60);

fn ring(name: &str) -> std::sync::Arc<Segment> {
    let cfg = Config {
        capacity: 64 << 10,
        log_entries: Some(16),
        ..Config::default()
    };
    Segment::create_in_process(name, &cfg).unwrap()
}

fn fast() -> ConsumerOptions {
    ConsumerOptions {
        liveness_interval: Duration::from_millis(5),
        spin: 0,
        ..Default::default()
    }
}

#[test]
fn producers_a_consumer_and_a_tap_work_on_an_in_process_ring() {
    let seg = ring("basic");
    assert!(seg.name().starts_with("in-process:"), "{}", seg.name());
    let consumer = seg.consumer().unwrap();
    let mut tap = Tap::new(ReadOnlySegment::of(&seg).unwrap(), TapOptions::default());
    let mut p = seg.producer().unwrap();
    let mut buf = Vec::new();
    for i in 0..40u32 {
        p.send(&[i as u8; 700], Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().expect("a frame");
        assert_eq!((f.meta().kind, f.payload()), (i, &[i as u8; 700][..]));
        drop(f);
        let got = tap.next_into(&mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(got.map(|f| f.meta.kind), Some(i));
        assert_eq!(buf, [i as u8; 700]);
    }
    let s = seg.stats();
    assert_eq!((s.records_committed, s.records_consumed), (40, 40));
    assert_eq!((s.producers, s.consumer_attached), (1, true));
    // The roles are held against each other, as record locks hold them.
    assert!(matches!(seg.consumer(), Err(Error::ConsumerBusy(_))));
    drop(consumer);
    assert!(!seg.consumer_alive());
    let again = seg.consumer().unwrap();
    p.send(b"after", Meta::new(0, 0)).unwrap();
    assert_eq!(again.try_next().unwrap().unwrap().payload(), b"after");
}

#[test]
fn an_in_process_ring_hands_out_no_descriptor() {
    let seg = ring("no-fd");
    assert!(seg.descriptors().is_empty());
    let e = seg.read_only_fd().expect_err("no read-only descriptor");
    assert!(e.to_string().contains("in-process:no-fd"), "{e}");
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let e = seg.send(&a).expect_err("nothing to send");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

/// What `fd()` gives for an in-process ring refers to no ring: attaching from it
/// and serving it are refused with an error, not a panic. (Not under Miri, which
/// has no `fstat` or sockets to bind.)
#[test]
#[cfg_attr(miri, ignore = "fstat and bind are not supported by Miri")]
fn its_placeholder_descriptor_is_refused_by_attach_and_listener() {
    let seg = ring("placeholder");
    let fd = seg.fd().try_clone_to_owned().unwrap();
    assert!(Address::Descriptors(vec![fd]).open().is_err());
    let dir = std::env::temp_dir().join(format!("shmring-in-process-{}", std::process::id()));
    let e = shmring::Listener::bind(&seg, &dir, Default::default())
        .expect_err("an in-process ring cannot be served");
    assert!(e.to_string().contains("not a sealed memfd"), "{e}");
    assert!(!dir.exists());
}

#[test]
fn a_killed_producers_claim_is_taken_back_and_its_slot_freed() {
    let seg = ring("kill-producer");
    let consumer = Consumer::with_options(seg.clone(), fast()).unwrap();
    let mut victim = seg.producer().unwrap();
    let slot = victim.slot();
    let r = victim.reserve_raw(300, FullPolicy::Fail).unwrap();
    // SAFETY: the reservation's bytes are ours until the producer dies.
    unsafe { std::ptr::write_bytes(r.ptr, 0xdd, r.len) };
    Segment::kill_producer(victim).unwrap();
    let mut honest = seg.producer().unwrap();
    assert_ne!(
        honest.slot(),
        slot,
        "the dead slot is not free before it is reaped"
    );
    honest
        .send(b"behind the dead claim", Meta::new(1, 1))
        .unwrap();
    // Strict claim order: the record waits for the dead claim, which the consumer
    // takes back once the slot's lock reads free (no claim timeout involved).
    let f = consumer
        .next_timeout(Some(GUARD))
        .unwrap()
        .expect("the record behind the dead claim");
    assert_eq!(f.payload(), b"behind the dead claim");
    drop(f);
    let s = seg.stats();
    assert_eq!((s.abandoned, s.expired_claims, s.corruption), (1, 0, 0));
    // The dead producer's slot is reaped, and taken by the next producer.
    consumer.reap();
    assert_eq!(seg.stats().producers, 1);
    let next = seg.producer().unwrap();
    assert_eq!(next.slot(), slot);
}

#[test]
fn a_killed_consumers_role_is_taken_over_and_its_frames_delivered_again() {
    let seg = ring("kill-consumer");
    let first = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    for i in 0..3u32 {
        p.send(&[i as u8; 100], Meta::new(0, i)).unwrap();
    }
    // It holds one frame and released another when it dies.
    drop(first.try_next().unwrap().unwrap());
    let held = first.try_next().unwrap().unwrap().into_raw();
    assert!(matches!(seg.consumer(), Err(Error::ConsumerBusy(_))));
    Segment::kill_consumer(first).unwrap();
    assert!(!seg.consumer_alive());
    let second = seg.consumer().unwrap();
    // The frame it held comes again (its release was never published), then the
    // rest; the one it released does not.
    let kinds: Vec<u32> = std::iter::from_fn(|| second.try_next().unwrap())
        .map(|f| f.meta().kind)
        .collect();
    assert_eq!(kinds, [1, 2], "the held frame once more, then the rest");
    assert_eq!(held.len, 100);
}

#[test]
fn a_killed_tethered_consumer_is_expelled_and_producers_carry_on() {
    let seg = ring("kill-tether");
    let owner = Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            // Only its death can expel it.
            tether_stall_limit: Duration::from_secs(3600),
            ..fast()
        },
    )
    .unwrap();
    let tethered = Consumer::tethered(seg.clone(), fast()).unwrap();
    assert!(owner.try_next().unwrap().is_none()); // adopts it
    let mut p = seg.producer().unwrap();
    p.set_policy(FullPolicy::Fail);
    p.send(b"held", Meta::new(0, 0)).unwrap();
    let _held = tethered.try_next().unwrap().unwrap().into_raw();
    // The ring fills up behind the frame the tethered consumer holds.
    let mut sent = 1;
    while p.send(&[1u8; 1000], Meta::new(0, sent)).is_ok() {
        drop(owner.try_next().unwrap());
        sent += 1;
    }
    assert_eq!(seg.stats().tethered_consumers, 1);
    Segment::kill_consumer(tethered).unwrap();
    // The owner frees its line within a liveness interval: space comes back.
    p.set_policy(FullPolicy::Block(GUARD));
    let writer = std::thread::spawn(move || p.send(b"after", Meta::new(0, 0)));
    let deadline = std::time::Instant::now() + GUARD;
    let mut last = Vec::new();
    while last != b"after" {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead tethered consumer's space never came back"
        );
        if let Some(f) = owner.next_timeout(Some(Duration::from_millis(5))).unwrap() {
            last = f.payload().to_vec();
        }
    }
    writer.join().unwrap().unwrap();
    let s = seg.stats();
    assert_eq!((s.tethers_detached, s.tethered_consumers), (1, 0));
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no memfd")]
fn only_an_in_process_rings_holders_can_be_killed() {
    let seg = Address::memfd("kill-memfd", Config::with_capacity(1 << 16))
        .open()
        .unwrap();
    let p = seg.producer().unwrap();
    let e = Segment::kill_producer(p).expect_err("a memfd ring's producer dies by kill");
    assert!(e.to_string().contains("in-process"), "{e}");
    // It was dropped as usual: its slot is free.
    assert_eq!(seg.stats().producers, 0);
}

/// A dead producer's claim that ends at the ring's end looks, to a tap, like the
/// padding of a placement (which the consumer counts, and a tap's jump does not
/// count as records lost). A tap that took such a claim for one still counts
/// every record it jumps over later: what it delivers and what it counts lost
/// add up to what was committed.
#[test]
fn a_tap_that_took_a_dead_claim_for_a_padding_counts_every_record_it_jumps() {
    use shmring::layout::{record_units, UNIT};
    let seg = ring("tap-dead-at-end");
    let consumer = Consumer::with_options(seg.clone(), fast()).unwrap();
    let mut tap = Tap::new(ReadOnlySegment::of(&seg).unwrap(), TapOptions::default());
    let mut buf = Vec::new();
    // Records of 16 units: 64 of them fill the 64 KiB ring exactly.
    let len = 15 * UNIT as usize;
    assert_eq!(record_units(len as u64) * 64 * UNIT, 64 << 10);
    let mut p = seg.producer().unwrap();
    for i in 0..63u32 {
        p.send(&vec![i as u8; len], Meta::new(0, i)).unwrap();
        drop(consumer.try_next().unwrap().expect("a frame"));
        let got = tap.next_into(&mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(got.map(|f| f.meta.kind), Some(i));
    }
    // The 64th claim ends at the ring's end; its producer dies holding it.
    let mut victim = seg.producer().unwrap();
    let _claim = victim.reserve_raw(len, FullPolicy::Fail).unwrap();
    Segment::kill_producer(victim).unwrap();
    let start = std::time::Instant::now();
    while seg.stats().abandoned == 0 {
        assert!(
            start.elapsed() < GUARD,
            "the dead claim was never taken back"
        );
        assert!(consumer
            .next_timeout(Some(Duration::from_millis(5)))
            .unwrap()
            .is_none());
    }
    assert!(tap
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .is_none());
    assert_eq!(seg.stats().placements, 0);
    // The tap falls more than a ring behind, then reads again.
    let more = 40u32;
    for i in 0..more {
        p.send(&vec![i as u8; len], Meta::new(1, i)).unwrap();
        drop(consumer.try_next().unwrap().expect("a frame"));
    }
    let before = tap.stats();
    let mut delivered = 0;
    while tap
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .is_some()
    {
        delivered += 1;
    }
    let after = tap.stats();
    assert!(after.skips > before.skips, "{after:?}");
    assert_eq!(
        delivered + after.lost - before.lost,
        more as u64,
        "delivered {delivered}, {after:?}"
    );
}
