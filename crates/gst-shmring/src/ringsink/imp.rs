//! The sink's implementation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;
use shmring::media::{kind, MEDIA_HEADER_SIZE};
use shmring::{Error, FullPolicy, Meta, Producer, Segment};

use super::pool::{Core, RingPool};
use crate::lock;
use crate::media::{supported_caps, Input};
use crate::ring::{self, Location};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringsink",
        gst::DebugColorFlags::empty(),
        Some("shmring sink"),
    )
});

/// Buffers (and so producers) in the pool offered upstream.
const POOL_BUFFERS: usize = 4;

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
struct Settings {
    location: Location,
    stream: u32,
    full: FullMode,
    timeout_ms: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            location: Location::default(),
            stream: 0,
            full: FullMode::Block,
            timeout_ms: 0,
        }
    }
}

struct State {
    seg: Arc<Segment>,
    producer: Producer,
    input: Option<Input>,
    pool: Option<(gst::Caps, Arc<Core>, RingPool)>,
    sequence: u64,
    stream: u32,
}

#[derive(Default)]
struct Counters {
    committed: AtomicU64,
    in_place: AtomicU64,
    copies: AtomicU64,
    dropped: AtomicU64,
}

/// The `shmringsink` element.
#[derive(Default)]
pub struct ShmRingSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    counters: Counters,
}

impl ShmRingSink {
    fn policy(s: &Settings, producer: &Producer) -> FullPolicy {
        match s.full {
            FullMode::Drop => FullPolicy::Fail,
            FullMode::Block if s.timeout_ms == 0 => match producer.policy() {
                FullPolicy::Block(d) => FullPolicy::Block(d),
                FullPolicy::Fail => FullPolicy::Fail,
            },
            FullMode::Block => FullPolicy::Block(Duration::from_millis(s.timeout_ms as u64)),
        }
    }

    /// The buffer's capture time on the monotonic clock the ring's timestamps use.
    fn capture_ns(&self, buffer: &gst::BufferRef) -> u64 {
        let now = shmring::now_ns();
        let obj = self.obj();
        let (Some(pts), Some(clock), Some(base)) = (buffer.pts(), obj.clock(), obj.base_time())
        else {
            return now;
        };
        let segment = obj.segment();
        let Some(seg) = segment.downcast_ref::<gst::ClockTime>() else {
            return now;
        };
        let Some(running) = seg.to_running_time(pts) else {
            return now;
        };
        let at = (base + running).nseconds();
        let clock_now = clock.time().nseconds();
        // The same distance from now on the monotonic clock.
        if at <= clock_now {
            now.saturating_sub(clock_now - at)
        } else {
            now.saturating_add(at - clock_now)
        }
    }

    fn drop_counted(&self, why: &Error) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        gst::debug!(CAT, imp = self, "buffer dropped: {why}");
        Ok(gst::FlowSuccess::Ok)
    }
}

#[glib::object_subclass]
impl ObjectSubclass for ShmRingSink {
    const NAME: &'static str = "GstShmRingSink";
    type Type = super::ShmRingSink;
    type ParentType = gst_base::BaseSink;
}

