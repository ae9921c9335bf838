//! Model check of the claim / commit / poll / release protocol with loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmring --release --test loom`
//!
//! The preemption bound defaults to 3 (every interleaving with at most three
//! forced context switches); `LOOM_MAX_PREEMPTIONS` overrides it.

#![cfg(loom)]

mod model {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use loom::sync::atomic::Ordering::{Acquire, Relaxed as LRelaxed, Release};
    use loom::sync::Arc;
    use shmring::layout::{ClaimState, LogEntry};
    use shmring::protocol::{is_forged, ClaimError, ConsumerCursor, Poll, Shared};
    use shmring::sync::{AtomicU32, AtomicU64};

    struct Ring {
        write: AtomicU64,
        read: AtomicU64,
        log: Vec<AtomicU64>,
        /// Each slot's `open_claim` word.
        open: Vec<AtomicU64>,
        cap_units: u64,
        /// The pin table (see `layout::Pins`).
        pinned: AtomicU32,
        pins: Vec<AtomicU64>,
    }

    impl Ring {
        fn new(n: u64, cap_units: u64) -> Self {
            Ring {
                write: AtomicU64::new(0),
                read: AtomicU64::new(0),
                log: (0..n)
                    .map(|i| AtomicU64::new(LogEntry::initial(i, n)))
                    .collect(),
                open: (0..4).map(|_| AtomicU64::new(0)).collect(),
                cap_units,
                pinned: AtomicU32::new(0),
                pins: (0..4).map(|_| AtomicU64::new(0)).collect(),
            }
        }
        fn shared(&self) -> Shared<'_> {
            Shared {
                write: &self.write,
                read: &self.read,
                log: &self.log,
                cap_units: self.cap_units,
                pins: shmring::protocol::PinTable {
                    in_use: &self.pinned,
                    extent: &self.pins,
                },
            }
        }
    }

    /// A futex word at rest: no wake-up sent, nobody waiting, no mark.
    fn futex() -> Arc<shmring::layout::Futex> {
        Arc::new(shmring::layout::Futex {
            seq: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            need: AtomicU32::new(0),
        })
    }

    fn builder() -> loom::model::Builder {
        let mut b = loom::model::Builder::new();
        if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
            b.preemption_bound = Some(3);
        }
        b
    }

    /// Record units as loom cells: a producer writing a unit while a consumer
    /// still reads it (space reused too early) is a data race loom reports.
    type Data = Vec<loom::cell::UnsafeCell<u64>>;

    /// Writes a unit of a record.
    fn put(unit: &loom::cell::UnsafeCell<u64>, v: u64) {
        // SAFETY: a loom cell: loom reports any access that races with this one.
        unit.with_mut(|p| unsafe { *p = v })
    }

    /// Reads a unit of a record.
    fn get(unit: &loom::cell::UnsafeCell<u64>) -> u64 {
        // SAFETY: a loom cell: loom reports any write that races with this read.
        unit.with(|p| unsafe { *p })
    }

    fn data(units: usize) -> Arc<Data> {
        Arc::new((0..units).map(|_| loom::cell::UnsafeCell::new(0)).collect())
    }

    /// Polls `polls` times, handing out what it can: each record must hold its
    /// claim number plus one, as its producer wrote it; then it is released and
    /// `publish` called.
    fn consume(
        ring: &Ring,
        data: &Data,
        cur: &mut ConsumerCursor,
        seen: &mut Vec<u64>,
        polls: usize,
        mut publish: impl FnMut(&ConsumerCursor),
    ) {
        let sh = ring.shared();
        for _ in 0..polls {
            match cur.poll(&sh) {
                Poll::Record { seq, rec_off, .. } => {
                    let v = get(&data[rec_off as usize]);
                    assert_eq!(v, seq + 1, "record {seq} overwritten");
                    seen.push(seq);
                    cur.release(seq).unwrap();
                    publish(cur);
                }
                Poll::Corrupt(w) => panic!("corrupt: {w}"),
                Poll::Empty | Poll::Pending { .. } => loom::thread::yield_now(),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

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

    static TETHER_REUSED: AtomicUsize = AtomicUsize::new(0);

    /// Two producers and two consumers: the ring's consumer and a tethered one,
    /// each with its own cursors. The ring's consumer publishes as the ring's read
    /// cursor the farthest behind of its own and the tethered one's (as
    /// `tether::Supervisor::ring_read` does). Each producer writes its claim number
    /// into the record's first unit; each consumer checks it when it reads the
    /// record: a producer that reused space one consumer still held would have
    /// overwritten it. Every interleaving: both consumers see every committed record
    /// once, in claim order, intact; no claim reads the ring as broken.
    #[test]
    fn two_producers_two_consumers() {
        use shmring::protocol::farthest_behind;
        // Four threads: every interleaving with at most one forced switch (raise
        // it with LOOM_MAX_PREEMPTIONS for a longer run).
        let mut b = builder();
        if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
            b.preemption_bound = Some(1);
        }
        b.check(|| {
            // Two log entries, four units: the third claim needs both consumers to
            // release the first.
            let ring = Arc::new(Ring::new(2, 4));
            let data = data(4);
            let tether_read = Arc::new(AtomicU64::new(0));
            let mut handles = Vec::new();
            for slot in 0..2u32 {
                let (ring, data) = (ring.clone(), data.clone());
                handles.push(loom::thread::spawn(move || {
                    let sh = ring.shared();
                    let mut n = 0;
                    for _ in 0..if slot == 0 { 1 } else { 2 } {
                        match sh.try_claim(2, slot, &ring.open[slot as usize]) {
                            Ok(c) => {
                                if c.seq >= 2 {
                                    TETHER_REUSED.fetch_add(1, Relaxed);
                                }
                                put(&data[c.rec_off as usize], c.seq + 1);
                                assert!(sh.settle(
                                    &c,
                                    ClaimState::Committed,
                                    &ring.open[slot as usize]
                                ));
                                n += 1;
                            }
                            Err(ClaimError::Broken) => panic!("broken"),
                            Err(_) => {}
                        }
                    }
                    n
                }));
            }
            // Reads what it can in a bounded number of polls, releasing each record
            // after checking it; publishes its read cursor to `to`.
            let tethered = {
                let (ring, data, tr) = (ring.clone(), data.clone(), tether_read.clone());
                loom::thread::spawn(move || {
                    let mut cur = ConsumerCursor::new(2, 0);
                    let mut seen = Vec::new();
                    consume(&ring, &data, &mut cur, &mut seen, 2, |c| {
                        tr.store(c.published(), Release)
                    });
                    seen
                })
            };
            let mut cur = ConsumerCursor::new(2, 0);
            let mut seen = Vec::new();
            let owner_publish = |c: &ConsumerCursor| {
                let other = tether_read.load(Acquire);
                let w = ring.write.load(Acquire);
                ring.read
                    .store(farthest_behind(c.published(), &[other], w, 2, 4), Release);
            };
            consume(&ring, &data, &mut cur, &mut seen, 2, owner_publish);
            let tseen = tethered.join().unwrap();
            let produced: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
            // Everything committed is still there for whoever has not read it.
            consume(&ring, &data, &mut cur, &mut seen, 3, owner_publish);
            assert_eq!(seen.len() as u64, produced);
            assert!(seen.windows(2).all(|w| w[0] + 1 == w[1]));
            // The tethered consumer read a prefix, in order, of the same records.
            assert!(tseen.iter().enumerate().all(|(i, &s)| s == i as u64));
        });
        assert!(
            TETHER_REUSED.load(Relaxed) > 0,
            "no execution reused space after both consumers released it"
        );
    }

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
                        Poll::Record { seq, rec_off, .. } => {
                            check(&mut cur, &mut order, seq, rec_off)
                        }
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
}
