//! Integrity: bytes a consumer receives as a valid record were written by the
//! producer that committed it and by no other honest process. A producer paused
//! past the claim timeout (Ctrl-Z, a debugger, a cgroup quota) still holds a
//! pointer into its reservation and writes through it when it resumes: its space
//! is *pinned* (producers place records around it) until its next library call
//! learns the claim was taken back, or it dies.

use std::time::{Duration, Instant};

mod common;

use shmring::{Address, Config, Consumer, ConsumerOptions, FullPolicy, Meta, Producer, Segment};

const RECORD: usize = 3000;

fn ring(name: &str, overtake: Option<Duration>) -> (std::sync::Arc<Segment>, Consumer) {
    let cfg = Config {
        capacity: 64 << 10,
        max_record: Some(8 << 10),
        // Fewer than half the records a paused claim's tests send, so a parked
        // claim is taken back when the claim log is half full behind it.
        log_entries: Some(64),
        ..Config::default()
    };
    let seg = Address::memfd(name, cfg).open().unwrap();
    let opts = ConsumerOptions {
        liveness_interval: Duration::from_millis(2),
        claim_timeout: Some(Duration::from_millis(10)),
        overtake_after: overtake,
        spin: 0,
        ..Default::default()
    };
    let c = Consumer::with_options(seg.clone(), opts).unwrap();
    (seg, c)
}

fn payload(i: u64) -> Vec<u8> {
    (0..RECORD as u64).map(|b| (b * 7 + i) as u8).collect()
}

/// Polls the consumer until it has stopped waiting for the claim held by the
/// paused producer: taken back at the claim timeout (`expired_claims`), or parked
/// (`stalled_claims`) when it overtakes. Not a speed goal: both are 10 ms or less.
fn until_taken_back(seg: &Segment, consumer: &Consumer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while seg.stats().expired_claims + seg.stats().stalled_claims == 0 {
        assert!(Instant::now() < deadline, "the claim was never taken back");
        assert!(consumer
            .next_timeout(Some(Duration::from_millis(2)))
            .unwrap()
            .is_none());
    }
}

/// `[p, p + len)` and `[q, q + len2)` share a byte.
fn overlaps(p: *const u8, len: usize, q: *const u8, len2: usize) -> bool {
    let (p, q) = (p as usize, q as usize);
    p < q + len2 && q < p + len
}

/// Honest producer `b` sends records round the ring several times while `a`
/// holds a claim that was taken back; after each commit, `a` writes its whole
/// reservation (it may resume at any instant). Every record `b` sends must come
/// out intact and must never lie on `a`'s reservation.
fn ring_goes_round_a_paused_claim(overtake: Option<Duration>) {
    let (seg, consumer) = ring("integrity-pause", overtake);
    let mut a = seg.producer().unwrap();
    let mut b = seg.producer().unwrap();
    let held = a.reserve_raw(RECORD, FullPolicy::Fail).unwrap();
    until_taken_back(&seg, &consumer);
    // Four laps of the ring; under Miri (a slow machine) two, past half the
    // claim log.
    let laps = (if cfg!(miri) { 2 } else { 4 }) * (64 << 10) / RECORD as u64 + 2;
    for i in 0..laps {
        // The claim log full behind a parked claim: the consumer (here, between
        // attempts) takes it back, and there is room again.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut r = loop {
            match b.try_reserve(RECORD) {
                Ok(r) => break r,
                Err(shmring::Error::Full { .. }) => {
                    assert!(Instant::now() < deadline, "record {i}: no room");
                    assert!(consumer
                        .next_timeout(Some(Duration::from_millis(2)))
                        .unwrap()
                        .is_none());
                }
                Err(e) => panic!("record {i}: {e}"),
            }
        };
        assert!(
            !overlaps(r.payload().as_ptr(), RECORD, held.ptr, held.len),
            "record {i} was placed on the space of a claim whose holder may still write it"
        );
        r.payload().copy_from_slice(&payload(i));
        r.commit(Meta::new(1, 0)).unwrap();
        // The paused producer resumes for a moment and writes its reservation.
        // SAFETY: `held` is a reservation this producer has not settled: its
        // bytes are its own to write, however long ago it was made.
        unsafe { std::ptr::write_bytes(held.ptr, 0xAA, held.len) };
        let f = consumer
            .next_timeout(Some(Duration::from_secs(5)))
            .unwrap()
            .expect("the honest record");
        assert!(f.payload() == payload(i), "record {i} torn");
    }
    // Its commit learns the claim was taken back, and its space returns.
    assert!(matches!(
        a.commit_raw(RECORD, Meta::new(2, 0)),
        Err(shmring::Error::Abandoned { .. })
    ));
    assert!(consumer.try_next().unwrap().is_none(), "nothing from a");
    let st = seg.stats();
    assert_eq!((st.expired_claims, st.corruption, st.resets), (1, 0, 0));
    full_ring_is_available(&seg, &consumer, &mut b);
}

