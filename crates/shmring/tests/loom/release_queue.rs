//! The release queue of `SharedConsumer`: a release queued while the consumer is
//! held is applied, never stranded, and one queued during a receive wakes it.

use loom::sync::atomic::Ordering::{Acquire, Relaxed as LRelaxed, Release};
use loom::sync::Arc;
use shmring::sync::AtomicU64;

use super::{builder, futex};

/// The lock of `SharedConsumer` as the model sees it: a try-lock
/// (`Mutex::try_lock`: Acquire on success) and an unlock (Release).
struct Lock(loom::sync::atomic::AtomicBool);

impl Lock {
    fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(false, true, Acquire, LRelaxed)
            .is_ok()
    }
    fn unlock(&self) {
        self.0.store(false, Release);
    }
}

/// Holding the lock: applies every queued release (`Consumer::apply_queued`).
fn drain(q: &shmring::release_queue::ReleaseQueue, applied: &AtomicU64) {
    while let Some(seq) = q.pop() {
        applied.fetch_or(1 << seq, LRelaxed);
    }
}

/// `SharedConsumer::settle`, after an unlock: fence, look, lock again if a
/// release is queued.
fn settle(q: &shmring::release_queue::ReleaseQueue, lock: &Lock, applied: &AtomicU64) {
    loop {
        loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
        if !q.ready() || !lock.try_lock() {
            return;
        }
        drain(q, applied);
        lock.unlock();
    }
}

/// `SharedConsumer::release_raw` when the lock is taken: queue, then settle
/// (the releaser's fence orders its push before its try of the lock). Two
/// releasers race a holder that lets go of the consumer (the end of a `with`
/// or a receive, then its settle). Every interleaving: both releases are
/// applied, by whichever thread held the lock after them: none is stranded
/// in the queue.
#[test]
fn a_release_queued_while_the_consumer_is_held_is_never_stranded() {
    use shmring::release_queue::ReleaseQueue;
    builder().check(|| {
        let q = Arc::new(ReleaseQueue::new(2));
        let lock = Arc::new(Lock(loom::sync::atomic::AtomicBool::new(true)));
        let applied = Arc::new(AtomicU64::new(0));
        let releasers: Vec<_> = (0..2u64)
            .map(|seq| {
                let (q, lock, applied) = (q.clone(), lock.clone(), applied.clone());
                loom::thread::spawn(move || {
                    if lock.try_lock() {
                        applied.fetch_or(1 << seq, LRelaxed);
                        drain(&q, &applied);
                        lock.unlock();
                    } else {
                        q.push(seq).expect("a place per held frame");
                    }
                    settle(&q, &lock, &applied);
                })
            })
            .collect();
        // The holder lets go.
        lock.unlock();
        settle(&q, &lock, &applied);
        for r in releasers {
            r.join().unwrap();
        }
        assert_eq!(applied.load(LRelaxed), 0b11, "a release was stranded");
        assert!(!q.ready());
    });
}

/// The nudge: a releaser queues while the consumer, holding the lock in a
/// receive, arms its wake-up and re-checks (`Consumer::sleep` asks
/// `release_queued`), then signals as a producer does (`handshake::signal_one`).
/// Every interleaving: the consumer sees the release (and applies it before
/// sleeping), or its sleep returns at once (`seq` moved).
#[test]
fn a_release_queued_during_a_receive_wakes_it() {
    use shmring::protocol::handshake;
    use shmring::release_queue::ReleaseQueue;
    builder().check(|| {
        let f = futex();
        let q = Arc::new(ReleaseQueue::new(2));
        let releaser = {
            let (f, q) = (f.clone(), q.clone());
            loom::thread::spawn(move || {
                q.push(7).unwrap();
                handshake::signal_one(&f, None)
            })
        };
        let seen = handshake::arm_one(&f);
        let sees = q.ready();
        let woke = releaser.join().unwrap();
        if sees {
            assert_eq!(q.pop(), Some(7));
        } else {
            assert!(woke, "the releaser missed a receive about to sleep");
            assert_ne!(f.seq.load(LRelaxed), seen, "the sleep would not return");
            // Woken, the receive applies it.
            assert_eq!(q.pop(), Some(7));
        }
        handshake::disarm_one(&f);
    });
}
