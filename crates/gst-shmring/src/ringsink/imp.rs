//! The sink's implementation.
//!
//! **Start order.** The sink may start before its ring exists or before the ring
//! has a consumer: it opens the ring by name as soon as it appears, and drops what
//! arrives meanwhile at once (counted, one warning) instead of waiting a full-ring
//! timeout per buffer; `wait-for-consumer=true` makes it wait instead (for a
//! non-live upstream that must lose nothing). It never creates the ring: the ring
//! belongs to its consumer, which sizes it and removes it.
//!
//! **A consumer that goes away.** The sink checks at most every
//! [`CONSUMER_CHECK`] whether the ring still has a consumer; without one it drops
//! at once (one warning), and when the named ring was replaced by a new consumer
//! (`create=true` after a crash) it opens the new one.
//!
//! **End of stream.** At EOS the sink commits an end-of-stream record for its
//! stream and kind: the consumer ends that stream (`shmringsrc` sends EOS,
//! `shmring record` finishes its file).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;
use shmring::media::{EndOfStream, MEDIA_HEADER_SIZE};
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

/// How often the sink looks for its ring (not there yet) and for its consumer.
const CONSUMER_CHECK: Duration = Duration::from_millis(100);
/// How long `wait-for-consumer` sleeps between looks (flushing interrupts it).
const WAIT_STEP: Duration = Duration::from_millis(10);
/// At most one warning about buffers the ring refused per this interval (each
/// one is counted, and has its QoS message).
const DROP_WARN_INTERVAL: Duration = Duration::from_secs(1);

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
    wait_for_consumer: bool,
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

/// The ring the sink writes into.
struct Conn {
    seg: Arc<Segment>,
    producer: Producer,
    pool: Option<(gst::Caps, Arc<Core>, RingPool)>,
    /// The ring's consumer, as last checked.
    consumer: bool,
    checked: Instant,
}

struct Started {
    settings: Settings,
    conn: Option<Conn>,
    /// The last attempt to open a ring that was not there.
    tried: Option<Instant>,
    input: Option<Input>,
    sequence: u64,
    /// Why buffers are being dropped, already said on the bus.
    warned: Option<&'static str>,
    ended: bool,
    /// A ring was found, or replaced, since upstream chose its buffers: ask it to
    /// choose again (this ring's pool).
    reconfigure: bool,
    /// The last warning about buffers the ring refused, and the drops counted then.
    last_drop_warn: Option<Instant>,
    drops_warned: u64,
}

#[derive(Default)]
enum State {
    #[default]
    Stopped,
    Started(Box<Started>),
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
    state: Mutex<State>,
    counters: Counters,
    flushing: AtomicBool,
    /// Caps refused, already reported (an error is posted once per caps).
    refused: Mutex<Option<gst::Caps>>,
}

fn policy(s: &Settings, producer: &Producer) -> FullPolicy {
    match s.full {
        FullMode::Drop => FullPolicy::Fail,
        FullMode::Block if s.timeout_ms == 0 => producer.policy(),
        FullMode::Block => FullPolicy::Block(Duration::from_millis(s.timeout_ms as u64)),
    }
}

/// Did `why` come from a full ring, a reset, or a consumer that is gone (the
/// buffer is dropped and counted, and writing goes on)?
fn is_drop(why: &Error) -> bool {
    matches!(
        why,
        Error::Full { .. } | Error::Timeout { .. } | Error::NoConsumer(_) | Error::Abandoned { .. }
    )
}

impl ShmRingSink {
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

    /// Opens the ring (`None`: not there yet; `Err`: it cannot be written into).
    fn connect(&self, s: &Settings) -> Result<Option<Conn>, gst::ErrorMessage> {
        let seg = match s.location.open(self.obj().upcast_ref()) {
            Ok(seg) => seg,
            // Not there yet: the consumer has not created it. A descriptor is
            // given once, so it either works now or never.
            Err(e) if s.location.fd < 0 && e.contains("does not exist") => return Ok(None),
            Err(e) => {
                return Err(error_msg!(
                    gst::ResourceError::OpenWrite,
                    "shmringsink: cannot open ring {}: {}",
                    s.location.describe(),
                    e
                ))
            }
        };
        let mut producer = seg.producer().map_err(|e| {
            error_msg!(
                gst::ResourceError::OpenWrite,
                "shmringsink: cannot write into ring {}: {}",
                s.location.describe(),
                e
            )
        })?;
        producer.set_policy(policy(s, &producer));
        Ok(Some(Conn {
            consumer: seg.consumer_alive(),
            checked: Instant::now(),
            seg,
            producer,
            pool: None,
        }))
    }

