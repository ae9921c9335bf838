//! Microbenchmark of the ring inside one process: throughput for small (4 KiB
//! audio-sized) and large (3 MiB video-sized) records with one and two producer
//! threads, the consumer blocking or spinning, and the wake-up latency from commit
//! to the consumer's return from its wait.
//!
//! Run: `cargo run --release -p shmring --example ringbench [-- SECONDS]`
//!
//! Producers write a sequence number at the start of each payload and one byte per
//! 4 KiB page (the payload is not filled: this measures the ring, not memcpy); the
//! consumer checks the sequence numbers. Process-level numbers come from
//! `shmring bench`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use shmring::{now_ns, Address, Config, Consumer, ConsumerOptions, FullPolicy, Meta};

const PAGE: usize = 4096;

fn options(spin: bool) -> ConsumerOptions {
    ConsumerOptions {
        spin: if spin { 1 << 20 } else { 0 },
        ..ConsumerOptions::default()
    }
}

struct Throughput {
    records: u64,
    secs: f64,
    bytes: u64,
}

fn throughput(size: usize, producers: u32, spin: bool, secs: f64) -> Throughput {
    let seg = Address::memfd("ringbench", Config::with_capacity(64 << 20))
        .open()
        .expect("create ring");
    let consumer = Consumer::with_options(seg.clone(), options(spin)).expect("consumer");
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let seg = seg.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut prod = seg.producer().expect("producer");
                prod.set_policy(FullPolicy::Block(Duration::from_millis(100)));
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut r) = prod.reserve(size) else {
                        continue;
                    };
                    let buf = r.payload();
                    buf[..8].copy_from_slice(&i.to_le_bytes());
                    for b in buf.iter_mut().step_by(PAGE).skip(1) {
                        *b = i as u8;
                    }
                    r.commit(Meta::new(p, 0)).expect("commit");
                    i += 1;
                }
            })
        })
        .collect();
    let mut next = vec![0u64; producers as usize];
    let mut check = |f: &shmring::Frame<'_>| {
        let i = u64::from_le_bytes(f.payload()[..8].try_into().unwrap());
        let n = &mut next[f.stream() as usize];
        assert_eq!(i, *n, "records of producer {} out of order", f.stream());
        *n += 1;
    };
    // Warm up (first lap of the ring faults its pages in), then measure.
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(200) {
        if let Some(f) = consumer
            .next_timeout(Some(Duration::from_millis(10)))
            .unwrap()
        {
            check(&f);
        }
    }
    let start = Instant::now();
    let window = Duration::from_secs_f64(secs);
    let mut records = 0u64;
    let mut bytes = 0u64;
    while start.elapsed() < window {
        if let Some(f) = consumer
            .next_timeout(Some(Duration::from_millis(10)))
            .unwrap()
        {
            check(&f);
            records += 1;
            bytes += f.len() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    while !handles.iter().all(|h| h.is_finished()) {
        if let Some(f) = consumer
            .next_timeout(Some(Duration::from_millis(10)))
            .unwrap()
        {
            check(&f);
        }
    }
    for h in handles {
        h.join().expect("producer thread");
    }
    Throughput {
        records,
        secs,
        bytes,
    }
}

/// Commit-to-return latency with one record every `gap`, the consumer idle between.
fn latency(spin: bool, samples: u32, gap: Duration) -> Histogram<u64> {
    let seg = Address::memfd("ringbench-latency", Config::with_capacity(1 << 20))
        .open()
        .expect("create ring");
    let consumer = Consumer::with_options(seg.clone(), options(spin)).expect("consumer");
    let producer = {
        let seg = seg.clone();
        std::thread::spawn(move || {
            let mut prod = seg.producer().expect("producer");
            for i in 0..samples {
                std::thread::sleep(gap);
                let mut r = prod.reserve(4096).expect("reserve");
                r.payload()[..4].copy_from_slice(&i.to_le_bytes());
                r.commit(Meta::new(0, 0).with_timestamp(now_ns()))
                    .expect("commit");
            }
        })
    };
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    for _ in 0..samples {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(5)))
            .expect("consumer")
            .expect("a record within 5 s");
        let t = now_ns();
        h.record(t.saturating_sub(f.timestamp_ns()).max(1))
            .expect("in range");
    }
    producer.join().expect("producer thread");
    h
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS must be a number"))
        .unwrap_or(1.0);
    println!("shmring ringbench: threads in one process, 64 MiB ring, {secs} s per row");
    println!();
    println!(
        "{:>8} {:>9} {:>9} {:>12} {:>10} {:>9}",
        "record", "producers", "consumer", "records/s", "ns/record", "GiB/s*"
    );
    for &(size, label) in &[(4096usize, "4 KiB"), (3 << 20, "3 MiB")] {
        for producers in [1u32, 2] {
            for spin in [false, true] {
                let t = throughput(size, producers, spin, secs);
                println!(
                    "{:>8} {:>9} {:>9} {:>12.0} {:>10.0} {:>9.2}",
                    label,
                    producers,
                    if spin { "spinning" } else { "blocking" },
                    t.records as f64 / t.secs,
                    t.secs * 1e9 / t.records.max(1) as f64,
                    t.bytes as f64 / t.secs / (1u64 << 30) as f64,
                );
            }
        }
    }
    println!("* payload bytes handed over in place per second (written sparsely, never copied)");
    println!();
    let samples = (secs * 1000.0).max(100.0) as u32;
    println!("wake-up latency, commit -> consumer returns, one 4 KiB record every 1 ms ({samples} samples)");
    println!(
        "{:>9} {:>10} {:>10} {:>10} {:>10}",
        "consumer", "p50 us", "p99 us", "p99.9 us", "max us"
    );
    for spin in [false, true] {
        let h = latency(spin, samples, Duration::from_millis(1));
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            if spin { "spinning" } else { "blocking" },
            us(0.5),
            us(0.99),
            us(0.999),
            h.max() as f64 / 1000.0
        );
    }
}
