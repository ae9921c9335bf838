//! The wake-up handshake (`protocol::handshake`): no wake-up lost, under a latency
//! budget or not, and one wake-up per sleep on the data futex.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::sync::atomic::Ordering::{Acquire, Relaxed as LRelaxed, Release};
use loom::sync::Arc;
use shmring::sync::AtomicU64;

use super::{builder, futex};

static BUDGET_SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// The wake-up handshake of `protocol::handshake` (what `wake` runs before its
/// system calls): a producer commits and signals while the consumer announces
/// itself and re-checks. Every interleaving: a consumer that does not see the
/// commit finds `seq` moved (its futex sleep returns at once), so no wake-up is
/// lost; under a latency budget the same holds once the ring is past the
/// consumer's mark, and below the mark the wake-up may be skipped (the consumer's sleep
/// is bounded by its budget instead: some execution must show that).
#[test]
fn the_wake_handshake_loses_no_wake_up() {
    use shmring::protocol::handshake;
    // (mark the consumer sets, fill the producer reaches)
    for (mark, fill) in [(0u32, 10u64), (5, 10), (20, 10)] {
        builder().check(move || {
            let f = futex();
            let committed = Arc::new(AtomicU64::new(0));
            let producer = {
                let (f, committed) = (f.clone(), committed.clone());
                loom::thread::spawn(move || {
                    committed.store(1, Release);
                    handshake::signal(&f, Some(&mut |m| fill >= m as u64))
                })
            };
            // The consumer: its mark before arming (as `Consumer::sleep` does).
            f.need.store(mark, LRelaxed);
            let seen = handshake::arm(&f);
            let sees_commit = committed.load(Acquire) != 0;
            let woke = producer.join().unwrap();
            if mark != 0 && fill < mark as u64 {
                // Allowed either way (a producer that read `need` before the mark
                // was stored wakes it once more); the budget bounds the sleep.
                if !woke {
                    BUDGET_SKIPPED.fetch_add(1, Relaxed);
                }
            } else if !sees_commit {
                assert!(woke, "the producer missed a consumer about to sleep");
                assert_ne!(f.seq.load(LRelaxed), seen, "the sleep would not return");
            }
            handshake::disarm(&f);
        });
    }
    assert!(
        BUDGET_SKIPPED.load(Relaxed) > 0,
        "no execution skipped the wake-up below the mark"
    );
}

static BOTH_UNSEEN: AtomicUsize = AtomicUsize::new(0);

/// The consumer's wake-up on the data futex, whose one waiter is the ring's
/// consumer (`handshake::arm_one`, `signal_one`): two producers commit and
/// signal while the consumer announces itself and re-checks. Every
/// interleaving: at most one producer takes the flag and wakes (a burst costs
/// one system call), and a consumer that sees neither commit finds `seq`
/// moved, so its sleep returns at once: no wake-up is lost.
#[test]
fn one_wake_per_sleep_and_none_lost() {
    use shmring::protocol::handshake;
    builder().check(|| {
        let f = futex();
        let committed = Arc::new(AtomicU64::new(0));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (f, committed) = (f.clone(), committed.clone());
                loom::thread::spawn(move || {
                    committed.fetch_add(1, Release);
                    handshake::signal_one(&f, None)
                })
            })
            .collect();
        let seen = handshake::arm_one(&f);
        let sees_commit = committed.load(Acquire) != 0;
        let woke: Vec<bool> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        assert!(!(woke[0] && woke[1]), "two wake-ups for one sleep");
        if !sees_commit {
            BOTH_UNSEEN.fetch_add(1, Relaxed);
            assert!(
                woke[0] || woke[1],
                "both producers missed a consumer about to sleep"
            );
            assert_ne!(f.seq.load(LRelaxed), seen, "the sleep would not return");
        }
        handshake::disarm_one(&f);
    });
    assert!(
        BOTH_UNSEEN.load(Relaxed) > 0,
        "no execution had the consumer miss both commits"
    );
}