    /// Says once, on the bus, why buffers are dropped.
    fn warn_dropping(&self, st: &mut Started, why: &'static str) {
        if st.warned == Some(why) {
            return;
        }
        st.warned = Some(why);
        let ring = st.settings.location.describe();
        let text = match why {
            "no-ring" => format!(
                "shmringsink: ring {ring} does not exist yet: buffers are dropped until its consumer creates it (wait-for-consumer=true waits instead)"
            ),
            _ => format!(
                "shmringsink: ring {ring} has no consumer: buffers are dropped at once until one attaches (wait-for-consumer=true waits instead)"
            ),
        };
        post!(self.obj(), Warning, gst::ResourceError::Write, "{}", text);
    }

    /// The ring with a live consumer, waiting or not as the settings say. `None`:
    /// drop this buffer (counted and said).
    fn ready(&self, st: &mut Started) -> Result<bool, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            let now = Instant::now();
            if st.conn.is_none()
                && st
                    .tried
                    .is_none_or(|t| now.duration_since(t) >= CONSUMER_CHECK)
            {
                st.tried = Some(now);
                match self.connect(&st.settings) {
                    Ok(c) => Self::replace_conn(st, c),
                    Err(e) => {
                        self.post_error_message(e);
                        return Err(gst::FlowError::Error);
                    }
                }
                if st.conn.is_some() {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "ring {} is there",
                        st.settings.location.describe()
                    );
                }
            }
            let mut why = "no-ring";
            if let Some(c) = st.conn.as_mut() {
                if now.duration_since(c.checked) >= CONSUMER_CHECK {
                    c.checked = now;
                    c.consumer = c.seg.consumer_alive();
                }
                why = "no-consumer";
            }
            // A ring whose consumer is gone may have been replaced by a new one
            // under the same name (create=true after a crash): open that.
            let stale = st.conn.as_ref().is_some_and(|c| !c.consumer)
                && st.settings.location.fd < 0
                && st
                    .tried
                    .is_none_or(|t| now.duration_since(t) >= CONSUMER_CHECK);
            if stale {
                st.tried = Some(now);
                if let Ok(Some(fresh)) = self.connect(&st.settings) {
                    if fresh.consumer
                        && !Arc::ptr_eq(&fresh.seg, &st.conn.as_ref().expect("stale").seg)
                    {
                        log!(
                            CAT,
                            Info,
                            &*self.obj(),
                            "ring {} has a new consumer",
                            st.settings.location.describe()
                        );
                        Self::replace_conn(st, Some(fresh));
                    }
                }
            }
            let live = st.conn.as_ref().is_some_and(|c| c.consumer);
            if let Some((_, core, _)) = st.conn.as_ref().and_then(|c| c.pool.as_ref()) {
                core.set_no_consumer(!live);
            }
            if live {
                if st.warned.take().is_some() {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "ring {} has a consumer again: writing",
                        st.settings.location.describe()
                    );
                }
                return Ok(true);
            }
            if !st.settings.wait_for_consumer {
                self.warn_dropping(st, why);
                return Ok(false);
            }
            std::thread::sleep(WAIT_STEP);
        }
    }

    /// The sink writes into `conn` from now on (a ring found, or one that replaced
    /// the ring it wrote into). The old ring's pool is retired: upstream's buffers
    /// from it are copied, never reserved in a ring nobody reads (which, full,
    /// would make every buffer wait the full-ring timeout); upstream is asked to
    /// choose its buffers again, and gets the new ring's pool.
    fn replace_conn(st: &mut Started, conn: Option<Conn>) {
        let found = conn.is_some();
        if let Some((_, core, _)) = std::mem::replace(&mut st.conn, conn).and_then(|c| c.pool) {
            core.retire();
        }
        st.reconfigure |= found;
    }

    /// A buffer dropped (`why`, after waiting `waited` for room): counted, a QoS
    /// message on the bus and, after a wait, a QoS event upstream saying how late
    /// it was (when `qos` is on, as by default), and for the
    /// buffers the ring refused (`said`: not said otherwise) a warning at most once
    /// per [`DROP_WARN_INTERVAL`]. Called without the state's lock.
    fn dropped(&self, buffer: &gst::BufferRef, why: &str, waited: Duration, said: bool) {
        let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        let obj = self.obj();
        log!(CAT, Debug, &*obj, "buffer dropped: {why}");
        if obj.is_qos() {
            let pts = buffer.pts();
            let segment = obj.segment();
            let seg = segment.downcast_ref::<gst::ClockTime>();
            let running = seg.and_then(|s| pts.and_then(|p| s.to_running_time(p)));
            let stream = seg.and_then(|s| pts.and_then(|p| s.to_stream_time(p)));
            let waited_ns = i64::try_from(waited.as_nanos()).unwrap_or(i64::MAX);
            let msg = gst::message::Qos::builder(obj.is_sync())
                .running_time_if_some(running)
                .stream_time_if_some(stream)
                .timestamp_if_some(pts)
                .duration_if_some(buffer.duration())
                .values(waited_ns, 1.0, 0)
                .stats(
                    gst::format::Buffers::from_u64(self.counters.committed.load(Ordering::Relaxed)),
                    gst::format::Buffers::from_u64(dropped),
                )
                .src(&*obj)
                .build();
            let _ = obj.post_message(msg);
            // Upstream produces more than the ring's consumer takes, and this
            // buffer waited for room before it was dropped: it was that late.
            // (Without a wait, the QoS event the base class sends for every
            // buffer says as much.)
            if waited_ns > 0 {
                let event = gst::event::Qos::builder(gst::QOSType::Overflow, 1.0, waited_ns)
                    .timestamp_if_some(running)
                    .build();
                let _ = obj.sink_pad().push_event(event);
            }
        }
        if said {
            return;
        }
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return;
        };
        let now = Instant::now();
        if st
            .last_drop_warn
            .is_some_and(|t| now.duration_since(t) < DROP_WARN_INTERVAL)
        {
            return;
        }
        st.last_drop_warn = Some(now);
        let since = dropped - std::mem::replace(&mut st.drops_warned, dropped);
        let ring = st.settings.location.describe();
        drop(guard);
        post!(
            obj,
            Warning,
            gst::ResourceError::NoSpaceLeft,
            "shmringsink: buffers dropped: {since} since the last warning, {dropped} in all ({why}): ring {ring}'s consumer does not keep up (give it a larger capacity, or write less)"
        );
    }

    /// Commits the end-of-stream record of the stream (once).
    fn end_stream(&self) {
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return;
        };
        if st.ended {
            return;
        }
        let (Some(input), Some(conn)) = (st.input.as_ref(), st.conn.as_mut()) else {
            return;
        };
        st.ended = true;
        let end = EndOfStream {
            pts_ns: 0,
            sequence: st.sequence,
        };
        let meta = Meta::new(st.settings.stream, input.kind());
        match conn.producer.send(&end.to_bytes(), meta) {
            Ok(()) => log!(
                CAT,
                Info,
                &*self.obj(),
                "end of stream {} written",
                st.settings.stream
            ),
            Err(e) => log!(CAT, Warning, &*self.obj(), "end of stream not written: {e}"),
        }
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

