//! Pending claims and how they end: abort, commit and abandon racing; the forgery
//! check never judging an honest claim; a claim taken back and pinned until its
//! holder settles; several pending claims overtaken, each delivered once.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::sync::atomic::Ordering::Acquire;
use loom::sync::Arc;
use shmring::layout::{ClaimState, LogEntry};
use shmring::protocol::{is_forged, ClaimError, ConsumerCursor, Poll};

use super::{builder, data, get, put, Ring};

static OWNER_WON: AtomicUsize = AtomicUsize::new(0);
static CONSUMER_WON: AtomicUsize = AtomicUsize::new(0);

/// One producer aborts while another commits, and the consumer abandons a
/// pending claim while its holder commits it: exactly one of the two wins, and
/// the consumer sees that record Committed xor Abandoned. The aborted claim is
/// skipped and the committed one delivered once.
#[test]
fn abort_commit_and_abandon_race() {
    builder().check(|| {
        let ring = Arc::new(Ring::new(4, 8));
        let sh = ring.shared();
        // Claim 0 by slot 2, which the consumer is about to judge dead.
        let c0 = sh.try_claim(2, 2, &ring.open[2]).expect("empty ring");
        let mut cur = ConsumerCursor::new(4, 0);
        let Poll::Pending { slot: 2, value } = cur.poll(&sh) else {
            panic!("claim 0 should be pending")
        };
        let owner = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                ring.shared()
                    .settle(&c0, ClaimState::Committed, &ring.open[2])
            })
        };
        let aborter = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let sh = ring.shared();
                let c = sh
                    .try_claim(2, 0, &ring.open[0])
                    .expect("room for three claims");
                assert!(sh.settle(&c, ClaimState::Aborted, &ring.open[0]));
                c.seq
            })
        };
        let committer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let sh = ring.shared();
                let c = sh
                    .try_claim(2, 1, &ring.open[1])
                    .expect("room for three claims");
                assert!(sh.settle(&c, ClaimState::Committed, &ring.open[1]));
                c.seq
            })
        };
        let abandoned = cur.abandon(&sh, value);
        let mut records = Vec::new();
        let mut skipped = Vec::new();
        let mut step = |cur: &mut ConsumerCursor, records: &mut Vec<u64>, final_: bool| {
            let k = cur.peek_seq;
            match cur.poll(&sh) {
                Poll::Record { seq, .. } => {
                    records.push(seq);
                    cur.release(seq).unwrap();
                    true
                }
                Poll::Skipped { state } => {
                    skipped.push((k, state));
                    true
                }
                Poll::Empty if !final_ => false,
                Poll::Pending { .. } if !final_ => false,
                other => panic!("claim {k}: unexpected {other:?}"),
            }
        };
        // Poll while the producers run; then finish after they are done.
        if !step(&mut cur, &mut records, false) {
            loom::thread::yield_now();
        }
        let owner_won = owner.join().unwrap();
        let aborted_seq = aborter.join().unwrap();
        let committed_seq = committer.join().unwrap();
        while cur.peek_seq < 3 {
            step(&mut cur, &mut records, true);
        }
        assert!(matches!(cur.poll(&sh), Poll::Empty));
        assert_eq!(cur.outstanding(), 0);
        // Exactly one of owner and consumer won claim 0.
        assert!(
            owner_won != abandoned,
            "owner {owner_won}, consumer {abandoned}"
        );
        let c0_record = records.contains(&0);
        let c0_abandoned = skipped.contains(&(0, ClaimState::Abandoned));
        assert!(c0_record != c0_abandoned);
        assert_eq!(c0_record, owner_won);
        // The aborted claim skipped, the committed one delivered once.
        assert!(skipped.contains(&(aborted_seq, ClaimState::Aborted)));
        assert_eq!(records.iter().filter(|&&s| s == committed_seq).count(), 1);
        assert_eq!(records.len() + skipped.len(), 3);
        if owner_won {
            OWNER_WON.fetch_add(1, Relaxed);
        } else {
            CONSUMER_WON.fetch_add(1, Relaxed);
        }
    });
    assert!(OWNER_WON.load(Relaxed) > 0, "the owner never won");
    assert!(CONSUMER_WON.load(Relaxed) > 0, "the consumer never won");
}

