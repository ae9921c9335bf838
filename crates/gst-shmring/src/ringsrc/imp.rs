//! The source's implementation: one output pad for the records its filters take
//! (see [`crate::reader`] for how the ring is read, and `shmringdemux` for a pad
//! per stream and kind).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;
use shmring::media::{kind, MediaHeader, MediaRecord};

use crate::lock;
use crate::media::{negotiated_rate, output_for, same_shape, supported_caps, Output};
use crate::reader::{self, downstream_holder, Counters, Latency, Reader, ReaderSettings, Record};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringsrc",
        gst::DebugColorFlags::empty(),
        Some("shmring source"),
    )
});

/// Which records the source outputs, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcKind")]
pub enum KindFilter {
    /// Video and audio records, as far as downstream accepts them.
    #[enum_value(
        name = "Any: video and audio records; a kind downstream does not accept (a video-only pipeline on a ring that also carries audio) is skipped",
        nick = "any"
    )]
    Any,
    /// Video records only.
    #[enum_value(name = "Video records only", nick = "video")]
    Video,
    /// Audio records only.
    #[enum_value(name = "Audio records only", nick = "audio")]
    Audio,
}

#[derive(Debug, Clone)]
struct Settings {
    reader: ReaderSettings,
    stream: i64,
    kind: KindFilter,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reader: ReaderSettings::default(),
            stream: -1,
            kind: KindFilter::Any,
        }
    }
}

/// One stream (kind, id) the source has output, and whether its producer ended it.
#[derive(Debug, Clone, Copy)]
struct Output1 {
    kind: u32,
    stream: u32,
    ended: bool,
}

struct Started {
    reader: Reader,
    kind: KindFilter,
    eos_after: Option<Duration>,
    /// An end of stream ends no output (`keep-running`).
    keep_running: bool,
    current: Option<(MediaHeader, Output, gst::Fraction)>,
    /// Kind::Any: does downstream accept video, audio (asked once each)?
    accepts: [Option<bool>; 2],
    outputs: Vec<Output1>,
    last_video_pts: Option<gst::ClockTime>,
    /// What keeps frames downstream (looked up at each caps change).
    holder: reader::Holder,
    /// How long downstream keeps buffers.
    lane: Arc<reader::Lane>,
    /// Caps downstream refused, already reported.
    refused: Option<gst::Caps>,
}

#[derive(Default)]
enum State {
    #[default]
    Stopped,
    Started(Box<Started>),
}

