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
//!
//! The folder: this file reads (`Reader`: the core's [`shmring::Reader`] over the
//! element's `mode`, the checks and counts of every record); `settings.rs` the
//! properties a source reads by; `counters.rs` what the elements count and the
//! hold depth they learn; `record.rs` a record and the memory of its buffer;
//! `holder.rs` what keeps frames downstream, and latency.

mod counters;
mod holder;
mod record;
mod settings;

pub use counters::*;
pub use holder::*;
pub use record::*;
pub use settings::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use gst::prelude::*;
use shmring::media::{self, kind, MediaRecord};
use shmring::{
    ConsumerOptions, Error, Filter, Meta, ReaderCounts, ReaderFrame, ReaderKind, SharedFrame, Tap,
    TapOptions,
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
    /// The ring's consumer, a tethered consumer or a tap (`mode`).
    source: shmring::Reader,
    /// Its counts already reported.
    seen: ReaderCounts,
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
        let kind = ReaderKind::from(opts.mode);
        let source = if kind == ReaderKind::Tap {
            let ro = opts.location.open_read_only().map_err(|e| {
                error_msg!(
                    gst::ResourceError::OpenRead,
                    "{}: cannot open ring {} read-only: {}",
                    element,
                    what,
                    e
                )
            })?;
            let topts = TapOptions {
                filter: Filter {
                    kind: opts.tap_kind,
                    stream: opts.stream,
                },
                ..Default::default()
            };
            shmring::Reader::from(Tap::new(ro, topts))
        } else {
            let seg = opts
                .location
                .open_for(el, element, gst::ResourceError::OpenRead)?;
            let copts = ConsumerOptions {
                tether_stall_limit: Duration::from_millis(opts.tether_stall_ms as u64),
                max_age: (opts.max_age_ms > 0)
                    .then(|| Duration::from_millis(opts.max_age_ms as u64)),
                ..Default::default()
            };
            shmring::Reader::consume(seg, kind, copts).map_err(|e| {
                error_msg!(
                    gst::ResourceError::OpenRead,
                    "{}: cannot consume ring {}: {}",
                    element,
                    what,
                    e
                )
            })?
        };
        let geo = source.geometry().map_err(|e| {
            error_msg!(
                gst::ResourceError::OpenRead,
                "{}: ring {}: {}",
                element,
                what,
                e
            )
        })?;
        Ok(Reader {
            source,
            seen: ReaderCounts::default(),
            budget: geo.capacity * opts.max_held_percent as u64 / 100,
            frames_limit: geo.log_entries as u64 / 2,
            outstanding: std::collections::VecDeque::with_capacity(geo.log_entries as usize / 2),
            next_place: 0,
            capacity: geo.capacity,
            opts,
            tracker: Arc::new(Tracker::new(geo.log_entries as usize / 2 + 1)),
            counters,
            spare: Arc::new(ArrayQueue::new(SPARE_COPIES)),
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
        let in_place = self.source.kind().in_place();
        // A tap copies into a spare buffer; frames in place need none.
        let mut buf = if in_place {
            Vec::new()
        } else {
            self.spare.pop().unwrap_or_default()
        };
        let asked = Instant::now();
        let got = self.source.next_into(&mut buf, Some(POLL_IDLE));
        // Waited for: the ring was empty when asked.
        let fresh = in_place && asked.elapsed() >= FRESH;
        let counts = self
            .source
            .counts()
            .map_err(|e| ReadError::Failed(e.to_string()))?;
        let more = counts.lost - self.seen.lost;
        if more > 0 {
            self.counters.lost.fetch_add(more, Ordering::Relaxed);
            self.discont = true;
            self.losses(
                el,
                more,
                "records lost by this tap (overwritten while it read them, or passed by the producers)",
            );
        }
        self.counters
            .skipped
            .fetch_add(counts.filtered - self.seen.filtered, Ordering::Relaxed);
        if counts.resets != self.seen.resets {
            self.counters
                .resets
                .fetch_add(counts.resets - self.seen.resets, Ordering::Relaxed);
            self.discont = true;
            post!(
                el,
                Warning,
                gst::StreamError::Failed,
                "{}: ring corrupted ({}); reset, continuing",
                el.name(),
                self.source.last_corruption().unwrap_or("unknown")
            );
        }
        self.seen = counts;
        let (meta, seq, data) = match got {
            Ok(Some(ReaderFrame::Held(f))) => (f.meta(), f.seq(), Data::Frame(f)),
            Ok(Some(ReaderFrame::Copied(f))) => (f.meta, f.seq, Data::Copy(buf)),
            Ok(None) => {
                if !in_place {
                    let _ = self.spare.push(buf);
                }
                return Ok(None);
            }
            // The consumer resets a scribbled ring by itself, keeping the frames
            // held downstream valid; it reports corruption only while frames from
            // before an earlier reset are still held: their releases let it reset
            // again.
            Err(Error::Corrupt { .. }) | Err(Error::TooManyHeld { .. }) => {
                std::thread::sleep(POLL);
                return Ok(None);
            }
            Err(e) => return Err(ReadError::Failed(e.to_string())),
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
        if eos_after
            && self
                .last_reap
                .is_none_or(|t| now.duration_since(t) >= POLL * 10)
        {
            self.last_reap = Some(now);
            let _ = self.source.reap();
        }
        let Ok(stats) = self.source.stats() else {
            return None;
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
