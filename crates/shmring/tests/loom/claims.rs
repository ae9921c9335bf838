//! Two or three producers claim and commit while the consumer polls and releases:
//! every record seen once, in claim order, claims never overlapping, log entries
//! reused only after their release; and placement, the padding to the ring's end
//! racing a claim.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::sync::Arc;
use shmring::layout::ClaimState;
use shmring::protocol::{ClaimError, ConsumerCursor, Poll};

use super::{builder, consume, data, put, Ring};

/// Executions in which a claim reused a log entry after the consumer's release
/// (claim seq >= N), and in which a claim found the ring full.
static REUSED: AtomicUsize = AtomicUsize::new(0);
static FULL: AtomicUsize = AtomicUsize::new(0);
static ALL_THREE: AtomicUsize = AtomicUsize::new(0);

/// Two producers claim and commit (the second twice: its second claim needs the
/// log entry of claim 0 again, so it must wait for the consumer's release) while
/// one consumer polls and releases out of order. Every interleaving: each
/// committed record is seen exactly once, in claim order, claims never overlap,
/// and nothing reads as broken or corrupt.
#[test]
fn two_producers_one_consumer() {
    builder().check(|| {
        // Two log entries, four units: two records of two units fill it.
        let ring = Arc::new(Ring::new(2, 4));
        let mut handles = Vec::new();
        for slot in 0..2u32 {
            let ring = ring.clone();
            handles.push(loom::thread::spawn(move || {
                let sh = ring.shared();
                let mut got = Vec::new();
                for _ in 0..if slot == 0 { 1 } else { 2 } {
                    match sh.try_claim(2, slot, &ring.open[slot as usize]) {
                        Ok(c) => {
                            assert_eq!(c.total, 2);
                            if c.seq >= 2 {
                                REUSED.fetch_add(1, Relaxed);
                            }
                            assert!(sh.settle(
                                &c,
                                ClaimState::Committed,
                                &ring.open[slot as usize]
                            ));
                            got.push((c.seq, c.pos));
                        }
                        Err(ClaimError::Broken) => panic!("broken"),
                        Err(_) => {
                            FULL.fetch_add(1, Relaxed);
                        }
                    }
                }
                got
            }));
        }
        let sh = ring.shared();
        let mut cur = ConsumerCursor::new(2, 0);
        let mut seen = Vec::new();
        let mut polls = 0;
        while seen.len() < 2 && polls < 4 {
            polls += 1;
            match cur.poll(&sh) {
                Poll::Record { seq, rec_units, .. } => {
                    assert_eq!(rec_units, 2);
                    seen.push(seq);
                }
                Poll::Corrupt(w) => panic!("corrupt: {w}"),
                Poll::Empty | Poll::Pending { .. } => loom::thread::yield_now(),
                other => panic!("unexpected {other:?}"),
            }
        }
        // Release in reverse order: the read cursor moves only at the last one.
        for (i, &s) in seen.iter().enumerate().rev() {
            assert_eq!(cur.release(s).unwrap(), i == 0);
        }
        cur.publish(&sh);
        let produced: Vec<(u64, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        // A helper moved the cursor for an owner, or the owner did: either way the
        // write cursor covers every claim.
        if produced.len() == 3 {
            ALL_THREE.fetch_add(1, Relaxed);
        }
        // Whatever was committed and not yet seen must still be visible.
        loop {
            match cur.poll(&sh) {
                Poll::Record { seq, .. } => {
                    seen.push(seq);
                    cur.release(seq).unwrap();
                }
                Poll::Empty => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(seen.len(), produced.len());
        // Claim order, no duplicates, distinct non-overlapping positions.
        assert!(seen.windows(2).all(|w| w[0] + 1 == w[1]));
        let mut by_seq = produced.clone();
        by_seq.sort();
        for (i, &(seq, pos)) in by_seq.iter().enumerate() {
            assert_eq!(seq, i as u64);
            assert_eq!(pos, 2 * i as u64);
        }
    });
    // The model did reach the interesting states.
    assert!(REUSED.load(Relaxed) > 0, "no execution reused a log entry");
    assert!(FULL.load(Relaxed) > 0, "no execution found the ring full");
    assert!(
        ALL_THREE.load(Relaxed) > 0,
        "no execution made all three claims"
    );
}

static THREE_HELPED: AtomicUsize = AtomicUsize::new(0);

/// Three producers, one consumer: each producer claims and commits one record
/// of one unit while the consumer polls and releases. A four-entry log over a
/// two-unit ring: the third claim needs the consumer's release of the first.
/// Every interleaving: every committed record is seen once, in claim order;
/// claims get consecutive numbers and positions; a record the consumer reads
/// holds what its producer wrote (loom cells: a claim on space still read is a
/// race loom reports); a producer whose claim failed found the ring full.
#[test]
fn three_producers_one_consumer() {
    let mut b = builder();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(|| {
        let ring = Arc::new(Ring::new(4, 2));
        let data = data(2);
        let handles: Vec<_> = (0..3u32)
            .map(|slot| {
                let (ring, data) = (ring.clone(), data.clone());
                loom::thread::spawn(move || {
                    let sh = ring.shared();
                    match sh.try_claim(1, slot, &ring.open[slot as usize]) {
                        Ok(c) => {
                            put(&data[c.rec_off as usize], c.seq + 1);
                            assert!(sh.settle(
                                &c,
                                ClaimState::Committed,
                                &ring.open[slot as usize]
                            ));
                            Some((c.seq, c.pos))
                        }
                        Err(ClaimError::Broken) => panic!("broken"),
                        Err(_) => None,
                    }
                })
            })
            .collect();
        let mut cur = ConsumerCursor::new(4, 0);
        let mut seen = Vec::new();
        let publish = |c: &ConsumerCursor| c.publish(&ring.shared());
        consume(&ring, &data, &mut cur, &mut seen, 2, publish);
        let mut produced: Vec<(u64, u64)> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        consume(&ring, &data, &mut cur, &mut seen, 3, publish);
        if produced.len() == 3 {
            THREE_HELPED.fetch_add(1, Relaxed);
        }
        produced.sort();
        assert_eq!(seen.len(), produced.len());
        for (i, &(seq, pos)) in produced.iter().enumerate() {
            assert_eq!((seq, pos), (i as u64, i as u64));
            assert_eq!(seen[i], seq);
        }
    });
    assert!(
        THREE_HELPED.load(Relaxed) > 0,
        "no execution made all three claims"
    );
}

/// Placement: the consumer, having released everything, pads the empty ring
/// to its end (`pad_to_start`) while a producer claims. Every interleaving:
/// exactly one of them gets the claim number; if the padding did, the record
/// lands at the ring's start, else right where the ring was empty; a producer
/// that finds the ring full behind the padding gets through once the consumer
/// steps over it; the consumer gets the record.
#[test]
fn placement_races_a_claim_and_holds_nothing() {
    builder().check(|| {
        let ring = Arc::new(Ring::new(4, 8));
        let sh = ring.shared();
        let mut cur = ConsumerCursor::new(4, 0);
        // A record of 2 units in and out: the ring is empty at unit 2. The
        // padding takes units 2 to 8; in the moment before the consumer steps
        // over it, a record of 4 units does not fit, and is claimed once it has.
        let c = sh.try_claim(2, 2, &ring.open[2]).unwrap();
        assert!(sh.settle(&c, ClaimState::Committed, &ring.open[2]));
        let Poll::Record { seq, .. } = cur.poll(&sh) else {
            panic!("the first record")
        };
        cur.release(seq).unwrap();
        cur.publish(&sh);
        let producer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let sh = ring.shared();
                let c = sh
                    .try_claim(4, 0, &ring.open[0])
                    .expect("room for a record beside a padding");
                assert!(sh.settle(&c, ClaimState::Committed, &ring.open[0]));
                (c.pos, c.rec_off)
            })
        };
        let padded = sh.pad_to_start(cur.peek_seq, cur.peek_pos);
        if let Some(pad) = padded {
            assert_eq!(pad, 6);
            assert!(matches!(
                cur.poll(&sh),
                Poll::Skipped {
                    state: ClaimState::Abandoned
                }
            ));
            cur.publish(&sh);
        }
        let got = loop {
            match cur.poll(&sh) {
                Poll::Record {
                    rec_off, rec_units, ..
                } => break (rec_off, rec_units),
                Poll::Empty | Poll::Pending { .. } => loom::thread::yield_now(),
                other => panic!("unexpected {other:?}"),
            }
        };
        let (pos, rec_off) = producer.join().unwrap();
        if padded.is_some() {
            PADDED_FIRST.fetch_add(1, Relaxed);
            assert_eq!((pos, rec_off), (8, 0), "after the padding, at the start");
        } else {
            CLAIMED_FIRST.fetch_add(1, Relaxed);
            assert_eq!((pos, rec_off), (2, 2), "where the ring was empty");
        }
        assert_eq!(got, (rec_off, 4));
    });
    assert!(
        PADDED_FIRST.load(Relaxed) > 0,
        "the padding never came first"
    );
    assert!(
        CLAIMED_FIRST.load(Relaxed) > 0,
        "the claim never came first"
    );
}

static PADDED_FIRST: AtomicUsize = AtomicUsize::new(0);
static CLAIMED_FIRST: AtomicUsize = AtomicUsize::new(0);
