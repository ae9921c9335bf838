//! Reading a ring for the source elements (`shmringsrc`, one output;
//! `shmringdemux`, a pad per stream and kind): the ring's consumer, a tethered
//! consumer beside it, or a read-only tap; media headers read once and checked;
//! sequence numbers followed per stream and kind; capture times mapped onto the
//! pipeline's clock; and the choice, per frame, between handing downstream the
//! ring's memory and a copy.
//!
//! **Frames in place.** A buffer's memory holds a [`Held`] frame (the core's
//! [`SharedFrame`]) that releases itself when the last reference drops, on
//! whatever thread that happens, without waiting for the reading thread: the
//! core queues the release if the reading thread is in a receive and nudges that
//! receive, which gives the space back at once (see `shmring::SharedConsumer`).
//!
//! **Copy or not.** The ring gives space back in order: a frame held downstream
//! keeps every later record's space from being reused, so an element that keeps
//! frames for long (an encoder's look-ahead: `x264enc` keeps about 50 by default)
//! would make the producers wait for space it will only give back once it has
//! *more* frames: a stall. A buffer cannot change its memory once handed out, so
//! the choice is made when it is: every buffer, wrapped or copied, reports when
//! downstream frees it, and the reader learns how much ring traffic passes while
//! downstream holds a buffer (its *hold depth*). A frame is handed out in place
//! only while that depth plus the frame fits the `max-held` share of the ring,
//! and while the ring pinned now (from the oldest frame still held to the newest
//! record read) leaves room for it; otherwise it is copied and released at once
//! (and the element says so on the bus, once). Until the first buffer comes back,
//! a pipeline with an encoder or a muxer downstream (an element classified
//! `Encoder` or `Muxer` on the raw-media path) gets copies: those are the elements
//! known to keep frames (a muxer keeps one stream's records while it waits for
//! another's, which may wait behind an encoder's look-ahead), and one wrapped
//! frame they kept would be enough to stall the ring.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use gst::prelude::*;
use shmring::media::{self, kind, MediaRecord};
use shmring::{
    Consumer, ConsumerOptions, Error, Filter, Meta, SharedConsumer, SharedFrame, Tap, TapOptions,
};

use crate::ring::Location;

pub static CAT: std::sync::LazyLock<gst::DebugCategory> = std::sync::LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringreader",
        gst::DebugColorFlags::empty(),
        Some("shmring source elements: reading the ring"),
    )
});

/// How long the reading thread pauses before it reads again after the consumer
/// refused (frames from before a reset still held, or as many held as the claim
/// log tracks): releases downstream end that.
pub const POLL: Duration = Duration::from_millis(1);
/// Longest the reading thread waits for a record, before it looks at flushing
/// and idleness again. (Releases downstream reach the ring during the wait: the
/// core nudges it.)
pub const POLL_IDLE: Duration = Duration::from_millis(20);
/// At most one malformed-header warning on the bus per this interval (a hostile
/// producer must not flood the bus); every one is counted and logged.
const WARN_INTERVAL: Duration = Duration::from_secs(1);
/// Streams (id and kind) whose sequence numbers are followed.
const TRACKED_STREAMS: usize = 64;
/// Two steps back in one stream's sequence within this long: two producers write
/// that stream id.
const TWO_PRODUCERS_WINDOW: Duration = Duration::from_secs(2);
/// Copies a reader keeps for reuse (a copy comes back when downstream frees it).
const SPARE_COPIES: usize = 8;
/// Records older than this when read are a backlog, not live: their age says
/// nothing about the latency.
const LIVE_AGE: Duration = Duration::from_secs(2);
/// A read that waited at least this long found the ring empty: the record it
/// got is fresh (see [`Record`]).
const FRESH: Duration = Duration::from_micros(50);
/// How long the ring may stay nearly full, while downstream holds frames, before
/// the element warns that producers wait.
const STALL_WARN: Duration = Duration::from_secs(1);

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

/// Which of the ring's readers an element is.
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

use gst::glib;

/// Counters both source elements expose as properties.
#[derive(Default)]
pub struct Counters {
    pub frames: AtomicU64,
    pub copies: AtomicU64,
    pub malformed: AtomicU64,
    pub resets: AtomicU64,
    pub skipped: AtomicU64,
    pub lost: AtomicU64,
    pub missing: AtomicU64,
}

impl Counters {
    /// The value of a counter property, if `name` is one.
    pub fn property(&self, name: &str) -> Option<glib::Value> {
        let c = match name {
            "frames" => &self.frames,
            "copies" => &self.copies,
            "malformed" => &self.malformed,
            "resets" => &self.resets,
            "skipped" => &self.skipped,
            "lost" => &self.lost,
            "missing" => &self.missing,
            _ => return None,
        };
        Some(c.load(Ordering::Relaxed).to_value())
    }