/// A producer claims, then commits or aborts, twice, while the consumer keeps
/// checking the claim at its peek cursor for forgery, as it does for a pending
/// claim of a live producer. In no interleaving is an honest claim judged
/// forged: the owner's `open_claim` word holds the entry value from before the
/// claim's CAS until after its settling CAS.
#[test]
fn an_honest_claim_is_never_judged_forged() {
    static CHECKED: AtomicUsize = AtomicUsize::new(0);
    builder().check(|| {
        let ring = Arc::new(Ring::new(2, 8));
        let producer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let sh = ring.shared();
                for (i, state) in [ClaimState::Committed, ClaimState::Aborted]
                    .into_iter()
                    .enumerate()
                {
                    let c = sh.try_claim(2, 1, &ring.open[1]).expect("room");
                    assert_eq!(c.seq, i as u64);
                    assert!(sh.settle(&c, state, &ring.open[1]));
                }
            })
        };
        let sh = ring.shared();
        let mut cur = ConsumerCursor::new(2, 0);
        let mut done = 0;
        for _ in 0..4 {
            match cur.poll(&sh) {
                Poll::Pending { slot, value } => {
                    assert_eq!(slot, 1);
                    let seq = cur.peek_seq;
                    assert!(
                        !is_forged(&sh, seq, value, &ring.open[1]),
                        "honest claim {seq} judged forged"
                    );
                    CHECKED.fetch_add(1, Relaxed);
                }
                Poll::Record { seq, .. } => {
                    cur.release(seq).unwrap();
                    cur.publish(&sh);
                    done += 1;
                }
                Poll::Skipped { .. } => done += 1,
                Poll::Empty => {}
                other => panic!("{other:?}"),
            }
            loom::thread::yield_now();
        }
        producer.join().unwrap();
        while done < 2 {
            match cur.poll(&sh) {
                Poll::Record { seq, .. } => {
                    cur.release(seq).unwrap();
                    done += 1;
                }
                Poll::Skipped { .. } => done += 1,
                other => panic!("{other:?}"),
            }
        }
    });
    assert!(
        CHECKED.load(Relaxed) > 0,
        "no pending claim was ever checked"
    );
}

/// A claim taken back while its holder still writes it. Producer A claimed
/// unit 0 of a four-unit ring and stalls; the consumer takes the claim back
/// (the claim timeout), pins its record, steps over it and publishes a read
/// cursor past it, then releases B's records as they come. Meanwhile A writes
/// its record and commits (which must fail, writing no header), and B claims
/// round the ring twice. The data units are loom cells: any execution in which
/// B's record, or the consumer's read of it, touches a unit A may still write
/// is a data race loom reports. Once A has settled (its open-claim word
/// cleared), the consumer drops the pin and B may use unit 0 again.
#[test]
fn a_claim_taken_back_is_pinned_until_its_holder_settles() {
    use shmring::protocol::pack_pin;
    builder().check(|| {
        let ring = Arc::new(Ring::new(4, 4));
        let data = data(4);
        let sh = ring.shared();
        let a = sh.try_claim(1, 0, &ring.open[0]).unwrap();
        let mut cur = ConsumerCursor::new(4, 0);
        let Poll::Pending { slot: 0, value } = cur.poll(&sh) else {
            panic!("A's claim should be pending")
        };
        assert!(cur.abandon(&sh, value), "nobody else touched it");
        // Pinned before any read cursor past it is published.
        sh.pins.set(0, pack_pin(a.rec_off, a.rec_units), 1);
        assert!(matches!(
            cur.poll(&sh),
            Poll::Skipped {
                state: ClaimState::Abandoned
            }
        ));
        cur.publish(&sh);
        let holder = {
            let (ring, data) = (ring.clone(), data.clone());
            loom::thread::spawn(move || {
                let sh = ring.shared();
                // The late write: A's record, through the pointer it still has.
                put(&data[a.rec_off as usize], 0xA);
                // The commit looks first and writes no header: the claim is gone.
                assert_ne!(sh.entry(a.seq).load(Acquire), a.claimed);
                assert!(!sh.settle(&a, ClaimState::Committed, &ring.open[0]));
            })
        };
        let producer = {
            let (ring, data) = (ring.clone(), data.clone());
            loom::thread::spawn(move || {
                let sh = ring.shared();
                let mut placed = Vec::new();
                for _ in 0..2 {
                    let c = loop {
                        match sh.try_claim(2, 1, &ring.open[1]) {
                            Ok(c) => break c,
                            Err(ClaimError::Broken) => panic!("broken"),
                            Err(_) => loom::thread::yield_now(),
                        }
                    };
                    for u in c.rec_off..c.rec_off + c.rec_units {
                        put(&data[u as usize], 0xB);
                    }
                    assert!(sh.settle(&c, ClaimState::Committed, &ring.open[1]));
                    placed.push(c.rec_off);
                }
                placed
            })
        };
        // The consumer: hands out and releases B's records, reading them, and
        // drops the pin once A has settled.
        let mut got = 0;
        let mut pinned = true;
        while got < 2 {
            if pinned && ring.open[0].load(Acquire) != value {
                sh.pins.clear(0, 0);
                pinned = false;
            }
            match cur.poll(&sh) {
                Poll::Record {
                    seq,
                    rec_off,
                    rec_units,
                } => {
                    for u in rec_off..rec_off + rec_units {
                        assert_eq!(get(&data[u as usize]), 0xB);
                    }
                    cur.release(seq).unwrap();
                    cur.publish(&sh);
                    got += 1;
                }
                Poll::Skipped { .. } => cur.publish(&sh),
                Poll::Empty | Poll::Pending { .. } => loom::thread::yield_now(),
                other => panic!("unexpected {other:?}"),
            }
        }
        holder.join().unwrap();
        let placed = producer.join().unwrap();
        // B's second record wrapped: around the pin (at unit 1) while A may
        // still write unit 0, or at the start once A settled.
        if placed[1] == 0 {
            UNPINNED_REUSE.fetch_add(1, Relaxed);
        } else {
            PLACED_AROUND.fetch_add(1, Relaxed);
        }
    });
    assert!(
        PLACED_AROUND.load(Relaxed) > 0,
        "no record was placed around the pin"
    );
    assert!(UNPINNED_REUSE.load(Relaxed) > 0, "the pin never went");
}

