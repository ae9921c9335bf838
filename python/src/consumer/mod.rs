//! `Consumer` and `Frame`: usable from any thread. The consumer is the core's
//! [`SharedConsumer`] (one receive at a time; releases from any thread, at any
//! time); a frame keeps its [`SharedFrame`] behind a lock with its view count.

//!
//! The folder: this file is the class; `opening.rs` turns its arguments into a
//! ring (the core's `AddressArgs`, descriptors handed over, `Exists` worded for
//! Python); `conversion.rs` makes Python values of the core's (seconds, dicts of
//! snapshots and layouts); `frame.rs` is `Frame`, its views and its deferred
//! release.

mod conversion;
mod frame;
mod opening;

pub use conversion::*;
pub use frame::*;
pub use opening::*;

use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use shmring::media::{kind, EndOfStream, MediaHeader, MediaRecord};
use shmring::{
    Address, AddressArgs, ArgNames, Consumer, ConsumerSettings, Meta, Occupant, Reader, ReaderKind,
    Segment, Setting, SharedConsumer, SharedFrame, Snapshot,
};

use crate::args::{each, opt, Fd, Int};
use crate::cleanup::{lock, CreatedRing};
use crate::errors::{BadMediaHeader, ConfigError, IntoPy, Released};
use crate::media::{format_name, header_dict, plane_layouts, read, Elem, PlaneLayout};
use crate::views::{array_of, Plane, ViewGuard};

/// Longest stretch a blocking wait spends without the GIL before checking for
/// signals (Ctrl-C).
pub const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// How long the next step of a wait until `deadline` (None: none) may last: up to
/// [`SIGNAL_CHECK`], so that signals are checked between steps.
pub fn step_until(deadline: Option<Instant>) -> Duration {
    match deadline {
        None => SIGNAL_CHECK,
        Some(d) => d
            .saturating_duration_since(Instant::now())
            .min(SIGNAL_CHECK),
    }
}