    /// The counter properties (read-only), documented for gst-inspect-1.0.
    pub fn properties() -> Vec<glib::ParamSpec> {
        [
            ("frames", "Frames", "Buffers output"),
            ("copies", "Copies", "Buffers output as copies instead of the ring's memory, because downstream keeps frames longer than the ring can carry (see max-held) or is an encoder whose look-ahead was not measured yet"),
            ("malformed", "Malformed", "Records dropped because their media header was malformed"),
            ("resets", "Resets", "Times the ring was reset after corruption"),
            ("skipped", "Skipped", "Records not output: other streams or kinds than the filters take, or a kind downstream does not accept"),
            ("lost", "Lost", "Mode tap: records lost (overwritten while read, or passed by the producers); 0 in the other modes, which lose nothing"),
            ("missing", "Missing", "Records missing from their stream's numbering: dropped by their producer before they reached the ring (a full ring, no consumer; shmringsink's dropped). The next buffer is DISCONT; a QoS message and a warning (at most one a second) say so"),
        ]
        .into_iter()
        .map(|(name, nick, blurb)| {
            glib::ParamSpecUInt64::builder(name)
                .nick(nick)
                .blurb(blurb)
                .read_only()
                .build()
        })
        .collect()
    }
}

/// How long one output's downstream (a pad's) keeps buffers, learned from the
/// buffers it gives back. Each pad has its own: an audio encoder gives its input
/// back at once while a video encoder beside it keeps fifty frames.
///
/// What is learned holds for one set of caps (a *generation*): at a caps change an
/// encoder drains (gives back every frame it kept at once, which would teach a
/// hold far shorter than its look-ahead) and the frames change size (a depth
/// learned in bytes of small frames says nothing of large ones), so the lane
/// starts again: copies until a buffer of the new caps comes back, and buffers of
/// the old caps teach nothing.
#[derive(Default)]
pub struct Lane {
    /// Largest ring traffic (bytes) seen to pass while downstream held a buffer of
    /// this generation, decaying slowly (1/64 per buffer returned).
    depth: AtomicU64,
    /// A buffer of this generation came back.
    returned: AtomicBool,
    generation: AtomicU64,
}

impl Lane {
    /// A buffer of generation `generation`, output when `at` bytes had been read,
    /// came back, `now` read since.
    fn returned(&self, generation: u64, at: u64, now: u64) {
        // Relaxed: statistics guiding a choice, never memory safety. (A buffer
        // returning while the caps change may teach the new generation once: the
        // next returns correct it.)
        if generation != self.generation.load(Ordering::Relaxed) {
            return;
        }
        let span = now.saturating_sub(at);
        let _ = self
            .depth
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(span.max(d - d / 64))
            });
        self.returned.store(true, Ordering::Relaxed);
    }

    /// New caps: forget what was learned (see the type's documentation).
    pub fn restart(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.returned.store(false, Ordering::Relaxed);
        self.depth.store(0, Ordering::Relaxed);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Downstream's hold depth in bytes, if a buffer came back yet.
    pub fn depth(&self) -> Option<u64> {
        self.returned
            .load(Ordering::Relaxed)
            .then(|| self.depth.load(Ordering::Relaxed))
    }
}

/// The ring's side of what downstream holds, shared with every buffer handed out.
pub struct Tracker {
    /// Bytes of records read from the ring so far (every record, output or not).
    consumed: AtomicU64,
    /// Frames handed out in place and not yet returned, and their bytes.
    held_frames: AtomicU64,
    held_bytes: AtomicU64,
    /// One flag per place in the reader's list of frames held in place: set when
    /// that frame came back.
    back: Box<[AtomicBool]>,
}

