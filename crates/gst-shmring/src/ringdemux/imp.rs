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
//! [`QUEUE_TIME`](super::queue::QUEUE_TIME) of media (or
//! [`QUEUE_BYTES`](super::queue::QUEUE_BYTES), or
//! [`QUEUE_BUFFERS`](super::queue::QUEUE_BUFFERS)); only a pad whose queue is
//! full makes the reader wait. Buffers waiting in a queue count as held
//! downstream for the reader's copy-or-not choice.
//!
//! Locks: `state` is held while reading a record and while building its buffer,
//! never while adding a pad or pushing (pad-added handlers and downstream queries
//! call back into the element); a queue's lock only around its own contents.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::pads::OutPad;
use super::queue::PadQueue;
use crate::lock;
use crate::media::supported_caps;
use crate::reader::{Counters, Latency, Reader, ReaderSettings};

pub(super) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringdemux",
        gst::DebugColorFlags::empty(),
        Some("shmring source with a pad per stream and kind"),
    )
});

pub(super) struct Started {
    pub(super) reader: Reader,
    pub(super) eos_after: Option<Duration>,
    /// A participant's end of stream ends none of its pads (`keep-running`).
    pub(super) keep_running: bool,
    pub(super) pads: Vec<OutPad>,
    pub(super) group: gst::GroupId,
    /// Every pad got EOS (eos-after): the task waits for a state change.
    pub(super) finished: bool,
}

#[derive(Default)]
pub(super) enum State {
    #[default]
    Stopped,
    Started(Box<Started>),
}

/// The `shmringdemux` element.
pub struct ShmRingDemux {
    settings: Mutex<ReaderSettings>,
    pub(super) state: Mutex<State>,
    task: Mutex<Option<gst::Task>>,
    task_lock: gst::TaskLock,
    pub(super) flushing: AtomicBool,
    pub(super) counters: Arc<Counters>,
    pub(super) latency: Latency,
    /// Flow returns of every pad, combined as a demuxer combines them.
    pub(super) combiner: Mutex<gst_base::UniqueFlowCombiner>,
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
}
