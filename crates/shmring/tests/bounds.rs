//! Bounds that hold against a peer who aims (issue: hostile peers, round 3): one
//! test per class a targeted write or a live attacker used to break. Each attack is
//! a plain store into the mapping (what any process with the descriptor can do);
//! afterwards honest producers' records must flow again, exactly once.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring::layout::{
    cursor_pos, cursor_seq, pack_cursor, ClaimState, LogEntry, SLOT_ACTIVE, UNIT,
};
use shmring::{
    Address, Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta, Producer, Segment,
};
use shmring_testkit::Peer;

/// The liveness bound these tests hold the ring to; more under Miri, whose clock
/// counts microseconds per step it interprets (a much slower machine).
const BOUND: Duration = Duration::from_secs(if cfg!(miri) { 60 } else { 1 });

fn small() -> Config {
    Config {
        capacity: 64 << 10,
        max_record: Some(4 << 10),
        log_entries: Some(16),
        max_producers: 32,
        ..Config::default()
    }
}

fn fast(opts: ConsumerOptions) -> ConsumerOptions {
    ConsumerOptions {
        liveness_interval: Duration::from_millis(5),
        spin: 0,
        ..opts
    }
}

fn payload(i: u64) -> Vec<u8> {
    (0..(64 + (i % 7) * 100)).map(|b| (b ^ i) as u8).collect()
}

/// Sends records tagged from `first` on until the consumer receives one sent
/// after the attack, then `more` further ones, each exactly once and intact.
/// Fails if nothing flows within `budget` (the liveness bound, not a speed goal).
fn records_flow(consumer: &Consumer, producer: &mut Producer, first: u64, more: u64) {
    let budget = BOUND;
    let start = Instant::now();
    let mut next = first;
    let mut seen = Vec::new();
    let target = loop {
        assert!(
            start.elapsed() < budget,
            "no record got through within {budget:?} (sent {} since the attack)",
            next - first
        );
        if let Ok(mut r) = producer.try_reserve(payload(next).len()) {
            r.payload().copy_from_slice(&payload(next));
            let _ = r.commit(Meta::new(0, next as u32));
        }
        next += 1;
        while let Some(f) = consumer
            .next_timeout(Some(Duration::from_millis(2)))
            .expect("consumer")
        {
            let tag = f.meta().kind as u64;
            assert_eq!(f.payload(), payload(tag), "record {tag} damaged");
            seen.push(tag);
        }
        if seen.iter().any(|&t| t >= first) {
            break next;
        }
    };
    // From now on: every record exactly once, in order.
    let mut expect = Vec::new();
    for tag in target..target + more {
        // A full ring or claim log (a claim parked behind): the consumer, here
        // between attempts, makes room.
        let deadline = Instant::now() + budget;
        loop {
            match producer.try_reserve(payload(tag).len()) {
                Ok(mut r) => {
                    r.payload().copy_from_slice(&payload(tag));
                    r.commit(Meta::new(0, tag as u32))
                        .expect("commit after recovery");
                    break;
                }
                Err(Error::Full { .. }) => {
                    assert!(Instant::now() < deadline, "no room for record {tag}");
                    assert!(consumer
                        .next_timeout(Some(Duration::from_millis(2)))
                        .expect("consumer")
                        .is_none());
                }
                Err(e) => panic!("send after recovery: {e}"),
            }
        }
        expect.push(tag);
        let f = consumer
            .next_timeout(Some(BOUND))
            .expect("consumer")
            .expect("a record after recovery");
        assert_eq!(f.meta().kind as u64, tag);
        assert_eq!(f.payload(), payload(tag));
    }
    assert!(
        consumer.try_next().expect("consumer").is_none(),
        "a record twice"
    );
}

#[test]
fn a_write_cursor_moved_about_a_ring_ahead_recovers() {
    let cap = small().capacity / UNIT;
    let rec = 2; // units of a small record
    for (ahead, committed_first) in [
        (cap, 0),
        (cap, 3),
        (cap - 1, 0),
        (cap - 3 * rec, 0),
        (cap - 3 * rec, 2),
        (cap + 1, 0),
        (2 * cap, 0),
        (cap / 2, 0),
    ] {
        let seg = Address::memfd("bounds-ahead", small()).open().unwrap();
        let consumer = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
        let mut producer = seg.producer().unwrap();
        for i in 0..committed_first {
            producer.send(&payload(i), Meta::new(0, i as u32)).unwrap();
        }
        let peer = Peer::new(&seg);
        let w = peer.control().write.0.load(Ordering::Relaxed);
        peer.control().write.0.store(
            pack_cursor(cursor_seq(w), cursor_pos(w) + ahead),
            Ordering::Relaxed,
        );
        records_flow(&consumer, &mut producer, 1000, 40);
    }
}