impl Tracker {
    fn new(places: usize) -> Tracker {
        Tracker {
            consumed: AtomicU64::new(0),
            held_frames: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            back: (0..places).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// A buffer of `lane`'s `generation` output when `at` bytes had been read
    /// came back.
    fn returned(&self, lane: &Lane, generation: u64, at: u64) {
        lane.returned(generation, at, self.consumed.load(Ordering::Relaxed));
    }
}

/// A frame in the ring, owned by a `GstMemory`: released when that is freed.
struct Held {
    frame: SharedFrame,
    tracker: Arc<Tracker>,
    lane: Arc<Lane>,
    generation: u64,
    at: u64,
    /// Its place in the reader's list of frames held in place.
    place: usize,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        self.frame.payload()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.tracker.held_frames.fetch_sub(1, Ordering::Relaxed);
        self.tracker
            .held_bytes
            .fetch_sub(self.frame.len() as u64, Ordering::Relaxed);
        self.tracker.returned(&self.lane, self.generation, self.at);
        // Release: the reader that sees the flag may reuse the place.
        self.tracker.back[self.place].store(true, Ordering::Release);
        // The frame goes back to the ring as the field drops, after this.
    }
}

/// A copy of a record, owned by a `GstMemory`: given back to the reader's spares
/// when freed (so in the steady state a copy allocates nothing).
struct Copied {
    buf: Vec<u8>,
    home: Arc<ArrayQueue<Vec<u8>>>,
    tracker: Arc<Tracker>,
    lane: Arc<Lane>,
    generation: u64,
    at: u64,
}

impl AsRef<[u8]> for Copied {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.tracker.returned(&self.lane, self.generation, self.at);
        // A full queue drops the copy instead.
        let _ = self.home.push(std::mem::take(&mut self.buf));
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

/// Where a record's bytes are.
enum Data {
    /// A frame of the ring, held until released.
    Frame(SharedFrame),
    /// A tap's copy.
    Copy(Vec<u8>),
}

/// One media record read from the ring.
pub struct Record {
    pub meta: Meta,
    pub media: MediaRecord,
    /// Something was lost before it: a gap in its stream's sequence, a reset of
    /// the ring, records a tap lost, or its stream starting (again).
    pub discont: bool,
    /// This record made it plain that two producers write its stream id (said
    /// once per stream).
    pub second_producer: bool,
    /// It arrived while the reader waited for it (it did not wait in the ring for
    /// the reader): its age at output says how late producers deliver.
    fresh: bool,
    data: Data,
    at: u64,
}

impl Record {
    /// See the field.
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    fn payload(&self) -> &[u8] {
        match &self.data {
            Data::Frame(f) => f.payload(),
            Data::Copy(buf) => buf,
        }
    }
}

/// What the reader makes of the settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub location: Location,
    pub mode: Mode,
    /// Only this stream id (records of other ids are released unread).
    pub stream: Option<u32>,
    /// Mode tap: only this kind (the tap skips the others without copying them).
    pub tap_kind: Option<u32>,
    pub timestamp_mode: TimestampMode,
    pub max_held_percent: u32,
    pub tether_stall_ms: u32,
}

/// The library's stall limit for tethered consumers, in ms.
fn default_tether_stall_ms() -> u32 {
    ConsumerOptions::default().tether_stall_limit.as_millis() as u32
}

/// The settings both source elements share: the ring's (see [`crate::ring`]) and
/// the reader's, with their properties.
#[derive(Debug, Clone)]
pub struct ReaderSettings {
    pub location: Location,
    pub mode: Mode,
    pub timestamp_mode: TimestampMode,
    pub max_held_percent: u32,
    pub eos_after_ms: u32,
    pub tether_stall_ms: u32,
    pub keep_running: bool,
}

impl Default for ReaderSettings {
    fn default() -> Self {
        ReaderSettings {
            location: Location::default(),
            mode: Mode::Consumer,
            timestamp_mode: TimestampMode::Capture,
            max_held_percent: 50,
            eos_after_ms: 0,
            tether_stall_ms: default_tether_stall_ms(),
            keep_running: false,
        }
    }
}

impl ReaderSettings {
    /// The ring's and the reader's properties, documented for gst-inspect-1.0.
    pub fn properties() -> Vec<glib::ParamSpec> {
        let mut props = crate::ring::properties("consume", "", true);
        props.extend([
            glib::ParamSpecEnum::builder_with_default("mode", Mode::Consumer)
                .nick("Mode")
                .blurb("Which reader of the ring this source is: consumer (the ring's own), tethered (beside the ring's own consumer, every record in place) or tap (read-only copies, may lose records)")
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder_with_default("timestamp-mode", TimestampMode::Capture)
                .nick("Timestamp mode")
                .blurb("Which time becomes each buffer's PTS. capture: records captured before the pipeline started (a backlog after a restart) keep their spacing, the timeline shifted by the oldest one's age")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-held")
                .nick("Max held")
                .blurb("Percent of the ring downstream may keep pinned by frames in place. The source measures how much ring traffic passes while downstream keeps a frame; a frame that would pin more than this share is copied (counted in 'copies', said once on the bus) and released at once, so producers never wait for it. Until that is measured, an encoder downstream (look-ahead) gets copies. 0: copy every frame")
                .minimum(0)
                .maximum(100)
                .default_value(50)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("eos-after")
                .nick("EOS after")
                .blurb("Milliseconds with no producer attached and no record, counted from the last record or producer (not from the start: a source started before its producers waits for them), after which the source sends EOS; 0: keep waiting. Producers also end their streams themselves (an end-of-stream record: shmringsink at EOS)")
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
            glib::ParamSpecBoolean::builder("keep-running")
                .nick("Keep running")
                .blurb("Participants come and go: a producer's end of stream does not end this element's output. shmringsrc then sends no EOS when every stream it output has ended, and shmringdemux sends none on a participant's pads: a participant who comes back (same stream id) continues on them, its first buffer DISCONT; eos-after, or an EOS sent to the pipeline (gst-launch-1.0 -e), ends it. false: shmringsrc sends EOS once every stream it output has ended; shmringdemux sends EOS on a participant's pads when it ends its streams, and one who comes back gets new pads (video_ID_2, audio_ID_2, then _3, ...)")
                .default_value(false)
                .mutable_ready()
                .build(),
        ]);
        props
    }

    /// Sets one of [`ReaderSettings::properties`]; false if `name` is none.
    pub fn set_property(&mut self, name: &str, value: &glib::Value) -> bool {
        const CHECKED: &str = "type checked upstream";
        if self.location.set_property(name, value) {
            return true;
        }
        match name {
            "mode" => self.mode = value.get().expect(CHECKED),
            "timestamp-mode" => self.timestamp_mode = value.get().expect(CHECKED),
            "max-held" => self.max_held_percent = value.get().expect(CHECKED),
            "eos-after" => self.eos_after_ms = value.get().expect(CHECKED),
            "tether-stall-limit" => self.tether_stall_ms = value.get().expect(CHECKED),
            "keep-running" => self.keep_running = value.get().expect(CHECKED),
            _ => return false,
        }
        true
    }

    /// The value of one of [`ReaderSettings::properties`].
    pub fn property(&self, name: &str) -> Option<glib::Value> {
        if let Some(v) = self.location.property(name) {
            return Some(v);
        }
        Some(match name {
            "mode" => self.mode.to_value(),
            "timestamp-mode" => self.timestamp_mode.to_value(),
            "max-held" => self.max_held_percent.to_value(),
            "eos-after" => self.eos_after_ms.to_value(),
            "tether-stall-limit" => self.tether_stall_ms.to_value(),
            "keep-running" => self.keep_running.to_value(),
            _ => return None,
        })
    }

