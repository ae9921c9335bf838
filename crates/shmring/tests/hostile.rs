//! Hostile producers: random bytes over every shared structure a producer can
//! write (control block, slot table, claim log, record headers), up front and
//! concurrently with the consumer. The consumer must never panic, never touch
//! memory outside the segment, never hang; it reports `Error::Corrupt` (or sees
//! nothing, or garbage frames that lie inside the ring), and after
//! `Consumer::reset` honest producers attach and records flow again. Identity
//! scribbles make a new attach fail with `Error::LayoutMismatch` naming the field.
//!
//! All randomness comes from fixed seeds, so a failure reproduces.

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::layout::{
    cursor_seq, ClaimState, Control, Identity, LogEntry, RecordHeader, SEQ_MASK, UNIT,
};
use shmring::{Address, Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta, Segment};
use shmring_testkit::{Peer, Rng, Target};

/// One random act of vandalism, by a peer writing where any producer can write.
fn scribble(peer: &Peer, rng: &mut Rng) {
    let g = *peer.geometry();
    let c = peer.control();
    let n = g.log_entries as u64;
    let cap = g.cap_units();
    let read = || cursor_seq(c.cursors.0.read.load(Ordering::Relaxed));
    match rng.below(8) {
        // The control block's lines 1 to 7: cursors, futex words, the consumer's
        // role and counters.
        0 => peer.scribble(
            rng,
            offset_of!(Control, write)..offset_of!(Control, health),
            16,
        ),
        1 => peer.scribble(rng, peer.target(Target::Slots), 24),
        2 => peer.entry(rng.next()).store(rng.next(), Ordering::Relaxed),
        3 | 4 => {
            // A forged claim right where the consumer looks next (or soon).
            let seq = (read() + rng.below(n)) & SEQ_MASK;
            let state = match rng.below(4) {
                0 => ClaimState::Claimed,
                1 => ClaimState::Committed,
                2 => ClaimState::Aborted,
                _ => ClaimState::Abandoned,
            };
            let units = match rng.below(4) {
                0 => 1 + rng.below(4),
                1 => 1 + rng.below(cap + 4),
                2 => cap - rng.below(4),
                _ => rng.next(),
            };
            let e = LogEntry {
                stamp: seq,
                state,
                slot: rng.below(g.max_producers as u64 + 4) as u32,
                units,
            };
            peer.entry(seq).store(e.pack(), Ordering::Relaxed);
        }
        5 => {
            // Random bytes over a record header (or anywhere in it).
            let off = peer.unit_offset(rng.below(cap));
            peer.scribble(rng, off..off + UNIT as usize, UNIT);
        }
        6 => {
            // A plausible header: right seq, lying length.
            let unit = rng.below(cap);
            let h = RecordHeader {
                len: match rng.below(3) {
                    0 => rng.below(4 * UNIT),
                    1 => rng.below(g.capacity + 1),
                    _ => rng.next(),
                },
                seq: shmring::layout::header_seq(read() + rng.below(n)),
                timestamp_ns: rng.next(),
                stream: rng.next() as u32,
                ..Default::default()
            };
            peer.put_header(unit, &h);
        }
        _ => {
            let cursor = if rng.below(2) == 0 {
                &c.write.0
            } else {
                &c.cursors.0.read
            };
            let v = match rng.below(2) {
                0 => rng.next(),
                _ => cursor
                    .load(Ordering::Relaxed)
                    .wrapping_add(rng.below(1 << 40)),
            };
            cursor.store(v, Ordering::Relaxed);
        }
    }
}

fn config() -> Config {
    Config {
        capacity: 256 << 10,
        max_record: Some(16 << 10),
        log_entries: Some(64),
        max_producers: 8,
        ..Config::default()
    }
}

/// The application resets by hand here (these tests watch every corruption
/// report); `tests/recovery.rs` covers the consumer that resets by itself.
fn options() -> ConsumerOptions {
    ConsumerOptions {
        liveness_interval: Duration::from_millis(1),
        spin: 0,
        auto_reset: false,
        ..Default::default()
    }
}

#[derive(Default, Debug)]
struct Seen {
    frames: u64,
    corrupt: u64,
    saturated: u64,
}