impl ObjectImpl for ShmRingSink {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut props = ring::properties("write into", false);
            props.extend([
                glib::ParamSpecUInt::builder("stream")
                    .nick("Stream")
                    .blurb("Stream id written in every record (give each producer of a ring its own)")
                    .default_value(0)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("full-policy", FullMode::Block)
                    .nick("Full policy")
                    .blurb("What to do when the ring is full")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("timeout")
                    .nick("Timeout")
                    .blurb("Milliseconds to wait for room with full-policy=block before dropping; 0: the library's default")
                    .default_value(0)
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
                    .blurb("Buffers dropped because the ring was full or had no consumer")
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
        match pspec.name() {
            "stream" => s.stream = value.get().expect("type checked upstream"),
            "full-policy" => s.full = value.get().expect("type checked upstream"),
            "timeout" => s.timeout_ms = value.get().expect("type checked upstream"),
            other => gst::warning!(CAT, imp = self, "no writable property {other}"),
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
            "committed" => c.committed.load(Ordering::Relaxed).to_value(),
            "in-place" => c.in_place.load(Ordering::Relaxed).to_value(),
            "copies" => c.copies.load(Ordering::Relaxed).to_value(),
            "dropped" => c.dropped.load(Ordering::Relaxed).to_value(),
            other => {
                gst::warning!(CAT, imp = self, "no property {other}");
                pspec.default_value().clone()
            }
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        // The last sample would keep a reference to each buffer after its commit,
        // which forces a copy (a committed frame belongs to the ring's consumer).
        self.obj().set_enable_last_sample(false);
    }
}

impl GstObjectImpl for ShmRingSink {}

impl ElementImpl for ShmRingSink {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "shmring sink",
                "Sink/Video/Audio",
                "Writes raw video and audio into a shmring ring, with caps and timestamps in every record; upstream may write frames in place through its buffer pool",
                "shmring",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            // The supported formats, then any raw media: an unsupported format
            // still links and reaches `set_caps`, which fails naming it; the caps
            // query offers the supported formats first (see `caps`).
            let mut caps = supported_caps();
            caps.merge(
                "video/x-raw; audio/x-raw"
                    .parse::<gst::Caps>()
                    .expect("valid caps"),
            );
            vec![gst::PadTemplate::new(
                "sink",
                gst::PadDirection::Sink,
                gst::PadPresence::Always,
                &caps,
            )
            .expect("valid template")]
        });
        TEMPLATES.as_ref()
    }
}