    /// What the reader is opened with.
    pub fn options(&self, stream: Option<u32>, tap_kind: Option<u32>) -> Options {
        Options {
            location: self.location.clone(),
            mode: self.mode,
            stream,
            tap_kind,
            timestamp_mode: self.timestamp_mode,
            max_held_percent: self.max_held_percent,
            tether_stall_ms: self.tether_stall_ms,
        }
    }

    /// `eos-after`, if set.
    pub fn eos_after(&self) -> Option<Duration> {
        (self.eos_after_ms > 0).then(|| Duration::from_millis(self.eos_after_ms as u64))
    }
}

/// A tap and what of its counters was already reported.
struct TapReader {
    tap: Tap,
    lost_seen: u64,
    filtered_seen: u64,
}

/// One stream (id and kind) whose sequence is followed.
#[derive(Clone, Copy)]
struct SeqTrack {
    kind: u32,
    stream: u32,
    last: Option<u64>,
    back_at: Option<Instant>,
    warned: bool,
    /// Its producer ended it: records after that start it again.
    ended: bool,
}

/// Reads one ring for one element.
pub struct Reader {
    ring: Option<SharedConsumer>,
    tap: Option<TapReader>,
    opts: Options,
    pub tracker: Arc<Tracker>,
    counters: Arc<Counters>,
    spare: Arc<ArrayQueue<Vec<u8>>>,
    capacity: u64,
    /// Bytes of the ring downstream may hold in place (`max-held`).
    budget: u64,
    /// Frames downstream may hold in place: half the claim log, so small records
    /// cannot exhaust it either.
    frames_limit: u64,
    /// Frames held in place, oldest first: (place in `tracker.back`, bytes read
    /// when it was output).
    outstanding: std::collections::VecDeque<(usize, u64)>,
    next_place: usize,
    resets_seen: u64,
    last_reap: Option<Instant>,
    last_warn: Option<Instant>,
    /// The last warning about records missing or lost, and those counted then.
    last_loss_warn: Option<Instant>,
    losses_warned: u64,
    discont: bool,
    seqs: Vec<SeqTrack>,
    /// Shift of the timeline (ns) so that a backlog captured before the pipeline
    /// started keeps its spacing instead of piling up at 0.
    offset_ns: u64,
    /// Last record, or last time a producer was seen attached.
    activity: Option<Instant>,
    /// Largest age (capture to output) of a live record, in ns.
    pub max_age_ns: u64,
    warned_copy: bool,
    full_since: Option<Instant>,
    warned_stall: bool,
}

/// Why reading stopped (already worded for the bus).
pub enum ReadError {
    /// The ring failed.
    Failed(String),
    /// A producer's records do not fit the ring (a sink's notice).
    TooLarge(String),
}

impl ReadError {
    /// Posts the error from `el` (its factory's name first).
    pub fn post(&self, el: &gst::Element) {
        let who = el
            .factory()
            .map(|f| f.name().to_string())
            .unwrap_or_default();
        match self {
            ReadError::Failed(e) => post!(el, Error, gst::ResourceError::Read, "{who}: {e}"),
            ReadError::TooLarge(e) => {
                post!(el, Error, gst::ResourceError::NoSpaceLeft, "{who}: {e}")
            }
        }
    }
}

impl Reader {
    /// Opens the ring as `opts.mode` says. The error is the element error to post.
    pub fn open(
        el: &gst::Element,
        element: &str,
        opts: Options,
        counters: Arc<Counters>,
    ) -> Result<Reader, gst::ErrorMessage> {
        let what = opts.location.describe();
        if opts.location.create && opts.mode != Mode::Consumer {
            return Err(error_msg!(
                gst::ResourceError::Settings,
                "{}: create=true makes a new ring, which only its own consumer (mode=consumer) reads; modes tethered and tap read a ring that another element or process consumes",
                element
            ));
        }
        let (ring, tap, geo) = if opts.mode == Mode::Tap {
            let ro = opts.location.open_read_only().map_err(|e| {
                error_msg!(
                    gst::ResourceError::OpenRead,
                    "{}: cannot open ring {} read-only: {}",
                    element,
                    what,
                    e
                )
            })?;
            let geo = *ro.geometry();
            let topts = TapOptions {
                filter: Filter {
                    kind: opts.tap_kind,
                    stream: opts.stream,
                },
                ..Default::default()
            };
            let t = TapReader {
                tap: Tap::new(ro, topts),
                lost_seen: 0,
                filtered_seen: 0,
            };
            (None, Some(t), geo)
        } else {
            let seg = opts
                .location
                .open_for(el, element, gst::ResourceError::OpenRead)?;
            let copts = ConsumerOptions {
                tether_stall_limit: Duration::from_millis(opts.tether_stall_ms as u64),
                ..Default::default()
            };
            let consumer = match opts.mode {
                Mode::Tethered => Consumer::tethered(seg.clone(), copts),
                _ => Consumer::with_options(seg.clone(), copts),
            }
            .map_err(|e| {
                error_msg!(
                    gst::ResourceError::OpenRead,
                    "{}: cannot consume ring {}: {}",
                    element,
                    what,
                    e
                )
            })?;
            let geo = *seg.geometry();
            (Some(SharedConsumer::new(consumer)), None, geo)
        };
        Ok(Reader {
            ring,
            tap,
            budget: geo.capacity * opts.max_held_percent as u64 / 100,
            frames_limit: geo.log_entries as u64 / 2,
            outstanding: std::collections::VecDeque::with_capacity(geo.log_entries as usize / 2),
            next_place: 0,
            capacity: geo.capacity,
            opts,
            tracker: Arc::new(Tracker::new(geo.log_entries as usize / 2 + 1)),
            counters,
            spare: Arc::new(ArrayQueue::new(SPARE_COPIES)),
            resets_seen: 0,
            last_reap: None,
            last_warn: None,
            last_loss_warn: None,
            losses_warned: 0,
            discont: true,
            seqs: Vec::with_capacity(TRACKED_STREAMS),
            offset_ns: 0,
            activity: None,
            max_age_ns: 0,
            warned_copy: false,
            full_since: None,
            warned_stall: false,
        })
    }

