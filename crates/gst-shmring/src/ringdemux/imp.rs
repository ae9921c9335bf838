//! The demuxing source's implementation.
//!
//! A live source element with no sink pad (READY→PAUSED and PLAYING→PAUSED answer
//! NO_PREROLL, as live sources do). Its reading task (started in PLAYING, paused in
//! PAUSED) reads one record per iteration ([`crate::reader`]); the first record of
//! a stream id and kind adds its pad (`video_%u` / `audio_%u`, the number the
//! stream id) with stream-start, caps and a TIME segment; a header change
//! renegotiates on that pad; an end-of-stream record sends EOS on it; `eos-after`
//! ends every pad. Pads nobody linked drop their records (released at once).
//!
//! **A queue and a thread per pad.** Each pad pushes from a queue of its own, on
//! its own streaming thread, as decodebin's multiqueue does. One reading thread
//! pushing into every pad would deadlock a meeting's muxers: a muxer waits for its
//! video while its audio queue downstream fills, and the video waits behind an
//! encoder's look-ahead (`x264enc` needs about 50 frames before its first output)
//! that the blocked reading thread never delivers. A pad's queue holds up to
//! [`QUEUE_TIME`] of media (or [`QUEUE_BYTES`], or [`QUEUE_BUFFERS`]); only a pad
//! whose queue is full makes the reader wait. Buffers waiting in a queue count as
//! held downstream for the reader's copy-or-not choice.
//!
//! Locks: `state` is held while reading a record and while building its buffer,
//! never while adding a pad or pushing (pad-added handlers and downstream queries
//! call back into the element); a queue's lock only around its own contents.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use shmring::media::{kind, MediaHeader, MediaRecord};

use crate::lock;
use crate::media::{negotiated_rate, output_for, same_shape, supported_caps, Output};
use crate::reader::{self, downstream_holder, Counters, Latency, Reader, ReaderSettings, Record};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringdemux",
        gst::DebugColorFlags::empty(),
        Some("shmring source with a pad per stream and kind"),
    )
});

/// Most media a pad's queue holds before the reader waits for that pad.
pub const QUEUE_TIME: gst::ClockTime = gst::ClockTime::from_seconds(5);
/// Most bytes a pad's queue holds.
pub const QUEUE_BYTES: usize = 64 << 20;
/// Most buffers a pad's queue holds.
pub const QUEUE_BUFFERS: usize = 1000;

/// What a pad's thread pushes, in order.
enum Item {
    Event(gst::Event),
    Buffer(gst::Buffer),
}

#[derive(Default)]
struct QueueInner {
    items: VecDeque<Item>,
    bytes: usize,
    time: gst::ClockTime,
    flushing: bool,
}

/// A pad's queue, between the reading thread and the pad's streaming thread.
#[derive(Default)]
struct PadQueue {
    inner: Mutex<QueueInner>,
    /// Signalled when an item is added or taken, or when flushing starts.
    changed: Condvar,
}

impl PadQueue {
    fn full(q: &QueueInner) -> bool {
        q.time >= QUEUE_TIME || q.bytes >= QUEUE_BYTES || q.items.len() >= QUEUE_BUFFERS
    }

