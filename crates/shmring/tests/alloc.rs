//! No heap allocation per record, on either side, once warmed up: a counting global
//! allocator (this test binary only; `shmring_host::CountingAlloc`, whose own test
//! shows it counts each thread apart) counts allocations per thread, so the producer
//! thread and the consumer thread are measured separately. Records are 4 KiB and
//! 3 MiB, in a ring that holds only two of the large ones, and both sides pause now
//! and then, so producers block for space and the consumer blocks for data.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use shmring::{Address, Config, FullPolicy, Meta};
use shmring_host::thread_alloc_count as allocs;

#[global_allocator]
static GLOBAL: shmring_host::CountingAlloc = shmring_host::CountingAlloc;

const SMALL: usize = 4096;
const LARGE: usize = 3 << 20;
const WARM: u64 = 40;
const MEASURED: u64 = 400;
const GUARD: Duration = Duration::from_secs(30);

fn len_of(i: u64) -> usize {
    if i % 8 == 5 {
        LARGE
    } else {
        SMALL + (i as usize % 7) * 64
    }
}

#[test]
fn no_allocation_per_record_on_either_side() {
    let cfg = Config {
        capacity: 8 << 20,
        max_record: Some(LARGE as u64),
        ..Config::default()
    };
    let seg = Address::memfd("alloc", cfg).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let barrier = Arc::new(Barrier::new(2));

    let producer = {
        let (seg, barrier) = (seg.clone(), barrier.clone());
        std::thread::spawn(move || {
            let mut prod = seg.producer().unwrap();
            prod.set_policy(FullPolicy::Block(GUARD));
            let src = vec![0u8; LARGE];
            let mut src = src;
            let mut one = |prod: &mut shmring::Producer, i: u64| {
                let len = len_of(i);
                let meta = Meta::new(1, 2).with_flags(i as u32);
                if i % 3 == 0 {
                    src[0] = i as u8;
                    src[len - 1] = i as u8;
                    prod.send(&src[..len], meta).unwrap();
                } else {
                    let mut r = prod.reserve(len).unwrap();
                    let p = r.payload();
                    p[0] = i as u8;
                    p[len - 1] = i as u8;
                    r.commit(meta).unwrap();
                }
            };
            for i in 0..WARM {
                one(&mut prod, i);
            }
            barrier.wait();
            let before = allocs();
            for i in WARM..WARM + MEASURED {
                one(&mut prod, i);
                if i % 16 == 0 {
                    // Let the consumer run dry so it has to wait for data.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            allocs() - before
        })
    };

    let check = |payload: &[u8], flags: u32, i: u64| {
        assert_eq!(flags as u64, i);
        assert_eq!(payload.len(), len_of(i));
        assert_eq!((payload[0], payload[payload.len() - 1]), (i as u8, i as u8));
    };
    for i in 0..WARM {
        let f = consumer
            .next_timeout(Some(GUARD))
            .unwrap()
            .expect("warm-up record");
        check(f.payload(), f.meta().flags, i);
    }
    let before_stats = seg.stats();
    barrier.wait();
    let before = allocs();
    let mut i = WARM;
    let mut held: Option<shmring::Frame<'_>> = None;
    while i < WARM + MEASURED {
        match i % 4 {
            // Blocking wait with a timeout; hold this frame across the next one and
            // release them out of order.
            0 => {
                let f = consumer
                    .next_timeout(Some(GUARD))
                    .unwrap()
                    .expect("a record");
                check(f.payload(), f.meta().flags, i);
                held = Some(f);
            }
            1 => {
                let f = consumer.next_timeout(None).unwrap().expect("a record");
                check(f.payload(), f.meta().flags, i);
                drop(f); // the newer one first
                drop(held.take());
            }
            // Polling.
            2 => loop {
                if let Some(f) = consumer.try_next().unwrap() {
                    check(f.payload(), f.meta().flags, i);
                    f.release();
                    break;
                }
                std::hint::spin_loop();
            },
            // Raw frames.
            _ => {
                let r = consumer.next_raw(Some(GUARD)).unwrap().expect("a record");
                // SAFETY: the frame is held until release_raw below.
                let payload = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
                check(payload, r.meta.flags, i);
                consumer.release_raw(r.seq).unwrap();
            }
        }
        if i % 10 == 0 {
            // Let the producer fill the ring so it has to wait for space.
            std::thread::sleep(Duration::from_millis(2));
        }
        i += 1;
    }
    let consumer_allocs = allocs() - before;
    let producer_allocs = producer.join().unwrap();
    let after = seg.stats();
    assert_eq!(
        consumer_allocs, 0,
        "consumer allocations in {MEASURED} records"
    );
    assert_eq!(
        producer_allocs, 0,
        "producer allocations in {MEASURED} records"
    );
    assert!(
        after.producer_waits > before_stats.producer_waits,
        "the producer blocked for space while measured"
    );
    assert!(
        after.consumer_waits > before_stats.consumer_waits,
        "the consumer blocked for data while measured"
    );
    assert_eq!(after.records_consumed, WARM + MEASURED);
    assert!(consumer.try_next().unwrap().is_none());
}

/// Frames received on one thread and released on another: neither allocates per
/// frame once warmed up (the release queue is sized once; a frame is a handle).
#[test]
fn no_allocation_per_frame_released_on_another_thread() {
    use shmring::{SharedConsumer, SharedFrame};
    let seg = Address::memfd("alloc-shared", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = SharedConsumer::new(seg.consumer().unwrap());
    // A bounded channel's places are made once; with a place for every frame the
    // sender never blocks (a blocked sender may allocate its wait context).
    let (tx, rx) = std::sync::mpsc::sync_channel::<SharedFrame>((WARM + MEASURED) as usize);
    // The channel's first blocking receive allocates its waiting context (the
    // channel's, not ours): made once here, on the empty channel, before any frame.
    let warmed = Arc::new(Barrier::new(2));
    let releaser_warmed = warmed.clone();
    let releaser = std::thread::spawn(move || {
        let first = rx.recv_timeout(Duration::from_millis(1));
        assert!(first.is_err(), "nothing is sent before the barrier");
        releaser_warmed.wait();
        let mut n = 0u64;
        let mut before = 0;
        while let Ok(f) = rx.recv() {
            if n == WARM {
                before = allocs();
            }
            assert_eq!(f.len(), SMALL);
            drop(f);
            n += 1;
        }
        allocs() - before
    });
    warmed.wait();
    let producer = {
        let seg = seg.clone();
        std::thread::spawn(move || {
            let mut p = seg.producer().unwrap();
            p.set_policy(FullPolicy::Block(GUARD));
            let src = vec![1u8; SMALL];
            for i in 0..WARM + MEASURED {
                p.send(&src, Meta::new(0, 2).with_flags(i as u32)).unwrap();
            }
        })
    };
    let mut before = 0;
    for i in 0..WARM + MEASURED {
        if i == WARM {
            before = allocs();
        }
        let f = consumer
            .next_timeout(Some(GUARD))
            .unwrap()
            .expect("a frame");
        tx.send(f).unwrap();
    }
    let receiver = allocs() - before;
    drop(tx);
    producer.join().unwrap();
    let releaser = releaser.join().unwrap();
    assert_eq!(
        (receiver, releaser),
        (0, 0),
        "allocations (receiving, releasing)"
    );
    assert_eq!(consumer.outstanding(), 0);
}