    /// Ring bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn warn_malformed(&mut self, el: &gst::Element, what: &str) {
        self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        self.discont = true;
        log!(CAT, Warning, el, "record dropped: {what}");
        let now = Instant::now();
        if self
            .last_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_INTERVAL)
        {
            self.last_warn = Some(now);
            post!(
                el,
                Warning,
                gst::StreamError::Decode,
                "{}: record dropped: {} ({} malformed records so far)",
                el.name(),
                what,
                self.counters.malformed.load(Ordering::Relaxed)
            );
        }
    }

    /// Records missing (`missing`) or lost (`lost`) grew by `more`: a QoS message
    /// with the counts, and a warning at most once per [`WARN_INTERVAL`].
    fn losses(&mut self, el: &gst::Element, more: u64, what: &str) {
        if more == 0 {
            return;
        }
        let c = &self.counters;
        let lost = c.missing.load(Ordering::Relaxed) + c.lost.load(Ordering::Relaxed);
        let qos = gst::message::Qos::builder(true)
            .stats(
                gst::format::Buffers::from_u64(c.frames.load(Ordering::Relaxed)),
                gst::format::Buffers::from_u64(lost),
            )
            .src(el)
            .build();
        let _ = el.post_message(qos);
        log!(CAT, Info, el, "{what}: {more}");
        let now = Instant::now();
        if self
            .last_loss_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_INTERVAL)
        {
            let since = lost - self.losses_warned;
            self.last_loss_warn = Some(now);
            self.losses_warned = lost;
            post!(
                el,
                Warning,
                gst::StreamError::Failed,
                "{}: {what}: {since} since the last warning, {lost} in all (counted in missing and lost; the next buffer is DISCONT)",
                el.name()
            );
        }
    }

    /// Follows the record's stream sequence: (lost before it, second producer seen).
    /// A gap is counted in `missing` (its records never reached the ring); a
    /// stream that starts again after its end, or steps back (a producer that
    /// started again), is not a loss, but its next buffer is DISCONT too.
    fn follow(&mut self, el: &gst::Element, meta: Meta, seq: u64, end: bool) -> (bool, bool) {
        let key = (meta.kind, meta.stream);
        let i = match self.seqs.iter().position(|t| (t.kind, t.stream) == key) {
            Some(i) => i,
            None => {
                if self.seqs.len() >= TRACKED_STREAMS {
                    self.seqs.remove(0);
                }
                self.seqs.push(SeqTrack {
                    kind: key.0,
                    stream: key.1,
                    last: None,
                    back_at: None,
                    warned: false,
                    ended: false,
                });
                self.seqs.len() - 1
            }
        };
        let t = &mut self.seqs[i];
        let (mut lost, mut second, mut gap) = (false, false, 0);
        match t.last {
            // A stream starting: no gap (the element's first buffer is DISCONT);
            // starting again after its end (a participant back): DISCONT.
            None => lost = std::mem::take(&mut t.ended),
            Some(last) if seq == last.wrapping_add(1) => {}
            Some(last) if seq > last => {
                lost = true;
                gap = seq - last - 1;
            }
            Some(_) => {
                lost = true;
                let now = Instant::now();
                if t.back_at
                    .is_some_and(|b| now.duration_since(b) < TWO_PRODUCERS_WINDOW)
                    && !t.warned
                {
                    t.warned = true;
                    second = true;
                }
                t.back_at = Some(now);
            }
        }
        // After its end a stream may start again from 0.
        t.last = if end { None } else { Some(seq) };
        t.ended = end;
        if gap > 0 {
            self.counters.missing.fetch_add(gap, Ordering::Relaxed);
            let what = format!(
                "records missing from stream {} ({}), dropped by its producer before they reached the ring (a full ring, or no consumer)",
                meta.stream,
                if meta.kind == kind::AUDIO { "audio" } else { "video" }
            );
            self.losses(el, gap, &what);
        }
        (lost, second)
    }

    /// The next media record, waiting up to [`POLL_IDLE`]; `None` when nothing came
    /// (or a record was dropped: malformed, filtered). Err: the ring failed.
    pub fn next(&mut self, el: &gst::Element) -> Result<Option<Record>, ReadError> {
        let mut fresh = false;
        let (meta, seq, data) = match self.tap.as_mut() {
            Some(t) => {
                let mut buf = self.spare.pop().unwrap_or_default();
                let got = t.tap.next_into(&mut buf, Some(POLL_IDLE));
                let ts = t.tap.stats();
                let more = ts.lost - t.lost_seen;
                if more > 0 {
                    self.counters.lost.fetch_add(more, Ordering::Relaxed);
                    t.lost_seen = ts.lost;
                    self.discont = true;
                }
                self.counters
                    .skipped
                    .fetch_add(ts.filtered - t.filtered_seen, Ordering::Relaxed);
                t.filtered_seen = ts.filtered;
                self.losses(
                    el,
                    more,
                    "records lost by this tap (overwritten while it read them, or passed by the producers)",
                );
                match got {
                    Ok(Some(f)) => (f.meta, f.seq, Data::Copy(buf)),
                    Ok(None) => {
                        let _ = self.spare.push(buf);
                        return Ok(None);
                    }
                    Err(e) => return Err(ReadError::Failed(e.to_string())),
                }
            }
            None => {
                let ring = self.ring.as_ref().expect("a consumer or a tap");
                let asked = Instant::now();
                let next = ring.next_timeout(Some(POLL_IDLE));
                // Waited for: the ring was empty when asked.
                fresh = asked.elapsed() >= FRESH;
                let (resets, cause) = ring
                    .with(|c| (c.resets(), c.health().last_corruption))
                    .map_err(|e| ReadError::Failed(e.to_string()))?;
                if resets != self.resets_seen {
                    self.counters
                        .resets
                        .fetch_add(resets - self.resets_seen, Ordering::Relaxed);
                    self.resets_seen = resets;
                    self.discont = true;
                    post!(
                        el,
                        Warning,
                        gst::StreamError::Failed,
                        "{}: ring corrupted ({}); reset, continuing",
                        el.name(),
                        cause.unwrap_or("unknown")
                    );
                }
                match next {
                    Ok(Some(f)) => (f.meta(), f.seq(), Data::Frame(f)),
                    Ok(None) => return Ok(None),
                    // The consumer resets a scribbled ring by itself, keeping the
                    // frames held downstream valid; it reports corruption only while
                    // frames from before an earlier reset are still held: their
                    // releases let it reset again.
                    Err(Error::Corrupt { .. }) | Err(Error::TooManyHeld { .. }) => {
                        std::thread::sleep(POLL);
                        return Ok(None);
                    }
                    Err(e) => return Err(ReadError::Failed(e.to_string())),
                }
            }
        };
        // The traffic after this record (what passes while it is held).
        let len = match &data {
            Data::Frame(f) => f.len() as u64,
            Data::Copy(b) => b.len() as u64,
        };
        let at = self.tracker.consumed.fetch_add(len, Ordering::Relaxed) + len;
        self.activity = Some(Instant::now());
        let mut rec = Record {
            meta,
            media: MediaRecord::End(media::EndOfStream {
                pts_ns: 0,
                sequence: 0,
            }),
            discont: false,
            second_producer: false,
            fresh,
            data,
            at,
        };
        let stream = Filter {
            stream: self.opts.stream,
            ..Filter::ANY
        };
        if let Some(n) =
            crate::notice::TooLarge::read(meta.kind, rec.payload()).filter(|_| stream.takes(&meta))
        {
            self.discard(rec);
            return Err(ReadError::TooLarge(format!(
                "a producer of stream {} ({}) cannot write its records of {} bytes into ring {}, which takes records of at most {} bytes: {}",
                meta.stream,
                n.kind_name(),
                n.len,
                self.opts.location.describe(),
                n.max,
                crate::ring::capacity_advice(n.len)
            )));
        }
        let wanted = (meta.kind == kind::VIDEO || meta.kind == kind::AUDIO) && stream.takes(&meta);
        if !wanted {
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            self.discard(rec);
            return Ok(None);
        }
        match media::read(meta.kind, rec.payload()) {
            Ok(m) => rec.media = m,
            Err(e) => {
                let what = format!("stream {} record {seq}: {e}", meta.stream);
                self.discard(rec);
                self.warn_malformed(el, &what);
                return Ok(None);
            }
        }
        let (sequence, end) = match rec.media {
            MediaRecord::Frame(h) => (h.sequence, false),
            MediaRecord::End(e) => (e.sequence, true),
        };
        let (lost, second) = self.follow(el, meta, sequence, end);
        rec.discont = lost || std::mem::take(&mut self.discont);
        rec.second_producer = second;
        Ok(Some(rec))
    }

    /// A record not output goes back to the ring at once.
    pub fn discard(&self, rec: Record) {
        match rec.data {
            Data::Frame(f) => f.release(),
            Data::Copy(buf) => {
                let _ = self.spare.push(buf);
            }
        }
    }

    /// Bytes of the ring pinned by frames held in place: from the oldest still
    /// held to the newest record read.
    fn pinned(&mut self) -> u64 {
        while let Some(&(place, _)) = self.outstanding.front() {
            // Acquire: pairs with the Release store when the frame came back.
            if !self.tracker.back[place].load(Ordering::Acquire) {
                break;
            }
            self.outstanding.pop_front();
        }
        match self.outstanding.front() {
            Some(&(_, at)) => self
                .tracker
                .consumed
                .load(Ordering::Relaxed)
                .saturating_sub(at),
            None => 0,
        }
    }

    /// The buffer for a frame record: bytes `span` of its payload, the ring's
    /// memory or a copy (see the module's documentation), for the output whose
    /// downstream `lane` follows and `holder` says what keeps frames there.
    pub fn buffer(
        &mut self,
        el: &gst::Element,
        rec: Record,
        (first, end): (usize, usize),
        lane: &Arc<Lane>,
        holder: &Holder,
    ) -> gst::Buffer {
        let at = rec.at;
        let f = match rec.data {
            Data::Copy(buf) => {
                let copy = Copied {
                    buf,
                    home: self.spare.clone(),
                    tracker: self.tracker.clone(),
                    lane: lane.clone(),
                    generation: lane.generation(),
                    at,
                };
                return buffer_over(copy, first, end);
            }
            Data::Frame(f) => f,
        };
        let len = f.len() as u64;
        let pinned = self.pinned();
        let t = &self.tracker;
        let depth = lane.depth();
        let fits_now =
            pinned + len <= self.budget && (self.outstanding.len() as u64) < self.frames_limit;
        let wrap = fits_now
            && match (holder, depth) {
                (Holder::Always(_), _) => false,
                (_, Some(d)) => d + len <= self.budget,
                (Holder::Learn(_), None) => false,
                (Holder::None, None) => true,
            };
        if wrap {
            t.held_bytes.fetch_add(len, Ordering::Relaxed);
            t.held_frames.fetch_add(1, Ordering::Relaxed);
            // The place after the newest: free, as no more than `frames_limit`
            // frames are held and the list has one place more.
            let place = self.next_place;
            self.next_place = (place + 1) % t.back.len();
            t.back[place].store(false, Ordering::Relaxed);
            self.outstanding.push_back((place, at));
            let held = Held {
                frame: f,
                tracker: t.clone(),
                lane: lane.clone(),
                generation: lane.generation(),
                at,
                place,
            };
            return buffer_over(held, first, end);
        }
        if let Some(d) = depth.filter(|&d| d + len > self.budget && !self.warned_copy) {
            self.warned_copy = true;
            let frames = d / len.max(1);
            post!(
                el,
                Warning,
                gst::ResourceError::NoSpaceLeft,
                "{}: downstream keeps frames while {} MB ({} frames like this one) pass through the ring, more than max-held allows ({} of the {} MB ring): copying frames from now on, so producers never wait for frames held downstream{}; a ring of at least capacity={} keeps them in place",
                el.name(),
                d >> 20,
                frames,
                self.budget >> 20,
                self.capacity >> 20,
                holder.name().map(|e| format!(" ({e} keeps frames: an encoder's look-ahead, or a muxer waiting for another stream)")).unwrap_or_default(),
                ((d + len) * 2).next_power_of_two()
            );
        }
        self.counters.copies.fetch_add(1, Ordering::Relaxed);
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(f.payload());
        f.release();
        let copy = Copied {
            buf,
            home: self.spare.clone(),
            tracker: t.clone(),
            lane: lane.clone(),
            generation: lane.generation(),
            at,
        };
        buffer_over(copy, first, end)
    }

    /// A record's PTS by `mode`, and whether it is live (fresh enough to say
    /// something about the latency). Records captured before the pipeline
    /// started (a backlog left in the ring) keep their spacing: the element's
    /// timeline is shifted once by the oldest one's age.
    pub fn pts(
        &mut self,
        el: &gst::Element,
        capture_ns: u64,
        stream_pts: u64,
        fresh: bool,
    ) -> Option<gst::ClockTime> {
        let mode = self.opts.timestamp_mode;
        if mode == TimestampMode::Stream {
            return Some(gst::ClockTime::from_nseconds(stream_pts));
        }
        let clock = el.clock()?;
        let base = el.base_time()?.nseconds() as i128;
        let now = clock.time().nseconds() as i128;
        let at = if mode == TimestampMode::Capture && capture_ns != 0 {
            // Move the capture time from the monotonic clock onto the pipeline's.
            let age = shmring::now_ns().saturating_sub(capture_ns);
            // Only a record that did not wait in the ring for us: one that did
            // waited while downstream held us, which the latency must not count
            // (it would grow the latency that made it wait).
            if fresh && age < LIVE_AGE.as_nanos() as u64 {
                self.max_age_ns = self.max_age_ns.max(age);
            }
            now - age as i128
        } else {
            now
        };
        let running = at - base;
        if running + (self.offset_ns as i128) < 0 {
            let shift = (-running) as u64;
            log!(
                CAT,
                Info,
                el,
                "a record captured {} ms before the pipeline started: timeline shifted",
                shift / 1_000_000
            );
            self.offset_ns = shift;
        }
        Some(gst::ClockTime::from_nseconds(
            (running + self.offset_ns as i128) as u64,
        ))
    }

    /// Nothing arrived. How long since the last record or producer (`None`:
    /// there never was one; `eos_after` counts from the first). Also frees the
    /// slots of producers that died, and warns once if the ring stays full while
    /// downstream holds its frames.
    pub fn idle(&mut self, el: &gst::Element, eos_after: bool) -> Option<Duration> {
        let now = Instant::now();
        let stats = match (&self.ring, &self.tap) {
            (Some(r), _) => {
                if eos_after
                    && self
                        .last_reap
                        .is_none_or(|t| now.duration_since(t) >= POLL * 10)
                {
                    self.last_reap = Some(now);
                    let _ = r.with(|c| c.reap());
                }
                r.with(|c| c.segment().stats())
                    .expect("the reader's consumer is never closed")
            }
            (None, Some(t)) => t.tap.segment().stats(),
            (None, None) => return None,
        };
        if stats.producers > 0 {
            self.activity = Some(now);
        }
        let held = self.tracker.held_frames.load(Ordering::Relaxed);
        if held > 0 && stats.occupancy * 10 >= stats.capacity * 9 {
            let since = *self.full_since.get_or_insert(now);
            if now.duration_since(since) >= STALL_WARN && !self.warned_stall {
                self.warned_stall = true;
                post!(
                    el,
                    Warning,
                    gst::ResourceError::NoSpaceLeft,
                    "{}: the ring has been full for {} ms while downstream holds {} of its frames ({} MB): producers wait for space; lower max-held, or give the ring more capacity",
                    el.name(),
                    now.duration_since(since).as_millis(),
                    held,
                    self.tracker.held_bytes.load(Ordering::Relaxed) >> 20
                );
            }
        } else {
            self.full_since = None;
        }
        self.activity.map(|a| now.duration_since(a))
    }
}