#[test]
fn a_producer_killed_between_stamping_its_claim_and_moving_the_cursor_costs_no_reset() {
    let seg = Address::memfd("bounds-half-claim", small()).open().unwrap();
    let consumer = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let mut producer = seg.producer().unwrap();
    producer.send(&payload(1), Meta::new(0, 1)).unwrap();
    // The dead producer: a slot that is ACTIVE while nobody holds its lock, and its
    // claim stamped at the write cursor, which it never moved.
    let peer = Peer::new(&seg);
    let dead = 7;
    peer.slot(dead).state.store(SLOT_ACTIVE, Ordering::Relaxed);
    let w = peer.control().write.0.load(Ordering::Relaxed);
    let claim = LogEntry {
        stamp: cursor_seq(w),
        state: ClaimState::Claimed,
        slot: dead,
        units: 3,
    };
    peer.entry(cursor_seq(w))
        .store(claim.pack(), Ordering::Relaxed);
    let f = consumer.recv().unwrap();
    assert_eq!(f.payload(), payload(1));
    drop(f);
    // The consumer judges the claim, steps over it, and helps the cursor past it
    // as a producer would: no reset, nothing counted as corruption.
    let deadline = Instant::now() + BOUND;
    while seg.stats().abandoned == 0 {
        assert!(
            Instant::now() < deadline,
            "the dead claim was never skipped"
        );
        assert!(consumer
            .next_timeout(Some(Duration::from_millis(5)))
            .unwrap()
            .is_none());
    }
    let _ = consumer.audit().unwrap();
    let s = seg.stats();
    assert_eq!((s.resets, s.corruption), (0, 0), "{s:?}");
    records_flow(&consumer, &mut producer, 2000, 20);
    assert_eq!(seg.stats().resets, 0);
}

#[test]
fn any_number_of_held_reservations_lets_the_records_behind_them_through() {
    let seg = Address::memfd("bounds-held", small()).open().unwrap();
    let opts = fast(ConsumerOptions {
        overtake_after: Some(Duration::from_millis(10)),
        claim_timeout: None,
        ..Default::default()
    });
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    // Twenty live producers each hold a reservation open (more than the claims a
    // consumer could once watch at a time), the log has 16 entries, so 12 of them.
    let mut holders: Vec<Producer> = (0..12).map(|_| seg.producer().unwrap()).collect();
    let held: Vec<_> = holders
        .iter_mut()
        .map(|p| p.reserve_raw(100, FullPolicy::Fail).unwrap())
        .collect();
    assert_eq!(held.len(), 12);
    let mut honest = seg.producer().unwrap();
    for i in 0..3u64 {
        honest.send(&payload(i), Meta::new(0, i as u32)).unwrap();
    }
    for i in 0..3u64 {
        let f = consumer
            .next_timeout(Some(BOUND))
            .unwrap()
            .unwrap_or_else(|| panic!("record {i} stayed behind the held reservations"));
        assert_eq!(f.payload(), payload(i));
    }
    assert!(seg.stats().stalled_claims >= 12);
}

#[test]
fn held_reservations_expire_after_the_claim_timeout() {
    let seg = Address::memfd("bounds-expire", small()).open().unwrap();
    let opts = fast(ConsumerOptions {
        claim_timeout: Some(Duration::from_millis(50)),
        ..Default::default()
    });
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let mut stuck = seg.producer().unwrap();
    let r = stuck.reserve_raw(100, FullPolicy::Fail).unwrap();
    let mut honest = seg.producer().unwrap();
    honest.send(&payload(5), Meta::new(0, 5)).unwrap();
    // Strict claim order: the record waits for the stuck claim, which is taken
    // back after the timeout.
    let f = consumer
        .next_timeout(Some(BOUND))
        .unwrap()
        .expect("the record behind an expired claim");
    assert_eq!(f.payload(), payload(5));
    drop(f);
    assert_eq!(seg.stats().expired_claims, 1);
    assert!(matches!(
        stuck.commit_raw(r.len, Meta::new(0, 0)),
        Err(Error::Abandoned { .. })
    ));
    // The stuck producer carries on with new reservations.
    stuck.send(&payload(6), Meta::new(0, 6)).unwrap();
    assert_eq!(consumer.recv().unwrap().payload(), payload(6));
}

