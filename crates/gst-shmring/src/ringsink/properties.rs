//! The sink's settings, and the properties that set them and show its counters.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use shmring::{FullPolicy, Producer};

use super::imp::{ShmRingSink, CAT};
use crate::lock;
use crate::ring::{self, Location};

/// What the sink does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSinkFullMode")]
pub enum FullMode {
    /// Wait for room up to `timeout`, then drop the buffer and count it.
    #[enum_value(
        name = "Block: wait for room up to the timeout, then drop and count",
        nick = "block"
    )]
    Block,
    /// Drop the buffer at once and count it.
    #[enum_value(name = "Drop: drop the buffer at once and count it", nick = "drop")]
    Drop,
}

#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) location: Location,
    pub(super) stream: u32,
    pub(super) full: FullMode,
    pub(super) timeout_ms: u32,
    pub(super) wait_for_consumer: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            location: Location::default(),
            stream: 0,
            full: FullMode::Block,
            timeout_ms: 0,
            wait_for_consumer: false,
        }
    }
}

pub(super) fn policy(s: &Settings, producer: &Producer) -> FullPolicy {
    match s.full {
        FullMode::Drop => FullPolicy::Fail,
        FullMode::Block if s.timeout_ms == 0 => producer.policy(),
        FullMode::Block => FullPolicy::Block(Duration::from_millis(s.timeout_ms as u64)),
    }
}

impl ObjectImpl for ShmRingSink {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut props = ring::properties(
                "write into",
                ". The sink waits for the ring: it does not create it (its consumer does, and sizes it); until it exists, or while it has no consumer, buffers are dropped at once (see wait-for-consumer)",
                false,
            );
            props.extend([
                glib::ParamSpecUInt::builder("stream")
                    .nick("Stream")
                    .blurb("Stream id written in every record (give each producer of a ring its own: the consumer warns when two interleave)")
                    .default_value(0)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("full-policy", FullMode::Block)
                    .nick("Full policy")
                    .blurb("What to do when the ring is full (with a consumer attached; without one, buffers are dropped at once)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("timeout")
                    .nick("Timeout")
                    .blurb("Milliseconds to wait for room with full-policy=block before dropping; 0: the library's default")
                    .default_value(0)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("wait-for-consumer")
                    .nick("Wait for consumer")
                    .blurb("While the ring does not exist or has no consumer: false drops each buffer at once (counted, one warning: right for live sources); true waits for the consumer (a non-live source then loses nothing)")
                    .default_value(false)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("committed")
                    .nick("Committed")
                    .blurb("Records written into the ring")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("in-place")
                    .nick("In place")
                    .blurb("Records upstream wrote straight into the ring through the buffer pool (no copy)")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("copies")
                    .nick("Copies")
                    .blurb("Records copied into the ring (buffers not from this sink's pool)")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("dropped")
                    .nick("Dropped")
                    .blurb("Buffers dropped: the ring was full, not there yet, or had no consumer")
                    .read_only()
                    .build(),
            ]);
            props
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        if s.location.set_property(pspec.name(), value) {
            return;
        }
        const CHECKED: &str = "type checked upstream";
        match pspec.name() {
            "stream" => s.stream = value.get().expect(CHECKED),
            "full-policy" => s.full = value.get().expect(CHECKED),
            "timeout" => s.timeout_ms = value.get().expect(CHECKED),
            "wait-for-consumer" => s.wait_for_consumer = value.get().expect(CHECKED),
            other => log!(CAT, Warning, &*self.obj(), "no writable property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = lock(&self.settings);
        let c = &self.counters;
        if let Some(v) = s.location.property(pspec.name()) {
            return v;
        }
        match pspec.name() {
            "stream" => s.stream.to_value(),
            "full-policy" => s.full.to_value(),
            "timeout" => s.timeout_ms.to_value(),
            "wait-for-consumer" => s.wait_for_consumer.to_value(),
            "committed" => c.committed.load(Ordering::Relaxed).to_value(),
            "in-place" => c.in_place.load(Ordering::Relaxed).to_value(),
            "copies" => c.copies.load(Ordering::Relaxed).to_value(),
            "dropped" => c.dropped.load(Ordering::Relaxed).to_value(),
            other => {
                log!(CAT, Warning, &*self.obj(), "no property {other}");
                pspec.default_value().clone()
            }
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        // The last sample would keep a reference to each buffer after its commit,
        // which forces a copy (a committed frame belongs to the ring's consumer).
        self.obj().set_enable_last_sample(false);
        // Drops are said as sinks say them: QoS messages and events.
        self.obj().set_qos(true);
    }
}
