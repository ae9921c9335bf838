//! The source's implementation.
//!
//! Buffers wrap ring frames in place: each output `GstMemory` holds a [`Held`]
//! frame that releases itself when the last reference drops, on whatever thread
//! that happens. The consumer is not `Sync`, so a release takes the consumer's lock
//! if it is free, and otherwise leaves the frame's number in a bounded lock-free
//! queue that the reading thread empties before every read and after every wait
//! (waits are short, [`POLL`], while releases keep arriving, [`POLL_IDLE`]
//! otherwise). The queue holds as many entries as the ring has claim
//! log entries, more than the frames that can ever be outstanding, so a release
//! never allocates and never fails.
//!
//! The consumer is the ring's own (mode `consumer`) or a tethered one beside it
//! (mode `tethered`); both hand out frames in place. Mode `tap` reads through a
//! read-only [`Tap`] instead: each record taken is copied once, and that copy
//! becomes the buffer's memory (kept for the next copy once downstream frees it);
//! records the tap lost make the next buffer DISCONT.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;
use shmring::media::{kind, MediaHeader};
use shmring::{Consumer, ConsumerOptions, Error, Meta, RawFrame, Segment, Tap, TapOptions};

use crate::lock;
use crate::media::{output_for, same_shape, supported_caps, Output};
use crate::ring::{self, Location};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringsrc",
        gst::DebugColorFlags::empty(),
        Some("shmring source"),
    )
});

/// Longest the reading thread waits for a record when downstream threads have
/// just been queueing releases, before it looks at the queue again.
const POLL: Duration = Duration::from_millis(1);
/// Longest it waits otherwise, before it looks at the queue, flushing and
/// idleness again.
const POLL_IDLE: Duration = Duration::from_millis(20);
/// At most one malformed-header warning on the bus per this interval (a hostile
/// producer must not flood the bus); every one is counted and logged.
const WARN_INTERVAL: Duration = Duration::from_secs(1);
/// Streams whose sequence numbers are followed for gaps (DISCONT).
const TRACKED_STREAMS: usize = 16;

/// Which timestamp becomes a buffer's PTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcTimestampMode")]
pub enum TimestampMode {
    /// The record's capture time (the producer's monotonic clock), mapped onto this
    /// pipeline's clock.
    #[enum_value(
        name = "Capture: the producer's capture time, on this pipeline's clock",
        nick = "capture"
    )]
    Capture,
    /// When this element received the record.
    #[enum_value(name = "Arrival: when the record was received", nick = "arrival")]
    Arrival,
    /// The PTS the producer wrote in the media header, unchanged.
    #[enum_value(
        name = "Stream: the producer's own PTS from the media header, unchanged",
        nick = "stream"
    )]
    Stream,
}

/// Which records the source outputs, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcKind")]
pub enum KindFilter {
    /// Video and audio records.
    #[enum_value(name = "Any: video and audio records", nick = "any")]
    Any,
    /// Video records only.
    #[enum_value(name = "Video records only", nick = "video")]
    Video,
    /// Audio records only.
    #[enum_value(name = "Audio records only", nick = "audio")]
    Audio,
}

/// Which of the ring's readers the source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcMode")]
pub enum Mode {
    /// The ring's own consumer.
    #[enum_value(
        name = "Consumer: the ring's own consumer; buffers are its frames in place",
        nick = "consumer"
    )]
    Consumer,
    /// A tethered consumer beside the ring's own.
    #[enum_value(
        name = "Tethered: a further consumer beside the ring's own, which must be running; every record, frames in place, each held in the ring until this source releases it (one that releases nothing for the ring's consumer's stall limit is detached: an error)",
        nick = "tethered"
    )]
    Tethered,
    /// A read-only tap.
    #[enum_value(
        name = "Tap: read-only; copies of the records as they go by, never holding the ring; records overwritten while read are lost (counted in 'lost', next buffer DISCONT)",
        nick = "tap"
    )]
    Tap,
}

#[derive(Debug, Clone)]
struct Settings {
    location: Location,
    mode: Mode,
    stream: i64,
    kind: KindFilter,
    timestamp_mode: TimestampMode,
    max_held_percent: u32,
    eos_after_ms: u32,
    tether_stall_ms: u32,
}