#[test]
fn a_claim_forged_in_an_idle_producers_name_stalls_no_longer_than_the_claim_timeout() {
    let seg = Address::memfd("bounds-forged-idle", small())
        .open()
        .unwrap();
    let opts = fast(ConsumerOptions {
        claim_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    });
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let idle = seg.producer().unwrap();
    let victim = idle.slot();
    // The forger writes a claim in the idle producer's name *and* the producer's
    // open-claim word, moves the write cursor past it, and is gone.
    let peer = Peer::new(&seg);
    let w = peer.control().write.0.load(Ordering::Relaxed);
    let forged = LogEntry {
        stamp: cursor_seq(w),
        state: ClaimState::Claimed,
        slot: victim,
        units: 4,
    }
    .pack();
    peer.slot(victim)
        .open_claim
        .store(forged, Ordering::Relaxed);
    peer.entry(cursor_seq(w)).store(forged, Ordering::Relaxed);
    peer.control().write.0.store(
        pack_cursor(cursor_seq(w) + 1, cursor_pos(w) + 4),
        Ordering::Relaxed,
    );
    let mut honest = seg.producer().unwrap();
    records_flow(&consumer, &mut honest, 3000, 10);
    // The consumer stopped waiting for it: parked (overtaking, due as soon as
    // the claim timeout here), or taken back.
    let st = seg.stats();
    assert!(st.stalled_claims + st.expired_claims >= 1, "{st:?}");
    drop(idle);
}

