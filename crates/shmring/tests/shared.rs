//! `SharedConsumer` / `SharedFrame`: frames released from any thread, also while
//! the consumer thread waits in a receive; close detaching once the last frame
//! is released.

use std::time::Duration;

use shmring::{
    Address, Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta, Segment, SharedConsumer,
};

/// Guards against a hang only: the test fails if it is reached.
const GUARD: Duration = Duration::from_secs(30);

fn ring(name: &str, capacity: u64) -> std::sync::Arc<Segment> {
    let cfg = Config {
        capacity,
        max_record: Some(capacity / 4),
        ..Config::default()
    };
    Address::memfd(name, cfg).open().unwrap()
}

/// A producer blocked on a full ring gets through once another thread drops a
/// frame, while the consumer thread sits in a receive with a long timeout: the
/// release is queued, the receive is nudged and gives the space back.
#[test]
fn space_returns_while_the_consumer_waits_in_a_long_receive() {
    let seg = ring("shared-space", 64 << 10);
    // The receive looks at the ring on its own only every minute: only the nudge
    // can bring it the release before the producer's wait runs out.
    let opts = ConsumerOptions {
        liveness_interval: 2 * GUARD,
        ..ConsumerOptions::default()
    };
    let consumer = SharedConsumer::new(Consumer::with_options(seg.clone(), opts).unwrap());
    let big = (16 << 10) - 256;
    let mut p = seg.producer().unwrap();
    p.set_policy(FullPolicy::Fail);
    let mut held = Vec::new();
    // Fill the ring: every frame held.
    loop {
        match p.send(&vec![7u8; big], Meta::new(0, 1)) {
            Ok(()) => held.push(consumer.try_next().unwrap().expect("a frame")),
            Err(Error::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(held.len() >= 2);
    // The consumer thread waits for data far longer than the test lasts.
    let waits = seg.stats().consumer_waits;
    let waiter = {
        let c = consumer.clone();
        std::thread::spawn(move || c.next_timeout(Some(GUARD)).unwrap().map(|f| f.len()))
    };
    // The producer blocks for space.
    let producer = std::thread::spawn(move || {
        p.set_policy(FullPolicy::Block(GUARD));
        p.send(&vec![9u8; big], Meta::new(0, 2)).map(|()| p)
    });
    // Until the consumer sleeps in its receive (holding the consumer), a release
    // would apply directly: wait for its sleep, and for the producer's.
    while seg.stats().consumer_waits == waits || seg.stats().producer_waits == 0 {
        std::thread::yield_now();
    }
    assert!(!producer.is_finished(), "the ring is full");
    // Another thread releases every frame (oldest first frees space at once).
    std::thread::spawn(move || drop(held)).join().unwrap();
    let p = producer.join().unwrap().expect("the producer got space");
    drop(p);
    // The consumer's receive got the producer's record.
    assert_eq!(waiter.join().unwrap(), Some(big));
    assert_eq!(consumer.outstanding(), 0);
}

#[test]
fn close_detaches_once_the_last_frame_is_released() {
    let seg = ring("shared-close", 1 << 20);
    let consumer = SharedConsumer::new(seg.consumer().unwrap());
    let mut p = seg.producer().unwrap();
    p.send(b"one", Meta::new(0, 1)).unwrap();
    p.send(b"two", Meta::new(0, 1)).unwrap();
    let a = consumer.try_next().unwrap().unwrap();
    let b = consumer.recv().unwrap();
    assert_eq!(consumer.outstanding(), 2);
    consumer.close();
    assert!(consumer.is_closed());
    assert!(matches!(consumer.try_next(), Err(Error::Closed(_))));
    assert!(matches!(
        consumer.with(|c| c.outstanding()),
        Err(Error::Closed(_))
    ));
    // Still the ring's consumer while frames are held: their payload is valid.
    assert!(matches!(seg.consumer(), Err(Error::ConsumerBusy(_))));
    assert!(!consumer.is_detached());
    assert_eq!(&a[..], b"one");
    std::thread::spawn(move || a.release()).join().unwrap();
    assert_eq!(&b[..], b"two");
    assert!(!consumer.is_detached());
    drop(b);
    assert!(consumer.is_detached());
    assert_eq!(consumer.outstanding(), 0);
    // Detached: another consumer may take the ring, after the released records.
    let next = seg.consumer().unwrap();
    assert!(next.try_next().unwrap().is_none());
}

#[test]
fn a_release_queued_while_the_consumer_is_lent_is_applied_when_it_is_let_go() {
    let seg = ring("shared-lent", 1 << 20);
    let consumer = SharedConsumer::new(seg.consumer().unwrap());
    seg.producer().unwrap().send(b"x", Meta::new(0, 1)).unwrap();
    let f = consumer.try_next().unwrap().unwrap();
    let seq = f.seq();
    consumer
        .with(|c| {
            assert!(c.is_held(seq));
            // Released on another thread while this one holds the consumer: queued.
            std::thread::spawn(move || drop(f)).join().unwrap();
            assert!(c.is_held(seq), "queued, not applied yet");
        })
        .unwrap();
    // Applied when `with` let go.
    assert_eq!(consumer.outstanding(), 0);
    assert!(!consumer.with(|c| c.is_held(seq)).unwrap());
}

#[test]
fn frames_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<shmring::SharedFrame>();
    both::<SharedConsumer>();
}

/// Frames held by other threads fill the claim log (the next record is behind
/// one not yet released): a receive waits for the release instead of failing,
/// and fails only when nothing is released for a liveness interval.
#[test]
fn a_receive_behind_a_frame_held_on_another_thread_waits_for_its_release() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let cfg = Config {
        capacity: 1 << 20,
        log_entries: Some(16),
        ..Config::default()
    };
    let seg = Address::memfd("shared-held", cfg).open().unwrap();
    let log = seg.geometry().log_entries;
    let total = 3 * log;
    let consumer = SharedConsumer::new(seg.consumer().unwrap());
    let got = AtomicU32::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut p = seg.producer().unwrap();
            p.set_policy(FullPolicy::Block(GUARD));
            for i in 0..total {
                p.send(&i.to_le_bytes(), Meta::new(0, 0)).unwrap();
            }
        });
        let first = consumer.next_timeout(Some(GUARD)).unwrap().unwrap();
        let receiver = s.spawn(|| {
            let mut seen = vec![0];
            for _ in 1..total {
                let f = consumer.next_timeout(Some(GUARD))?.expect("a record");
                seen.push(u32::from_le_bytes(f[..4].try_into().unwrap()));
                got.fetch_add(1, SeqCst);
            }
            Ok::<_, Error>(seen)
        });
        // Once the receiver is at the log's end, the first frame comes back.
        while got.load(SeqCst) < log - 1 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        drop(first);
        let seen = receiver.join().unwrap().unwrap();
        assert_eq!(seen, (0..total).collect::<Vec<_>>());
    });
    // Held by the caller itself: an error after a liveness interval, not a hang.
    let mut p = seg.producer().unwrap();
    let mut held = Vec::new();
    for i in 0..log {
        p.send(&i.to_le_bytes(), Meta::new(0, 0)).unwrap();
    }
    let e = loop {
        match consumer.next_timeout(None) {
            Ok(f) => held.push(f.unwrap()),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::TooManyHeld { .. }), "{e}");
    assert_eq!(held.len(), log as usize);
}
