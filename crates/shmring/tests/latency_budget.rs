//! A consumer with a latency budget: every record is delivered, in order, while
//! producers stop waking it for each record (one wake-up serves many).

mod common;

use std::sync::Arc;
use std::time::Duration;

use shmring::{Address, Config, Consumer, ConsumerOptions, FullPolicy, Meta, Segment};

fn paced_run(budget: Option<Duration>) -> (u64, u64) {
    const N: u32 = 2000;
    let seg = Address::memfd("budget", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        latency_budget: budget,
        spin: 0,
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let producer = {
        let seg: Arc<Segment> = seg.clone();
        std::thread::spawn(move || {
            let mut p = seg.producer().unwrap();
            p.set_policy(FullPolicy::Block(Duration::from_secs(30)));
            for i in 0..N {
                p.send(&i.to_le_bytes(), Meta::new(0, 1)).unwrap();
                // Records a little apart, as audio packets come.
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    for i in 0..N {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(30)))
            .unwrap()
            .expect("every record arrives");
        assert_eq!(f.payload(), i.to_le_bytes());
    }
    producer.join().unwrap();
    let s = seg.stats();
    assert_eq!(s.records_consumed, N as u64);
    (s.producer_wakes, s.records_committed)
}

#[test]
fn without_a_budget_a_sleeping_consumer_is_woken_for_most_records() {
    let (wakes, records) = paced_run(None);
    assert!(
        wakes > records / 2,
        "{wakes} wake-ups for {records} records"
    );
}

#[test]
fn with_a_budget_every_record_arrives_and_one_wake_up_serves_many() {
    let (wakes, records) = paced_run(Some(Duration::from_millis(5)));
    assert!(
        wakes < records / 4,
        "{wakes} wake-ups for {records} records"
    );
}

#[test]
fn with_a_budget_a_filling_ring_wakes_the_consumer() {
    // A budget far longer than the test: only the fill mark can wake it.
    let seg = Address::memfd("budget-fill", Config::with_capacity(1 << 16))
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        latency_budget: Some(Duration::from_secs(3600)),
        spin: 0,
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    let mut p = seg.producer().unwrap();
    p.send(b"first", Meta::new(0, 1)).unwrap();
    assert_eq!(consumer.try_next().unwrap().unwrap().payload(), b"first");
    let filler = std::thread::spawn(move || {
        // Wait until the consumer sleeps (its last wake found a record: on its
        // timer), then fill half the ring.
        common::wait_until("the consumer sleeps", Duration::from_secs(30), || {
            seg.stats().consumer_waits > 0
        });
        for i in 0..40u32 {
            p.send(&[i as u8; 1000], Meta::new(0, 2)).unwrap();
        }
        seg
    });
    let f = consumer
        .next_timeout(Some(Duration::from_secs(60)))
        .unwrap()
        .expect("woken by the fill mark");
    assert_eq!(f.payload(), &[0u8; 1000][..]);
    let seg = filler.join().unwrap();
    assert!(seg.stats().producer_wakes >= 1);
}