/// The library's stall limit for tethered consumers, in ms.
fn default_tether_stall_ms() -> u32 {
    ConsumerOptions::default().tether_stall_limit.as_millis() as u32
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            location: Location::default(),
            mode: Mode::Consumer,
            stream: -1,
            kind: KindFilter::Any,
            timestamp_mode: TimestampMode::Capture,
            max_held_percent: 50,
            eos_after_ms: 0,
            tether_stall_ms: default_tether_stall_ms(),
        }
    }
}

/// The settings the reading thread uses, copied at start (no per-frame clone).
#[derive(Debug, Clone, Copy)]
struct Opts {
    stream: i64,
    kind: KindFilter,
    timestamp_mode: TimestampMode,
    eos_after_ms: u32,
}

/// The consumer and what downstream threads need to release frames.
struct Ring {
    consumer: Mutex<Consumer>,
    /// Frames released on other threads while the reading thread held the consumer.
    /// (Frames stay valid across a reset of the ring, so every release counts.)
    released: ArrayQueue<u64>,
    held_bytes: AtomicU64,
    held_frames: AtomicU64,
    seg: Arc<Segment>,
}

impl Ring {
    /// Releases frames queued by other threads (the caller holds the consumer);
    /// how many there were.
    fn drain(&self, c: &Consumer) -> usize {
        let mut n = 0;
        while let Some(seq) = self.released.pop() {
            n += 1;
            if let Err(e) = c.release_raw(seq) {
                gst::warning!(CAT, "release of frame {seq}: {e}");
            }
        }
        n
    }

    fn release(&self, seq: u64, len: usize) {
        self.held_bytes.fetch_sub(len as u64, Ordering::AcqRel);
        self.held_frames.fetch_sub(1, Ordering::AcqRel);
        match self.consumer.try_lock() {
            Ok(c) => {
                if let Err(e) = c.release_raw(seq) {
                    gst::warning!(CAT, "release of frame {seq}: {e}");
                }
                self.drain(&c);
            }
            Err(_) => {
                if self.released.push(seq).is_err() {
                    // Cannot happen: the queue holds more entries than frames can be
                    // outstanding. Should it, the frame stays held until a reset.
                    gst::error!(CAT, "release queue full; frame {seq} stays held");
                }
            }
        }
    }
}

/// A frame in the ring, owned by a `GstMemory`: released when that is freed.
struct Held {
    ring: Arc<Ring>,
    ptr: *const u8,
    len: usize,
    seq: u64,
}

// SAFETY: `ptr` points into the shared mapping that `ring.seg` keeps alive; the
// bytes are only read, and the release goes through the ring's lock or queue, so the
// frame may be dropped on any thread.
unsafe impl Send for Held {}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the frame is held (not released) while this value lives, so no
        // honest producer reuses its bytes; ptr/len come from the consumer, which
        // validated them to lie inside the mapping that `ring.seg` keeps mapped.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.ring.release(self.seq, self.len);
    }
}

/// Copies a tap keeps for reuse: a buffer's copy comes back here when downstream
/// frees it, so in the steady state a record is copied without an allocation.
const SPARE_COPIES: usize = 4;

/// A tap and what of its counters was already reported.
struct TapReader {
    tap: Tap,
    lost_seen: u64,
    filtered_seen: u64,
    spare: Arc<ArrayQueue<Vec<u8>>>,
}

/// A tap's copy of one record, given back to its tap's spares when dropped.
struct TapCopy {
    buf: Vec<u8>,
    home: Arc<ArrayQueue<Vec<u8>>>,
}

impl AsRef<[u8]> for TapCopy {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for TapCopy {
    fn drop(&mut self) {
        // A full queue drops the copy instead.
        let _ = self.home.push(std::mem::take(&mut self.buf));
    }
}

/// A record to output: a frame of the ring (held until released), or a tap's copy.
enum Rec<'a> {
    Held {
        c: &'a Consumer,
        ring: &'a Arc<Ring>,
        f: RawFrame,
    },
    Copied {
        buf: TapCopy,
        meta: Meta,
        seq: u64,
    },
}

impl Rec<'_> {
    fn meta_seq(&self) -> (Meta, u64) {
        match self {
            Rec::Held { f, .. } => (f.meta, f.seq),
            Rec::Copied { meta, seq, .. } => (*meta, *seq),
        }
    }

    fn payload(&self) -> &[u8] {
        match self {
            // SAFETY: ptr/len come from the consumer, validated to lie inside the
            // mapping the ring keeps alive; the frame is held until released.
            Rec::Held { f, .. } => unsafe { std::slice::from_raw_parts(f.ptr, f.len) },
            Rec::Copied { buf, .. } => buf.as_ref(),
        }
    }

    /// Not output: a held frame goes back to the ring at once.
    fn discard(self) {
        if let Rec::Held { c, f, .. } = self {
            let _ = c.release_raw(f.seq);
        }
    }
}

