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
//! [`CONSUMER_CHECK`](super::connection::CONSUMER_CHECK) whether the ring
//! still has a consumer; without one it drops at once (one warning), and when
//! the named ring was replaced by a new consumer (`create=true` after a crash)
//! it opens the new one.
//!
//! **End of stream.** At EOS the sink commits an end-of-stream record for its
//! stream and kind: the consumer ends that stream (`shmringsrc` sends EOS,
//! `shmring record` finishes its file).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;

use super::connection::Conn;
use super::pool::{Core, RingPool};
use super::properties::{policy, Settings};
use super::render::Written;
use crate::lock;
use crate::media::{supported_caps, Input};

pub(super) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringsink",
        gst::DebugColorFlags::empty(),
        Some("shmring sink"),
    )
});

pub(super) struct Started {
    pub(super) settings: Settings,
    pub(super) conn: Option<Conn>,
    /// The last attempt to open a ring that was not there.
    pub(super) tried: Option<Instant>,
    pub(super) input: Option<Input>,
    pub(super) sequence: u64,
    /// Why buffers are being dropped, already said on the bus.
    pub(super) warned: Option<&'static str>,
    pub(super) ended: bool,
    /// A ring was found, or replaced, since upstream chose its buffers: ask it to
    /// choose again (this ring's pool).
    pub(super) reconfigure: bool,
    /// The last warning about buffers the ring refused, and the drops counted then.
    pub(super) last_drop_warn: Option<Instant>,
    pub(super) drops_warned: u64,
}

#[derive(Default)]
pub(super) enum State {
    #[default]
    Stopped,
    Started(Box<Started>),
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) committed: AtomicU64,
    pub(super) in_place: AtomicU64,
    pub(super) copies: AtomicU64,
    pub(super) dropped: AtomicU64,
}

/// The `shmringsink` element.
#[derive(Default)]
pub struct ShmRingSink {
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<State>,
    pub(super) counters: Counters,
    pub(super) flushing: AtomicBool,
    /// Caps refused, already reported (an error is posted once per caps).
    refused: Mutex<Option<gst::Caps>>,
}

#[glib::object_subclass]
impl ObjectSubclass for ShmRingSink {
    const NAME: &'static str = "GstShmRingSink";
    type Type = super::ShmRingSink;
    type ParentType = gst_base::BaseSink;
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
