//! Async producers and an async consumer on one tokio runtime.
//!
//! `cargo run --release -p shmring --features tokio --example tokio_stream`
//!
//! Two producer tasks write 1,000 records each into a small ring (so they often
//! wait for space, without blocking the runtime); the consumer reads them as a
//! `Stream` and, to show cancellation, wraps every wait in a 1 ms timeout: a
//! timed-out `recv()` loses nothing, the next call returns the frame.

use std::time::Duration;

use shmring::tokio::{AsyncConsumer, AsyncProducer};
use shmring::{Address, Config, Meta};

const PER_PRODUCER: u32 = 1000;

#[tokio::main]
async fn main() -> shmring::Result<()> {
    let cfg = Config {
        eventfd: true,
        ..Config::with_capacity(256 << 10)
    };
    let seg = Address::memfd("tokio-example", cfg.clone()).open()?;
    let mut frames = AsyncConsumer::new(seg.consumer()?)?;

    let mut tasks = Vec::new();
    for id in 0..2u32 {
        let mut producer = AsyncProducer::new(seg.producer()?);
        tasks.push(tokio::spawn(async move {
            for n in 0..PER_PRODUCER {
                let mut r = producer.reserve(16 << 10).await?;
                r.payload()[..4].copy_from_slice(&n.to_le_bytes());
                r.commit(Meta::new(id, shmring::media::kind::RAW))?;
            }
            Ok::<_, shmring::Error>(())
        }));
    }

    let (mut received, mut timeouts) = ([0u32; 2], 0u32);
    while received.iter().sum::<u32>() < 2 * PER_PRODUCER {
        match tokio::time::timeout(Duration::from_millis(1), frames.recv()).await {
            Err(_) => timeouts += 1, // the recv() future was dropped: no frame lost
            Ok(frame) => {
                let frame = frame?;
                let id = frame.meta().stream as usize;
                let n = u32::from_le_bytes(frame[..4].try_into().unwrap());
                assert_eq!(n, received[id], "each producer's records arrive in order");
                received[id] += 1;
            }
        }
    }
    for t in tasks {
        t.await.expect("producer task")?;
    }
    println!(
        "received {} + {} records; {timeouts} recv() calls timed out and were dropped, none lost",
        received[0], received[1]
    );
    Ok(())
}