/// Reads until the ring is quiet or reports an error. Every frame must lie inside
/// the data ring.
fn drain(consumer: &Consumer, peer: &Peer, max: usize, seen: &mut Seen) {
    let g = peer.geometry();
    let data = peer.base() + g.data_offset as usize;
    let end = data + g.capacity as usize;
    for _ in 0..max {
        match consumer.next_timeout(Some(Duration::from_millis(1))) {
            Ok(Some(f)) => {
                let p = f.payload().as_ptr() as usize;
                assert!(p >= data && p + f.len() <= end, "frame outside the ring");
                assert_eq!(p % UNIT as usize, 0);
                assert!(f.len() as u64 <= g.capacity / 2);
                seen.frames += 1;
            }
            Ok(None) => return,
            Err(Error::Corrupt { what, .. }) => {
                assert!(!what.is_empty());
                seen.corrupt += 1;
                return;
            }
            Err(Error::TooManyHeld { .. }) => {
                seen.saturated += 1;
                return;
            }
            Err(e) => panic!("unexpected consumer error: {e}"),
        }
    }
}

/// Honest producers attach and records flow, checked byte for byte.
fn honest_flow(seg: &Arc<Segment>, consumer: &Consumer, round: u64) {
    let mut p = seg
        .producer()
        .unwrap_or_else(|e| panic!("round {round}: honest producer cannot attach: {e}"));
    p.set_policy(FullPolicy::Fail);
    for i in 0..16u64 {
        let len = (i * 1013 + round * 7) as usize % 9000;
        let mut r = p
            .reserve(len)
            .unwrap_or_else(|e| panic!("round {round}: reserve: {e}"));
        for (j, b) in r.payload().iter_mut().enumerate() {
            *b = (j as u64 ^ i ^ round) as u8;
        }
        r.commit(Meta::new(round as u32, 0).with_flags(i as u32))
            .unwrap_or_else(|e| panic!("round {round}: commit: {e}"));
        let f = consumer
            .next_timeout(Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("round {round}: consumer after reset: {e}"))
            .unwrap_or_else(|| panic!("round {round}: record {i} not delivered"));
        assert_eq!(
            (f.stream(), f.meta().flags, f.len()),
            (round as u32, i as u32, len)
        );
        for (j, &b) in f.payload().iter().enumerate() {
            assert_eq!(b, (j as u64 ^ i ^ round) as u8);
        }
    }
}

#[test]
fn upfront_scribbles_never_break_the_consumer() {
    let seg = Address::memfd("hostile-upfront", config()).open().unwrap();
    let peer = Peer::new(&seg);
    let mut consumer = Consumer::with_options(seg.clone(), options()).unwrap();
    let mut rng = Rng(0x5eed_0001);
    let mut seen = Seen::default();
    for round in 0..400u64 {
        honest_flow(&seg, &consumer, round);
        // Records in flight, one claim left pending, then vandalism.
        let mut p = seg.producer().unwrap();
        p.set_policy(FullPolicy::Fail);
        for i in 0..rng.below(8) {
            let _ = p.send(&[i as u8; 300], Meta::new(1, 1));
        }
        let mut other = seg.producer().unwrap();
        {
            let pending = other.try_reserve(100).ok();
            for _ in 0..1 + rng.below(6) {
                scribble(&peer, &mut rng);
            }
            drain(&consumer, &peer, 200, &mut seen);
            // The honest producers finish (or learn their claims were taken) without
            // panicking.
            if let Some(r) = pending {
                if rng.below(2) == 0 {
                    let _ = r.commit(Meta::new(2, 2));
                }
            }
        }
        let _ = p.send(&[9; 64], Meta::new(1, 1));
        drop((p, other));
        drain(&consumer, &peer, 200, &mut seen);
        consumer.reset().unwrap();
    }
    honest_flow(&seg, &consumer, 1000);
    // The vandalism was noticed, and did not only produce errors.
    assert!(seen.corrupt > 0, "{seen:?}");
    assert!(seen.frames > 0, "{seen:?}");
    // (`seg.stats()` is not read here: see `stats_survive_hostile_counters`.)
}