/// What keeps frames downstream of an output, as far as the element can tell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Holder {
    /// Nothing known to keep frames: in place until measured otherwise.
    #[default]
    None,
    /// An element that keeps frames (an encoder, by name): copies until the first
    /// buffer comes back, then as measured.
    Learn(String),
    /// An element that may keep frames for as long as another output makes it
    /// wait (a muxer fed by several of this element's pads): copies always.
    Always(String),
}

impl Holder {
    pub fn name(&self) -> Option<&str> {
        match self {
            Holder::None => None,
            Holder::Learn(n) | Holder::Always(n) => Some(n),
        }
    }
}

/// What keeps frames downstream of `pad`: the first encoder (factory klass
/// "Encoder", for its look-ahead) or muxer ("Muxer", which keeps one stream's
/// records while it waits for another's) on the path, and whether a muxer on
/// it (before or after an encoder) is fed from another of `siblings` too: then
/// it can keep this pad's frames for as long as the other waits (an audio pad
/// waiting behind its participant's video encoder), and nothing measured before
/// says how long. Follows single-output elements (queues, converters, parsers,
/// encoders) and every branch of a tee, a few elements deep.
pub fn downstream_holder(pad: &gst::Pad, siblings: &[gst::Pad]) -> Holder {
    fn walk(pad: &gst::Pad, depth: u32, found: &mut Vec<(gst::Element, bool)>) {
        if depth > 12 {
            return;
        }
        let Some(el) = pad.peer().and_then(|p| p.parent_element()) else {
            return;
        };
        let klass = el
            .factory()
            .map(|f| f.metadata("klass").unwrap_or_default().to_string())
            .unwrap_or_default();
        let muxer = klass.contains("Muxer");
        if muxer || klass.contains("Encoder") {
            found.push((el.clone(), muxer));
        }
        for p in el.src_pads() {
            walk(&p, depth + 1, found);
        }
    }
    let mut found = Vec::new();
    walk(pad, 0, &mut found);
    let Some((first, _)) = found.first() else {
        return Holder::None;
    };
    let shared = found.iter().filter(|(_, m)| *m).find(|(mux, _)| {
        siblings.iter().filter(|s| *s != pad).any(|s| {
            let mut theirs = Vec::new();
            walk(s, 0, &mut theirs);
            theirs.iter().any(|(e, _)| e == mux)
        })
    });
    match shared {
        Some((mux, _)) => Holder::Always(mux.name().to_string()),
        None => Holder::Learn(first.name().to_string()),
    }
}

