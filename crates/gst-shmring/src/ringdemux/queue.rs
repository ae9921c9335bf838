//! A pad's queue, between the reading thread and the pad's streaming thread:
//! bounded by media time, bytes and buffers; a full one makes the reader wait.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

use crate::lock;
use crate::reader;

/// Most media a pad's queue holds before the reader waits for that pad.
pub const QUEUE_TIME: gst::ClockTime = gst::ClockTime::from_seconds(5);

/// Most bytes a pad's queue holds.
pub const QUEUE_BYTES: usize = 64 << 20;

/// Most buffers a pad's queue holds.
pub const QUEUE_BUFFERS: usize = 1000;

/// What a pad's thread pushes, in order.
pub(super) enum Item {
    Event(gst::Event),
    Buffer(gst::Buffer),
}

#[derive(Default)]
pub(super) struct QueueInner {
    items: VecDeque<Item>,
    bytes: usize,
    time: gst::ClockTime,
    pub(super) flushing: bool,
}

/// A pad's queue, between the reading thread and the pad's streaming thread.
#[derive(Default)]
pub(super) struct PadQueue {
    pub(super) inner: Mutex<QueueInner>,
    /// Signalled when an item is added or taken, or when flushing starts.
    changed: Condvar,
}

impl PadQueue {
    fn full(q: &QueueInner) -> bool {
        q.time >= QUEUE_TIME || q.bytes >= QUEUE_BYTES || q.items.len() >= QUEUE_BUFFERS
    }

    /// Adds an item, waiting while the queue is full (false: flushing).
    pub(super) fn put(&self, item: Item) -> bool {
        let mut q = lock(&self.inner);
        while Self::full(&q) && !q.flushing {
            q = self
                .changed
                .wait_timeout(q, reader::POLL_IDLE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if q.flushing {
            return false;
        }
        if let Item::Buffer(b) = &item {
            q.bytes += b.size();
            q.time += b.duration().unwrap_or(gst::ClockTime::ZERO);
        }
        q.items.push_back(item);
        self.changed.notify_all();
        true
    }

    /// The next item, waiting up to a poll for one.
    pub(super) fn take(&self) -> Option<Item> {
        let mut q = lock(&self.inner);
        if q.items.is_empty() && !q.flushing {
            q = self
                .changed
                .wait_timeout(q, reader::POLL_IDLE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let item = q.items.pop_front()?;
        if let Item::Buffer(b) = &item {
            q.bytes = q.bytes.saturating_sub(b.size());
            q.time = q
                .time
                .saturating_sub(b.duration().unwrap_or(gst::ClockTime::ZERO));
        }
        self.changed.notify_all();
        Some(item)
    }

    pub(super) fn set_flushing(&self, flushing: bool) {
        let mut q = lock(&self.inner);
        q.flushing = flushing;
        if flushing {
            // Queued frames go back to the ring.
            q.items.clear();
            q.bytes = 0;
            q.time = gst::ClockTime::ZERO;
        }
        self.changed.notify_all();
    }
}