#[test]
fn concurrent_scribbles_never_break_the_consumer() {
    let seg = Address::memfd("hostile-concurrent", config())
        .open()
        .unwrap();
    let peer = Peer::new(&seg);
    let mut consumer = Consumer::with_options(seg.clone(), options()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let vandal = {
        let stop = stop.clone();
        let peer = peer.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0x5eed_0002);
            // Bursts of vandalism with pauses, so honest traffic flows in between.
            for _ in 0..1500 {
                for _ in 0..1 + rng.below(4) {
                    scribble(&peer, &mut rng);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Release);
        })
    };
    let honest = {
        let stop = stop.clone();
        let seg = seg.clone();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            let mut errors = 0u64;
            while !stop.load(Ordering::Acquire) {
                let Ok(mut p) = seg.producer() else {
                    errors += 1;
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                };
                p.set_policy(FullPolicy::Fail);
                for i in 0..100u32 {
                    match p.send(&[i as u8; 2000], Meta::new(3, 3)) {
                        Ok(()) => sent += 1,
                        Err(_) => {
                            errors += 1;
                            std::thread::sleep(Duration::from_micros(20));
                        }
                    }
                }
            }
            (sent, errors)
        })
    };
    let mut seen = Seen::default();
    let mut resets = 0;
    let mut last_reset = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let before = (seen.corrupt, seen.saturated);
        drain(&consumer, &peer, 50, &mut seen);
        // Reset on corruption, and now and then anyway (a forged pending claim
        // naming a live producer's slot stalls the ring without an error).
        if (seen.corrupt, seen.saturated) != before
            || last_reset.elapsed() > Duration::from_millis(20)
        {
            consumer.reset().unwrap();
            resets += 1;
            last_reset = Instant::now();
        }
    }
    vandal.join().unwrap();
    let (sent, errors) = honest.join().unwrap();
    eprintln!("sent {sent}, producer errors {errors}, consumer {seen:?}, resets {resets}");
    consumer.reset().unwrap();
    honest_flow(&seg, &consumer, 7);
    assert!(
        sent > 0 && seen.frames > 0 && seen.corrupt > 0 && resets > 0,
        "{seen:?}"
    );
}

