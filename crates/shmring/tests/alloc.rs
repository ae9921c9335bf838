//! No heap allocation per record, on either side, once warmed up: a counting global
//! allocator (this test binary only) counts allocations per thread, so the producer
//! thread and the consumer thread are measured separately. Records are 4 KiB and
//! 3 MiB, in a ring that holds only two of the large ones, and both sides pause now
//! and then, so producers block for space and the consumer blocks for data.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use shmring::{Config, FullPolicy, Meta, Segment};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator; counting touches only a const-initialised
// thread-local without destructor, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by the calling thread so far.
fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

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
fn the_counter_sees_this_threads_allocations() {
    let before = allocs();
    let v = std::hint::black_box(Vec::<u8>::with_capacity(16));
    assert_eq!(allocs(), before + 1);
    drop(v);
    let before = allocs();
    let other = std::thread::spawn(|| {
        let mine = allocs();
        for _ in 0..1000 {
            drop(std::hint::black_box(vec![1u8; 32]));
        }
        allocs() - mine
    });
    assert_eq!(other.join().unwrap(), 1000);
    // Spawning costs this thread a few allocations, not the other thread's 1000.
    assert!(
        allocs() - before < 100,
        "another thread's allocations are not counted here"
    );
}

#[test]
fn no_allocation_per_record_on_either_side() {
    let cfg = Config {
        capacity: 8 << 20,
        max_record: Some(LARGE as u64),
        ..Config::default()
    };
    let seg = Segment::create_memfd("alloc", &cfg).unwrap();
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