///
/// Consumer(name=None, *, create=False, capacity=None, max_record=None,
///          log_entries=None, max_producers=None, eventfd=False, memfd=False,
///          persist=False, fd=None, eventfd_fd=None, fds=None, liveness_interval=None,
///          spin=None, overtake_after=None, manual_reset=False, role="consumer",
///          tether_stall_limit=None, latency_budget=None, claim_timeout=None, max_age=None,
///          kind=None, stream=None, replace_stale=None, address=None)
///
/// Sizes and options left at None are the library's defaults (a 16 MiB ring, 64
/// producer slots, a 50 ms liveness interval, ...). The options are the core's
/// ``ConsumerOptions``, by the names every binding uses; durations are in seconds,
/// where None or 0 is the library's default and ``math.inf`` turns off what is
/// optional (``overtake_after``, ``latency_budget``, ``claim_timeout``).
///
/// * ``Consumer("cam0")`` attaches to ``/dev/shm/cam0``.
/// * ``Consumer("cam0", create=True, capacity=1 << 26)`` creates it (mode 0600),
///   removed again (its name; frames still held keep their memory) when the
///   consumer is closed, garbage-collected or the interpreter exits, unless
///   ``persist=True``.
/// * ``Consumer("cam0", create=True, memfd=True)`` creates an anonymous sealed
///   memfd; hand ``fileno()`` (and ``eventfd_fileno()``) to producers.
/// * ``Consumer(fds=[...])`` attaches to a ring received as its descriptors (the
///   creator's ``descriptors()``, in that order); ``Consumer(fd=N, eventfd_fd=M)``
///   to a named ring's file. The consumer takes ownership of them.
/// * ``eventfd=True`` makes producers wake the consumer through an eventfd, which
///   ``frames()`` (asyncio) needs.
/// * ``Consumer("cam0", role="tethered")`` (or ``fd=``) attaches a *tethered*
///   consumer beside the ring's own: it gets every record from where the ring's
///   consumer is when that one next looks at the ring, and holds each record's
///   space until it releases it. The ring's consumer expels one that stops
///   releasing for its ``tether_stall_limit`` seconds (None: the library's
///   default); the tethered consumer's calls then raise ``Detached``.
/// * ``Consumer(address="create:cam0,capacity=64M")`` reaches the ring by its
///   address, the text every binding and the ``shmring`` command take: ``NAME``,
///   ``unix:PATH`` (a consumer's socket), ``fd:SEG[,LOCK][,EVENTFD]`` (descriptors,
///   taken over as with ``fds=``), ``create:NAME[,OPTION...]`` (a stale ring of
///   that name is replaced; ``stale=refuse`` raises ``Exists`` instead) or
///   ``memfd:[LABEL][,OPTION...]``; the options are ``capacity=``, ``max_record=``
///   (bytes, or with K, M, G), ``log_entries=``, ``max_producers=``, ``eventfd``,
///   ``huge_pages``. Bad text raises ``ConfigError`` saying what is wrong.
/// * ``create=True`` replaces a ring of that name whose consumer is gone (its
///   process was killed, e.g. by SIGTERM), as creating does in every binding; a
///   ring whose consumer is alive raises ``Exists``. ``replace_stale=False``
///   (with ``create=True``): a stale ring raises ``Exists`` too.
/// * ``latency_budget=0.001`` lets a record wait up to that many seconds before
///   the consumer sees it: producers stop waking the consumer for each record,
///   and one wake-up serves every record that came meanwhile.
/// * ``max_age`` (seconds; None: off) releases unread, counted in
///   ``records_filtered``, a record older than that (by its timestamp on
///   CLOCK_MONOTONIC) when the consumer reaches it: a live viewer that fell
///   behind skips to fresh frames instead of working through a backlog.
/// * ``claim_timeout`` (seconds; None: the library's default) takes back a
///   reservation still open that long after the consumer first saw it, whoever
///   holds it (a stuck producer, or a claim a peer made up in a live producer's
///   name); ``math.inf``: wait for live producers for ever (trusted producers).
///
/// Frames: ``ring.next(timeout=None)`` returns the next Frame (None on timeout),
/// ``ring.try_next()`` does not wait, ``for frame in ring:`` waits forever.
/// A frame is handed back to the ring by ``frame.release()``, at the end of
/// ``with ring.next() as frame:``, or when the frame and every view of it are gone.
/// One consumer per ring (plus tethered ones). A consumer and its frames may be
/// used from any thread: one receive runs at a time (others wait for it, without
/// the GIL), and a frame may be released, or dropped, on any thread.
#[pyclass(frozen, subclass, module = "shmring._shmring", name = "Consumer")]
pub struct PyConsumer {
    /// The core's shared consumer: it counts the frames handed out, and detaches
    /// once closed and the last is released.
    shared: SharedConsumer,
    /// Resets already reported through the logger.
    resets_logged: AtomicU64,
    /// The named ring this consumer created: its name goes at close.
    created: Option<Arc<CreatedRing>>,
}

impl Drop for PyConsumer {
    fn drop(&mut self) {
        self.close_now();
    }
}