impl GstObjectImpl for ShmRingSink {}

impl ElementImpl for ShmRingSink {
    element_metadata!(
        "shmring sink",
        "Sink/Video/Audio",
        "Writes raw video and audio into a shmring ring, with caps, frame rate and timestamps in every record and an end-of-stream record at EOS; upstream may write frames in place through its buffer pool. Waits for the ring (its consumer creates it)"
    );

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
        let settings = lock(&self.settings).clone();
        let what = settings.location.describe();
        if settings.location.fd < 0 && settings.location.name.as_deref().is_none_or(str::is_empty) {
            return Err(error_msg!(
                gst::ResourceError::Settings,
                "shmringsink: no ring: set the ring property (a name) or fd"
            ));
        }
        let conn = self.connect(&settings)?;
        match &conn {
            Some(_) => log!(CAT, Info, &*self.obj(), "writing into ring {what}"),
            None => log!(
                CAT,
                Info,
                &*self.obj(),
                "ring {what} is not there yet: waiting for it"
            ),
        }
        *lock(&self.state) = State::Started(Box::new(Started {
            tried: Some(Instant::now()),
            settings,
            conn,
            input: None,
            sequence: 0,
            warned: None,
            ended: false,
            reconfigure: false,
            last_drop_warn: None,
            drops_warned: 0,
        }));
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.state) = State::Stopped;
        Ok(())
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::Release);
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(false, Ordering::Release);
        Ok(())
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            self.end_stream();
        }
        self.parent_event(event)
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
                // Upstream may offer the same caps again: say it once.
                let mut refused = lock(&self.refused);
                if refused.as_ref() != Some(caps) {
                    *refused = Some(caps.clone());
                    post!(
                        self.obj(),
                        Error,
                        gst::CoreError::Negotiation,
                        "shmringsink: {}",
                        e
                    );
                }
                return Err(loggable!(CAT, "shmringsink: {}", e));
            }
        };
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return Err(loggable!(CAT, "shmringsink: caps before start"));
        };
        st.input = Some(input);
        st.ended = false;
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
        if !input.is_video() {
            // Audio is small and copied: no pool, and no video meta to offer.
            return Ok(());
        }
        query.add_allocation_meta::<gst_video::VideoMeta>(None);
        if !need_pool {
            return Ok(());
        }
        let size = input.frame_size();
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return Ok(());
        };
        let Some(conn) = st.conn.as_mut() else {
            // No ring yet: upstream allocates its own buffers (copied later).
            return Ok(());
        };
        let reuse = conn
            .pool
            .as_ref()
            .filter(|(c, _, _)| *c == caps)
            .map(|(_, core, p)| (p.clone(), core.max_buffers()));
        let (pool, max) = match reuse {
            Some(p) => p,
            None => {
                let core = match Core::new(&conn.seg, size, policy(&st.settings, &conn.producer)) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        log!(
                            CAT,
                            Warning,
                            &*self.obj(),
                            "no pool, buffers will be copied: {e}"
                        );
                        return Ok(());
                    }
                };
                let max = core.max_buffers();
                let pool = RingPool::new(core.clone());
                let mut config = pool.config();
                config.set_params(Some(&caps), size as u32, 0, max as u32);
                pool.set_config(config)
                    .map_err(|e| loggable!(CAT, "shmringsink: pool config: {}", e))?;
                conn.pool = Some((caps.clone(), core, pool.clone()));
                (pool, max)
            }
        };
        query.add_allocation_pool(Some(&pool), size as u32, 0, max as u32);
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let capture = self.capture_ns(buffer);
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return Err(gst::FlowError::Flushing);
        };
        let written = self.write(st, buffer, capture);
        let reconfigure = std::mem::take(&mut st.reconfigure);
        drop(guard);
        // Outside the lock: upstream may answer by asking for our pool at once.
        if reconfigure {
            log!(
                CAT,
                Info,
                &*self.obj(),
                "a ring to write into: upstream chooses its buffers again"
            );
            let _ = self
                .obj()
                .sink_pad()
                .push_event(gst::event::Reconfigure::new());
        }
        match written? {
            Written::Committed => Ok(gst::FlowSuccess::Ok),
            Written::Dropped { why, waited, said } => {
                self.dropped(buffer, &why, waited, said);
                Ok(gst::FlowSuccess::Ok)
            }
        }
    }
}

