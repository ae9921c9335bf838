//! Processes that die: producers SIGKILLed while holding a reservation, between
//! records, and while blocked waiting for space; a consumer SIGKILLed while
//! producers run, replaced by a new one. Liveness is per process (record locks),
//! so the dying side always runs in a child process.
//!
//! Timeouts here are failure guards only; the assertions are about what arrives.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::RawFd;

use common::{retry_full, shm_name, spawn, wait_until, write_record, Checker, Child};
use shmring::{Address, Config, Consumer, Error, Frame, FullPolicy};

const ENTRY: &str = "child_process_entry";
const GUARD: Duration = Duration::from_secs(30);
const SMALL: usize = 4096;

/// Not a test: the body of child processes (returns at once in the test run).
#[test]
fn child_process_entry() {
    common::child_entry();
}

/// A producer child in `role` on the segment `spec`: producer number `p`, `n`
/// records, records of up to `max` bytes.
fn producer_child(spec: &str, fds: &[RawFd], role: &str, (p, n, max): (u32, u64, usize)) -> Child {
    spawn(ENTRY, role, &env(spec.to_string(), p, n, max), fds)
}

/// The consumer's next record, within GUARD; `what`: what the test expects there.
fn next<'c>(c: &'c Consumer, what: &str) -> Frame<'c> {
    c.next_timeout(Some(GUARD))
        .unwrap()
        .unwrap_or_else(|| panic!("nothing within {GUARD:?}: {what}"))
}

/// A consumer child in `role` on the segment `spec`.
fn consumer_child(spec: &str, fds: &[RawFd], role: &str) -> Child {
    spawn(ENTRY, role, &[("SHMRING_TEST_SEG", spec.to_string())], fds)
}

fn env(seg: String, p: u32, n: u64, max: usize) -> Vec<(&'static str, String)> {
    vec![
        ("SHMRING_TEST_SEG", seg),
        ("P", p.to_string()),
        ("N", n.to_string()),
        ("MAX", max.to_string()),
    ]
}

