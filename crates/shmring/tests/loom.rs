//! Model check of the claim / commit / poll / release protocol with loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmring --release --test loom`
//!
//! The preemption bound defaults to 3 (every interleaving with at most three
//! forced context switches); `LOOM_MAX_PREEMPTIONS` overrides it.
//!
//! This file holds the model's ring and the helpers every model uses; the
//! models, by concern, in `tests/loom/`:
//! - `claims`: producers claiming and committing against one consumer, log
//!   entries reused after their release, placement racing a claim;
//! - `pending`: pending claims and how they end (abort, commit, abandon), the
//!   forgery check, a claim taken back and pinned, overtaking;
//! - `tethers`: a tethered consumer beside the ring's own;
//! - `reset`: the reset and a commit racing it;
//! - `wake`: the wake-up handshake;
//! - `release_queue`: releases queued while the consumer is held.

#![cfg(loom)]

#[path = "loom/claims.rs"]
mod claims;
#[path = "loom/pending.rs"]
mod pending;
#[path = "loom/release_queue.rs"]
mod release_queue;
#[path = "loom/reset.rs"]
mod reset;
#[path = "loom/tethers.rs"]
mod tethers;
#[path = "loom/wake.rs"]
mod wake;

use loom::sync::Arc;
use shmring::layout::LogEntry;
use shmring::protocol::{ConsumerCursor, Poll, Shared};
use shmring::sync::{AtomicU32, AtomicU64};

struct Ring {
    write: AtomicU64,
    read: AtomicU64,
    log: Vec<AtomicU64>,
    /// Each slot's `open_claim` word.
    open: Vec<AtomicU64>,
    cap_units: u64,
    /// The pin table (see `layout::Pins`).
    pinned: AtomicU32,
    pins: Vec<AtomicU64>,
}

impl Ring {
    fn new(n: u64, cap_units: u64) -> Self {
        Ring {
            write: AtomicU64::new(0),
            read: AtomicU64::new(0),
            log: (0..n)
                .map(|i| AtomicU64::new(LogEntry::initial(i, n)))
                .collect(),
            open: (0..4).map(|_| AtomicU64::new(0)).collect(),
            cap_units,
            pinned: AtomicU32::new(0),
            pins: (0..4).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    fn shared(&self) -> Shared<'_> {
        Shared {
            write: &self.write,
            read: &self.read,
            log: &self.log,
            cap_units: self.cap_units,
            pins: shmring::protocol::PinTable {
                in_use: &self.pinned,
                extent: &self.pins,
            },
        }
    }
}

/// A futex word at rest: no wake-up sent, nobody waiting, no mark.
fn futex() -> Arc<shmring::layout::Futex> {
    Arc::new(shmring::layout::Futex {
        seq: AtomicU32::new(0),
        waiting: AtomicU32::new(0),
        need: AtomicU32::new(0),
    })
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(3);
    }
    b
}

/// Record units as loom cells: a producer writing a unit while a consumer
/// still reads it (space reused too early) is a data race loom reports.
type Data = Vec<loom::cell::UnsafeCell<u64>>;

/// Writes a unit of a record.
fn put(unit: &loom::cell::UnsafeCell<u64>, v: u64) {
    // SAFETY: a loom cell: loom reports any access that races with this one.
    unit.with_mut(|p| unsafe { *p = v })
}

/// Reads a unit of a record.
fn get(unit: &loom::cell::UnsafeCell<u64>) -> u64 {
    // SAFETY: a loom cell: loom reports any write that races with this read.
    unit.with(|p| unsafe { *p })
}

fn data(units: usize) -> Arc<Data> {
    Arc::new((0..units).map(|_| loom::cell::UnsafeCell::new(0)).collect())
}

/// Polls `polls` times, handing out what it can: each record must hold its
/// claim number plus one, as its producer wrote it; then it is released and
/// `publish` called.
fn consume(
    ring: &Ring,
    data: &Data,
    cur: &mut ConsumerCursor,
    seen: &mut Vec<u64>,
    polls: usize,
    mut publish: impl FnMut(&ConsumerCursor),
) {
    let sh = ring.shared();
    for _ in 0..polls {
        match cur.poll(&sh) {
            Poll::Record { seq, rec_off, .. } => {
                let v = get(&data[rec_off as usize]);
                assert_eq!(v, seq + 1, "record {seq} overwritten");
                seen.push(seq);
                cur.release(seq).unwrap();
                publish(cur);
            }
            Poll::Corrupt(w) => panic!("corrupt: {w}"),
            Poll::Empty | Poll::Pending { .. } => loom::thread::yield_now(),
            other => panic!("unexpected {other:?}"),
        }
    }
}
