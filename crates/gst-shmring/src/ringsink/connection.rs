//! The ring the sink writes into: opened by name as soon as it appears, checked
//! for a consumer at most every [`CONSUMER_CHECK`], and replaced when a new
//! consumer created the named ring again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gst::prelude::*;
use gst::subclass::prelude::*;
use shmring::{Producer, Segment};

use super::imp::{ShmRingSink, Started, CAT};
use super::pool::{Core, RingPool};
use super::properties::{policy, Settings};

/// How often the sink looks for its ring (not there yet) and for its consumer.
pub(super) const CONSUMER_CHECK: Duration = Duration::from_millis(100);

/// How long `wait-for-consumer` sleeps between looks (flushing interrupts it).
const WAIT_STEP: Duration = Duration::from_millis(10);

/// The ring the sink writes into.
pub(super) struct Conn {
    pub(super) seg: Arc<Segment>,
    pub(super) producer: Producer,
    pub(super) pool: Option<(gst::Caps, Arc<Core>, RingPool)>,
    /// The ring's consumer, as last checked.
    pub(super) consumer: bool,
    pub(super) checked: Instant,
}

impl ShmRingSink {
    /// Opens the ring (`None`: not there yet; `Err`: it cannot be written into).
    pub(super) fn connect(&self, s: &Settings) -> Result<Option<Conn>, gst::ErrorMessage> {
        let seg = match s.location.open(self.obj().upcast_ref()) {
            Ok(seg) => seg,
            // Not there yet: the consumer has not created it. A descriptor is
            // given once, so it either works now or never.
            Err(e) if s.location.fd < 0 && e.contains("does not exist") => return Ok(None),
            Err(e) => {
                return Err(error_msg!(
                    gst::ResourceError::OpenWrite,
                    "shmringsink: cannot open ring {}: {}",
                    s.location.describe(),
                    e
                ))
            }
        };
        let mut producer = seg.producer().map_err(|e| {
            error_msg!(
                gst::ResourceError::OpenWrite,
                "shmringsink: cannot write into ring {}: {}",
                s.location.describe(),
                e
            )
        })?;
        producer.set_policy(policy(s, &producer));
        Ok(Some(Conn {
            consumer: seg.consumer_alive(),
            checked: Instant::now(),
            seg,
            producer,
            pool: None,
        }))
    }

    /// Says once, on the bus, why buffers are dropped.
    fn warn_dropping(&self, st: &mut Started, why: &'static str) {
        if st.warned == Some(why) {
            return;
        }
        st.warned = Some(why);
        let ring = st.settings.location.describe();
        let text = match why {
            "no-ring" => format!(
                "shmringsink: ring {ring} does not exist yet: buffers are dropped until its consumer creates it (wait-for-consumer=true waits instead)"
            ),
            _ => format!(
                "shmringsink: ring {ring} has no consumer: buffers are dropped at once until one attaches (wait-for-consumer=true waits instead)"
            ),
        };
        post!(self.obj(), Warning, gst::ResourceError::Write, "{}", text);
    }

    /// The ring with a live consumer, waiting or not as the settings say. `None`:
    /// drop this buffer (counted and said).
    pub(super) fn ready(&self, st: &mut Started) -> Result<bool, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::Acquire) {
                return Err(gst::FlowError::Flushing);
            }
            let now = Instant::now();
            if st.conn.is_none()
                && st
                    .tried
                    .is_none_or(|t| now.duration_since(t) >= CONSUMER_CHECK)
            {
                st.tried = Some(now);
                match self.connect(&st.settings) {
                    Ok(c) => Self::replace_conn(st, c),
                    Err(e) => {
                        self.post_error_message(e);
                        return Err(gst::FlowError::Error);
                    }
                }
                if st.conn.is_some() {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "ring {} is there",
                        st.settings.location.describe()
                    );
                }
            }
            let mut why = "no-ring";
            if let Some(c) = st.conn.as_mut() {
                if now.duration_since(c.checked) >= CONSUMER_CHECK {
                    c.checked = now;
                    c.consumer = c.seg.consumer_alive();
                }
                why = "no-consumer";
            }
            // A ring whose consumer is gone may have been replaced by a new one
            // under the same name (create=true after a crash): open that.
            let stale = st.conn.as_ref().is_some_and(|c| !c.consumer)
                && st.settings.location.fd < 0
                && st
                    .tried
                    .is_none_or(|t| now.duration_since(t) >= CONSUMER_CHECK);
            if stale {
                st.tried = Some(now);
                if let Ok(Some(fresh)) = self.connect(&st.settings) {
                    if fresh.consumer
                        && !Arc::ptr_eq(&fresh.seg, &st.conn.as_ref().expect("stale").seg)
                    {
                        log!(
                            CAT,
                            Info,
                            &*self.obj(),
                            "ring {} has a new consumer",
                            st.settings.location.describe()
                        );
                        Self::replace_conn(st, Some(fresh));
                    }
                }
            }
            let live = st.conn.as_ref().is_some_and(|c| c.consumer);
            if let Some((_, core, _)) = st.conn.as_ref().and_then(|c| c.pool.as_ref()) {
                core.set_no_consumer(!live);
            }
            if live {
                if st.warned.take().is_some() {
                    log!(
                        CAT,
                        Info,
                        &*self.obj(),
                        "ring {} has a consumer again: writing",
                        st.settings.location.describe()
                    );
                }
                return Ok(true);
            }
            if !st.settings.wait_for_consumer {
                self.warn_dropping(st, why);
                return Ok(false);
            }
            std::thread::sleep(WAIT_STEP);
        }
    }

    /// The sink writes into `conn` from now on (a ring found, or one that replaced
    /// the ring it wrote into). The old ring's pool is retired: upstream's buffers
    /// from it are copied, never reserved in a ring nobody reads (which, full,
    /// would make every buffer wait the full-ring timeout); upstream is asked to
    /// choose its buffers again, and gets the new ring's pool.
    fn replace_conn(st: &mut Started, conn: Option<Conn>) {
        let found = conn.is_some();
        if let Some((_, core, _)) = std::mem::replace(&mut st.conn, conn).and_then(|c| c.pool) {
            core.retire();
        }
        st.reconfigure |= found;
    }
}
