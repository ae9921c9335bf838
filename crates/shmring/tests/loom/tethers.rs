//! A tethered consumer beside the ring's own: the ring's read cursor is the
//! farthest behind of the two, so no producer reuses space either still holds.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use loom::sync::atomic::Ordering::{Acquire, Release};
use loom::sync::Arc;
use shmring::layout::ClaimState;
use shmring::protocol::{ClaimError, ConsumerCursor};
use shmring::sync::AtomicU64;

use super::{builder, consume, data, put, Ring};

static TETHER_REUSED: AtomicUsize = AtomicUsize::new(0);

/// Two producers and two consumers: the ring's consumer and a tethered one,
/// each with its own cursors. The ring's consumer publishes as the ring's read
/// cursor the farthest behind of its own and the tethered one's (as
/// `tether::Supervisor::ring_read` does). Each producer writes its claim number
/// into the record's first unit; each consumer checks it when it reads the
/// record: a producer that reused space one consumer still held would have
/// overwritten it. Every interleaving: both consumers see every committed record
/// once, in claim order, intact; no claim reads the ring as broken.
#[test]
fn two_producers_two_consumers() {
    use shmring::protocol::farthest_behind;
    // Four threads: every interleaving with at most one forced switch (raise
    // it with LOOM_MAX_PREEMPTIONS for a longer run).
    let mut b = builder();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(1);
    }
    b.check(|| {
        // Two log entries, four units: the third claim needs both consumers to
        // release the first.
        let ring = Arc::new(Ring::new(2, 4));
        let data = data(4);
        let tether_read = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        for slot in 0..2u32 {
            let (ring, data) = (ring.clone(), data.clone());
            handles.push(loom::thread::spawn(move || {
                let sh = ring.shared();
                let mut n = 0;
                for _ in 0..if slot == 0 { 1 } else { 2 } {
                    match sh.try_claim(2, slot, &ring.open[slot as usize]) {
                        Ok(c) => {
                            if c.seq >= 2 {
                                TETHER_REUSED.fetch_add(1, Relaxed);
                            }
                            put(&data[c.rec_off as usize], c.seq + 1);
                            assert!(sh.settle(
                                &c,
                                ClaimState::Committed,
                                &ring.open[slot as usize]
                            ));
                            n += 1;
                        }
                        Err(ClaimError::Broken) => panic!("broken"),
                        Err(_) => {}
                    }
                }
                n
            }));
        }
        // Reads what it can in a bounded number of polls, releasing each record
        // after checking it; publishes its read cursor to `to`.
        let tethered = {
            let (ring, data, tr) = (ring.clone(), data.clone(), tether_read.clone());
            loom::thread::spawn(move || {
                let mut cur = ConsumerCursor::new(2, 0);
                let mut seen = Vec::new();
                consume(&ring, &data, &mut cur, &mut seen, 2, |c| {
                    tr.store(c.published(), Release)
                });
                seen
            })
        };
        let mut cur = ConsumerCursor::new(2, 0);
        let mut seen = Vec::new();
        let owner_publish = |c: &ConsumerCursor| {
            let other = tether_read.load(Acquire);
            let w = ring.write.load(Acquire);
            ring.read
                .store(farthest_behind(c.published(), &[other], w, 2, 4), Release);
        };
        consume(&ring, &data, &mut cur, &mut seen, 2, owner_publish);
        let tseen = tethered.join().unwrap();
        let produced: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        // Everything committed is still there for whoever has not read it.
        consume(&ring, &data, &mut cur, &mut seen, 3, owner_publish);
        assert_eq!(seen.len() as u64, produced);
        assert!(seen.windows(2).all(|w| w[0] + 1 == w[1]));
        // The tethered consumer read a prefix, in order, of the same records.
        assert!(tseen.iter().enumerate().all(|(i, &s)| s == i as u64));
    });
    assert!(
        TETHER_REUSED.load(Relaxed) > 0,
        "no execution reused space after both consumers released it"
    );
}
