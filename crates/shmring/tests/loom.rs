//! Model check of the claim / commit / poll / release protocol with loom.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmring --release --test loom`

#![cfg(loom)]

mod model {
    use loom::sync::Arc;
    use shmring::layout::{ClaimState, LogEntry};
    use shmring::protocol::{ClaimError, ConsumerCursor, Poll, Shared};
    use shmring::sync::AtomicU64;

    struct Ring {
        write: AtomicU64,
        read: AtomicU64,
        log: Vec<AtomicU64>,
    }

    impl Ring {
        fn new(n: u64) -> Self {
            Ring {
                write: AtomicU64::new(0),
                read: AtomicU64::new(0),
                log: (0..n)
                    .map(|i| AtomicU64::new(LogEntry::initial(i, n)))
                    .collect(),
            }
        }
        fn shared(&self) -> Shared<'_> {
            Shared {
                write: &self.write,
                read: &self.read,
                log: &self.log,
                cap_units: 4,
            }
        }
    }

    /// Two producers each claim and commit one record (the second also tries a
    /// second record that may have to wait for the consumer's release), while one
    /// consumer polls and releases out of order. Every interleaving: each committed
    /// record is seen exactly once, claims never overlap, and nothing breaks.
    #[test]
    fn two_producers_one_consumer() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(2));
            let mut handles = Vec::new();
            for slot in 0..2u32 {
                let ring = ring.clone();
                handles.push(loom::thread::spawn(move || {
                    let sh = ring.shared();
                    let mut got = 0;
                    for _ in 0..2 {
                        match sh.try_claim(2, slot) {
                            Ok(c) => {
                                assert!(sh.finish(&c, ClaimState::Committed));
                                got += 1;
                            }
                            Err(ClaimError::Broken) => panic!("broken"),
                            Err(_) => {}
                        }
                        if slot == 0 {
                            break;
                        }
                    }
                    got
                }));
            }
            let sh = ring.shared();
            let mut cur = ConsumerCursor::new(2, 0);
            let mut seen = Vec::new();
            let mut polls = 0;
            while seen.len() < 2 && polls < 6 {
                polls += 1;
                match cur.poll(&sh) {
                    Poll::Record { seq, rec_units, .. } => {
                        assert_eq!(rec_units, 2);
                        seen.push(seq);
                    }
                    Poll::Corrupt(w) => panic!("corrupt: {w}"),
                    _ => loom::thread::yield_now(),
                }
            }
            // Release in reverse order: the read cursor moves only at the last one.
            for &s in seen.iter().rev() {
                cur.release(s).unwrap();
            }
            cur.publish(&sh);
            let produced: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
            // Whatever was committed and not yet seen must still be visible.
            loop {
                match cur.poll(&sh) {
                    Poll::Record { seq, .. } => {
                        seen.push(seq);
                        cur.release(seq).unwrap();
                    }
                    Poll::Empty => break,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(seen.len() as u32, produced);
            let mut dedup = seen.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(dedup.len(), seen.len());
        });
    }
}