#[test]
fn producer_killed_holding_a_reservation_is_skipped() {
    let seg = Address::memfd("crash-hold", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    // In claim order (the default parks a claim pending for 100 ms and delivers
    // past it): the records behind the held claim wait for its producer's death.
    let consumer = shmring::Consumer::with_options(
        seg.clone(),
        shmring::ConsumerOptions {
            overtake_after: None,
            ..Default::default()
        },
    )
    .unwrap();
    let (spec, fds) = common::inherit(&seg);
    // Producer 0 (child) commits 10 records, then reserves and hangs.
    let mut child = producer_child(&spec, &fds, "reserve-and-hang", (0, 10, SMALL));
    child.expect("HOLDING", GUARD);
    // Producer 1 (here) commits 50 records after the pending claim.
    let mut prod = seg.producer().unwrap();
    for i in 0..50 {
        write_record(&mut prod, 1, i, SMALL).unwrap();
    }
    let mut ck = Checker::new(2, SMALL);
    for _ in 0..10 {
        let f = next(&consumer, "record of producer 0");
        ck.check(f.payload(), f.meta());
    }
    // The claim's holder is alive: the consumer waits for it, delivering nothing
    // past it (several liveness checks happen in this time).
    assert!(consumer
        .next_timeout(Some(Duration::from_millis(300)))
        .unwrap()
        .is_none());
    assert_eq!(seg.stats().abandoned, 0);

    child.kill();
    for _ in 0..50 {
        let f = next(&consumer, "records behind the dead producer's claim");
        ck.check(f.payload(), f.meta());
    }
    assert_eq!(ck.next, [10, 50]);
    assert!(consumer.try_next().unwrap().is_none());
    let s = seg.stats();
    assert_eq!(s.abandoned, 1, "the killed claim is counted");
    assert_eq!((s.records_committed, s.records_consumed), (60, 60));
    assert_eq!(s.corruption, 0);
    assert_eq!(s.producers, 1, "the dead producer's slot was reaped");
    assert!(s.reaped_slots >= 1);
    // The ring keeps working, across a wrap.
    for i in 50..400 {
        write_record(&mut prod, 1, i, SMALL).unwrap();
        let f = next(&consumer, "a record");
        ck.check(f.payload(), f.meta());
    }
}

#[test]
fn producer_killed_between_records_loses_nothing() {
    let name = shm_name("crash-idle");
    let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut child = spawn(
        ENTRY,
        "produce-then-hang",
        &env(format!("name:{}", name.0), 0, 20, SMALL),
        &[],
    );
    child.expect("IDLE", GUARD);
    child.kill();
    let mut prod = seg.producer().unwrap();
    for i in 0..5 {
        write_record(&mut prod, 1, i, SMALL).unwrap();
    }
    let mut ck = Checker::new(2, SMALL);
    for _ in 0..25 {
        let f = next(&consumer, "a record");
        ck.check(f.payload(), f.meta());
    }
    assert_eq!(ck.next, [20, 5]);
    assert!(consumer.try_next().unwrap().is_none());
    let s = seg.stats();
    assert_eq!((s.abandoned, s.records_consumed, s.corruption), (0, 25, 0));
    assert_eq!(s.producers, 1, "only live producers count");
    assert_eq!(
        consumer.reap(),
        1,
        "the dead producer's slot stays until reaped"
    );
    assert_eq!(seg.stats().producers, 1);
    drop((consumer, prod, seg));
    assert!(!name.exists());
}

#[test]
fn producer_killed_while_blocked_for_space() {
    let seg = Address::memfd("crash-block", Config::with_capacity(64 << 10))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let (spec, fds) = common::inherit(&seg);
    let mut child = producer_child(&spec, &fds, "fill-and-block", (0, 0, SMALL));
    // The consumer reads nothing: the ring fills and the child waits for space.
    wait_until("the producer to block", GUARD, || {
        seg.stats().producer_waits > 0
    });
    child.kill();
    let committed = seg.stats().records_committed;
    assert!(committed > 0);
    let mut ck = Checker::new(2, SMALL);
    while let Some(f) = consumer.try_next().unwrap() {
        ck.check(f.payload(), f.meta());
    }
    assert_eq!(ck.next[0], committed, "every committed record arrives");
    let s = seg.stats();
    assert_eq!((s.abandoned, s.corruption), (0, 0));
    // Space freed by the consumer is usable by others: many ring-fulls more.
    let mut prod = seg.producer().unwrap();
    prod.set_policy(FullPolicy::Fail);
    for i in 0..300 {
        write_record(&mut prod, 1, i, SMALL).unwrap();
        let f = next(&consumer, "a record");
        ck.check(f.payload(), f.meta());
    }
    assert_eq!(seg.stats().drops_full, 0);
}

/// The consumer dies while three producers write; producers blocked on the full
/// ring get `NoConsumer` (never hang), and a new consumer takes over at the dead
/// one's read cursor: together the two see every record, the new one in order and
/// exactly once.
#[test]
fn consumer_killed_new_consumer_takes_over() {
    const PRODUCERS: usize = 3;
    const PER: u64 = 6000;
    const MAX: usize = 16 << 10;
    let cfg = Config {
        capacity: 1 << 20,
        max_record: Some(MAX as u64),
        ..Config::default()
    };
    let seg = Address::memfd("takeover", cfg).open().unwrap();
    let (spec, fds) = common::inherit(&seg);
    let old = spawn(
        ENTRY,
        "consume-report",
        &[("SHMRING_TEST_SEG", spec.clone()), ("MAX", MAX.to_string())],
        &fds,
    );
    old.expect("ATTACHED", GUARD);

    let no_consumer = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS as u32)
        .map(|p| {
            let (seg, nc, to, stop) = (
                seg.clone(),
                no_consumer.clone(),
                timeouts.clone(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                let mut prod = seg.producer().unwrap();
                prod.set_policy(FullPolicy::Block(Duration::from_millis(100)));
                for i in 0..PER {
                    retry_full(&nc, &to, || {
                        assert!(!stop.load(Ordering::Relaxed), "test gave up");
                        write_record(&mut prod, p, i, MAX)
                    });
                }
            })
        })
        .collect();
    // Guard: if this test panics, producer threads stop retrying.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop = Stop(stop.clone());

    // Let the old consumer get through about a third, then kill it.
    let mut reported = vec![Vec::new(); PRODUCERS];
    let mut got = 0;
    let mut old = old;
    while got < PER as usize {
        let m = old.message_timeout(GUARD).expect("old consumer progress");
        let rest = m.strip_prefix("GOT ").expect("GOT message");
        let (p, i) = rest.split_once(' ').unwrap();
        reported[p.parse::<usize>().unwrap()].push(i.parse::<u64>().unwrap());
        got += 1;
    }
    old.kill();
    for m in old.remaining_messages(GUARD) {
        let rest = m.strip_prefix("GOT ").expect("GOT message");
        let (p, i) = rest.split_once(' ').unwrap();
        reported[p.parse::<usize>().unwrap()].push(i.parse::<u64>().unwrap());
    }
    // Nobody consumes: the ring fills and blocked producers learn the consumer is gone.
    wait_until("producers to see NoConsumer", GUARD, || {
        no_consumer.load(Ordering::Relaxed) >= 1
    });
    let consumer = seg
        .consumer()
        .expect("a new consumer takes over from a dead one");
    let mut seen: Vec<Vec<u64>> = vec![Vec::new(); PRODUCERS];
    let mut held = Vec::new();
    while seen.iter().any(|v| v.last() != Some(&(PER - 1))) {
        let f = next(&consumer, "records keep coming after the takeover");
        let (p, i) = common::verify(f.payload(), f.meta(), MAX);
        seen[p as usize].push(i);
        held.push(f);
        if held.len() == 4 {
            held.swap(0, 3);
            held.clear();
        }
    }
    drop(held);
    for h in producers {
        h.join().unwrap();
    }
    assert!(consumer.try_next().unwrap().is_none());
    for p in 0..PRODUCERS {
        let new = &seen[p];
        let first = new[0];
        // The new consumer sees a contiguous suffix: in order, exactly once.
        assert!(
            new.iter().copied().eq(first..PER),
            "producer {p}: new consumer saw a gap or a duplicate"
        );
        // Everything before it was handed to the old consumer (and released).
        let mut old_seen = reported[p].clone();
        old_seen.sort_unstable();
        old_seen.dedup();
        assert!(
            (0..first).all(|i| old_seen.binary_search(&i).is_ok()),
            "producer {p}: records before {first} were neither seen by the old consumer nor the new"
        );
    }
    let s = seg.stats();
    assert_eq!(s.records_committed, PER * PRODUCERS as u64);
    assert_eq!((s.abandoned, s.corruption), (0, 0));
    assert!(s.drops_full >= no_consumer.load(Ordering::Relaxed));
}