/// A buffer of one memory over `data[first..end]`.
fn buffer_over<T: AsRef<[u8]> + Send + 'static>(data: T, first: usize, end: usize) -> gst::Buffer {
    let mut mem = gst::Memory::from_slice(data);
    mem.get_mut()
        .expect("a new memory is writable")
        .resize(first..end);
    let mut b = gst::Buffer::new();
    b.get_mut()
        .expect("a new buffer is writable")
        .append_memory(mem);
    b
}

struct State {
    opts: Opts,
    /// Modes consumer and tethered.
    ring: Option<Arc<Ring>>,
    /// Mode tap.
    tap: Option<Box<TapReader>>,
    current: Option<(MediaHeader, Output)>,
    discont: bool,
    /// (kind, stream id, last sequence number) of each stream followed.
    streams: [(u32, u32, u64); TRACKED_STREAMS],
    tracked: usize,
    idle_since: Option<Instant>,
    last_reap: Option<Instant>,
    last_warn: Option<Instant>,
    held_limit: u64,
    frames_limit: u64,
    /// The previous video buffer's PTS: a video frame is taken to last as long as
    /// the interval before it (the header carries no frame rate).
    last_video_pts: Option<gst::ClockTime>,
    /// Resets of the ring the consumer made by itself, already reported.
    resets_seen: u64,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    copies: AtomicU64,
    malformed: AtomicU64,
    resets: AtomicU64,
    skipped: AtomicU64,
    lost: AtomicU64,
}

/// The `shmringsrc` element.
#[derive(Default)]
pub struct ShmRingSrc {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    flushing: AtomicBool,
    counters: Counters,
}

#[glib::object_subclass]
impl ObjectSubclass for ShmRingSrc {
    const NAME: &'static str = "GstShmRingSrc";
    type Type = super::ShmRingSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for ShmRingSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut props = ring::properties("consume", true);
            props.extend([
                glib::ParamSpecEnum::builder_with_default("mode", Mode::Consumer)
                    .nick("Mode")
                    .blurb("Which reader of the ring this source is: consumer (the ring's own), tethered (beside the ring's own consumer, every record in place) or tap (read-only copies, may lose records)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt64::builder("stream")
                    .nick("Stream")
                    .blurb("Output only records of this stream id; -1: every stream")
                    .minimum(-1)
                    .maximum(u32::MAX as i64)
                    .default_value(-1)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("kind", KindFilter::Any)
                    .nick("Kind")
                    .blurb("Output only records of this kind")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("timestamp-mode", TimestampMode::Capture)
                    .nick("Timestamp mode")
                    .blurb("Which time becomes each buffer's PTS")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("max-held")
                    .nick("Max held")
                    .blurb("Percent of the ring downstream may hold as wrapped frames; past it, frames are copied (counted in 'copies') and released at once, so a slow consumer cannot stall producers")
                    .minimum(0)
                    .maximum(100)
                    .default_value(50)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("eos-after")
                    .nick("EOS after")
                    .blurb("Milliseconds with no producer attached and no record after which the source sends EOS; 0: keep waiting")
                    .default_value(0)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("tether-stall-limit")
                    .nick("Tether stall limit")
                    .blurb("Mode consumer: milliseconds a tethered reader of the ring (mode=tethered, shmring record --tethered) may go without releasing a record before it is detached")
                    .minimum(1)
                    .default_value(default_tether_stall_ms())
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt64::builder("frames")
                    .nick("Frames")
                    .blurb("Buffers output")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("copies")
                    .nick("Copies")
                    .blurb("Buffers copied because downstream held max-held of the ring")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("malformed")
                    .nick("Malformed")
                    .blurb("Records dropped because their media header was malformed")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("resets")
                    .nick("Resets")
                    .blurb("Times the ring was reset after corruption")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("skipped")
                    .nick("Skipped")
                    .blurb("Records skipped by the stream and kind filters")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("lost")
                    .nick("Lost")
                    .blurb("Mode tap: records lost (overwritten while read, or passed by the producers); 0 in the other modes, which lose nothing")
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
            "mode" => s.mode = value.get().expect("type checked upstream"),
            "stream" => s.stream = value.get().expect("type checked upstream"),
            "kind" => s.kind = value.get().expect("type checked upstream"),
            "timestamp-mode" => s.timestamp_mode = value.get().expect("type checked upstream"),
            "max-held" => s.max_held_percent = value.get().expect("type checked upstream"),
            "eos-after" => s.eos_after_ms = value.get().expect("type checked upstream"),
            "tether-stall-limit" => s.tether_stall_ms = value.get().expect("type checked upstream"),
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
            "mode" => s.mode.to_value(),
            "stream" => s.stream.to_value(),
            "kind" => s.kind.to_value(),
            "timestamp-mode" => s.timestamp_mode.to_value(),
            "max-held" => s.max_held_percent.to_value(),
            "eos-after" => s.eos_after_ms.to_value(),
            "tether-stall-limit" => s.tether_stall_ms.to_value(),
            "frames" => c.frames.load(Ordering::Relaxed).to_value(),
            "copies" => c.copies.load(Ordering::Relaxed).to_value(),
            "malformed" => c.malformed.load(Ordering::Relaxed).to_value(),
            "resets" => c.resets.load(Ordering::Relaxed).to_value(),
            "skipped" => c.skipped.load(Ordering::Relaxed).to_value(),
            "lost" => c.lost.load(Ordering::Relaxed).to_value(),
            other => {
                gst::warning!(CAT, imp = self, "no property {other}");
                pspec.default_value().clone()
            }
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.set_live(true);
        obj.set_format(gst::Format::Time);
        obj.set_do_timestamp(false);
    }
}

impl GstObjectImpl for ShmRingSrc {}

impl ElementImpl for ShmRingSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "shmring source",
                "Source/Video/Audio",
                "Reads raw video and audio from a shmring ring, as its consumer or beside it (mode); buffers are the ring's frames in place, or copies in mode tap",
                "shmring",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &supported_caps(),
            )
            .expect("valid template")]
        });
        TEMPLATES.as_ref()
    }
}