/// With nothing held, a producer can fill the whole ring again: no pin outlives
/// its holder's settling.
fn full_ring_is_available(seg: &Segment, consumer: &Consumer, p: &mut Producer) {
    // Let the consumer notice the holder settled (its next look).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = consumer
            .next_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        if seg.stats().pinned_bytes == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the pin was never dropped");
    }
    let mut sent = 0;
    while p
        .try_reserve(RECORD)
        .map(|r| r.commit(Meta::new(1, 0)))
        .is_ok()
    {
        sent += 1;
    }
    assert!(
        (sent + 1) * (RECORD as u64 + 128) > 64 << 10,
        "only {sent} records fit an empty ring"
    );
}

#[test]
fn a_claim_taken_back_in_claim_order_pins_its_space_until_its_holder_settles() {
    ring_goes_round_a_paused_claim(None);
}

#[test]
fn a_claim_taken_back_after_overtaking_pins_its_space_until_its_holder_settles() {
    ring_goes_round_a_paused_claim(Some(Duration::from_millis(2)));
}

/// A claim the consumer parked (overtaking) is not taken back at the claim
/// timeout while the claim log has room: it stops nobody, and its live holder may
/// commit it long after (a `queue` of pool buffers before a GStreamer sink holds
/// reservations for half a second and more). The record is delivered.
#[test]
fn a_parked_claim_committed_after_the_claim_timeout_is_delivered() {
    let (seg, consumer) = ring("integrity-late", Some(Duration::from_millis(2)));
    let mut a = seg.producer().unwrap();
    let mut b = seg.producer().unwrap();
    let mut held = a.reserve(RECORD).unwrap();
    until_taken_back(&seg, &consumer);
    // Records behind it flow meanwhile (fewer than half the claim log holds),
    // and several claim timeouts (10 ms) pass.
    let start = Instant::now();
    for i in 0..4 {
        b.send(&payload(i), Meta::new(1, 0)).unwrap();
        let f = consumer
            .next_timeout(Some(Duration::from_secs(5)))
            .unwrap()
            .expect("a record behind the parked claim");
        assert!(f.payload() == payload(i), "record {i} torn");
    }
    while start.elapsed() < Duration::from_millis(50) {
        assert!(consumer
            .next_timeout(Some(Duration::from_millis(2)))
            .unwrap()
            .is_none());
    }
    held.payload().copy_from_slice(&payload(1000));
    held.commit(Meta::new(2, 0)).unwrap();
    let f = consumer
        .next_timeout(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("the late record");
    assert!(f.payload() == payload(1000));
    assert_eq!(f.meta().stream, 2);
    drop(f);
    let st = seg.stats();
    assert_eq!((st.stalled_claims, st.expired_claims), (1, 0), "{st:?}");
}

/// The paused producer's commit, once its claim was taken back, writes nothing:
/// the record of another producer placed after it is not lost. It commits when
/// the other producer's newest record lies on its reservation, if one ever does,
/// else at the end.
#[test]
fn a_late_commit_writes_no_header() {
    let (seg, consumer) = ring("integrity-commit", None);
    let mut a = seg.producer().unwrap();
    let mut b = seg.producer().unwrap();
    let held = a.reserve_raw(RECORD, FullPolicy::Fail).unwrap();
    until_taken_back(&seg, &consumer);
    // Four laps of the ring; under Miri (a slow machine) one lap and a wrap.
    let laps = (if cfg!(miri) { 1 } else { 4 }) * (64 << 10) / RECORD as u64 + 2;
    let mut settled = false;
    for i in 0..laps {
        let mut r = b.reserve(RECORD).unwrap();
        let on_it = overlaps(r.payload().as_ptr(), RECORD, held.ptr, held.len);
        r.payload().copy_from_slice(&payload(i));
        r.commit(Meta::new(1, 0)).unwrap();
        if !settled && (on_it || i == laps - 1) {
            assert!(a.commit_raw(RECORD, Meta::new(2, 0)).is_err());
            settled = true;
        }
        let f = consumer
            .next_timeout(Some(Duration::from_secs(5)))
            .unwrap()
            .unwrap_or_else(|| panic!("record {i} lost"));
        assert!(f.payload() == payload(i), "record {i} torn");
    }
    assert_eq!(seg.stats().corruption, 0);
}

/// A producer that dies holding a claim pins nothing: its space returns at once.
#[test]
#[cfg_attr(miri, ignore = "needs a child process")]
fn a_dead_holder_pins_nothing() {
    let (seg, consumer) = ring("integrity-dead", None);
    let mut b = seg.producer().unwrap();
    // A holder in another process, killed with its reservation open.
    let (spec, fds) = common::inherit(&seg);
    let env = [
        ("SHMRING_TEST_SEG", spec),
        ("P", "0".into()),
        ("N", "0".into()),
        ("MAX", "4096".into()),
    ];
    let mut holder = common::spawn("child", "reserve-and-hang", &env, &fds);
    holder.expect("HOLDING", Duration::from_secs(30));
    holder.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seg.stats().abandoned == 0 {
        assert!(
            Instant::now() < deadline,
            "the dead claim was never skipped"
        );
        let _ = consumer
            .next_timeout(Some(Duration::from_millis(2)))
            .unwrap();
    }
    assert_eq!(seg.stats().pinned_bytes, 0);
    full_ring_is_available(&seg, &consumer, &mut b);
}

/// Entry point of the child processes (see `common::spawn`).
#[test]
#[cfg_attr(miri, ignore = "a child process's entry point")]
fn child() {
    common::child_entry();
}
