//! The reading task: one record per iteration, a pad added for a stream and
//! kind not seen yet, caps renegotiated when a header changes, an end-of-stream
//! record turned into EOS on its pad, and each frame's buffer queued for its pad.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use gst::prelude::*;
use gst::subclass::prelude::*;
use shmring::media::{kind, MediaHeader, MediaRecord};

use super::imp::{ShmRingDemux, State, CAT};
use super::pads::OutPad;
use super::queue::{Item, PadQueue};
use crate::lock;
use crate::media::{negotiated_rate, output_for, same_shape};
use crate::reader::{self, downstream_holder, Record};

impl ShmRingDemux {
    /// One iteration of the reading task: one record read and, for a stream
    /// downstream takes, queued for its pad.
    pub(super) fn iterate(&self, task: &gst::Task) {
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