impl BaseSrcImpl for ShmRingSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let what = s.location.describe();
        if s.location.create && s.mode != Mode::Consumer {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                (
                    "shmringsrc: create=true makes a new ring, which only its own consumer (mode=consumer) reads; modes tethered and tap read a ring that another element or process consumes"
                )
            ));
        }
        let (ring, tap, geo) = if s.mode == Mode::Tap {
            let ro = s.location.open_read_only().map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("shmringsrc: cannot open ring {} read-only: {}", what, e)
                )
            })?;
            let geo = *ro.geometry();
            let opts = TapOptions {
                kind: match s.kind {
                    KindFilter::Any => None,
                    KindFilter::Video => Some(kind::VIDEO),
                    KindFilter::Audio => Some(kind::AUDIO),
                },
                stream: u32::try_from(s.stream).ok(),
                ..Default::default()
            };
            let t = TapReader {
                tap: Tap::new(ro, opts),
                lost_seen: 0,
                filtered_seen: 0,
                spare: Arc::new(ArrayQueue::new(SPARE_COPIES)),
            };
            (None, Some(Box::new(t)), geo)
        } else {
            let seg = s
                .location
                .open_for("shmringsrc", gst::ResourceError::OpenRead)?;
            let opts = ConsumerOptions {
                tether_stall_limit: Duration::from_millis(s.tether_stall_ms as u64),
                ..Default::default()
            };
            let consumer = match s.mode {
                Mode::Tethered => Consumer::tethered(seg.clone(), opts),
                _ => Consumer::with_options(seg.clone(), opts),
            }
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("shmringsrc: cannot consume ring {}: {}", what, e)
                )
            })?;
            let geo = *seg.geometry();
            let ring = Arc::new(Ring {
                consumer: Mutex::new(consumer),
                released: ArrayQueue::new(geo.log_entries as usize),
                held_bytes: AtomicU64::new(0),
                held_frames: AtomicU64::new(0),
                seg,
            });
            (Some(ring), None, geo)
        };
        let log = geo.log_entries as u64;
        *lock(&self.state) = Some(State {
            opts: Opts {
                stream: s.stream,
                kind: s.kind,
                timestamp_mode: s.timestamp_mode,
                eos_after_ms: s.eos_after_ms,
            },
            held_limit: geo.capacity * s.max_held_percent as u64 / 100,
            // Frames downstream may hold, by count: half the claim log, so small
            // records cannot exhaust it either.
            frames_limit: log / 2,
            ring,
            tap,
            current: None,
            discont: true,
            streams: [(0, 0, 0); TRACKED_STREAMS],
            tracked: 0,
            idle_since: None,
            last_reap: None,
            last_warn: None,
            last_video_pts: None,
            resets_seen: 0,
        });
        self.flushing.store(false, Ordering::Release);
        gst::info!(CAT, imp = self, "reading ring {what} as {:?}", s.mode);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Frames still held downstream keep the ring (and its consumer) alive until
        // they are released.
        *lock(&self.state) = None;
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        // Caps come from the first record's media header (see `create`).
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
}