    /// Adds an item, waiting while the queue is full (false: flushing).
    fn put(&self, item: Item) -> bool {
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
    fn take(&self) -> Option<Item> {
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

    fn set_flushing(&self, flushing: bool) {
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

/// One output pad: one stream id's video or audio.
struct OutPad {
    pad: gst::Pad,
    queue: Arc<PadQueue>,
    kind: u32,
    stream: u32,
    /// Which of the stream's pads this is: 1, then 2, ... for a participant who
    /// comes back after its end (without `keep-running`).
    appearance: u32,
    current: Option<(MediaHeader, Output, gst::Fraction)>,
    ended: bool,
    /// Said on the bus that nothing is linked to it.
    warned_unlinked: bool,
    last_video_pts: Option<gst::ClockTime>,
    /// What keeps frames downstream of this pad.
    holder: reader::Holder,
    /// How long this pad's downstream keeps buffers.
    lane: Arc<reader::Lane>,
}

struct Started {
    reader: Reader,
    eos_after: Option<Duration>,
    /// A participant's end of stream ends none of its pads (`keep-running`).
    keep_running: bool,
    pads: Vec<OutPad>,
    group: gst::GroupId,
    /// Every pad got EOS (eos-after): the task waits for a state change.
    finished: bool,
}

#[derive(Default)]
enum State {
    #[default]
    Stopped,
    Started(Box<Started>),
}

/// The `shmringdemux` element.
pub struct ShmRingDemux {
    settings: Mutex<ReaderSettings>,
    state: Mutex<State>,
    task: Mutex<Option<gst::Task>>,
    task_lock: gst::TaskLock,
    flushing: AtomicBool,
    counters: Arc<Counters>,
    latency: Latency,
    /// Flow returns of every pad, combined as a demuxer combines them.
    combiner: Mutex<gst_base::UniqueFlowCombiner>,
}

impl Default for ShmRingDemux {
    fn default() -> Self {
        ShmRingDemux {
            settings: Mutex::new(ReaderSettings::default()),
            state: Mutex::new(State::Stopped),
            task: Mutex::new(None),
            task_lock: gst::TaskLock::new(),
            flushing: AtomicBool::new(true),
            counters: Arc::new(Counters::default()),
            latency: Latency::default(),
            combiner: Mutex::new(gst_base::UniqueFlowCombiner::new()),
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for ShmRingDemux {
    const NAME: &'static str = "GstShmRingDemux";
    type Type = super::ShmRingDemux;
    type ParentType = gst::Element;
}

impl ObjectImpl for ShmRingDemux {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let mut props = ReaderSettings::properties();
            props.extend(Counters::properties());
            props
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        if !lock(&self.settings).set_property(pspec.name(), value) {
            log!(
                CAT,
                Warning,
                &*self.obj(),
                "no writable property {}",
                pspec.name()
            );
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        // A source: a bin sends it the EOS an application sends the pipeline.
        self.obj().set_element_flags(gst::ElementFlags::SOURCE);
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if let Some(v) = lock(&self.settings).property(pspec.name()) {
            return v;
        }
        self.counters.property(pspec.name()).unwrap_or_else(|| {
            log!(CAT, Warning, &*self.obj(), "no property {}", pspec.name());
            pspec.default_value().clone()
        })
    }
}

impl GstObjectImpl for ShmRingDemux {}

impl ElementImpl for ShmRingDemux {
    element_metadata!(
        "shmring demuxing source",
        "Source/Demuxer/Video/Audio",
        "Reads a shmring ring (as its consumer or beside it, see mode) with a pad per stream id and kind, added as records arrive: video_ID and audio_ID, so each participant of a meeting goes its own way (link them by name: d.video_0, d.audio_0); EOS on a pad when its producer ends the stream"
    );

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let all = supported_caps();
            let video = all
                .iter()
                .filter(|s| s.name() == "video/x-raw")
                .map(|s| s.to_owned())
                .collect::<gst::Caps>();
            let audio = all
                .iter()
                .filter(|s| s.name() == "audio/x-raw")
                .map(|s| s.to_owned())
                .collect::<gst::Caps>();
            // A stream's first pad (video_ID), and those of a participant who
            // comes back after its end (video_ID_2, ...).
            ["video_%u", "audio_%u", "video_%u_%u", "audio_%u_%u"]
                .into_iter()
                .map(|name| {
                    let caps = if name.starts_with("video") {
                        &video
                    } else {
                        &audio
                    };
                    gst::PadTemplate::new(
                        name,
                        gst::PadDirection::Src,
                        gst::PadPresence::Sometimes,
                        caps,
                    )
                    .expect("valid template")
                })
                .collect()
        });
        TEMPLATES.as_ref()
    }

    fn send_event(&self, event: gst::Event) -> bool {
        // An EOS sent to the element (gst-launch-1.0 -e, an application ending
        // the recording): EOS on every pad, after what is queued.
        if let gst::EventView::Eos(_) = event.view() {
            log!(
                CAT,
                Info,
                &*self.obj(),
                "EOS sent to the element: EOS on every pad"
            );
            self.end_all();
            return true;
        }
        self.parent_send_event(event)
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        match transition {
            gst::StateChange::ReadyToPaused => self.start().map_err(|e| {
                self.post_error_message(e);
                gst::StateChangeError
            })?,
            gst::StateChange::PausedToPlaying => self.start_task()?,
            gst::StateChange::PlayingToPaused => self.pause_task(),
            gst::StateChange::PausedToReady => self.stop(),
            _ => {}
        }
        let ret = self.parent_change_state(transition)?;
        Ok(match transition {
            // Live: no preroll.
            gst::StateChange::ReadyToPaused | gst::StateChange::PlayingToPaused => {
                gst::StateChangeSuccess::NoPreroll
            }
            _ => ret,
        })
    }
}

impl ShmRingDemux {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let obj = self.obj();
        let reader = Reader::open(
            obj.upcast_ref(),
            "shmringdemux",
            s.options(None, None),
            self.counters.clone(),
        )?;
        *lock(&self.state) = State::Started(Box::new(Started {
            reader,
            eos_after: s.eos_after(),
            keep_running: s.keep_running,
            pads: Vec::new(),
            group: gst::GroupId::next(),
            finished: false,
        }));
        lock(&self.combiner).reset();
        log!(
            CAT,
            Info,
            &*self.obj(),
            "reading ring {} as {:?}",
            s.location.describe(),
            s.mode
        );
        Ok(())
    }

    fn start_task(&self) -> Result<(), gst::StateChangeError> {
        self.flushing.store(false, Ordering::Release);
        let mut task = lock(&self.task);
        if task.is_none() {
            let weak = self.obj().downgrade();
            let t = gst::Task::builder(move |task| match weak.upgrade() {
                Some(el) => el.imp().iterate(task),
                None => {
                    let _ = task.pause();
                }
            })
            .lock(&self.task_lock)
            .build();
            *task = Some(t);
        }
        task.as_ref()
            .expect("set above")
            .start()
            .map_err(|_| gst::StateChangeError)
    }

    fn pause_task(&self) {
        self.flushing.store(true, Ordering::Release);
        // Not waiting for the iteration in flight: it may wait for a pad's queue,
        // which waits for a sink that waits for PLAYING again. The pads' threads
        // go on: they block in the sinks until then.
        if let Some(t) = lock(&self.task).as_ref() {
            let _ = t.pause();
        }
    }

    fn stop(&self) {
        self.flushing.store(true, Ordering::Release);
        let queues: Vec<(gst::Pad, Arc<PadQueue>)> = match &*lock(&self.state) {
            State::Started(st) => st
                .pads
                .iter()
                .map(|p| (p.pad.clone(), p.queue.clone()))
                .collect(),
            State::Stopped => Vec::new(),
        };
        for (_, q) in &queues {
            q.set_flushing(true);
        }
        // Downstream is READY already (flushing): whatever is in flight returns.
        if let Some(t) = lock(&self.task).take() {
            let _ = t.stop();
            let _ = t.join();
        }
        for (pad, _) in &queues {
            let _ = pad.stop_task();
            let _ = pad.set_active(false);
            let _ = self.obj().remove_pad(pad);
        }
        *lock(&self.state) = State::Stopped;
        lock(&self.combiner).clear();
    }

    /// A new pad for `kind` of stream `stream`, its `appearance`th (not added
    /// yet): `video_ID`, then `video_ID_2`, ... for a participant who comes back.
    fn make_pad(&self, k: u32, stream: u32, appearance: u32) -> gst::Pad {
        let prefix = if k == kind::VIDEO { "video" } else { "audio" };
        let (templ, name) = if appearance > 1 {
            (
                format!("{prefix}_%u_%u"),
                format!("{prefix}_{stream}_{appearance}"),
            )
        } else {
            (format!("{prefix}_%u"), format!("{prefix}_{stream}"))
        };
        let templ = self
            .obj()
            .pad_template(&templ)
            .expect("the class has the template");
        gst::Pad::builder_from_template(&templ)
            .name(name)
            .query_function(|pad, parent, query| {
                ShmRingDemux::catch_panic_pad_function(
                    parent,
                    || false,
                    |imp| imp.src_query(pad, query),
                )
            })
            .event_function(|pad, parent, event| {
                ShmRingDemux::catch_panic_pad_function(
                    parent,
                    || false,
                    |imp| imp.src_event(pad, event),
                )
            })
            .build()
    }

    fn src_query(&self, pad: &gst::Pad, query: &mut gst::QueryRef) -> bool {
        match query.view_mut() {
            gst::QueryViewMut::Latency(q) => {
                // Live: a frame plus the largest capture-to-output age seen; at most
                // that plus what the ring holds at the current rate.
                let (min, max) = self.latency.answer();
                q.set(true, min, max);
                true
            }
            gst::QueryViewMut::Caps(q) => {
                let caps = pad
                    .current_caps()
                    .unwrap_or_else(|| pad.pad_template_caps());
                let caps = match q.filter() {
                    Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
                    None => caps,
                };
                q.set_result(&caps);
                true
            }
            _ => gst::Pad::query_default(pad, Some(&*self.obj()), query),
        }
    }

    fn src_event(&self, pad: &gst::Pad, event: gst::Event) -> bool {
        match event.view() {
            // Live and not seekable.
            gst::EventView::Seek(_) => false,
            gst::EventView::Reconfigure(_)
            | gst::EventView::Latency(_)
            | gst::EventView::Qos(_) => true,
            _ => gst::Pad::event_default(pad, Some(&*self.obj()), event),
        }
    }

    /// One step of a pad's streaming thread: its next item pushed.
    fn pad_loop(&self, pad: &gst::Pad, queue: &PadQueue, refused: &mut Option<gst::Caps>) {
        let Some(item) = queue.take() else {
            if self.flushing.load(Ordering::Acquire) && lock(&queue.inner).flushing {
                let _ = pad.pause_task();
            }
            return;
        };
        match item {
            Item::Event(e) => {
                let caps = match e.view() {
                    gst::EventView::Caps(c) => Some(c.caps_owned()),
                    _ => None,
                };
                let eos = matches!(e.view(), gst::EventView::Eos(_));
                let ok = pad.push_event(e);
                if let (false, Some(caps)) = (ok, caps) {
                    if pad.is_linked() && refused.as_ref() != Some(&caps) {
                        let accepted = pad.peer_query_caps(None);
                        post!(
                            self.obj(),
                            Error,
                            gst::CoreError::Negotiation,
                            "shmringdemux: downstream of {} refused caps {} (it accepts {}); a videorate, videoconvert or audioconvert between them may help",
                            pad.name(),
                            caps,
                            accepted
                        );
                        *refused = Some(caps);
                    }
                }
                if eos {
                    // Nothing follows an EOS on this pad.
                    let _ = pad.pause_task();
                }
            }
            Item::Buffer(b) => {
                let res = pad.push(b);
                let combined = lock(&self.combiner).update_pad_flow(pad, res);
                match combined {
                    // Not linked (every pad): a pad linked later gets what comes
                    // then. EOS: downstream finished with this pad.
                    Ok(_) | Err(gst::FlowError::NotLinked) | Err(gst::FlowError::Eos) => {}
                    Err(gst::FlowError::Flushing) => {
                        let _ = pad.pause_task();
                    }
                    Err(e) => {
                        post!(
                            self.obj(),
                            Error,
                            gst::StreamError::Failed,
                            "shmringdemux: internal data stream error: {}: streaming stopped, reason {:?}",
                            pad.name(),
                            e
                        );
                        self.end_all();
                    }
                }
            }
        }
    }

    /// Adds a pad and starts its streaming thread.
    fn add_pad(&self, pad: &gst::Pad, queue: &Arc<PadQueue>) {
        let _ = pad.set_active(true);
        let weak = self.obj().downgrade();
        let (p, q) = (pad.clone(), queue.clone());
        let mut refused = None;
        let started = pad.start_task(move || match weak.upgrade() {
            Some(el) => el.imp().pad_loop(&p, &q, &mut refused),
            None => {
                let _ = p.pause_task();
            }
        });
        if started.is_err() {
            log!(
                CAT,
                Warning,
                &*self.obj(),
                "pad {}: no streaming thread",
                pad.name()
            );
        }
        if self.obj().add_pad(pad).is_err() {
            log!(
                CAT,
                Warning,
                &*self.obj(),
                "pad {} could not be added",
                pad.name()
            );
        }
    }

    /// Sends EOS on every pad not ended yet; the reading task then waits.
    fn end_all(&self) {
        let queues: Vec<Arc<PadQueue>> = {
            let mut guard = lock(&self.state);
            let State::Started(st) = &mut *guard else {
                return;
            };
            st.finished = true;
            st.pads
                .iter_mut()
                .filter(|p| !p.ended)
                .map(|p| {
                    p.ended = true;
                    p.queue.clone()
                })
                .collect()
        };
        for q in queues {
            q.put(Item::Event(gst::event::Eos::new()));
        }
    }

    /// One iteration of the reading task: one record read and, for a stream
    /// downstream takes, queued for its pad.
    fn iterate(&self, task: &gst::Task) {
        if self.flushing.load(Ordering::Acquire) {
            let _ = task.pause();
            return;
        }
        let obj = self.obj();
        let el = obj.upcast_ref::<gst::Element>();
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            let _ = task.pause();
            return;
        };
        if st.finished {
            drop(guard);
            std::thread::sleep(reader::POLL_IDLE);
            return;
        }
        let rec = match st.reader.next(el) {
            Ok(Some(r)) => r,
            Ok(None) => {
                let idle = st.reader.idle(el, st.eos_after.is_some());
                let ends = matches!((st.eos_after, idle), (Some(l), Some(i)) if i >= l);
                drop(guard);
                if ends {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "no producer and no record for a while: EOS on every pad"
                    );
                    self.end_all();
                }
                return;
            }
            Err(e) => {
                drop(guard);
                e.post(el);
                self.end_all();
                let _ = task.pause();
                return;
            }
        };
        let key = (rec.meta.kind, rec.meta.stream);
        // The stream's latest pad; a new one for a stream never seen, or for one
        // that starts again after its end (its pad finished: downstream got EOS).
        let latest = st.pads.iter().rposition(|p| (p.kind, p.stream) == key);
        let (idx, added) = match latest {
            Some(i) if !st.pads[i].ended || matches!(rec.media, MediaRecord::End(_)) => (i, None),
            _ => {
                if let MediaRecord::End(_) = rec.media {
                    // The end of a stream never seen: nothing to end.
                    st.reader.discard(rec);
                    return;
                }
                let appearance = latest.map_or(1, |i| st.pads[i].appearance + 1);
                let pad = self.make_pad(key.0, key.1, appearance);
                let queue = Arc::new(PadQueue::default());
                lock(&self.combiner).add_pad(&pad);
                if appearance > 1 {
                    log!(
                        CAT,
                        Info,
                        el,
                        "stream {} is back after its end: pad {}",
                        key.1,
                        pad.name()
                    );
                }
                st.pads.push(OutPad {
                    pad: pad.clone(),
                    queue: queue.clone(),
                    kind: key.0,
                    stream: key.1,
                    appearance,
                    current: None,
                    ended: false,
                    warned_unlinked: false,
                    last_video_pts: None,
                    holder: reader::Holder::None,
                    lane: Arc::default(),
                });
                (st.pads.len() - 1, Some((pad, queue, st.group)))
            }
        };
        if rec.second_producer {
            post!(
                self.obj(),
                Warning,
                gst::StreamError::Demux,
                "shmringdemux: two producers write stream {} ({}): their sequence numbers interleave; give each shmringsink (or producer) its own stream id",
                key.1,
                if key.0 == kind::VIDEO { "video" } else { "audio" }
            );
        }
        let queue = st.pads[idx].queue.clone();
        let hd = match rec.media {
            MediaRecord::End(_) => {
                let keep = st.keep_running;
                let p = &mut st.pads[idx];
                let name = p.pad.name();
                let was = p.ended;
                p.ended |= !keep;
                st.reader.discard(rec);
                drop(guard);
                if keep {
                    log!(
                        CAT,
                        Info,
                        el,
                        "{name}: ended by its producer; keep-running: the pad waits for it"
                    );
                } else if !was {
                    log!(CAT, Info, el, "{name}: ended by its producer");
                    queue.put(Item::Event(gst::event::Eos::new()));
                }
                return;
            }
            MediaRecord::Frame(hd) => hd,
        };
        let pad = st.pads[idx].pad.clone();
        let changed = st.pads[idx]
            .current
            .as_ref()
            .is_none_or(|(h, _, _)| !same_shape(h, &hd));
        drop(guard);
        let is_new = added.is_some();
        if let Some((pad, queue, group)) = added {
            self.add_pad(&pad, &queue);
            let id = pad.create_stream_id(&*obj, Some(pad.name().as_str()));
            queue.put(Item::Event(
                gst::event::StreamStart::builder(&id)
                    .group_id(group)
                    .build(),
            ));
        }
        if changed {
            let peer = (hd.fps_num == 0 && hd.format.is_video()).then(|| pad.peer_query_caps(None));
            let rate = negotiated_rate(&hd, peer.as_ref());
            let out = match output_for(&hd, rate) {
                Ok(o) => o,
                Err(e) => {
                    if let State::Started(st) = &*lock(&self.state) {
                        st.reader.discard(rec);
                    }
                    self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                    post!(
                        self.obj(),
                        Warning,
                        gst::StreamError::Decode,
                        "shmringdemux: record dropped: {}: {}",
                        pad.name(),
                        e
                    );
                    return;
                }
            };
            queue.put(Item::Event(gst::event::Caps::new(&out.caps)));
            if is_new {
                let segment = gst::FormattedSegment::<gst::ClockTime>::new();
                queue.put(Item::Event(gst::event::Segment::new(&segment)));
            }
            // A new pad may share a muxer with the others: look at every pad again.
            let pads: Vec<gst::Pad> = obj.src_pads();
            let holders: Vec<(gst::Pad, reader::Holder)> = if is_new {
                pads.iter()
                    .map(|p| (p.clone(), downstream_holder(p, &pads)))
                    .collect()
            } else {
                vec![(pad.clone(), downstream_holder(&pad, &pads))]
            };
            let mut guard = lock(&self.state);
            let State::Started(st) = &mut *guard else {
                return;
            };
            for (p, holder) in holders {
                if let reader::Holder::Always(m) = &holder {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "{}: {m} muxes it with another pad's stream: copies",
                        p.name()
                    );
                }
                if let Some(o) = st.pads.iter_mut().find(|o| o.pad == p) {
                    o.holder = holder;
                }
            }
            // What this pad's downstream hold was learned for the old caps says
            // nothing of the new ones (and an encoder drains now).
            st.pads[idx].lane.restart();
            st.pads[idx].current = Some((hd, out, rate));
        }
        self.queue_buffer(idx, rec, hd);
    }