static PLACED_AROUND: AtomicUsize = AtomicUsize::new(0);
static UNPINNED_REUSE: AtomicUsize = AtomicUsize::new(0);

static OVERTAKEN_BOTH: AtomicUsize = AtomicUsize::new(0);

/// Several pending claims and overtaking. A and B hold claims (A's first)
/// and commit them in their own time; C commits a record behind both. The
/// consumer parks every pending claim it finds (overtakes it) and looks at the
/// parked ones again until each is resolved. Every interleaving: the three
/// records are handed out exactly once, each intact (loom cells), C's possibly
/// before A's and B's; the read cursor passes none of them before it is
/// released, and once all are released a claim of the whole ring succeeds.
#[test]
fn several_pending_claims_are_overtaken_and_each_delivered_once() {
    builder().check(|| {
        let ring = Arc::new(Ring::new(4, 4));
        let data = data(4);
        let sh = ring.shared();
        let a = sh.try_claim(1, 0, &ring.open[0]).unwrap();
        let b = sh.try_claim(1, 1, &ring.open[1]).unwrap();
        let c = sh.try_claim(1, 2, &ring.open[2]).unwrap();
        put(&data[c.rec_off as usize], c.seq + 1);
        assert!(sh.settle(&c, ClaimState::Committed, &ring.open[2]));
        let holders: Vec<_> = [(a, 0usize), (b, 1)]
            .into_iter()
            .map(|(claim, slot)| {
                let (ring, data) = (ring.clone(), data.clone());
                loom::thread::spawn(move || {
                    let sh = ring.shared();
                    put(&data[claim.rec_off as usize], claim.seq + 1);
                    assert!(sh.settle(&claim, ClaimState::Committed, &ring.open[slot]));
                })
            })
            .collect();
        let mut cur = ConsumerCursor::new(4, 0);
        let mut parked: Vec<(u64, u64)> = Vec::new();
        let mut order = Vec::new();
        let check = |cur: &mut ConsumerCursor, order: &mut Vec<u64>, seq: u64, rec_off: u64| {
            let v = get(&data[rec_off as usize]);
            assert_eq!(v, seq + 1, "record {seq} not as written");
            order.push(seq);
            cur.release(seq).unwrap();
            cur.publish(&sh);
        };
        let mut polls = 0;
        while order.len() < 3 {
            polls += 1;
            assert!(polls < 64, "the records did not all arrive");
            // The parked claims first, oldest first.
            let mut i = 0;
            while i < parked.len() {
                let (seq, pos) = parked[i];
                match cur.poll_parked(&sh, seq, pos) {
                    Poll::Record { seq, rec_off, .. } => {
                        parked.remove(i);
                        check(&mut cur, &mut order, seq, rec_off);
                    }
                    Poll::Pending { .. } => i += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            if cur.peek_seq < 3 {
                match cur.poll(&sh) {
                    Poll::Record { seq, rec_off, .. } => check(&mut cur, &mut order, seq, rec_off),
                    Poll::Pending { value, .. } => {
                        parked.push(cur.park(LogEntry::unpack(value).units, false))
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            // The ring's read cursor never passes a claim still parked.
            let read = shmring::layout::cursor_seq(ring.read.load(Acquire));
            if let Some(&(oldest, _)) = parked.first() {
                assert!(
                    read <= oldest,
                    "read cursor {read} passed parked claim {oldest}"
                );
            }
            loom::thread::yield_now();
        }
        for h in holders {
            h.join().unwrap();
        }
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2], "each record once");
        if order[0] == 2 {
            OVERTAKEN_BOTH.fetch_add(1, Relaxed);
        }
        // Everything released: the whole ring is free again.
        // (Three units from position 3: one of padding to the ring's end, then
        // three: all four units.)
        let d = sh
            .try_claim(3, 3, &ring.open[3])
            .expect("the whole ring is free once every record is released");
        assert!(sh.settle(&d, ClaimState::Committed, &ring.open[3]));
    });
    assert!(
        OVERTAKEN_BOTH.load(Relaxed) > 0,
        "no execution delivered C before both pending claims"
    );
}