/// A copy of bytes `first..end` of a held frame.
fn rec_copy(f: RawFrame, first: usize, end: usize) -> gst::Buffer {
    // SAFETY: as in `Rec::payload`: the frame is held until the caller releases it.
    let payload = unsafe { std::slice::from_raw_parts(f.ptr, f.len) };
    gst::Buffer::from_slice(payload[first..end].to_vec())
}

/// What became of one record.
enum Got {
    Buffer(gst::Buffer, Option<gst::Caps>),
    Nothing,
}

impl ShmRingSrc {
    fn warn_malformed(&self, st: &mut State, what: &str) {
        self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        st.discont = true;
        gst::warning!(CAT, imp = self, "record dropped: {what}");
        let now = Instant::now();
        if st
            .last_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_INTERVAL)
        {
            st.last_warn = Some(now);
            gst::element_imp_warning!(
                self,
                gst::StreamError::Decode,
                (
                    "shmringsrc: record dropped: {} ({} malformed records so far)",
                    what,
                    self.counters.malformed.load(Ordering::Relaxed)
                )
            );
        }
    }

    /// Nothing arrived: with `eos-after`, is it time to end the stream (no producer
    /// attached for that long)?
    fn idle_ends(&self, st: &mut State, producers: u32, s: Opts) -> bool {
        if producers > 0 {
            st.idle_since = None;
            return false;
        }
        let now = Instant::now();
        let since = *st.idle_since.get_or_insert(now);
        let ends = now.duration_since(since) >= Duration::from_millis(s.eos_after_ms as u64);
        if ends {
            gst::info!(
                CAT,
                imp = self,
                "no producer for {} ms: EOS",
                s.eos_after_ms
            );
        }
        ends
    }

    /// Sets new caps (if any) and hands `buffer` downstream.
    fn output(
        &self,
        buffer: gst::Buffer,
        caps: Option<gst::Caps>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        if let Some(caps) = caps {
            gst::info!(CAT, imp = self, "caps {caps}");
            if self.obj().set_caps(&caps).is_err() {
                gst::element_imp_error!(
                    self,
                    gst::CoreError::Negotiation,
                    ("shmringsrc: downstream refused caps {}", caps)
                );
                return Err(gst::FlowError::NotNegotiated);
            }
        }
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        Ok(CreateSuccess::NewBuffer(buffer))
    }

    /// Mode tap: the next record taken, copied; records lost since the previous
    /// one make it DISCONT.
    fn create_tap(
        &self,
        st: &mut State,
        t: &mut TapReader,
        s: Opts,
    ) -> Result<CreateSuccess, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            // The copy becomes the buffer's memory, and comes back when it is freed.
            let mut buf = t.spare.pop().unwrap_or_default();
            let got = t.tap.next_into(&mut buf, Some(POLL_IDLE));
            let ts = t.tap.stats();
            if ts.lost != t.lost_seen {
                self.counters
                    .lost
                    .fetch_add(ts.lost - t.lost_seen, Ordering::Relaxed);
                t.lost_seen = ts.lost;
                st.discont = true;
            }
            self.counters
                .skipped
                .fetch_add(ts.filtered - t.filtered_seen, Ordering::Relaxed);
            t.filtered_seen = ts.filtered;
            match got {
                Ok(Some(f)) => {
                    st.idle_since = None;
                    let buf = TapCopy {
                        buf,
                        home: t.spare.clone(),
                    };
                    let rec = Rec::Copied {
                        buf,
                        meta: f.meta,
                        seq: f.seq,
                    };
                    match self.handle(st, rec, s)? {
                        Got::Nothing => continue,
                        Got::Buffer(buffer, caps) => return self.output(buffer, caps),
                    }
                }
                Ok(None) => {
                    let _ = t.spare.push(buf);
                    if s.eos_after_ms > 0
                        && self.idle_ends(st, t.tap.segment().stats().producers, s)
                    {
                        return Err(gst::FlowError::Eos);
                    }
                }
                Err(e) => {
                    gst::element_imp_error!(self, gst::ResourceError::Read, ("shmringsrc: {}", e));
                    return Err(gst::FlowError::Error);
                }
            }
        }
    }

    /// Is this record's sequence number the one after the last of its stream (the
    /// records of one kind and stream id: video and audio are numbered apart)?
    fn in_sequence(st: &mut State, meta: Meta, seq: u64) -> bool {
        let n = st.tracked;
        let key = (meta.kind, meta.stream);
        if let Some(e) = st.streams[..n].iter_mut().find(|e| (e.0, e.1) == key) {
            let ok = e.2.wrapping_add(1) == seq;
            e.2 = seq;
            return ok;
        }
        if n < TRACKED_STREAMS {
            st.streams[n] = (key.0, key.1, seq);
            st.tracked += 1;
        }
        true
    }

    fn pts(&self, mode: TimestampMode, capture_ns: u64, stream_pts: u64) -> Option<gst::ClockTime> {
        if mode == TimestampMode::Stream {
            return Some(gst::ClockTime::from_nseconds(stream_pts));
        }
        let obj = self.obj();
        let clock = obj.clock()?;
        let base = obj.base_time()?;
        let now = clock.time();
        let at = if mode == TimestampMode::Capture && capture_ns != 0 {
            // Move the capture time from the monotonic clock onto the pipeline's.
            let age = shmring::now_ns().saturating_sub(capture_ns);
            now.nseconds().saturating_sub(age)
        } else {
            now.nseconds()
        };
        Some(gst::ClockTime::from_nseconds(
            at.saturating_sub(base.nseconds()),
        ))
    }

    fn handle(&self, st: &mut State, rec: Rec<'_>, s: Opts) -> Result<Got, gst::FlowError> {
        let (meta, seq) = rec.meta_seq();
        let wanted_stream = s.stream < 0 || s.stream as u64 == meta.stream as u64;
        let wanted_kind = match s.kind {
            KindFilter::Any => meta.kind == kind::VIDEO || meta.kind == kind::AUDIO,
            KindFilter::Video => meta.kind == kind::VIDEO,
            KindFilter::Audio => meta.kind == kind::AUDIO,
        };
        if !wanted_stream || !wanted_kind {
            rec.discard();
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(Got::Nothing);
        }
        let hd = match MediaHeader::parse_for(meta.kind, rec.payload()) {
            Ok(h) => h,
            Err(e) => {
                rec.discard();
                self.warn_malformed(st, &format!("stream {} record {seq}: {e}", meta.stream));
                return Ok(Got::Nothing);
            }
        };
        let mut new_caps = None;
        let changed = st.current.as_ref().is_none_or(|(h, _)| !same_shape(h, &hd));
        if changed {
            match output_for(&hd) {
                Ok(o) => {
                    new_caps = Some(o.caps.clone());
                    st.current = Some((hd, o));
                }
                Err(e) => {
                    rec.discard();
                    self.warn_malformed(st, &format!("stream {}: {e}", meta.stream));
                    return Ok(Got::Nothing);
                }
            }
        }
        let (_, out) = st.current.as_ref().expect("set above");
        let (first, end) = out.span;
        let mut buffer = match rec {
            // A tap's copy is the buffer's memory.
            Rec::Copied { buf, .. } => buffer_over(buf, first, end),
            Rec::Held { c, ring, f } => {
                let wrap = ring.held_bytes.load(Ordering::Acquire) + f.len as u64 <= st.held_limit
                    && ring.held_frames.load(Ordering::Acquire) < st.frames_limit;
                if wrap {
                    ring.held_bytes.fetch_add(f.len as u64, Ordering::AcqRel);
                    ring.held_frames.fetch_add(1, Ordering::AcqRel);
                    let held = Held {
                        ring: ring.clone(),
                        ptr: f.ptr,
                        len: f.len,
                        seq: f.seq,
                    };
                    buffer_over(held, first, end)
                } else {
                    let copy = rec_copy(f, first, end);
                    let _ = c.release_raw(f.seq);
                    self.counters.copies.fetch_add(1, Ordering::Relaxed);
                    copy
                }
            }
        };
        let gap = !Self::in_sequence(st, meta, hd.sequence);
        let (_, out) = st.current.as_ref().expect("set above");
        {
            let b = buffer.get_mut().expect("a new buffer is writable");
            let pts = self.pts(s.timestamp_mode, meta.timestamp_ns, hd.pts_ns);
            b.set_pts(pts);
            if hd.format.is_audio() && out.rate > 0 {
                b.set_duration(
                    gst::ClockTime::SECOND.mul_div_floor(hd.samples as u64, out.rate as u64),
                );
            } else if hd.format.is_video() {
                let previous = std::mem::replace(&mut st.last_video_pts, pts);
                if let (Some(now), Some(before)) = (pts, previous) {
                    b.set_duration(now.checked_sub(before));
                }
            }
            if st.discont || gap {
                b.set_flags(gst::BufferFlags::DISCONT);
                st.discont = false;
            }
            if out.video_meta {
                let vf = crate::media::video_format(hd.format)
                    .expect("output_for accepted a video format");
                let _ = gst_video::VideoMeta::add_full(
                    b,
                    gst_video::VideoFrameFlags::empty(),
                    vf,
                    hd.width,
                    hd.height,
                    &out.offsets[..out.planes],
                    &out.strides[..out.planes],
                )
                .map_err(|e| gst::warning!(CAT, imp = self, "video meta: {e}"));
            }
        }
        Ok(Got::Buffer(buffer, new_caps))
    }
}