/// A producer blocked on a full ring while the consumer dies gets `NoConsumer`;
/// with the consumer alive and holding everything it gets `Timeout`; a second
/// consumer is refused while the first lives, and accepted once it is dead.
#[test]
fn blocked_producer_learns_the_consumer_died() {
    let seg = Address::memfd("nocons", Config::with_capacity(64 << 10))
        .open()
        .unwrap();
    let (spec, fds) = common::inherit(&seg);
    let mut child = consumer_child(&spec, &fds, "consume-idle");
    child.expect("ATTACHED", GUARD);
    assert!(
        matches!(seg.consumer(), Err(Error::ConsumerBusy(_))),
        "a live consumer in another process"
    );

    let mut prod = seg.producer().unwrap();
    let mut n = 0;
    while prod
        .try_reserve(SMALL)
        .map(|r| r.commit(Default::default()))
        .is_ok()
    {
        n += 1;
    }
    assert!(n > 0);
    // Consumer alive (it just reads nothing): a timeout.
    let e = prod
        .reserve_with(SMALL, FullPolicy::Block(Duration::from_millis(100)))
        .err();
    assert!(matches!(e, Some(Error::Timeout { .. })), "{e:?}");

    // The consumer dies while the producer is blocked.
    let seg2 = seg.clone();
    let blocked = std::thread::spawn(move || {
        let mut prod = seg2.producer().unwrap();
        prod.reserve_with(SMALL, FullPolicy::Block(Duration::from_secs(2)))
            .map(|_| ())
    });
    wait_until("the producer to wait", GUARD, || {
        seg.stats().producer_waits >= 2
    });
    child.kill();
    let r = blocked.join().unwrap();
    assert!(matches!(r, Err(Error::NoConsumer(_))), "{r:?}");
    let e = prod
        .reserve_with(SMALL, FullPolicy::Block(Duration::from_millis(50)))
        .err();
    assert!(matches!(e, Some(Error::NoConsumer(_))), "{e:?}");

    // A new consumer takes over and drains what the dead one never read.
    let consumer = seg.consumer().unwrap();
    let mut got = 0;
    while consumer.try_next().unwrap().is_some() {
        got += 1;
    }
    assert_eq!(got, n);
    prod.reserve_with(SMALL, FullPolicy::Fail)
        .unwrap()
        .commit(Default::default())
        .unwrap();
    assert_eq!(
        seg.stats().drops_full,
        4,
        "the failed try_reserve, the timeout and two NoConsumer"
    );
}