/// The `shmringsrc` element.
#[derive(Default)]
pub struct ShmRingSrc {
    settings: Mutex<Settings>,
    state: Mutex<State>,
    flushing: AtomicBool,
    counters: Arc<Counters>,
    latency: Latency,
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
            let mut props = ReaderSettings::properties();
            props.extend([
                glib::ParamSpecInt64::builder("stream")
                    .nick("Stream")
                    .blurb("Output only records of this stream id; -1: every stream (shmringdemux gives each its own pad)")
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
            ]);
            props.extend(Counters::properties());
            props
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        if s.reader.set_property(pspec.name(), value) {
            return;
        }
        match pspec.name() {
            "stream" => s.stream = value.get().expect("type checked upstream"),
            "kind" => s.kind = value.get().expect("type checked upstream"),
            other => log!(CAT, Warning, &*self.obj(), "no writable property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = lock(&self.settings);
        if let Some(v) = s.reader.property(pspec.name()) {
            return v;
        }
        if let Some(v) = self.counters.property(pspec.name()) {
            return v;
        }
        match pspec.name() {
            "stream" => s.stream.to_value(),
            "kind" => s.kind.to_value(),
            other => {
                log!(CAT, Warning, &*self.obj(), "no property {other}");
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
    element_metadata!(
        "shmring source",
        "Source/Video/Audio",
        "Reads raw video and audio from a shmring ring, as its consumer or beside it (mode); buffers are the ring's frames in place, or copies where downstream keeps frames (an encoder's look-ahead) or in mode tap"
    );

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
        let tap_kind = match s.kind {
            KindFilter::Any => None,
            KindFilter::Video => Some(kind::VIDEO),
            KindFilter::Audio => Some(kind::AUDIO),
        };
        let obj = self.obj();
        let reader = Reader::open(
            obj.upcast_ref(),
            "shmringsrc",
            s.reader.options(u32::try_from(s.stream).ok(), tap_kind),
            self.counters.clone(),
        )?;
        *lock(&self.state) = State::Started(Box::new(Started {
            reader,
            kind: s.kind,
            eos_after: s.reader.eos_after(),
            keep_running: s.reader.keep_running,
            current: None,
            accepts: [None, None],
            outputs: Vec::new(),
            last_video_pts: None,
            holder: reader::Holder::None,
            lane: Arc::default(),
            refused: None,
        }));
        self.flushing.store(false, Ordering::Release);
        log!(
            CAT,
            Info,
            &*self.obj(),
            "reading ring {} as {:?}",
            s.reader.location.describe(),
            s.reader.mode
        );
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Frames still held downstream keep the ring (and its consumer) alive until
        // they are released.
        *lock(&self.state) = State::Stopped;
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        // Caps come from each record's media header (see `create`).
        Ok(())
    }

    fn query(&self, query: &mut gst::QueryRef) -> bool {
        if let gst::QueryViewMut::Latency(q) = query.view_mut() {
            // Live: a frame (or packet) plus the largest capture-to-output age seen;
            // at most that plus what the ring holds at the current rate.
            let (min, max) = self.latency.answer();
            q.set(true, min, max);
            return true;
        }
        BaseSrcImplExt::parent_query(self, query)
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

impl ShmRingSrc {
    /// Kind::Any: does downstream accept records of kind `k` (asked once)?
    fn accepts(&self, st: &mut Started, k: u32) -> bool {
        let i = if k == kind::VIDEO { 0 } else { 1 };
        *st.accepts[i].get_or_insert_with(|| {
            let media = if k == kind::VIDEO {
                "video/x-raw"
            } else {
                "audio/x-raw"
            };
            let ok = self
                .obj()
                .src_pad()
                .peer_query_caps(None)
                .can_intersect(&gst::Caps::new_empty_simple(media));
            if !ok {
                log!(
                    CAT,
                    Info,
                    &*self.obj(),
                    "downstream takes no {media}: those records are skipped"
                );
            }
            ok
        })
    }

    /// The stream's producer ended it; true when every stream output has ended.
    fn ended(st: &mut Started, rec: &Record) -> bool {
        let key = (rec.meta.kind, rec.meta.stream);
        if let Some(o) = st.outputs.iter_mut().find(|o| (o.kind, o.stream) == key) {
            o.ended = true;
        }
        !st.outputs.is_empty() && st.outputs.iter().all(|o| o.ended)
    }

    /// New caps for `hd`, if they differ from the current ones; `Err`: the header
    /// has no caps (a malformed record, counted).
    fn caps_for(&self, st: &mut Started, hd: &MediaHeader) -> Result<Option<gst::Caps>, String> {
        if st
            .current
            .as_ref()
            .is_some_and(|(h, _, _)| same_shape(h, hd))
        {
            return Ok(None);
        }
        let obj = self.obj();
        let pad = obj.src_pad();
        let peer = (hd.fps_num == 0 && hd.format.is_video()).then(|| pad.peer_query_caps(None));
        let rate = negotiated_rate(hd, peer.as_ref());
        let out = output_for(hd, rate)?;
        let caps = out.caps.clone();
        st.holder = downstream_holder(pad, &[]);
        // What downstream's hold was learned for the old caps says nothing of
        // the new ones (and an encoder drains now).
        st.lane.restart();
        st.current = Some((*hd, out, rate));
        Ok(Some(caps))
    }

    /// Sets new caps (if any); `false` when downstream refused them (said once).
    fn set_caps(&self, st: &mut Started, caps: Option<gst::Caps>) -> bool {
        let Some(caps) = caps else { return true };
        log!(CAT, Info, &*self.obj(), "caps {caps}");
        if self.obj().set_caps(&caps).is_ok() {
            return true;
        }
        if st.refused.as_ref() != Some(&caps) {
            let accepted = self.obj().src_pad().peer_query_caps(None);
            post!(
                self.obj(),
                Error,
                gst::CoreError::Negotiation,
                "shmringsrc: downstream refused caps {} (it accepts {}); a videorate, videoconvert or audioconvert between them may help",
                caps,
                accepted
            );
            st.refused = Some(caps);
        }
        st.current = None;
        false
    }

    /// One frame record out: caps, buffer, timestamps, flags.
    fn frame(
        &self,
        st: &mut Started,
        rec: Record,
        hd: MediaHeader,
    ) -> Result<Option<CreateSuccess>, gst::FlowError> {
        let obj = self.obj();
        let el = obj.upcast_ref::<gst::Element>();
        let caps = match self.caps_for(st, &hd) {
            Ok(c) => c,
            Err(e) => {
                let what = format!("stream {}: {e}", rec.meta.stream);
                st.reader.discard(rec);
                self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                post!(
                    self.obj(),
                    Warning,
                    gst::StreamError::Decode,
                    "shmringsrc: record dropped: {}",
                    what
                );
                return Ok(None);
            }
        };
        if !self.set_caps(st, caps) {
            st.reader.discard(rec);
            return Err(gst::FlowError::NotNegotiated);
        }
        let key = (rec.meta.kind, rec.meta.stream);
        match st.outputs.iter_mut().find(|o| (o.kind, o.stream) == key) {
            Some(o) => o.ended = false,
            None => st.outputs.push(Output1 {
                kind: key.0,
                stream: key.1,
                ended: false,
            }),
        }
        if rec.second_producer {
            post!(
                self.obj(),
                Warning,
                gst::StreamError::Demux,
                "shmringsrc: two producers write stream {} ({}): their sequence numbers interleave; give each shmringsink (or producer) its own stream id",
                rec.meta.stream,
                if rec.meta.kind == kind::VIDEO { "video" } else { "audio" }
            );
        }
        let (capture, discont, fresh) = (rec.meta.timestamp_ns, rec.discont, rec.fresh());
        let (_, out, rate) = st.current.as_ref().expect("set by caps_for");
        let (span, rate) = (out.span, *rate);
        let (offsets, strides, planes, video_meta) =
            (out.offsets, out.strides, out.planes, out.video_meta);
        let holder = st.holder.clone();
        let lane = st.lane.clone();
        let mut buffer = st.reader.buffer(el, rec, span, &lane, &holder);
        let pts = st.reader.pts(el, capture, hd.pts_ns, fresh);
        // A variable rate: a frame lasts as long as the interval before it.
        let duration = crate::media::duration(&hd, rate, pts, &mut st.last_video_pts);
        if hd.format.is_video() {
            st.last_video_pts = pts;
        }
        let layout = video_meta.then_some((&offsets[..planes], &strides[..planes]));
        let b = buffer.get_mut().expect("a new buffer is writable");
        if let Err(e) = crate::media::mark(b, &hd, (pts, duration), discont, layout) {
            log!(CAT, Warning, &*self.obj(), "video meta: {e}");
        }
        let frame_ns = duration.map_or(0, |d| d.nseconds());
        // How long the ring holds at this rate: records like this one it fits.
        let len = (span.1 - span.0).max(1) as u64;
        let ring_ns = (st.reader.capacity() / len).saturating_mul(frame_ns);
        if self.latency.note(frame_ns, st.reader.max_age_ns, ring_ns) {
            log!(
                CAT,
                Debug,
                &*self.obj(),
                "latency now {:?}",
                self.latency.answer()
            );
            let _ = obj.post_message(gst::message::Latency::builder().src(&*obj).build());
        }
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        Ok(Some(CreateSuccess::NewBuffer(buffer)))
    }
}

impl PushSrcImpl for ShmRingSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return Err(gst::FlowError::Flushing);
        };
        let obj = self.obj();
        let el = obj.upcast_ref::<gst::Element>();
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            let rec = match st.reader.next(el) {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    let idle = st.reader.idle(el, st.eos_after.is_some());
                    if let (Some(limit), Some(idle)) = (st.eos_after, idle) {
                        if idle >= limit {
                            log!(
                                CAT,
                                Info,
                                &*self.obj(),
                                "no producer and no record for {} ms: EOS",
                                limit.as_millis()
                            );
                            return Err(gst::FlowError::Eos);
                        }
                    }
                    continue;
                }
                Err(e) => {
                    e.post(el);
                    return Err(gst::FlowError::Error);
                }
            };
            let k = rec.meta.kind;
            let wanted = match st.kind {
                KindFilter::Any => self.accepts(st, k),
                KindFilter::Video => k == kind::VIDEO,
                KindFilter::Audio => k == kind::AUDIO,
            };
            if !wanted {
                self.counters.skipped.fetch_add(1, Ordering::Relaxed);
                st.reader.discard(rec);
                continue;
            }
            match rec.media {
                MediaRecord::End(_) => {
                    let all = Self::ended(st, &rec);
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "stream {} ({}) ended by its producer",
                        rec.meta.stream,
                        if k == kind::VIDEO { "video" } else { "audio" }
                    );
                    st.reader.discard(rec);
                    if all && st.keep_running {
                        log!(
                            CAT,
                            Info,
                            &*self.obj(),
                            "every stream output has ended: keep-running, waiting for the next"
                        );
                    } else if all {
                        return Err(gst::FlowError::Eos);
                    }
                }
                MediaRecord::Frame(hd) => {
                    if let Some(out) = self.frame(st, rec, hd)? {
                        return Ok(out);
                    }
                }
            }
        }
    }
}