/// What became of a buffer.
enum Written {
    Committed,
    /// Dropped (`why`), after waiting `waited` for room; `said`: said on the bus
    /// already (no ring or no consumer).
    Dropped {
        why: String,
        waited: Duration,
        said: bool,
    },
}

impl Written {
    /// Dropped because the ring refused it (`e`: full, reset, its consumer gone
    /// while waiting), after waiting as `policy` says.
    fn refused(e: &Error, policy: FullPolicy) -> Written {
        Written::Dropped {
            why: e.to_string(),
            waited: match (e, policy) {
                (Error::Abandoned { .. }, _) => Duration::ZERO,
                (_, FullPolicy::Block(t)) => t,
                (_, FullPolicy::Fail) => Duration::ZERO,
            },
            said: false,
        }
    }
}

impl ShmRingSink {
    /// Writes `buffer` into the ring (in place if it is one of our pool's
    /// reservations, else one copy), or drops it.
    fn write(
        &self,
        st: &mut Started,
        buffer: &gst::Buffer,
        capture: u64,
    ) -> Result<Written, gst::FlowError> {
        let Some(input) = st.input.clone() else {
            return Err(gst::FlowError::NotNegotiated);
        };
        // Every buffer takes a number, written or not: a dropped one is a gap the
        // consumer sees.
        let sequence = st.sequence;
        st.sequence += 1;
        let stream = st.settings.stream;
        if !self.ready(st)? {
            return Ok(Written::Dropped {
                why: "no ring or no consumer".into(),
                waited: Duration::ZERO,
                said: true,
            });
        }
        let conn = st.conn.as_mut().expect("ready");
        let size = buffer.size();
        let pts = buffer.pts().map(|t| t.nseconds()).unwrap_or(0);
        let hd = match input.header(
            size,
            buffer.meta::<gst_video::VideoMeta>().as_deref(),
            pts,
            sequence,
        ) {
            Ok(h) => h,
            Err(e) => {
                post!(
                    self.obj(),
                    Error,
                    gst::StreamError::Format,
                    "shmringsink: {}",
                    e
                );
                return Err(gst::FlowError::Error);
            }
        };
        let meta = Meta {
            stream,
            kind: input.kind(),
            timestamp_ns: capture,
            flags: 0,
        };
        let policy = conn.producer.policy();
        // In place: the buffer is one of our pool's reservations, and nobody else
        // holds it (after the commit the ring's consumer owns those bytes).
        if let Some((_, core, _)) = conn.pool.as_ref() {
            if buffer.n_memory() == 1 && buffer.is_writable() {
                let mem = buffer.peek_memory(0);
                if let Ok(map) = mem.map_readable() {
                    match core.commit(map.as_ptr(), map.len(), &hd, meta) {
                        Ok(true) => {
                            self.counters.committed.fetch_add(1, Ordering::Relaxed);
                            self.counters.in_place.fetch_add(1, Ordering::Relaxed);
                            return Ok(Written::Committed);
                        }
                        // The ring refused this buffer's reservation when upstream
                        // took it (and the producer waited then): dropped, not
                        // reserved (and waited for) a second time.
                        Ok(false) if core.refused(map.as_ptr()) => {
                            return Ok(Written::Dropped {
                                why: "the ring was full when upstream took this buffer".into(),
                                waited: match policy {
                                    FullPolicy::Block(t) => t,
                                    FullPolicy::Fail => Duration::ZERO,
                                },
                                said: false,
                            });
                        }
                        Ok(false) => {}
                        Err(e) if is_drop(&e) => return Ok(Written::refused(&e, FullPolicy::Fail)),
                        Err(e) => {
                            post!(
                                self.obj(),
                                Error,
                                gst::ResourceError::Write,
                                "shmringsink: {}",
                                e
                            );
                            return Err(gst::FlowError::Error);
                        }
                    }
                }
            }
        }
        // One copy.
        let r = match conn.producer.reserve_raw(MEDIA_HEADER_SIZE + size, policy) {
            Ok(r) => r,
            Err(e) if is_drop(&e) => return Ok(Written::refused(&e, policy)),
            Err(Error::TooLarge { len, max, .. }) => {
                self.too_large(st, &input, len, max);
                return Err(gst::FlowError::Error);
            }
            Err(e) => {
                post!(
                    self.obj(),
                    Error,
                    gst::ResourceError::Write,
                    "shmringsink: {}",
                    e
                );
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
            conn.producer.abort_raw();
            post!(
                self.obj(),
                Error,
                gst::ResourceError::Read,
                "shmringsink: cannot map buffer"
            );
            return Err(gst::FlowError::Error);
        }
        match conn.producer.commit_raw(MEDIA_HEADER_SIZE + size, meta) {
            Ok(()) => {
                self.counters.committed.fetch_add(1, Ordering::Relaxed);
                self.counters.copies.fetch_add(1, Ordering::Relaxed);
                Ok(Written::Committed)
            }
            Err(e @ Error::Abandoned { .. }) => Ok(Written::refused(&e, policy)),
            Err(e) => {
                post!(
                    self.obj(),
                    Error,
                    gst::ResourceError::Write,
                    "shmringsink: {}",
                    e
                );
                Err(gst::FlowError::Error)
            }
        }
    }

    /// The ring refused a record of `len` bytes (it takes `max` at most): an
    /// error saying what capacity the ring needs, and a notice in the ring, so
    /// that its consumer says so too instead of waiting for records that never
    /// come.
    fn too_large(&self, st: &mut Started, input: &Input, len: u64, max: u64) {
        let ring = st.settings.location.describe();
        let what = match input {
            Input::Video { info, .. } => format!(
                "{}x{} {} frames",
                info.width(),
                info.height(),
                info.format().to_str()
            ),
            Input::Audio { .. } => "audio buffers".into(),
        };
        post!(
            self.obj(),
            Error,
            gst::ResourceError::NoSpaceLeft,
            "shmringsink: ring {ring} takes records of at most {max} bytes, and these {what} need {len}: {}",
            crate::ring::capacity_advice(len)
        );
        let notice = crate::notice::TooLarge {
            kind: input.kind(),
            len,
            max,
        };
        if let Some(conn) = st.conn.as_mut() {
            let sent = conn.producer.send(
                &notice.to_bytes(),
                crate::notice::TooLarge::meta(st.settings.stream),
            );
            if let Err(e) = sent {
                log!(
                    CAT,
                    Warning,
                    &*self.obj(),
                    "the consumer could not be told: {e}"
                );
            }
        }
    }
}
