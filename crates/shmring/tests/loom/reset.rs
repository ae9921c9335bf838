//! The reset: the read cursor it publishes lets producers claim again, and a
//! commit racing it is never delivered in the new generation.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::sync::atomic::Ordering::{Acquire, Release};
use loom::sync::Arc;
use shmring::layout::ClaimState;
use shmring::protocol::{ConsumerCursor, Poll};

use super::{builder, data, get, put, Ring};

static CLAIMED_DURING_RESET: AtomicUsize = AtomicUsize::new(0);

/// The reset and what it publishes. A peer moved the write cursor exactly one
/// ring ahead (the value that once left a ring full for ever); the consumer
/// finds it in its audit and resets while a producer tries to claim. Every
/// interleaving: the ring's read cursor the reset publishes is the consumer's
/// own, the producer's claim (if it got one) lies in the new generation and is
/// delivered, and afterwards there is room: a claim succeeds.
#[test]
fn a_reset_publishes_a_read_cursor_producers_can_use() {
    use shmring::layout::pack_cursor;
    builder().check(|| {
        let ring = Arc::new(Ring::new(2, 4));
        ring.write.store(pack_cursor(0, 4), Release);
        let producer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let sh = ring.shared();
                for _ in 0..2 {
                    match sh.try_claim(1, 0, &ring.open[0]) {
                        Ok(c) => {
                            assert!(sh.settle(&c, ClaimState::Committed, &ring.open[0]));
                            return Some(c);
                        }
                        Err(_) => loom::thread::yield_now(),
                    }
                }
                None
            })
        };
        let sh = ring.shared();
        let mut cur = ConsumerCursor::new(2, 0);
        assert!(
            cur.audit_write_cursor(&sh).is_err(),
            "one ring ahead is found"
        );
        cur.reset(&sh, None);
        assert_eq!(
            ring.read.load(Acquire),
            cur.published(),
            "the ring's read cursor is the consumer's own"
        );
        let claimed = producer.join().unwrap();
        if let Some(c) = claimed {
            CLAIMED_DURING_RESET.fetch_add(1, Relaxed);
            // A claim made with the forged cursor would have been taken back by
            // the reset (its commit fails); one that committed is in the new
            // generation, and delivered.
            match cur.poll(&sh) {
                Poll::Record { seq, .. } => {
                    assert_eq!(seq & shmring::layout::SEQ_MASK, c.seq);
                    cur.release(seq).unwrap();
                    cur.publish(&sh);
                }
                other => panic!("the committed record is not delivered: {other:?}"),
            }
        }
        assert!(cur.audit_write_cursor(&sh).is_ok());
        let c = sh
            .try_claim(1, 1, &ring.open[1])
            .expect("room for a claim after the reset");
        assert!(sh.settle(&c, ClaimState::Committed, &ring.open[1]));
        assert!(matches!(cur.poll(&sh), Poll::Record { .. }));
    });
    assert!(
        CLAIMED_DURING_RESET.load(Relaxed) > 0,
        "no execution let the producer claim around the reset"
    );
}

static RESET_BEFORE_COMMIT: AtomicUsize = AtomicUsize::new(0);
static COMMIT_BEFORE_RESET: AtomicUsize = AtomicUsize::new(0);

/// A reset racing a commit. A producer holds a claim and writes its record
/// while the consumer resets the ring (as it does on finding corruption). Every
/// interleaving: the commit either fails (the producer learns it was lost to
/// the reset) or succeeds and the reset counts the record among what it
/// forgot; the forgotten claim is never handed out in the new generation; the
/// producer's late write touches no unit a new claim uses (loom cells: a race
/// is reported); a new claim after the reset succeeds and is delivered, intact.
#[test]
fn a_reset_racing_a_commit_never_delivers_the_forgotten_claim() {
    builder().check(|| {
        let ring = Arc::new(Ring::new(2, 4));
        let data = data(4);
        let sh = ring.shared();
        let a = sh.try_claim(1, 0, &ring.open[0]).unwrap();
        let holder = {
            let (ring, data) = (ring.clone(), data.clone());
            loom::thread::spawn(move || {
                let sh = ring.shared();
                put(&data[a.rec_off as usize], 0xA);
                sh.settle(&a, ClaimState::Committed, &ring.open[0])
            })
        };
        let mut cur = ConsumerCursor::new(2, 0);
        cur.reset(&sh, None);
        let committed = holder.join().unwrap();
        if committed {
            COMMIT_BEFORE_RESET.fetch_add(1, Relaxed);
        } else {
            RESET_BEFORE_COMMIT.fetch_add(1, Relaxed);
        }
        // Nothing of the old generation is handed out.
        assert_eq!(cur.poll(&sh), Poll::Empty, "the forgotten claim came back");
        let b = sh
            .try_claim(1, 1, &ring.open[1])
            .expect("room for a claim after the reset");
        put(&data[b.rec_off as usize], 0xB);
        assert!(sh.settle(&b, ClaimState::Committed, &ring.open[1]));
        match cur.poll(&sh) {
            Poll::Record { seq, rec_off, .. } => {
                assert_eq!(seq, b.seq);
                assert_eq!(get(&data[rec_off as usize]), 0xB);
            }
            other => panic!("the new record is not delivered: {other:?}"),
        }
    });
    assert!(RESET_BEFORE_COMMIT.load(Relaxed) > 0, "no commit failed");
    assert!(COMMIT_BEFORE_RESET.load(Relaxed) > 0, "no commit won");
}