#[test]
fn a_tether_line_written_by_another_process_is_expelled_and_its_reader_told_why() {
    let seg = Address::memfd("bounds-tether", small()).open().unwrap();
    let owner = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let tethered = Consumer::tethered(seg.clone(), fast(Default::default())).unwrap();
    let mut producer = seg.producer().unwrap();
    for i in 0..4u64 {
        producer.send(&payload(i), Meta::new(0, i as u32)).unwrap();
    }
    for _ in 0..4 {
        drop(owner.recv().unwrap());
    }
    let line = tethered.tether_info().unwrap().line as usize;
    for _ in 0..4 {
        drop(tethered.recv().unwrap());
    }
    // Another process moves the line's read cursor backwards, again and again.
    let peer = Peer::new(&seg);
    let before = peer.control().tether[line].0.read.load(Ordering::Relaxed);
    // Two values behind the line's, alternately (the owner never sees a release
    // that leads from one to the other).
    let back = [
        pack_cursor(cursor_seq(before) - 2, cursor_pos(before) - 4),
        pack_cursor(cursor_seq(before) - 1, cursor_pos(before) - 2),
    ];
    let deadline = Instant::now() + BOUND;
    for i in 0.. {
        peer.control().tether[line]
            .0
            .read
            .store(back[i % 2], Ordering::Relaxed);
        let _ = owner.audit().unwrap();
        if seg.stats().tethers_detached > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the written line was never expelled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    match tethered.try_next() {
        Err(Error::Detached { why, .. }) => {
            assert!(why.contains("another process"), "{why}")
        }
        other => panic!("expected Detached, got {other:?}"),
    }
    // The owner holds nothing for it any more: records flow to the end of the ring.
    records_flow(&owner, &mut producer, 4000, 60);
}

/// A ring with its consumer and a tethered one, each having read record 1.
fn owner_and_tethered(name: &str) -> (std::sync::Arc<Segment>, Consumer, Consumer, Producer) {
    let seg = Address::memfd(name, small()).open().unwrap();
    let owner = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let tethered = Consumer::tethered(seg.clone(), fast(Default::default())).unwrap();
    let mut producer = seg.producer().unwrap();
    producer.send(&payload(1), Meta::new(0, 1)).unwrap();
    drop(owner.recv().unwrap());
    drop(tethered.recv().unwrap());
    (seg, owner, tethered, producer)
}

#[test]
fn a_tethered_reader_notices_its_own_line_was_written() {
    let (seg, owner, tethered, mut producer) = owner_and_tethered("bounds-tether-self");
    let line = tethered.tether_info().unwrap().line as usize;
    let peer = Peer::new(&seg);
    let r = peer.control().tether[line].0.read.load(Ordering::Relaxed);
    // Forward, as if it had released records it never read.
    peer.control().tether[line].0.read.store(
        pack_cursor(cursor_seq(r) + 1, cursor_pos(r) + 2),
        Ordering::Relaxed,
    );
    match tethered.audit() {
        Err(Error::Detached { why, .. }) => assert!(why.contains("another process"), "{why}"),
        other => panic!("expected Detached, got {other:?}"),
    }
    drop(tethered);
    producer.send(&payload(2), Meta::new(0, 2)).unwrap();
    assert_eq!(owner.recv().unwrap().payload(), payload(2));
}

#[test]
fn a_claim_stamped_at_an_unmoved_write_cursor_never_makes_a_tap_go_back() {
    use shmring::{ReadOnlySegment, Tap, TapOptions};
    let seg = Address::memfd("bounds-tap-unmoved", small())
        .open()
        .unwrap();
    let consumer = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let mut tap = Tap::new(
        ReadOnlySegment::of(&seg).unwrap(),
        TapOptions {
            skip_pending_after: Duration::from_millis(10),
            poll_interval: Duration::from_millis(1),
            ..Default::default()
        },
    );
    let mut producer = seg.producer().unwrap();
    for i in 0..3u64 {
        producer.send(&payload(i), Meta::new(0, i as u32)).unwrap();
    }
    // A claim stamped at the write cursor, which nobody moves past it.
    let peer = Peer::new(&seg);
    let w = peer.control().write.0.load(Ordering::Relaxed);
    let claim = LogEntry {
        stamp: cursor_seq(w),
        state: ClaimState::Claimed,
        slot: producer.slot(),
        units: 2,
    };
    peer.entry(cursor_seq(w))
        .store(claim.pack(), Ordering::Relaxed);
    let mut buf = Vec::new();
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        if let Some(f) = tap
            .next_into(&mut buf, Some(Duration::from_millis(5)))
            .unwrap()
        {
            seen.push(f.meta.kind);
        }
    }
    assert_eq!(seen, [0, 1, 2], "each record once, none again");
    assert_eq!(
        tap.stats().lost,
        1,
        "only the claim stepped over: {:?}",
        tap.stats()
    );
    // The consumer takes the claim back; honest records reach the tap once each.
    for _ in 0..3 {
        drop(consumer.recv().unwrap());
    }
    records_flow(&consumer, &mut producer, 10, 5);
    let mut later = Vec::new();
    while let Some(f) = tap
        .next_into(&mut buf, Some(Duration::from_millis(50)))
        .unwrap()
    {
        later.push(f.meta.kind);
    }
    let mut dedup = later.clone();
    dedup.dedup();
    assert_eq!(later, dedup, "no record twice");
    assert!(later.iter().all(|&k| k >= 10), "{later:?}");
    assert!(tap.stats().lost < 10, "{:?}", tap.stats());
}