impl BaseSinkImpl for ShmRingSink {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let what = s.location.describe();
        let seg = s
            .location
            .open_for("shmringsink", gst::ResourceError::OpenWrite)?;
        let mut producer = seg.producer().map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                ("shmringsink: cannot write into ring {}: {}", what, e)
            )
        })?;
        let policy = Self::policy(&s, &producer);
        producer.set_policy(policy);
        *lock(&self.state) = Some(State {
            seg,
            producer,
            input: None,
            pool: None,
            sequence: 0,
            stream: s.stream,
        });
        gst::info!(CAT, imp = self, "writing into ring {what}");
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.state) = None;
        Ok(())
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let ours = supported_caps();
        Some(match filter {
            Some(f) => {
                let both = f.intersect_with_mode(&ours, gst::CapsIntersectMode::First);
                // Nothing in common: answer with what upstream offers, so the
                // unsupported format reaches `set_caps` and is named in the error.
                if both.is_empty() {
                    f.clone()
                } else {
                    both
                }
            }
            // Unfiltered (a link check): any raw media, ours first, so that an
            // unsupported format links and is refused by name in `set_caps`.
            None => {
                let mut all = ours;
                all.merge(
                    "video/x-raw; audio/x-raw"
                        .parse::<gst::Caps>()
                        .expect("valid caps"),
                );
                all
            }
        })
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let input = match Input::from_caps(caps) {
            Ok(i) => i,
            Err(e) => {
                gst::element_imp_error!(self, gst::CoreError::Negotiation, ("shmringsink: {}", e));
                return Err(gst::loggable_error!(CAT, "shmringsink: {}", e));
            }
        };
        let mut guard = lock(&self.state);
        let st = guard
            .as_mut()
            .ok_or_else(|| gst::loggable_error!(CAT, "shmringsink: caps before start"))?;
        st.input = Some(input);
        Ok(())
    }

    fn propose_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let (Some(caps), need_pool) = query.get_owned() else {
            return Ok(());
        };
        let Ok(input) = Input::from_caps(&caps) else {
            return Ok(());
        };
        query.add_allocation_meta::<gst_video::VideoMeta>(None);
        if !input.is_video() || !need_pool {
            return Ok(());
        }
        let size = input.frame_size();
        let s = lock(&self.settings).clone();
        let mut guard = lock(&self.state);
        let Some(st) = guard.as_mut() else {
            return Ok(());
        };
        let reuse = st
            .pool
            .as_ref()
            .filter(|(c, _, _)| *c == caps)
            .map(|(_, _, p)| p.clone());
        let pool = match reuse {
            Some(p) => p,
            None => {
                let policy = Self::policy(&s, &st.producer);
                let core = match Core::new(&st.seg, POOL_BUFFERS, policy) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        gst::warning!(CAT, imp = self, "no pool, buffers will be copied: {e}");
                        return Ok(());
                    }
                };
                let pool = RingPool::new(core.clone());
                let mut config = pool.config();
                config.set_params(Some(&caps), size as u32, 0, POOL_BUFFERS as u32);
                pool.set_config(config)
                    .map_err(|e| gst::loggable_error!(CAT, "shmringsink: pool config: {}", e))?;
                st.pool = Some((caps.clone(), core, pool.clone()));
                pool
            }
        };
        query.add_allocation_pool(Some(&pool), size as u32, 0, POOL_BUFFERS as u32);
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let capture = self.capture_ns(buffer);
        let mut guard = lock(&self.state);
        let Some(st) = guard.as_mut() else {
            return Err(gst::FlowError::Flushing);
        };
        let Some(input) = st.input.as_ref() else {
            return Err(gst::FlowError::NotNegotiated);
        };
        let size = buffer.size();
        let pts = buffer.pts().map(|t| t.nseconds()).unwrap_or(0);
        let hd = match input.header(
            size,
            buffer.meta::<gst_video::VideoMeta>().as_deref(),
            pts,
            st.sequence,
        ) {
            Ok(h) => h,
            Err(e) => {
                gst::element_imp_error!(self, gst::StreamError::Format, ("shmringsink: {}", e));
                return Err(gst::FlowError::Error);
            }
        };
        let meta = Meta {
            stream: st.stream,
            kind: if input.is_video() {
                kind::VIDEO
            } else {
                kind::AUDIO
            },
            timestamp_ns: capture,
            flags: 0,
        };
        st.sequence += 1;
        // In place: the buffer is one of our pool's reservations, and nobody else
        // holds it (after the commit the ring's consumer owns those bytes).
        if let Some((_, core, _)) = st.pool.as_ref() {
            if buffer.n_memory() == 1 && buffer.is_writable() {
                let mem = buffer.peek_memory(0);
                if let Ok(map) = mem.map_readable() {
                    match core.commit(map.as_ptr(), map.len(), &hd, meta) {
                        Ok(true) => {
                            self.counters.committed.fetch_add(1, Ordering::Relaxed);
                            self.counters.in_place.fetch_add(1, Ordering::Relaxed);
                            return Ok(gst::FlowSuccess::Ok);
                        }
                        Ok(false) => {}
                        Err(e @ (Error::Abandoned { .. } | Error::NoConsumer(_))) => {
                            return self.drop_counted(&e)
                        }
                        Err(e) => {
                            gst::element_imp_error!(
                                self,
                                gst::ResourceError::Write,
                                ("shmringsink: {}", e)
                            );
                            return Err(gst::FlowError::Error);
                        }
                    }
                }
            }
        }
        // One copy.
        let policy = st.producer.policy();
        let r = match st.producer.reserve_raw(MEDIA_HEADER_SIZE + size, policy) {
            Ok(r) => r,
            Err(e @ (Error::Full { .. } | Error::Timeout { .. } | Error::NoConsumer(_))) => {
                return self.drop_counted(&e)
            }
            Err(e) => {
                gst::element_imp_error!(self, gst::ResourceError::Write, ("shmringsink: {}", e));
                return Err(gst::FlowError::Error);
            }
        };
        let header = hd.to_bytes();
        let copied = buffer.map_readable().map(|map| {
            // SAFETY: the reservation spans header + size bytes from r.ptr and is
            // ours until commit; the source is the mapped buffer of `size` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_ptr(), r.ptr, MEDIA_HEADER_SIZE);
                std::ptr::copy_nonoverlapping(map.as_ptr(), r.ptr.add(MEDIA_HEADER_SIZE), size);
            }
        });
        if copied.is_err() {
            st.producer.abort_raw();
            gst::element_imp_error!(
                self,
                gst::ResourceError::Read,
                ("shmringsink: cannot map buffer")
            );
            return Err(gst::FlowError::Error);
        }
        match st.producer.commit_raw(MEDIA_HEADER_SIZE + size, meta) {
            Ok(()) => {
                self.counters.committed.fetch_add(1, Ordering::Relaxed);
                self.counters.copies.fetch_add(1, Ordering::Relaxed);
                Ok(gst::FlowSuccess::Ok)
            }
            Err(e @ Error::Abandoned { .. }) => self.drop_counted(&e),
            Err(e) => {
                gst::element_imp_error!(self, gst::ResourceError::Write, ("shmringsink: {}", e));
                Err(gst::FlowError::Error)
            }
        }
    }
}
