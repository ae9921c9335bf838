//! Writing a buffer into the ring (in place if upstream wrote it into one of
//! the pool's reservations, else one copy) or dropping it (counted, said on the
//! bus as sinks say it), and the end-of-stream record.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use shmring::media::{EndOfStream, MEDIA_HEADER_SIZE};
use shmring::{Error, FullPolicy, Meta};

use super::imp::{ShmRingSink, Started, State, CAT};
use crate::lock;
use crate::media::Input;

/// At most one warning about buffers the ring refused per this interval (each
/// one is counted, and has its QoS message).
const DROP_WARN_INTERVAL: Duration = Duration::from_secs(1);

/// Did `why` come from a full ring, a reset, or a consumer that is gone (the
/// buffer is dropped and counted, and writing goes on)?
fn is_drop(why: &Error) -> bool {
    matches!(
        why,
        Error::Full { .. } | Error::Timeout { .. } | Error::NoConsumer(_) | Error::Abandoned { .. }
    )
}

/// What became of a buffer.
pub(super) enum Written {
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
    /// The buffer's capture time on the monotonic clock the ring's timestamps use.
    pub(super) fn capture_ns(&self, buffer: &gst::BufferRef) -> u64 {
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

    /// Writes `buffer` into the ring (in place if it is one of our pool's
    /// reservations, else one copy), or drops it.
    pub(super) fn write(
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

    /// A buffer dropped (`why`, after waiting `waited` for room): counted, a QoS
    /// message on the bus and, after a wait, a QoS event upstream saying how late
    /// it was (when `qos` is on, as by default), and for the
    /// buffers the ring refused (`said`: not said otherwise) a warning at most once
    /// per [`DROP_WARN_INTERVAL`]. Called without the state's lock.
    pub(super) fn dropped(&self, buffer: &gst::BufferRef, why: &str, waited: Duration, said: bool) {
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
    pub(super) fn end_stream(&self) {
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