impl PushSrcImpl for ShmRingSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let Some(st) = guard.as_mut() else {
            return Err(gst::FlowError::Flushing);
        };
        let s = st.opts;
        if let Some(mut t) = st.tap.take() {
            let r = self.create_tap(st, &mut t, s);
            st.tap = Some(t);
            return r;
        }
        let Some(ring) = st.ring.clone() else {
            return Err(gst::FlowError::Flushing);
        };
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            let c = lock(&ring.consumer);
            // Releases arrived while we waited: more may come during the next
            // wait, and producers may be waiting for that space, so look again
            // soon. Otherwise nothing suggests they will.
            let wait = if ring.drain(&c) > 0 { POLL } else { POLL_IDLE };
            let next = c.next_raw(Some(wait));
            let resets = c.resets();
            if resets != st.resets_seen {
                self.counters
                    .resets
                    .fetch_add(resets - st.resets_seen, Ordering::Relaxed);
                st.resets_seen = resets;
                st.discont = true;
                gst::element_imp_warning!(
                    self,
                    gst::StreamError::Failed,
                    (
                        "shmringsrc: ring corrupted ({}); reset, continuing",
                        c.health().last_corruption.unwrap_or("unknown")
                    )
                );
            }
            match next {
                Ok(Some(f)) => {
                    st.idle_since = None;
                    let rec = Rec::Held {
                        c: &c,
                        ring: &ring,
                        f,
                    };
                    match self.handle(st, rec, s)? {
                        Got::Nothing => continue,
                        Got::Buffer(buffer, caps) => {
                            drop(c);
                            return self.output(buffer, caps);
                        }
                    }
                }
                Ok(None) => {
                    if s.eos_after_ms == 0 {
                        continue;
                    }
                    let now = Instant::now();
                    if st
                        .last_reap
                        .is_none_or(|t| now.duration_since(t) >= POLL * 10)
                    {
                        st.last_reap = Some(now);
                        c.reap();
                    }
                    drop(c);
                    if self.idle_ends(st, ring.seg.stats().producers, s) {
                        return Err(gst::FlowError::Eos);
                    }
                }
                Err(Error::Corrupt { .. }) => {
                    // The consumer resets a scribbled ring by itself, keeping the
                    // frames held downstream valid; it reports corruption only while
                    // frames from before an earlier reset are still held: their
                    // releases let it reset again.
                    drop(c);
                    std::thread::sleep(POLL);
                }
                Err(Error::TooManyHeld { .. }) => {
                    drop(c);
                    std::thread::sleep(POLL);
                }
                Err(e) => {
                    drop(c);
                    gst::element_imp_error!(self, gst::ResourceError::Read, ("shmringsrc: {}", e));
                    return Err(gst::FlowError::Error);
                }
            }
        }
    }
}