/// Every identity field, scribbled, makes a new attach fail naming it.
#[test]
fn identity_scribbles_fail_attach_naming_the_field() {
    let seg = Address::memfd("hostile-identity", config()).open().unwrap();
    let peer = Peer::new(&seg);
    let g = *seg.geometry();
    let attach = || Address::Descriptors(dup_descriptors(&seg)).open();
    // (the identity field, the value written, the field named in the error)
    let cases: &[(IdField, u64, &str)] = &[
        (W64(|i| &i.magic), u64::from_le_bytes(*b"SHMRING0"), "magic"),
        (W64(|i| &i.magic), 0, "magic"),
        (
            W32(|i| &i.version),
            shmring::layout::LAYOUT_VERSION as u64 + 1,
            "layout version",
        ),
        (W32(|i| &i.control_size), 8192, "control block size"),
        (W64(|i| &i.capacity), g.capacity + 64, "geometry"),
        (W64(|i| &i.capacity), 1 << 40, "geometry"),
        (W64(|i| &i.capacity), g.capacity * 2, "segment size"),
        (W64(|i| &i.max_record), g.capacity, "geometry"),
        (W32(|i| &i.log_entries), 3, "geometry"),
        (W32(|i| &i.log_entries), 1 << 30, "geometry"),
        (W32(|i| &i.max_producers), 0, "geometry"),
        (W32(|i| &i.max_producers), 257, "geometry"),
        (W64(|i| &i.data_offset), g.data_offset + 4096, "data offset"),
        (W64(|i| &i.data_offset), u64::MAX, "data offset"),
        (W64(|i| &i.total_size), g.total_size + 1, "segment size"),
        (W64(|i| &i.total_size), u64::MAX, "segment size"),
    ];
    // The three identity lines (line 0 and its two copies): two must agree.
    let lines = [0, 1, 2];
    for &(field, value, named) in cases {
        let saved = field.get(peer.identity(0));
        // One line scribbled: the other two outvote it.
        for line in lines {
            field.set(peer.identity(line), value);
            let s = attach().unwrap_or_else(|e| panic!("one line {line} scribbled: {e}"));
            assert_eq!(*s.geometry(), g, "the geometry two lines agree on");
            field.set(peer.identity(line), saved);
        }
        // All three: the field is named.
        for line in lines {
            field.set(peer.identity(line), value);
        }
        match attach() {
            Err(Error::LayoutMismatch { field: f, .. }) => {
                assert_eq!(f, named, "scribbling the {named} with {value}")
            }
            Err(e) => panic!("expected a {named} mismatch, got {e}"),
            Ok(_) => panic!("attach accepted a scribbled {named}"),
        }
        for line in lines {
            field.set(peer.identity(line), saved);
        }
        attach().expect("restored identity attaches");
    }
    // Random bytes anywhere in one identity line never change the geometry anyone
    // takes, and never panic: the other two lines outvote it.
    let line0 = peer.target(Target::Identity);
    let saved: Vec<u64> = line0
        .clone()
        .step_by(8)
        .map(|off| peer.at(off).load(Ordering::Relaxed))
        .collect();
    let mut rng = Rng(0x5eed_0003);
    for _ in 0..500 {
        peer.scribble(&mut rng, line0.clone(), 16);
        match attach() {
            Ok(s) => assert_eq!(*s.geometry(), g, "one scribbled line outvoted"),
            Err(Error::EventfdRequired(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        for (off, &v) in line0.clone().step_by(8).zip(&saved) {
            peer.at(off).store(v, Ordering::Relaxed);
        }
    }
}

/// A field of an identity line, 64 or 32 bits wide.
#[derive(Clone, Copy)]
enum IdField {
    W64(fn(&Identity) -> &AtomicU64),
    W32(fn(&Identity) -> &AtomicU32),
}
use IdField::{W32, W64};

impl IdField {
    fn get(self, i: &Identity) -> u64 {
        match self {
            W64(f) => f(i).load(Ordering::SeqCst),
            W32(f) => f(i).load(Ordering::SeqCst).into(),
        }
    }
    fn set(self, i: &Identity, v: u64) {
        match self {
            W64(f) => f(i).store(v, Ordering::SeqCst),
            W32(f) => f(i).store(v as u32, Ordering::SeqCst),
        }
    }
}

/// A producer may write anything into its own slot's counters; reading the
/// statistics must not overflow (debug builds panic on `+=` overflow).
#[test]
fn stats_survive_hostile_counters() {
    let seg = Address::memfd("hostile-stats", config()).open().unwrap();
    let peer = Peer::new(&seg);
    for slot in 0..2 {
        for counter in peer.producer_counters(slot) {
            counter.store(u64::MAX, Ordering::Relaxed);
        }
    }
    let s = seg.stats();
    // Whatever the policy (wrap or saturate), the call returns.
    assert!(s.records_committed == u64::MAX - 1 || s.records_committed == u64::MAX);
}

/// A flood of aborted claims (a hostile producer stamping entries just ahead of the
/// consumer as fast as it skips them) must not keep `next_timeout` from returning.
#[test]
fn next_timeout_returns_during_a_flood_of_aborted_claims() {
    let seg = Address::memfd("hostile-flood", config()).open().unwrap();
    let peer = Peer::new(&seg);
    // Entries stamped ahead of a write cursor that never moves are corruption too:
    // the consumer resets by itself, the flood goes on, and the call still returns.
    let opts = ConsumerOptions {
        auto_reset: true,
        ..options()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let n = peer.geometry().log_entries as u64;
            let start = Instant::now();
            while !stop.load(Ordering::Acquire) {
                if start.elapsed() > Duration::from_secs(3) {
                    return true; // gave up flooding before the consumer returned
                }
                let read = cursor_seq(peer.control().cursors.0.read.load(Ordering::Relaxed));
                for d in 0..n {
                    let k = (read + d) & SEQ_MASK;
                    let e = LogEntry {
                        stamp: k,
                        state: ClaimState::Aborted,
                        slot: 0,
                        units: 1,
                    };
                    peer.entry(k).store(e.pack(), Ordering::Relaxed);
                }
            }
            false
        })
    };
    std::thread::sleep(Duration::from_millis(5));
    let r = consumer.next_timeout(Some(Duration::from_millis(10)));
    stop.store(true, Ordering::Release);
    let flood_gave_up = flood.join().unwrap();
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(
        !flood_gave_up,
        "next_timeout(10 ms) did not return while the flood went on"
    );
    assert!(seg.stats().skipped_aborted > 0);
}

/// After vandalism of the slot table, a reset should give honest producers their
/// slots back: a slot stuck in a state nobody leaves (garbage, or ATTACHING after
/// a producer died mid-attach) is lost forever today.
#[test]
fn reset_recovers_a_scribbled_slot_table() {
    let seg = Address::memfd("hostile-slots", config()).open().unwrap();
    let peer = Peer::new(&seg);
    let mut consumer = Consumer::with_options(seg.clone(), options()).unwrap();
    for i in 0..peer.geometry().max_producers {
        // Every slot ATTACHING (1): what producers killed mid-attach leave behind.
        peer.slot(i).state.store(1, Ordering::Relaxed);
    }
    consumer.reset().unwrap();
    honest_flow(&seg, &consumer, 0);
}

/// Copies of the ring's descriptors, to attach a second mapping as another process
/// would.
fn dup_descriptors(seg: &Segment) -> Vec<std::os::fd::OwnedFd> {
    seg.descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect()
}
