//! A fast end-to-end check of the public API: several producer threads, one
//! consumer holding frames and releasing them out of order.

use shmring::{Address, Config, FullPolicy, Meta};
use std::time::Duration;

#[test]
fn threads_deliver_every_record_once_in_producer_order() {
    let seg = Address::memfd("smoke", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    // Under Miri (a slow machine): fewer, smaller records.
    const PER: u32 = if cfg!(miri) { 20 } else { 20_000 };
    const SPREAD: u32 = if cfg!(miri) { 300 } else { 5000 };
    let handles: Vec<_> = (0..3u32)
        .map(|p| {
            let seg = seg.clone();
            std::thread::spawn(move || {
                let mut prod = seg.producer().unwrap();
                prod.set_policy(FullPolicy::Block(Duration::from_secs(10)));
                for i in 0..PER {
                    let len = ((i * 7919 + p * 31) % SPREAD) as usize;
                    let mut r = prod.reserve(len + 8).unwrap();
                    let buf = r.payload();
                    buf[..4].copy_from_slice(&i.to_le_bytes());
                    buf[4..8].copy_from_slice(&p.to_le_bytes());
                    for (j, b) in buf[8..].iter_mut().enumerate() {
                        *b = (i as usize + j) as u8;
                    }
                    r.commit(Meta::new(p, 0)).unwrap();
                }
            })
        })
        .collect();
    let mut next = [0u32; 3];
    let mut held = Vec::new();
    let mut total = 0;
    while total < 3 * PER {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("a frame within 10 s");
        let b = f.payload();
        let i = u32::from_le_bytes(b[..4].try_into().unwrap());
        let p = u32::from_le_bytes(b[4..8].try_into().unwrap());
        assert_eq!(p, f.stream());
        assert_eq!(i, next[p as usize], "producer {p} order");
        next[p as usize] += 1;
        for (j, &x) in b[8..].iter().enumerate() {
            assert_eq!(x, (i as usize + j) as u8);
        }
        total += 1;
        held.push(f);
        if held.len() == 5 {
            // release out of order: newest first
            while let Some(f) = held.pop() {
                drop(f);
            }
        }
    }
    drop(held);
    for h in handles {
        h.join().unwrap();
    }
    let s = seg.stats();
    assert_eq!(s.records_committed, 3 * PER as u64);
    assert_eq!(s.records_consumed, 3 * PER as u64);
    assert!(consumer.try_next().unwrap().is_none());
}

#[test]
fn the_peak_occupancy_counts_records_waiting_for_the_consumer() {
    let seg = Address::memfd("smoke-peak", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    // 100 records of 1 KiB (plus header) wait before the consumer takes any.
    for i in 0..100u32 {
        prod.send(&[i as u8; 1024], Meta::new(0, i)).unwrap();
    }
    while let Some(f) = consumer.try_next().unwrap() {
        drop(f);
    }
    let peak = seg.stats().peak_occupancy;
    // Looked at every few records, not at each: it saw most of the backlog.
    assert!(
        (80 * 1088..=100 * 1088).contains(&peak),
        "peak occupancy {peak} bytes"
    );
}
