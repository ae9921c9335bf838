//! Wake-ups of the ring's consumer: one per sleep, whoever commits.

use std::time::Duration;

use shmring::{Address, Config, Consumer, ConsumerOptions, Meta};

#[test]
fn a_burst_of_commits_wakes_a_sleeping_consumer_once() {
    let seg = Address::memfd("wake-once", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut producers: Vec<_> = (0..3).map(|_| seg.producer().unwrap()).collect();
    // The consumer announces it is about to sleep, as before every sleep.
    assert!(!consumer.arm(), "nothing there yet");
    for (i, p) in producers.iter_mut().enumerate() {
        for j in 0..4u32 {
            p.send(&j.to_le_bytes(), Meta::new(i as u32, j)).unwrap();
        }
    }
    assert_eq!(
        seg.stats().producer_wakes,
        1,
        "the first commit wakes it; the others see it woken"
    );
    consumer.disarm();
    for _ in 0..12 {
        consumer.try_next().unwrap().expect("every record");
    }
    // Announced again: the next commit wakes it again.
    assert!(!consumer.arm());
    producers[0].send(b"x", Meta::new(0, 9)).unwrap();
    assert_eq!(seg.stats().producer_wakes, 2);
    consumer.disarm();
}

#[test]
fn a_sleeping_consumer_is_woken_by_every_burst() {
    // Blocking waits with producers committing in bursts from several threads,
    // each burst waking the consumer once at most: every record arrives, in order.
    let seg = Address::memfd("wake-bursts", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let opts = ConsumerOptions {
        spin: 0,
        ..Default::default()
    };
    let consumer = Consumer::with_options(seg.clone(), opts).unwrap();
    const BURSTS: u32 = 200;
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let seg = seg.clone();
            std::thread::spawn(move || {
                let mut p = seg.producer().unwrap();
                for b in 0..BURSTS {
                    for k in 0..3u32 {
                        p.send(&(b * 3 + k).to_le_bytes(), Meta::new(t, 0)).unwrap();
                    }
                    std::thread::sleep(Duration::from_micros(300));
                }
            })
        })
        .collect();
    let mut next = [0u32; 2];
    while next != [BURSTS * 3; 2] {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(30)))
            .unwrap()
            .expect("a record within 30 s");
        let t = f.stream() as usize;
        assert_eq!(f.payload(), next[t].to_le_bytes());
        next[t] += 1;
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(seg.stats().consumer_waits > 0, "the consumer slept");
}
