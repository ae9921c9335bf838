//! Races a race detector must see, and one it must not (`make test-tsan`). The
//! canary is undefined behaviour on purpose and runs only there; the late write
//! runs everywhere: a claim the consumer stops waiting for is pinned, not recycled
//! (DESIGN.md §3, "Pins"), so its holder's late bytes land in space nobody else
//! is given.
//!
//! The threads here order their steps with relaxed atomics only, which give a race
//! detector no happens-before edge: whatever order the ring's own synchronisation
//! does not give, it sees as a race.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use shmring::{Address, Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta};

/// Spins until `flag` is set (relaxed: no happens-before edge for a detector).
fn spin_until(flag: &AtomicBool) {
    while !flag.load(Relaxed) {
        std::hint::spin_loop();
    }
}

/// Two threads write one word with nothing ordering them: ThreadSanitizer must
/// report it, or it sees nothing at all (`make test-tsan` fails if this passes).
#[test]
#[ignore = "a data race on purpose: run only under ThreadSanitizer (make test-tsan)"]
fn canary_an_unsynchronised_write_is_reported() {
    let word = Arc::new(AtomicU64::new(0)); // only its address is shared
    let started = Arc::new(AtomicBool::new(false));
    let writer = {
        let (word, started) = (word.clone(), started.clone());
        std::thread::spawn(move || {
            started.store(true, Relaxed);
            // SAFETY: none; this plain write races with the one below on purpose.
            unsafe { std::ptr::write(word.as_ptr(), 1) };
        })
    };
    spin_until(&started);
    // SAFETY: none, as above.
    unsafe { std::ptr::write(std::hint::black_box(word.as_ptr()), 2) };
    writer.join().unwrap();
}

/// A producer reserves, stops before writing; the consumer's claim timeout takes
/// the claim back; another producer's record is placed and committed; then the
/// first producer writes its payload and commits, and the consumer reads the other
/// record. The late write must touch nothing another producer owns: the other
/// record arrives intact, and a race detector sees no write racing with its bytes.
#[test]
fn a_write_after_the_claim_was_taken_back_touches_no_other_record() {
    const LEN: usize = 100_000;
    // 1 MiB: its placement window (16 KiB) is far below LEN, so the ring's start
    // is where the next record goes once the claim is given up.
    let seg = Address::memfd("late-write", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            claim_timeout: Some(Duration::from_millis(20)),
            liveness_interval: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    let reserved = Arc::new(AtomicBool::new(false));
    let go = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicBool::new(false));
    let read = Arc::new(AtomicBool::new(false));
    let late = {
        let (seg, reserved, go, written, read) = (
            seg.clone(),
            reserved.clone(),
            go.clone(),
            written.clone(),
            read.clone(),
        );
        std::thread::spawn(move || {
            let mut p = seg.producer().unwrap();
            let r = p.reserve_raw(LEN, FullPolicy::Fail).unwrap();
            reserved.store(true, Relaxed);
            // Paused (a debugger, SIGSTOP, a cgroup quota) past the claim timeout.
            spin_until(&go);
            // SAFETY: the reservation's bytes, as this producer believes they still
            // are (what the test is about).
            unsafe { std::ptr::write_bytes(r.ptr, 0xaa, r.len) };
            written.store(true, Relaxed);
            // It commits once the other record was read (its header would
            // otherwise hide that record altogether).
            spin_until(&read);
            p.commit_raw(r.len, Meta::new(1, 1))
        })
    };
    spin_until(&reserved);
    // The consumer waits for the claim until its timeout, then takes it back.
    while seg.stats().expired_claims == 0 {
        assert!(consumer
            .next_timeout(Some(Duration::from_millis(5)))
            .unwrap()
            .is_none());
    }
    // Another producer's small record, read and released: the ring is empty, its
    // write cursor past the placement window, so the next record goes to the
    // ring's start, where the claim taken back was (if its space was given back).
    let mut other = seg.producer().unwrap();
    other.send(b"small", Meta::new(2, 1)).unwrap();
    let f = consumer
        .next_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(f.expect("the small record").payload(), b"small");
    // The other producer's large record, placed and committed.
    other.send(&[0xbb; LEN], Meta::new(2, 2)).unwrap();
    go.store(true, Relaxed);
    spin_until(&written);
    let got = consumer
        .next_timeout(Some(Duration::from_secs(10)))
        .map(|f| {
            f.map(|f| {
                (
                    f.meta().stream,
                    f.payload().iter().filter(|&&b| b != 0xbb).count(),
                )
            })
        });
    read.store(true, Relaxed);
    let (stream, torn) = got.unwrap().expect("the other producer's record");
    assert_eq!(stream, 2);
    assert_eq!(torn, 0, "{torn} of {LEN} bytes of the record are another's");
    // The late producer learns its claim was taken back.
    assert!(matches!(late.join().unwrap(), Err(Error::Abandoned { .. })));
}
