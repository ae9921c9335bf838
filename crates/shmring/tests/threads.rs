//! Many producer threads, one consumer thread: 4 producers x 100,000 records of 0 B
//! to 2 MiB with checksums. Every record arrives exactly once and intact, each
//! producer's records arrive in order, frames are held and released out of order,
//! and aborted reservations are skipped and counted.
//!
//! Sized to run in seconds with `cargo test --release`; it also passes in debug
//! builds, more slowly.

mod common;

use std::time::Duration;

use common::{consume_all, write_record, Checker};
use shmring::{Address, Config, FullPolicy};

const PRODUCERS: u32 = 4;
// Under Miri (a slow machine): fewer, smaller records in a smaller ring.
const PER: u64 = if cfg!(miri) { 12 } else { 100_000 };
const MAX: usize = if cfg!(miri) { 8 << 10 } else { 2 << 20 };

#[test]
fn four_threads_100k_records_each_exactly_once_in_order() {
    let cfg = Config {
        capacity: if cfg!(miri) { 1 << 20 } else { 32 << 20 },
        max_record: Some(MAX as u64),
        ..Config::default()
    };
    let seg = Address::memfd("threads", cfg).open().unwrap();
    let consumer = seg.consumer().unwrap();
    common::pool(); // build the payload pool before the clock matters

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let seg = seg.clone();
            std::thread::spawn(move || {
                let mut prod = seg.producer().unwrap();
                // A failure guard only: a producer never waits this long.
                prod.set_policy(FullPolicy::Block(Duration::from_secs(60)));
                let mut aborted = 0u64;
                for i in 0..PER {
                    if i % 97 == 50 {
                        // A reservation dropped without commit: the consumer skips it.
                        let mut r = prod.reserve((i as usize * 13) % 5000).unwrap();
                        r.payload().fill(0x5a);
                        drop(r);
                        aborted += 1;
                    }
                    write_record(&mut prod, p, i, MAX).unwrap();
                }
                aborted
            })
        })
        .collect();

    let mut ck = Checker::new(PRODUCERS as usize, MAX);
    consume_all(&consumer, &mut ck, PER, 42, 6 << 20);
    let aborted: u64 = producers.into_iter().map(|h| h.join().unwrap()).sum();

    assert!(
        consumer.try_next().unwrap().is_none(),
        "nothing beyond the last record"
    );
    assert_eq!(consumer.outstanding(), 0);
    let s = seg.stats();
    let total = PER * PRODUCERS as u64;
    assert_eq!(s.records_committed, total);
    assert_eq!(s.records_consumed, total);
    assert_eq!(s.bytes_committed, ck.bytes);
    assert_eq!(s.bytes_consumed, ck.bytes);
    assert_eq!(s.records_aborted, aborted);
    assert_eq!(s.skipped_aborted, aborted);
    assert_eq!((s.abandoned, s.corruption, s.drops_full), (0, 0, 0));
    assert_eq!((s.occupancy, s.records_in_flight), (0, 0));
    assert_eq!(s.producers, 0, "every producer detached");
    // The size mix really covered the range.
    assert!(
        ck.bytes > total * 1024,
        "mean record size {} B",
        ck.bytes / total
    );
}
