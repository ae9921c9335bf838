//! Where records go: a large record claimed into an empty ring is placed at the
//! ring's start, where the previous one was (frames keep reusing the same, cache-
//! warm memory); small records, and records claimed while others are in flight, go
//! round the ring. Every record still arrives once, intact and in order.

mod common;

use std::time::Duration;

use shmring::{Config, Consumer, ConsumerOptions, FullPolicy, Meta, Segment};

const RING: u64 = 1 << 20;
/// A "frame": more than 1/64 of the ring.
const FRAME: usize = 100_000;

fn frame(i: u32) -> Vec<u8> {
    (0..FRAME).map(|j| (i as usize * 31 + j) as u8).collect()
}

#[test]
fn frames_into_an_empty_ring_reuse_its_start() {
    let seg = Segment::create_memfd("place-start", &Config::with_capacity(RING)).unwrap();
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    // The first frame goes to the ring's start (the ring is new), and so does
    // every later one, since each finds the ring empty.
    let mut start = None;
    for i in 0..50u32 {
        p.send(&frame(i), Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().expect("the frame");
        assert_eq!(f.payload(), &frame(i)[..], "frame {i}");
        let at = f.payload().as_ptr() as usize;
        assert_eq!(*start.get_or_insert(at), at, "frame {i} not at the start");
    }
    let s = seg.stats();
    assert_eq!((s.records_committed, s.records_consumed), (50, 50));
    assert_eq!((s.skipped_aborted, s.abandoned, s.corruption), (0, 0, 0));
}

#[test]
fn small_records_and_records_behind_others_go_round_the_ring() {
    let seg = Segment::create_memfd("place-round", &Config::with_capacity(RING)).unwrap();
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    // Small records: each after the previous one, even into an empty ring.
    let mut last = 0;
    for i in 0..100u32 {
        p.send(&[i as u8; 1000], Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().unwrap();
        let at = f.payload().as_ptr() as usize;
        assert!(at > last, "record {i} went back");
        last = at;
    }
    // Frames while the consumer holds a record: the ring is not empty, so each
    // goes right after the one before.
    p.send(b"held", Meta::new(0, 0)).unwrap();
    let held = consumer.try_next().unwrap().unwrap();
    p.send(&frame(0), Meta::new(0, 0)).unwrap();
    let first = consumer.try_next().unwrap().unwrap();
    p.send(&frame(1), Meta::new(0, 1)).unwrap();
    let second = consumer.try_next().unwrap().unwrap();
    assert_eq!(
        first.payload().as_ptr() as usize,
        held.payload().as_ptr() as usize + 128,
        "behind a held record, a frame goes right after it"
    );
    assert_eq!(
        second.payload().as_ptr() as usize,
        first.payload().as_ptr() as usize + FRAME.next_multiple_of(64) + 64,
    );
    assert_eq!(second.payload(), &frame(1)[..]);
    drop((held, first, second));
}

#[test]
fn producers_behind_a_frame_at_the_start_wait_for_it_and_every_record_arrives() {
    // Frames from one thread, small records from another, a consumer that holds
    // nothing: frames keep going to the start, the small records wait behind them
    // when they must, and everything arrives once, in each producer's order.
    let seg = Segment::create_memfd("place-mixed", &Config::with_capacity(RING)).unwrap();
    let consumer = seg.consumer().unwrap();
    const N: u32 = 400;
    let threads: Vec<_> = (0..2u32)
        .map(|stream| {
            let seg = seg.clone();
            std::thread::spawn(move || {
                let mut p = seg.producer().unwrap();
                p.set_policy(FullPolicy::Block(Duration::from_secs(30)));
                for i in 0..N {
                    if stream == 0 {
                        p.send(&frame(i), Meta::new(0, i)).unwrap();
                    } else {
                        p.send(&i.to_le_bytes(), Meta::new(1, i)).unwrap();
                    }
                }
            })
        })
        .collect();
    let mut next = [0u32; 2];
    while next != [N, N] {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(30)))
            .unwrap()
            .expect("a record within 30 s");
        let (s, i) = (f.stream() as usize, f.kind());
        assert_eq!(i, next[s], "stream {s} out of order");
        if s == 0 {
            assert_eq!(f.payload(), &frame(i)[..]);
        } else {
            assert_eq!(f.payload(), i.to_le_bytes());
        }
        next[s] += 1;
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(consumer.try_next().unwrap().is_none());
}

#[test]
fn a_frame_at_the_start_does_not_wake_a_consumer_under_a_latency_budget() {
    // The padding of a frame placed at the ring's start holds nothing: it does not
    // count towards the fill mark past which producers wake a consumer that may let
    // records wait (half the ring), so the consumer sleeps on its own timer.
    let seg = Segment::create_memfd("place-budget", &Config::with_capacity(RING)).unwrap();
    let opts = ConsumerOptions {
        latency_budget: Some(Duration::from_secs(1)),
        spin: 0,
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let mut p = seg.producer().unwrap();
    // Somewhere past the start, so the next frame is placed there with padding.
    p.send(&frame(0), Meta::new(0, 0)).unwrap();
    assert_eq!(
        consumer.try_next().unwrap().unwrap().payload(),
        &frame(0)[..]
    );
    let sender = std::thread::spawn(move || {
        common::wait_until("the consumer sleeps", Duration::from_secs(30), || {
            seg.stats().consumer_waits > 0
        });
        p.send(&frame(1), Meta::new(0, 1)).unwrap();
        seg
    });
    let f = consumer
        .next_timeout(Some(Duration::from_secs(30)))
        .unwrap()
        .expect("the frame, on the consumer's timer");
    assert_eq!(f.payload(), &frame(1)[..]);
    let seg = sender.join().unwrap();
    assert_eq!(seg.stats().producer_wakes, 0, "woken below the fill mark");
}