impl PyConsumer {
    /// Runs `f` on the consumer, waiting without the GIL for a receive on another
    /// thread; `Closed` once closed.
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Consumer) -> R + Send) -> PyResult<R> {
        let shared = &self.shared;
        py.detach(|| shared.with(f)).py_err()
    }

    /// The ring (no need to wait for the consumer); `Closed` once closed.
    pub fn segment(&self) -> PyResult<Arc<Segment>> {
        match self.shared.segment() {
            Some(seg) if !self.shared.is_closed() => Ok(seg),
            _ => Err(crate::errors::to_py(shmring::Error::Closed(
                self.shared.label().clone(),
            ))),
        }
    }

    /// Stops consuming and removes the name of a ring created here (frames still
    /// held keep their memory).
    fn close_now(&self) {
        if let Some(c) = &self.created {
            c.remove();
        }
        self.shared.close();
    }

    fn make_frame<'py>(py: Python<'py>, frame: SharedFrame) -> PyResult<Bound<'py, PyFrame>> {
        let raw = frame.raw();
        let (media, end, media_error) =
            if raw.meta.kind == kind::VIDEO || raw.meta.kind == kind::AUDIO {
                match read(raw.meta.kind, frame.payload()) {
                    Ok(MediaRecord::Frame(h)) => (Some(h), None, None),
                    Ok(MediaRecord::End(e)) => (None, Some(e), None),
                    Err(e) => (None, None, Some(e.value(py).to_string())),
                }
            } else {
                (None, None, None)
            };
        let frame = PyFrame {
            hold: Mutex::new(Hold {
                frame: Some(frame),
                state: State::Held,
                views: 0,
            }),
            meta: raw.meta,
            seq: raw.seq,
            address: raw.ptr as usize,
            media,
            end,
            media_error,
            len: raw.len as isize,
        };
        // On error the frame is dropped, and its record released.
        Bound::new(py, frame)
    }

    /// Says through the ``shmring`` logger when the consumer reset the ring by
    /// itself since we last looked (a warning: corruption was found and recovered).
    fn log_new_resets(&self, py: Python<'_>) -> PyResult<()> {
        // Closed by another thread meanwhile: nothing more to report (the frame just
        // received is still handed out).
        let Ok(health) = self.with(py, |c| c.health()) else {
            return Ok(());
        };
        let seen = self.resets_logged.swap(health.resets, Ordering::Relaxed);
        if health.resets == seen {
            return Ok(());
        }
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("shmring",))?;
        logger.call_method1(
            "warning",
            (
                "ring %s: corruption found (%s); the ring was reset and consumption goes on (%d resets)",
                self.shared.label().to_string(),
                health.last_corruption.unwrap_or("unknown"),
                health.resets,
            ),
        )?;
        Ok(())
    }

    fn next_impl<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<Bound<'py, PyFrame>>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let step = step_until(deadline);
            let shared = &self.shared;
            let got = if step.is_zero() {
                py.detach(|| shared.try_next())
            } else {
                py.detach(|| shared.next_timeout(Some(step)))
            }
            .py_err()?;
            self.log_new_resets(py)?;
            if let Some(frame) = got {
                return Self::make_frame(py, frame).map(Some);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl PyConsumer {
    #[new]
    #[pyo3(signature = (name=None, *, create=false, capacity=None, max_record=None,
        log_entries=None, max_producers=None, eventfd=false, memfd=false, persist=false,
        fd=None, eventfd_fd=None, fds=None, liveness_interval=None, spin=None,
        overtake_after=None, manual_reset=false, role="consumer", tether_stall_limit=None,
        latency_budget=None, claim_timeout=None, max_age=None, kind=None, stream=None,
        replace_stale=None, address=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: Option<&str>,
        create: bool,
        capacity: Option<Int>,
        max_record: Option<Int>,
        log_entries: Option<Int>,
        max_producers: Option<Int>,
        eventfd: bool,
        memfd: bool,
        persist: bool,
        fd: Option<Int>,
        eventfd_fd: Option<Int>,
        fds: Option<Vec<Int>>,
        liveness_interval: Option<f64>,
        spin: Option<Int>,
        overtake_after: Option<f64>,
        manual_reset: bool,
        role: &str,
        tether_stall_limit: Option<f64>,
        latency_budget: Option<f64>,
        claim_timeout: Option<f64>,
        max_age: Option<f64>,
        kind: Option<Int>,
        stream: Option<Int>,
        replace_stale: Option<bool>,
        address: Option<&str>,
        py: Python<'_>,
    ) -> PyResult<Self> {
        // The core's rules: None or 0 the default, math.inf never.
        let setting = |v: Option<f64>, name: &str| {
            Setting::from_f64(v, Duration::from_secs(1), name).py_err()
        };
        let opts = ConsumerSettings {
            liveness_interval: setting(liveness_interval, "liveness_interval")?,
            spin: opt(spin, "spin")?,
            overtake_after: setting(overtake_after, "overtake_after")?,
            manual_reset,
            tether_stall_limit: setting(tether_stall_limit, "tether_stall_limit")?,
            latency_budget: setting(latency_budget, "latency_budget")?,
            claim_timeout: setting(claim_timeout, "claim_timeout")?,
            max_age: setting(max_age, "max_age")?,
            // The filter, as a tap's: None takes any.
            kind: opt(kind, "kind")?,
            stream: opt(stream, "stream")?,
        }
        .options()
        .py_err()?;
        let capacity = opt::<u64>(capacity, "capacity")?;
        let max_record = opt::<u64>(max_record, "max_record")?;
        let log_entries = opt::<u32>(log_entries, "log_entries")?;
        let max_producers = opt::<u32>(max_producers, "max_producers")?;
        // The core's reader kinds; a tap is a class of its own (`Tap`: copies,
        // not frames in place).
        let kind = match role
            .parse::<ReaderKind>()
            .map_err(|e| ConfigError::new_err(format!("role: {e}")))?
        {
            ReaderKind::Tap => {
                return Err(ConfigError::new_err(
                    "role=\"tap\": a tap is shmring.Tap (it copies records, holding nothing); \
                     a Consumer's role is \"consumer\" or \"tethered\"",
                ))
            }
            kind => kind,
        };
        let args = AddressArgs {
            create,
            memfd,
            replace_stale,
            capacity,
            max_record,
            log_entries,
            max_producers,
            eventfd: eventfd.then_some(true),
            ..where_args(address, name, fd, eventfd_fd, fds)?
        };
        // SAFETY: the package documents that the descriptors given (fd=, fds=,
        // eventfd_fd=, an fd: address) are handed over.
        let a = unsafe { args.address(&ArgNames::PYTHON) }.py_err()?;
        kind.may_open(&a).py_err()?;
        // Whether this call creates a named ring (its name is removed at close).
        let creates_named = matches!(a, Address::Create { .. });
        let seg = open(py, a)?;
        let created = creates_named.then(|| CreatedRing::register(&seg));
        if persist {
            if let Some(c) = &created {
                c.keep();
            }
            seg.persist();
        }
        let reader = Reader::consume(seg, kind, opts).py_err()?;
        Ok(PyConsumer {
            shared: reader
                .into_consumer()
                .ok_or_else(|| ConfigError::new_err("a Consumer reads in place"))?,
            resets_logged: AtomicU64::new(0),
            created,
        })
    }

    /// next(timeout=None) -> Frame | None
    ///
    /// The next frame, waiting up to ``timeout`` seconds (None: forever). Returns
    /// None when the time runs out. The GIL is released while waiting.
    #[pyo3(signature = (timeout=None))]
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyFrame>>> {
        let t = timeout.map(|t| secs(t, "timeout")).transpose()?;
        self.next_impl(py, t)
    }

    /// try_next() -> Frame | None
    ///
    /// The next frame if one is ready, without waiting. Call it at least every
    /// ``liveness_interval`` while waiting so a dead producer's claim is skipped.
    fn try_next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyFrame>>> {
        self.next_impl(py, Some(Duration::ZERO))
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyFrame>>> {
        if self.shared.is_closed() {
            return Ok(None); // StopIteration
        }
        self.next_impl(py, None)
    }

    /// arm() -> bool
    ///
    /// For eventfd rings (asyncio): asks producers to signal the eventfd. Returns
    /// True if a frame is already there (then call try_next() instead of waiting).
    /// Pair every False return with disarm() after the wait.
    /// The ring's consumer only: a tethered one waits in next().
    fn arm(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| ring_consumer_only(c).map(|()| c.arm()))?
            .map_err(ConfigError::new_err)
    }

    /// disarm(): ends a wait started with arm() and drains the eventfd.
    fn disarm(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |c| ring_consumer_only(c).map(|()| c.disarm()))?
            .map_err(ConfigError::new_err)
    }

    /// True for a tethered consumer (``role="tethered"``).
    #[getter]
    fn is_tethered(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| c.is_tethered())
    }

    /// The tethered consumers of the ring: a list of dicts (line, requested, pid,
    /// records_consumed, bytes_consumed, lost, lag_records, lag_bytes).
    fn tethers<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        tether_dicts(py, &self.segment()?.tethers())
    }

    /// A read-only descriptor of the ring, for taps (``Tap(fd=os.dup(n))``) in
    /// this process or another. Owned by the consumer; do not close it.
    fn read_only_fileno(&self) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        Ok(self.segment()?.read_only_fd().py_err()?.as_raw_fd())
    }

    /// The ring's descriptors, in the order a producer in another process needs
    /// them (``Producer(fds=...)``): the segment, a memfd ring's lock file, an
    /// eventfd ring's eventfd. Owned by the consumer; do not close them.
    fn descriptors(&self) -> PyResult<Vec<i32>> {
        use std::os::fd::AsRawFd;
        Ok(self
            .segment()?
            .descriptors()
            .iter()
            .map(|f| f.as_raw_fd())
            .collect())
    }

    /// The eventfd that becomes readable when data is ready (rings created with
    /// eventfd=True), or None (it is also the last of ``descriptors()``).
    fn eventfd_fileno(&self) -> PyResult<Option<i32>> {
        use std::os::fd::AsRawFd;
        Ok(self.segment()?.eventfd().map(|f| f.as_raw_fd()))
    }

    /// The segment's descriptor (a memfd for memfd rings; producers of a memfd
    /// ring need all of ``descriptors()``). Owned by the consumer; do not close it.
    fn fileno(&self) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        Ok(self.segment()?.fd().as_raw_fd())
    }

    /// mapping() -> (address, length) of the ring's shared-memory mapping in this
    /// process. Every frame's payload lies inside it.
    fn mapping(&self) -> PyResult<(usize, usize)> {
        let (p, l) = self.segment()?.mapping();
        Ok((p as usize, l))
    }

    /// The segment's name: "/name", "memfd:name" or "fd:N".
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.segment()?.name().to_string())
    }

    /// The ring's layout: capacity, max_record, log_entries, max_producers, eventfd.
    fn geometry<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        geometry_dict(py, self.segment()?.geometry())
    }

    /// A snapshot of the ring's counters as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(py, &self.segment()?.stats())
    }

    /// Seconds between liveness checks of a pending producer claim.
    #[getter]
    fn liveness_interval(&self, py: Python<'_>) -> PyResult<f64> {
        self.with(py, |c| c.options().liveness_interval.as_secs_f64())
    }

    /// Frames handed out and not yet handed back to the ring.
    #[getter]
    fn frames_alive(&self) -> u64 {
        self.shared.outstanding()
    }

    /// Records the core counts as held (handed out, or released out of order and
    /// not yet passed by the read cursor).
    fn outstanding(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| c.outstanding())
    }

    /// Frees the producer slots of dead producers that hold nothing.
    fn reap(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |c| c.reap())
    }

    /// Resets the ring by hand (the consumer does this by itself on corruption
    /// unless ``manual_reset=True``): forgets every claim in flight. Frames still
    /// alive stay valid. Raises Corrupt while frames from before an earlier reset
    /// are still alive.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        py.detach(|| shared.with_mut(|c| c.reset()))
            .py_err()?
            .py_err()
    }

    /// How many times this consumer reset the ring (by itself or through reset()).
    /// Each automatic reset is also logged as a warning on the ``shmring`` logger.
    #[getter]
    fn resets(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| c.resets())
    }

    /// Why the last reset was made (None: no reset yet).
    #[getter]
    fn last_reset_cause(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.with(py, |c| c.health().last_corruption)
    }

    /// Keep a named ring created here after the consumer is closed (and after
    /// this process).
    fn persist(&self) -> PyResult<()> {
        let seg = self.segment()?;
        if let Some(c) = &self.created {
            c.keep();
        }
        seg.persist();
        Ok(())
    }

    /// close(): stops consuming, and removes the name of a named ring created here
    /// (unless kept with ``persist``). Frames still alive stay valid; the ring is
    /// detached once they are released. Idempotent.
    fn close(&self) {
        self.close_now();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) {
        self.close_now();
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.with(py, |c| (c.is_tethered(), c.segment().geometry().capacity)) {
            Ok((tethered, capacity)) => format!(
                "<shmring.Consumer {}{} capacity={} frames_alive={}>",
                self.shared.label(),
                if tethered { " tethered" } else { "" },
                capacity,
                self.shared.outstanding()
            ),
            Err(_) => format!("<shmring.Consumer {} closed>", self.shared.label()),
        }
    }
}

/// The eventfd wakes the ring's consumer only (Err: the message of a ConfigError).
fn ring_consumer_only(c: &Consumer) -> Result<(), String> {
    if c.is_tethered() {
        return Err(format!(
            "a tethered consumer of {} does not wait on the eventfd; wait in next()",
            c.segment().name()
        ));
    }
    Ok(())
}