    /// Builds the record's buffer and queues it for pad `idx`.
    fn queue_buffer(&self, idx: usize, rec: Record, hd: MediaHeader) {
        let obj = self.obj();
        let el = obj.upcast_ref::<gst::Element>();
        let mut guard = lock(&self.state);
        let State::Started(st) = &mut *guard else {
            return;
        };
        let (capture, discont, fresh) = (rec.meta.timestamp_ns, rec.discont, rec.fresh());
        let p = &st.pads[idx];
        let (pad, queue) = (p.pad.clone(), p.queue.clone());
        let Some((_, out, rate)) = p.current.as_ref() else {
            st.reader.discard(rec);
            return;
        };
        let (span, rate, video_meta) = (out.span, *rate, out.video_meta);
        let (offsets, strides, planes) = (out.offsets, out.strides, out.planes);
        let (holder, lane) = (p.holder.clone(), p.lane.clone());
        if !pad.is_linked() {
            // Nobody takes this stream: back to the ring at once, said once.
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            st.reader.discard(rec);
            let p = &mut st.pads[idx];
            if !std::mem::replace(&mut p.warned_unlinked, true) {
                let what = if p.appearance > 1 {
                    format!(", back after its end (pad {} of the stream)", p.appearance)
                } else {
                    String::new()
                };
                post!(
                    el,
                    Warning,
                    gst::StreamError::Demux,
                    "shmringdemux: nothing is linked to pad {} (stream {}'s {}{}): its records are dropped (counted in skipped)",
                    pad.name(),
                    p.stream,
                    if p.kind == kind::VIDEO { "video" } else { "audio" },
                    what
                );
            }
            return;
        }
        let mut buffer = st.reader.buffer(el, rec, span, &lane, &holder);
        let pts = st.reader.pts(el, capture, hd.pts_ns, fresh);
        let age = st.reader.max_age_ns;
        let capacity = st.reader.capacity();
        let p = &mut st.pads[idx];
        let duration = crate::media::duration(&hd, rate, pts, &mut p.last_video_pts);
        let layout = video_meta.then_some((&offsets[..planes], &strides[..planes]));
        let b = buffer.get_mut().expect("a new buffer is writable");
        if let Err(e) = crate::media::mark(b, &hd, (pts, duration), discont, layout) {
            log!(CAT, Warning, &*self.obj(), "video meta: {e}");
        }
        drop(guard);
        let frame_ns = duration.map_or(0, |d| d.nseconds());
        let len = (span.1 - span.0).max(1) as u64;
        if self
            .latency
            .note(frame_ns, age, (capacity / len).saturating_mul(frame_ns))
        {
            let _ = obj.post_message(gst::message::Latency::builder().src(&*obj).build());
        }
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        // Waits while this pad's queue is full (its downstream is slow).
        queue.put(Item::Buffer(buffer));
    }
}
