//! The tokio consumer and producer (feature `tokio`): every record exactly once
//! under a multi-threaded runtime, and cancelled waits lose nothing.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shmring::tokio::{AsyncConsumer, AsyncFrame, AsyncProducer};
use shmring::{Address, Config, Meta, Segment};

fn eventfd_ring(name: &str, capacity: u64) -> Arc<Segment> {
    let cfg = Config {
        eventfd: true,
        ..Config::with_capacity(capacity)
    };
    Address::memfd(name, cfg.clone()).open().unwrap()
}

/// The next item through the `Stream` trait itself.
async fn next_item(frames: &mut AsyncConsumer) -> shmring::Result<AsyncFrame> {
    use futures_core::Stream;
    std::future::poll_fn(|cx| Pin::new(&mut *frames).poll_next(cx))
        .await
        .expect("the stream never ends")
}

/// Records carry (producer, n) and a checksum of their bytes.
fn fill(buf: &mut [u8], producer: u32, n: u32) {
    buf[..4].copy_from_slice(&producer.to_le_bytes());
    buf[4..8].copy_from_slice(&n.to_le_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (i as u32 ^ n ^ producer.rotate_left(8)) as u8;
    }
}

fn check(buf: &[u8]) -> (u32, u32) {
    let p = u32::from_le_bytes(buf[..4].try_into().unwrap());
    let n = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    for (i, &b) in buf[8..].iter().enumerate() {
        assert_eq!(
            b,
            (i as u32 ^ n ^ p.rotate_left(8)) as u8,
            "byte {i} of record ({p}, {n})"
        );
    }
    (p, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_delivers_every_record_exactly_once() {
    const PRODUCERS: u32 = 4;
    const EACH: u32 = 2000;
    // A small ring: producers wait for space often, on the blocking pool.
    let seg = eventfd_ring("tokio-once", 64 << 10);
    let mut frames = AsyncConsumer::new(seg.consumer().unwrap()).unwrap();
    let mut tasks = Vec::new();
    for id in 0..PRODUCERS {
        let mut p = AsyncProducer::new(seg.producer().unwrap());
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let len = 8 + (n as usize * 37 + id as usize * 101) % 3000;
                let mut r = p.reserve(len).await.unwrap();
                fill(r.payload(), id, n);
                r.commit(Meta::new(id, 0)).unwrap();
            }
        }));
    }
    let mut next = vec![0u32; PRODUCERS as usize];
    let mut held = Vec::new();
    for i in 0..PRODUCERS * EACH {
        let f = next_item(&mut frames).await.unwrap();
        let (p, n) = check(&f);
        assert_eq!(f.meta().stream, p);
        assert_eq!(
            n, next[p as usize],
            "records of producer {p} in order, none twice"
        );
        next[p as usize] += 1;
        // Hold a few frames and release them out of order, from another task (awaited,
        // so the frames held stay below what the claim log tracks).
        held.push(f);
        if i % 7 == 6 {
            let batch = std::mem::take(&mut held);
            tokio::spawn(async move { drop(batch.into_iter().rev().collect::<Vec<_>>()) })
                .await
                .unwrap();
        }
    }
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(next, vec![EACH; PRODUCERS as usize]);
    let s = seg.stats();
    assert_eq!(s.records_committed, (PRODUCERS * EACH) as u64);
    assert_eq!(s.records_consumed, (PRODUCERS * EACH) as u64);
    assert_eq!(s.drops_full, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_recv_mid_wait_loses_nothing() {
    const COUNT: u32 = 500;
    let seg = eventfd_ring("tokio-cancel", 1 << 20);
    let mut frames = AsyncConsumer::new(seg.consumer().unwrap()).unwrap();
    // A producer thread (synchronous core API) with pauses, so the consumer waits.
    let mut p = seg.producer().unwrap();
    let producer = std::thread::spawn(move || {
        for n in 0..COUNT {
            let mut r = p.reserve(64).unwrap();
            fill(r.payload(), 0, n);
            r.commit(Meta::new(0, 0)).unwrap();
            std::thread::sleep(Duration::from_micros(200 + (n as u64 % 5) * 300));
        }
    });
    let cancelled = AtomicU32::new(0);
    let mut expect = 0;
    while expect < COUNT {
        // Most waits are cut short: the recv() future is dropped mid-wait.
        let wait = Duration::from_micros(50 + (expect as u64 % 3) * 100);
        tokio::select! {
            f = frames.recv() => {
                let f = f.unwrap();
                assert_eq!(check(&f), (0, expect), "nothing lost, nothing twice");
                expect += 1;
            }
            _ = tokio::time::sleep(wait) => { cancelled.fetch_add(1, Ordering::Relaxed); }
        }
    }
    producer.join().unwrap();
    assert!(
        cancelled.load(Ordering::Relaxed) > 0,
        "some waits were cancelled"
    );
    // Nothing more, and the stream still works after all those cancellations.
    let none = tokio::time::timeout(Duration::from_millis(20), frames.recv()).await;
    assert!(none.is_err());
    let mut p = AsyncProducer::new(seg.producer().unwrap());
    let mut r = p.reserve(64).await.unwrap();
    fill(r.payload(), 1, 0);
    r.commit(Meta::new(1, 0)).unwrap();
    assert_eq!(check(&frames.recv().await.unwrap()), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reserve_or_reservation_is_aborted() {
    let seg = eventfd_ring("tokio-abort", 64 << 10);
    let mut frames = AsyncConsumer::new(seg.consumer().unwrap()).unwrap();
    let mut p = AsyncProducer::new(seg.producer().unwrap());
    drop(p.reserve(100).await.unwrap()); // dropped without commit
                                         // A reserve future dropped before it completes (possibly after it claimed).
    let fut = p.reserve(200);
    drop(fut);
    {
        let f = p.reserve(300);
        tokio::pin!(f);
        let _ = futures_poll_once(f.as_mut()).await;
    }
    let mut r = p.reserve(8).await.unwrap();
    fill(r.payload(), 7, 7);
    r.commit(Meta::new(7, 0)).unwrap();
    let f = frames.recv().await.unwrap();
    assert_eq!(check(&f), (7, 7), "only the committed record arrives");
    assert!(
        tokio::time::timeout(Duration::from_millis(20), frames.recv())
            .await
            .is_err()
    );
}

/// Polls a future once and drops the result (to cancel it mid-flight).
async fn futures_poll_once<F: std::future::Future>(mut f: Pin<&mut F>) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx).is_ready())).await
}

#[test]
fn needs_an_eventfd_ring() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let seg = Address::memfd("tokio-no-eventfd", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let err = AsyncConsumer::new(seg.consumer().unwrap()).err().unwrap();
    assert!(matches!(err, shmring::Error::EventfdRequired(_)), "{err}");
}