/// Another process writes DETACHED (the ring's consumer's verdict on a stalled
/// reader) into an honest tethered consumer's line: the tethered consumer waits
/// for the ring's consumer to confirm, hands out nothing meanwhile, and carries
/// on once the ring's consumer has written its line back (a repair).
#[test]
fn a_forged_detached_state_does_not_end_an_honest_tethered_consumer() {
    use shmring::layout::{TETHER_ACTIVE, TETHER_DETACHED};
    let (seg, owner, tethered, mut producer) = owner_and_tethered("bounds-tether-forged-detach");
    let line = tethered.tether_info().unwrap().line as usize;
    let peer = Peer::new(&seg);
    let state = &peer.control().tether[line].0.state;
    state.store(TETHER_DETACHED, Ordering::Relaxed);
    producer.send(&payload(2), Meta::new(0, 2)).unwrap();
    assert!(
        tethered.try_next().unwrap().is_none(),
        "nothing handed out while the verdict is unconfirmed"
    );
    let repairs = seg.stats().repairs;
    let _ = owner.audit().unwrap();
    assert_eq!(state.load(Ordering::Relaxed), TETHER_ACTIVE);
    assert!(seg.stats().repairs > repairs);
    let f = tethered
        .next_timeout(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("the record after the forgery");
    assert_eq!(f.payload(), payload(2));
    drop(f);
    assert_eq!(owner.recv().unwrap().payload(), payload(2));
    assert_eq!(seg.stats().tethers_detached, 0);
}

/// A real expulsion (the tethered consumer stopped releasing past its stall
/// limit) still ends it, once confirmed: the ring's consumer does not write it
/// back.
#[test]
fn a_stalled_tethered_consumer_is_still_expelled() {
    let seg = Address::memfd("bounds-tether-stalled", small())
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        tether_stall_limit: Duration::from_millis(20),
        ..fast(Default::default())
    };
    let owner = Consumer::with_options(seg.clone(), opts).unwrap();
    let tethered = Consumer::tethered(seg.clone(), fast(Default::default())).unwrap();
    let mut producer = seg.producer().unwrap();
    producer.send(&payload(1), Meta::new(0, 1)).unwrap();
    drop(owner.recv().unwrap());
    let held = tethered.recv().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seg.stats().tethers_detached == 0 {
        assert!(Instant::now() < deadline, "never expelled");
        let _ = owner.audit().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match tethered.try_next() {
            Err(Error::Detached { why, .. }) => {
                assert!(why.contains("stall limit"), "{why}");
                break;
            }
            Ok(None) => {
                let _ = owner.audit().unwrap();
                assert!(
                    Instant::now() < deadline,
                    "the expulsion was never confirmed"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            other => panic!("expected Detached, got {other:?}"),
        }
    }
}

/// Bits of the tether mask past the last tether line (no tethered consumer sets
/// them) are cleared by the ring's consumer's audit, counted as a repair.
#[test]
fn tether_mask_bits_past_the_last_line_are_repaired() {
    let seg = Address::memfd("bounds-tether-mask", small())
        .open()
        .unwrap();
    let owner = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let peer = Peer::new(&seg);
    let mask = &peer.control().tethers.0.mask;
    mask.store(0xffff_ff00, Ordering::Relaxed);
    let repairs = seg.stats().repairs;
    let _ = owner.audit().unwrap();
    assert_eq!(mask.load(Ordering::Relaxed), 0);
    assert!(seg.stats().repairs > repairs);
    let mut producer = seg.producer().unwrap();
    records_flow(&owner, &mut producer, 1, 20);
}

/// Counters only the ring's consumer writes, scribbled by another process, are
/// written back at its next audit (counted as a repair), so `stat` shows the
/// consumer's counts, not the peer's.
#[test]
fn the_consumers_counters_a_peer_scribbled_are_repaired() {
    let seg = Address::memfd("bounds-counters", small()).open().unwrap();
    let owner = Consumer::with_options(seg.clone(), fast(Default::default())).unwrap();
    let mut producer = seg.producer().unwrap();
    for i in 0..5u64 {
        producer.send(&payload(i), Meta::new(0, i as u32)).unwrap();
        drop(owner.recv().unwrap());
    }
    let before = seg.stats();
    assert_eq!(before.records_consumed, 5);
    let peer = Peer::new(&seg);
    let c = &peer.control().counters.0;
    for f in [
        &c.records_consumed,
        &c.bytes_consumed,
        &c.resets,
        &c.peak_occupancy,
    ] {
        f.store(u64::MAX, Ordering::Relaxed);
    }
    peer.control()
        .health
        .0
        .expired_claims
        .store(7, Ordering::Relaxed);
    let _ = owner.audit().unwrap();
    let after = seg.stats();
    assert_eq!(
        (
            after.records_consumed,
            after.bytes_consumed,
            after.resets,
            after.expired_claims
        ),
        (5, before.bytes_consumed, 0, 0)
    );
    assert_eq!(after.peak_occupancy, before.peak_occupancy);
    // The rewrites are the peer's doing, said as repairs (and corruption).
    assert!(after.repairs > before.repairs);
    assert!(after.corruption > before.corruption);
    records_flow(&owner, &mut producer, 100, 10);
}