/// The shared state of a reader's latency answer: the live records' largest age,
/// and the frame duration of what is output.
#[derive(Default)]
pub struct Latency {
    /// Largest age (capture to output) of live records, ns.
    pub age_ns: AtomicU64,
    /// Longest frame or packet duration output, ns.
    pub frame_ns: AtomicU64,
    /// Ring time at the output's byte rate, ns (how long the ring can buffer).
    pub ring_ns: AtomicU64,
}

impl Latency {
    /// (min, max) for a LATENCY answer: a frame plus the largest age seen, and
    /// that plus what the ring can hold.
    pub fn answer(&self) -> (gst::ClockTime, Option<gst::ClockTime>) {
        let min = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        let ring = self.ring_ns.load(Ordering::Relaxed);
        let min = gst::ClockTime::from_nseconds(min);
        (
            min,
            (ring > 0).then(|| min + gst::ClockTime::from_nseconds(ring)),
        )
    }

    /// Notes what was just output; true when the answer grew by more than a
    /// millisecond (time to post a LATENCY message).
    pub fn note(&self, frame_ns: u64, age_ns: u64, ring_ns: u64) -> bool {
        let before = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        self.frame_ns.fetch_max(frame_ns, Ordering::Relaxed);
        self.age_ns.fetch_max(age_ns, Ordering::Relaxed);
        self.ring_ns.store(ring_ns, Ordering::Relaxed);
        let after = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        after > before + 1_000_000
    }
}
