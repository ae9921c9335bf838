//! The output pads: made as a stream's records arrive (`video_ID`, `audio_ID`,
//! and `video_ID_2`, ... for a participant who comes back), their queries and
//! events, the streaming thread that pushes each pad's queue, and EOS on every
//! pad.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use gst::prelude::*;
use gst::subclass::prelude::*;
use shmring::media::{kind, MediaHeader};

use super::imp::{ShmRingDemux, State, CAT};
use super::queue::{Item, PadQueue};
use crate::lock;
use crate::media::Output;
use crate::reader;

/// One output pad: one stream id's video or audio.
pub(super) struct OutPad {
    pub(super) pad: gst::Pad,
    pub(super) queue: Arc<PadQueue>,
    pub(super) kind: u32,
    pub(super) stream: u32,
    /// Which of the stream's pads this is: 1, then 2, ... for a participant who
    /// comes back after its end (without `keep-running`).
    pub(super) appearance: u32,
    pub(super) current: Option<(MediaHeader, Output, gst::Fraction)>,
    pub(super) ended: bool,
    /// Said on the bus that nothing is linked to it.
    pub(super) warned_unlinked: bool,
    pub(super) last_video_pts: Option<gst::ClockTime>,
    /// What keeps frames downstream of this pad.
    pub(super) holder: reader::Holder,
    /// How long this pad's downstream keeps buffers.
    pub(super) lane: Arc<reader::Lane>,
}

impl ShmRingDemux {
    /// A new pad for `kind` of stream `stream`, its `appearance`th (not added
    /// yet): `video_ID`, then `video_ID_2`, ... for a participant who comes back.
    pub(super) fn make_pad(&self, k: u32, stream: u32, appearance: u32) -> gst::Pad {
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
    pub(super) fn add_pad(&self, pad: &gst::Pad, queue: &Arc<PadQueue>) {
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
    pub(super) fn end_all(&self) {
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
}