/// A consumer killed while asleep on the ring leaves its "waiting" mark behind; the
/// next consumer must clear it, or every commit from then on would make a wake-up
/// system call although nobody sleeps.
#[test]
fn consumer_killed_asleep_leaves_producers_quiet() {
    let seg = Address::memfd("asleep", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let (spec, fds) = common::inherit(&seg);
    let mut child = consumer_child(&spec, &fds, "consume-wait");
    child.expect("ATTACHED", GUARD);
    let mut prod = seg.producer().unwrap();
    // One record round trip proves the sleeping consumer is woken by a commit.
    prod.send(b"one", Default::default()).unwrap();
    assert_eq!(child.expect("GOT", GUARD), "0 0");
    wait_until("the consumer to sleep again", GUARD, || {
        seg.stats().consumer_waits >= 2
    });
    std::thread::sleep(Duration::from_millis(20));
    child.kill();

    let consumer = seg.consumer().unwrap();
    let wakes = seg.stats().producer_wakes;
    for i in 0..100u32 {
        prod.send(&i.to_le_bytes(), Default::default()).unwrap();
        let f = consumer.try_next().unwrap().expect("a record");
        assert_eq!(f.payload(), i.to_le_bytes());
    }
    assert_eq!(
        seg.stats().producer_wakes,
        wakes,
        "no wake-ups sent while the consumer never slept"
    );
    // And a consumer that does sleep is still woken.
    let seg2 = seg.clone();
    let t = std::thread::spawn(move || {
        let mut p = seg2.producer().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        p.send(b"late", Default::default()).unwrap();
    });
    let f = next(&consumer, "woken by the commit");
    assert_eq!(f.payload(), b"late");
    t.join().unwrap();
}

/// The same for the other direction: a producer killed while asleep waiting for
/// space leaves its mark on the space futex, and the consumer then sends a wake-up
/// with every release that frees space. Harmless (one futex call per release, no
/// hang, no lost record) but against the design's "no system call while the other
/// side is awake". Each slot marks its share of the waiting count, and the consumer
/// reaps dead slots (taking their share back) when it sees waiters.
#[test]
fn producer_killed_asleep_leaves_consumer_quiet() {
    let seg = Address::memfd("asleep-p", Config::with_capacity(64 << 10))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let (spec, fds) = common::inherit(&seg);
    let mut child = producer_child(&spec, &fds, "fill-and-block", (0, 0, SMALL));
    wait_until("the producer to block", GUARD, || {
        seg.stats().producer_waits >= 2
    });
    child.kill();
    while consumer.try_next().unwrap().is_some() {}
    let wakes = seg.stats().consumer_wakes;
    let mut prod = seg.producer().unwrap();
    for i in 0..100u32 {
        prod.send(&i.to_le_bytes(), Default::default()).unwrap();
        drop(consumer.try_next().unwrap().expect("a record"));
    }
    assert_eq!(seg.stats().consumer_wakes, wakes, "no producer was waiting");
}

/// Producers killed at arbitrary points (mid-record, mid-claim, between records),
/// one after another on the same ring, while a producer in this process keeps
/// writing: the consumer gets every record each dead producer committed, contiguous
/// and in order (the checker), at most one claim is abandoned per kill, and the live
/// producer's stream is untouched. Eight producers share four slots, so the slots
/// of dead producers must be recycled.
#[test]
fn producers_killed_at_random_points_lose_no_committed_record() {
    const ROUNDS: u32 = 8;
    const MAX: usize = 16 << 10;
    let cfg = Config {
        capacity: 1 << 20,
        max_record: Some(MAX as u64),
        max_producers: 4,
        ..Config::default()
    };
    let seg = Address::memfd("random-kill", cfg).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let (spec, fds) = common::inherit(&seg);
    let stop = Arc::new(AtomicBool::new(false));
    let live = {
        let (seg, stop) = (seg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut prod = seg.producer().unwrap();
            prod.set_policy(FullPolicy::Block(GUARD));
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                write_record(&mut prod, ROUNDS, i, MAX).unwrap();
                i += 1;
                if i % 64 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            i
        })
    };
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop_guard = Stop(stop.clone());

    let mut ck = Checker::new(ROUNDS as usize + 1, MAX);
    let mut rng = common::Rng(7);
    let take = |ck: &mut Checker, f: shmring::Frame<'_>| {
        ck.check(f.payload(), f.meta());
    };
    for round in 0..ROUNDS {
        let mut child = producer_child(&spec, &fds, "produce", (round, 1 << 40, MAX));
        let kill_after = 20 + rng.below(3000);
        while ck.next[round as usize] < kill_after {
            let f = next(&consumer, "records");
            take(&mut ck, f);
        }
        child.kill();
        assert!(
            seg.stats().abandoned <= round as u64 + 1,
            "at most one claim per kill"
        );
    }
    drop(stop_guard);
    // Keep consuming while the live producer finishes (it may be blocked on space).
    while !live.is_finished() {
        if let Some(f) = consumer
            .next_timeout(Some(Duration::from_millis(10)))
            .unwrap()
        {
            take(&mut ck, f);
        }
    }
    let live_n = live.join().unwrap();
    // Everything left arrives; the dead producers committed nothing more.
    while ck.next[ROUNDS as usize] < live_n {
        let f = next(&consumer, "the live producer's records");
        take(&mut ck, f);
    }
    wait_until("dead claims to be skipped", GUARD, || {
        while let Some(f) = consumer.try_next().unwrap() {
            take(&mut ck, f);
        }
        seg.stats().records_in_flight == 0
    });
    let s = seg.stats();
    assert_eq!(s.corruption, 0);
    assert!(s.abandoned <= ROUNDS as u64);
    // Producers count a record just before its commit, so the consumer never shows
    // more records than producers committed; a producer killed between its count and
    // its commit has counted one record too many.
    assert!(
        s.records_committed >= ck.records && s.records_committed <= ck.records + ROUNDS as u64,
        "committed {} vs consumed {}",
        s.records_committed,
        ck.records
    );
    assert_eq!(s.records_consumed, ck.records);
    // Eight producers came and went through four slots: dead slots are recycled.
    // Those still marked in use are freed by a reap.
    consumer.reap();
    assert_eq!(seg.stats().producers, 0);
}
