//! The queue behind [`SharedConsumer`](crate::SharedConsumer): frames released
//! on other threads while the consumer is busy (waiting for data in a receive, or
//! lent to a `with` call) wait here until the thread that holds the consumer
//! applies them. Public for the model checker (`tests/loom.rs`).
//!
//! Bounded, sized once: a consumer holds at most as many frames as the claim log
//! has entries, and each is released once, so a queue of that many places never
//! fills. Many threads push; one drains, the one that holds the consumer (the
//! consumer is not `Sync`, so two cannot). No allocation per push or pop.
//!
//! A pusher takes a ticket (the tail, by compare-exchange so a full queue takes
//! none) and stores `seq + 1` in the ticket's place; the drainer takes places in
//! ticket order while they are filled, emptying each before moving the head past
//! it. A ticket taken but not yet filled stops the drainer there: the pusher fills
//! it next and then nudges the holder (see `consumer/shared.rs`), so the places
//! after it wait one round at most.

use crate::sync::{AtomicU64, Ordering};

/// A bounded multi-producer, single-consumer queue of frame numbers.
pub struct ReleaseQueue {
    /// `seq + 1` of a queued release; 0: empty.
    places: Box<[AtomicU64]>,
    /// Tickets taken by pushers.
    tail: AtomicU64,
    /// The next place the drainer looks at (written by the drainer only).
    head: AtomicU64,
}

impl ReleaseQueue {
    /// A queue of `capacity` places (at least 1).
    pub fn new(capacity: usize) -> ReleaseQueue {
        ReleaseQueue {
            places: (0..capacity.max(1)).map(|_| AtomicU64::new(0)).collect(),
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
        }
    }

    fn place(&self, ticket: u64) -> &AtomicU64 {
        &self.places[(ticket % self.places.len() as u64) as usize]
    }

    /// Queues `seq`. `Err(seq)` if every place is taken (the caller then releases
    /// another way; it cannot happen while at most `capacity` frames are held).
    pub fn push(&self, seq: u64) -> Result<(), u64> {
        let cap = self.places.len() as u64;
        let t = loop {
            // Acquire: pairs with the drainer's Release store of the head, so its
            // emptying of the place `t - cap` comes before our store into it; and
            // the head moved past a ticket only after that ticket was taken, so the
            // tail loaded next is at least the head (no wrap-around below).
            let h = self.head.load(Ordering::Acquire);
            // Relaxed: the ticket only decides who fills which place; the place's
            // own Release store publishes the value.
            let t = self.tail.load(Ordering::Relaxed);
            if t.wrapping_sub(h) >= cap {
                return Err(seq);
            }
            // Relaxed: as above.
            if self
                .tail
                .compare_exchange_weak(t, t + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                break t;
            }
        };
        // Release: the drainer that loads this value (Acquire) sees what we did
        // with the frame before releasing it.
        self.place(t).store(seq.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// The next queued frame number, if its place is filled. The drainer only.
    pub fn pop(&self) -> Option<u64> {
        // Relaxed: only the drainer writes the head, and it is the drainer.
        let h = self.head.load(Ordering::Relaxed);
        let place = self.place(h);
        // Acquire: pairs with the pusher's Release store.
        let v = place.load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        // Relaxed: published to the next pusher of this place by the head's
        // Release store below.
        place.store(0, Ordering::Relaxed);
        // Release: the place is empty before a pusher can see the head past it.
        self.head.store(h + 1, Ordering::Release);
        Some(v.wrapping_sub(1))
    }

    /// Is the place the drainer looks at next filled (would [`ReleaseQueue::pop`]
    /// return a frame)? Any thread; the caller orders it (a SeqCst fence before,
    /// in the wake handshake).
    pub fn ready(&self) -> bool {
        // Relaxed: a hint ordered by the caller's fence; the drainer looks again
        // with Acquire in `pop`.
        let h = self.head.load(Ordering::Relaxed);
        self.place(h).load(Ordering::Relaxed) != 0
    }

    /// Places, as sized at creation.
    pub fn capacity(&self) -> usize {
        self.places.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pushes_come_out_in_order_and_a_full_queue_says_so() {
        let q = ReleaseQueue::new(2);
        assert!(!q.ready());
        q.push(5).unwrap();
        q.push(0).unwrap();
        assert_eq!(q.push(9), Err(9));
        assert!(q.ready());
        assert_eq!(q.pop(), Some(5));
        q.push(9).unwrap();
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(0), Some(9), None));
        assert!(!q.ready());
    }
}
