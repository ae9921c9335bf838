//! `Consumer` and `Frame`: usable from any thread. The consumer is the core's
//! [`SharedConsumer`] (one receive at a time; releases from any thread, at any
//! time); a frame keeps its [`SharedFrame`] behind a lock with its view count.

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
    Address, AddressArgs, ArgNames, Consumer, ConsumerSettings, Meta, Occupant, Segment, Setting,
    SharedConsumer, SharedFrame, Snapshot,
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

pub fn secs(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| ConfigError::new_err(format!("{what} must be >= 0 seconds, got {s}")))
}

/// Takes ownership of a descriptor number given by Python.
pub fn own_fd(fd: &Int, what: &str) -> PyResult<OwnedFd> {
    let Fd(fd) = fd.get(what)?;
    // SAFETY: the caller hands this descriptor over (documented on the classes).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A descriptor number given by Python, checked (`what` names it in errors) and
/// not yet taken: the core takes it once the arguments go together.
pub fn fd_number(fd: Option<Int>, what: &str) -> PyResult<Option<RawFd>> {
    Ok(opt::<Fd>(fd, what)?.map(|f| f.0))
}

/// Where a ring is, as every class takes it: `address=`, a name, `fd=` (with
/// `eventfd_fd=`) or `fds=`; the rest (creating) is the consumer's.
pub fn where_args(
    address: Option<&str>,
    name: Option<&str>,
    fd: Option<Int>,
    eventfd_fd: Option<Int>,
    fds: Option<Vec<Int>>,
) -> PyResult<AddressArgs> {
    Ok(AddressArgs {
        address: address.map(Into::into),
        name: name.map(Into::into),
        fd: fd_number(fd, "fd")?,
        eventfd_fd: fd_number(eventfd_fd, "eventfd_fd")?,
        fds: fds.map(|l| fd_numbers(&l, "fds")).transpose()?,
        ..Default::default()
    })
}

/// [`fd_number`] for each of a list.
pub fn fd_numbers(list: &[Int], what: &str) -> PyResult<Vec<RawFd>> {
    Ok(each::<Fd>(list, what)?.into_iter().map(|f| f.0).collect())
}

/// The consumer of a ring: creates it or attaches to it, and hands out frames that
/// point into the ring (zero copy).
///
/// Consumer(name=None, *, create=False, capacity=None, max_record=None,
///          log_entries=None, max_producers=None, eventfd=False, memfd=False,
///          persist=False, fd=None, eventfd_fd=None, fds=None, liveness_interval=None,
///          spin=None, overtake_after=None, manual_reset=False, role="owner",
///          tether_stall_limit=None, latency_budget=None, claim_timeout=None,
///          kind=None, stream=None, replace_stale=False, address=None)
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
/// * ``replace_stale=True`` (with ``create=True``): a ring of that name whose
///   consumer is gone (its process was killed, e.g. by SIGTERM) is replaced;
///   without it, such a ring raises ``Exists`` saying so.
/// * ``latency_budget=0.001`` lets a record wait up to that many seconds before
///   the consumer sees it: producers stop waking the consumer for each record,
///   and one wake-up serves every record that came meanwhile.
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
        overtake_after=None, manual_reset=false, role="owner", tether_stall_limit=None,
        latency_budget=None, claim_timeout=None, kind=None, stream=None,
        replace_stale=false, address=None))]
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
        kind: Option<Int>,
        stream: Option<Int>,
        replace_stale: bool,
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
        let tethered = match role {
            "owner" => false,
            "tethered" => true,
            _ => {
                return Err(ConfigError::new_err(format!(
                    "role must be \"owner\" or \"tethered\", got {role:?}"
                )))
            }
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
        if tethered && a.creates() {
            return Err(ConfigError::new_err(
                "a tethered consumer attaches to an existing ring: give a name or fd=, not create=True",
            ));
        }
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
        let c = if tethered {
            Consumer::tethered(seg, opts)
        } else {
            Consumer::with_options(seg, opts)
        }
        .py_err()?;
        Ok(PyConsumer {
            shared: SharedConsumer::new(c),
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

/// Opens `a` without the GIL. A ring it would create that exists already raises
/// `Exists`, saying whether its consumer is alive, or gone: the process that made
/// it ended without closing it (killed by SIGKILL, or by SIGTERM, whose default
/// action in Python runs no clean-up). With `replace_stale`, a ring whose consumer
/// is gone is removed and made again; a live ring, or a file that is no ring, is
/// never touched (the core's rule).
pub fn open(py: Python<'_>, a: Address) -> PyResult<Arc<Segment>> {
    let name = a.describe();
    let occupant = match py.detach(|| a.open()) {
        Err(shmring::Error::Exists { occupant, .. }) => occupant,
        r => return r.py_err(),
    };
    Err(crate::errors::Exists::new_err(match occupant {
        Occupant::Live => format!(
            "ring {name:?} already exists and its consumer is alive (another process \
             consumes it)"
        ),
        Occupant::Stale => format!(
            "ring {name:?} already exists but its consumer is gone: the process that made \
             it ended without closing it (killed by SIGKILL, or by SIGTERM, which runs no \
             clean-up unless the program handles it). Pass replace_stale=True to replace \
             it, or remove it with `shmring rm {name}`"
        ),
        Occupant::Foreign(e) => format!(
            "ring {name:?} already exists and is not a ring this library can use ({e}); it \
             is left alone"
        ),
        Occupant::Unknown => format!("ring {name:?} already exists"),
    }))
}

/// The ring address `text` (the core's text form: NAME, unix:PATH,
/// fd:SEG[,LOCK][,EVENTFD], create:NAME[,OPTION...], memfd:[LABEL][,OPTION...]),
/// parsed by the core. Descriptors an `fd:` address names are taken over, as
/// ``fd=`` and ``fds=`` do.
pub fn address_of(text: &str) -> PyResult<Address> {
    // SAFETY: the package documents that the descriptors an `fd:` address names are
    // handed over (as with fd= and fds=).
    unsafe { Address::parse_taking(text) }.py_err()
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

pub fn tether_dicts<'py>(
    py: Python<'py>,
    tethers: &[shmring::TetherInfo],
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    tethers.iter().map(|t| fields_dict(py, t)).collect()
}

/// A ring's layout as a dict (`Consumer.geometry()`, `Observer.geometry()`).
pub fn geometry_dict<'py>(
    py: Python<'py>,
    g: &shmring::layout::Geometry,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("capacity", g.capacity)?;
    d.set_item("max_record", g.max_record)?;
    d.set_item("log_entries", g.log_entries)?;
    d.set_item("max_producers", g.max_producers)?;
    d.set_item("eventfd", g.flags & shmring::layout::FLAG_EVENTFD != 0)?;
    d.set_item("segment_size", g.total_size)?;
    Ok(d)
}

/// A snapshot as a dict: the names are the core's (`Snapshot::fields`); flags
/// become booleans.
pub fn fields_dict<'py>(py: Python<'py>, s: &impl Snapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for f in s.fields() {
        match f.kind {
            shmring::FieldKind::Flag => d.set_item(f.name, f.value != 0)?,
            shmring::FieldKind::Counter | shmring::FieldKind::Gauge => {
                d.set_item(f.name, f.value)?
            }
        }
    }
    Ok(d)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Held; views may be taken.
    Held,
    /// release() was called while views existed: handed back when the last goes.
    Pending,
    /// Handed back to the ring.
    Released,
}

/// A record received from the ring. Its payload stays in shared memory: the
/// buffer protocol (``memoryview(frame)``, ``numpy.frombuffer(frame, dtype)``),
/// ``frame.array()``, ``frame.planes()`` (video) and ``frame.samples()`` (audio)
/// are zero-copy, read-only views into the ring.
///
/// Metadata: ``stream``, ``kind``, ``timestamp`` (ns), ``flags``, ``seq`` (ring
/// record number), ``sequence`` (media header sequence, else ``seq``). For video
/// and audio records with a valid media header: ``format``, ``width``, ``height``,
/// ``sample_rate``, ``channels``, ``samples``, ``pts_ns``, ``plane_count``,
/// ``header()``; otherwise these are None and ``media_error`` says why.
///
/// Release: ``frame.release()``, leaving ``with ring.next() as frame:``, or
/// dropping the frame and every view of it. **Release is deferred while views
/// exist**: if a memoryview or numpy array of the frame is still alive, release()
/// marks the frame released at once (new views and payload reads raise
/// ``Released``) but the record is handed back to the ring only when the last view
/// is gone, so no view ever points at memory a producer can reuse. Keeping views
/// therefore keeps ring space; producers see a full ring if you keep too many.
/// Release and payload reads may come from any thread: the frame's state and its
/// view count are behind a lock, which nothing holds while calling into Python.
#[pyclass(frozen, module = "shmring._shmring", name = "Frame")]
pub struct PyFrame {
    hold: Mutex<Hold>,
    meta: Meta,
    seq: u64,
    /// The payload's address in this process (metadata: kept after release).
    address: usize,
    media: Option<MediaHeader>,
    /// An end-of-stream record's contents.
    end: Option<EndOfStream>,
    media_error: Option<String>,
    /// The payload length, pointed to by exported buffers' `shape`.
    len: isize,
}

/// A frame's record and the views of it.
struct Hold {
    /// The core's frame, until handed back (it keeps the mapping).
    frame: Option<SharedFrame>,
    state: State,
    /// Live buffer exports and numpy views.
    views: u32,
}

impl PyFrame {
    fn released_error(&self) -> PyErr {
        Released::new_err(format!(
            "frame {} (stream {}) was released; its payload may have been reused",
            self.seq, self.meta.stream
        ))
    }

    /// Counts a new view of the payload and gives its address; `Released` once
    /// released.
    pub fn view_added(&self) -> PyResult<*mut u8> {
        let mut h = lock(&self.hold);
        match (&h.frame, h.state) {
            (Some(f), State::Held) => {
                let ptr = f.payload().as_ptr() as *mut u8;
                h.views += 1;
                Ok(ptr)
            }
            _ => Err(self.released_error()),
        }
    }

    /// A view is gone: the last one of a released frame hands the record back.
    pub fn view_dropped(&self) {
        let frame = {
            let mut h = lock(&self.hold);
            h.views = h.views.saturating_sub(1);
            if h.views == 0 && h.state == State::Pending {
                h.state = State::Released;
                h.frame.take()
            } else {
                None
            }
        };
        // Released outside the frame's lock (it never waits for the consumer).
        drop(frame);
    }

    fn media(&self, what: &str) -> PyResult<&MediaHeader> {
        self.media.as_ref().ok_or_else(|| {
            BadMediaHeader::new_err(match &self.media_error {
                Some(e) => format!("frame {}: {what}: {e}", self.seq),
                None => format!(
                    "frame {}: {what} needs a media record (kind {} or {}), this one is kind {}",
                    self.seq,
                    kind::VIDEO,
                    kind::AUDIO,
                    self.meta.kind
                ),
            })
        })
    }

    fn plane_array<'py>(
        guard: &Bound<'py, ViewGuard>,
        base: *mut u8,
        p: &PlaneLayout,
    ) -> PyResult<Bound<'py, PyAny>> {
        let plane = Plane {
            offset: p.offset,
            shape: &p.shape[..p.ndim],
            byte_strides: &p.strides[..p.ndim],
        };
        let owner = guard.clone().into_any();
        // SAFETY: the layout comes from a header validated against this payload
        // (every plane inside it), and the guard keeps the frame, hence the record
        // and the mapping, alive.
        unsafe {
            match p.elem {
                Elem::U8 => array_of::<u8>(owner, base, &plane, false),
                Elem::I16 => array_of::<i16>(owner, base, &plane, false),
                Elem::F32 => array_of::<f32>(owner, base, &plane, false),
            }
        }
    }
}

#[pymethods]
impl PyFrame {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        if (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a frame is read-only"));
        }
        let this = slf.get();
        let ptr = this.view_added()?;
        // SAFETY: `view` is a valid Py_buffer to fill (checked non-null). The shape
        // and stride pointers stay valid while `obj` (the frame) is referenced by
        // the buffer, and the payload while the frame holds its record, which it
        // does until the export is released (counted in `views`).
        unsafe {
            crate::views::fill_byte_view(
                view,
                slf.clone().into_any().into_ptr(),
                ptr as *mut c_void,
                &this.len,
                true,
                flags,
            )
        };
        Ok(())
    }

    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: *mut ffi::Py_buffer) {
        slf.get().view_dropped();
    }

    /// release(): hands the record back to the ring, now, or when the last view
    /// of it is gone (deferred release, see the class docs). Idempotent; any
    /// thread may call it.
    fn release(&self) {
        let frame = {
            let mut h = lock(&self.hold);
            match h.state {
                State::Held if h.views > 0 => {
                    h.state = State::Pending;
                    None
                }
                State::Held => {
                    h.state = State::Released;
                    h.frame.take()
                }
                _ => None,
            }
        };
        drop(frame);
    }

    /// True once release() was called (even if views still pin the record).
    #[getter]
    fn released(&self) -> bool {
        lock(&self.hold).state != State::Held
    }

    /// Live views (buffer exports and numpy arrays) of this frame.
    #[getter]
    fn views(&self) -> u32 {
        lock(&self.hold).views
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) {
        self.release();
    }

    fn __len__(&self) -> usize {
        self.len as usize
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.len as usize
    }

    #[getter]
    fn stream(&self) -> u32 {
        self.meta.stream
    }

    /// The record's kind: a ``shmring.Kind`` (RAW, VIDEO, AUDIO), or an int for a
    /// kind that is none of those.
    #[getter]
    fn kind(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::media::kind_object(py, self.meta.kind)
    }

    /// Capture time in nanoseconds (CLOCK_MONOTONIC unless the producer chose).
    #[getter]
    fn timestamp(&self) -> u64 {
        self.meta.timestamp_ns
    }

    #[getter]
    fn timestamp_ns(&self) -> u64 {
        self.meta.timestamp_ns
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.meta.flags
    }

    /// The consumer's record number of this frame.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// The media header's number within its stream and kind (an end of stream's
    /// too), or ``seq`` without one.
    #[getter]
    fn sequence(&self) -> u64 {
        match (self.media, self.end) {
            (Some(m), _) => m.sequence,
            (None, Some(e)) => e.sequence,
            _ => self.seq,
        }
    }

    /// True for an end-of-stream record: the producer ended this stream (of this
    /// kind); it carries no frame.
    #[getter]
    fn is_end(&self) -> bool {
        self.end.is_some()
    }

    /// Video's nominal frame rate as (numerator, denominator); (0, 1): variable.
    /// None for audio and other records.
    #[getter]
    fn fps(&self) -> Option<(u32, u32)> {
        self.media
            .filter(|m| m.format.is_video())
            .map(|m| (m.fps_num, m.fps_den))
    }

    /// Payload address in this process (inside ``Consumer.mapping()``).
    #[getter]
    fn address(&self) -> usize {
        self.address
    }

    /// Why the media header was rejected (None if valid or not a media record).
    #[getter]
    fn media_error(&self) -> Option<String> {
        self.media_error.clone()
    }

    #[getter]
    fn is_video(&self) -> bool {
        self.media.is_some_and(|m| m.format.is_video())
    }

    #[getter]
    fn is_audio(&self) -> bool {
        self.media.is_some_and(|m| m.format.is_audio())
    }

    #[getter]
    fn format(&self) -> Option<&'static str> {
        self.media.map(|m| format_name(m.format))
    }

    #[getter]
    fn width(&self) -> Option<u32> {
        self.media.map(|m| m.width)
    }

    #[getter]
    fn height(&self) -> Option<u32> {
        self.media.map(|m| m.height)
    }

    #[getter]
    fn sample_rate(&self) -> Option<u32> {
        self.media.map(|m| m.sample_rate)
    }

    #[getter]
    fn channels(&self) -> Option<u32> {
        self.media.map(|m| m.channels)
    }

    /// Audio samples per channel (the attribute; ``samples()`` is the array).
    #[getter(samples_per_channel)]
    fn samples_per_channel(&self) -> Option<u32> {
        self.media.map(|m| m.samples)
    }

    #[getter]
    fn pts_ns(&self) -> Option<u64> {
        self.media.map(|m| m.pts_ns)
    }

    /// Number of planes in the media header.
    #[getter]
    fn plane_count(&self) -> Option<u32> {
        self.media.map(|m| m.planes)
    }

    /// Row strides of the planes, in bytes.
    #[getter]
    fn strides(&self) -> Option<Vec<u32>> {
        self.media.map(|m| m.stride[..m.planes as usize].to_vec())
    }

    /// The media header as a dict, or None.
    fn header<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.media.as_ref().map(|m| header_dict(py, m)).transpose()
    }

    /// array() -> numpy.ndarray: the whole payload as a read-only uint8 view.
    fn array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let (guard, base) = ViewGuard::new(slf)?;
        let p = PlaneLayout {
            offset: 0,
            ndim: 1,
            shape: [slf.get().len as usize, 0, 0],
            strides: [1, 0, 0],
            elem: Elem::U8,
        };
        Self::plane_array(&guard, base, &p)
    }

    /// planes() -> tuple of numpy arrays (video): (Y, U, V) of shapes (h, w),
    /// (h/2, w/2), (h/2, w/2) for I420; (Y, UV) with UV (h/2, w/2, 2) for NV12;
    /// ((h, w, 4),) for RGBA. Row strides are the header's. Read-only views into
    /// the ring.
    fn planes<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let this = slf.get();
        let h = *this.media("planes()")?;
        if !h.format.is_video() {
            return Err(BadMediaHeader::new_err(format!(
                "planes() needs a video frame; frame {} is {} audio (use samples())",
                this.seq,
                format_name(h.format)
            )));
        }
        let (guard, base) = ViewGuard::new(slf)?;
        let (layouts, n) = plane_layouts(&h);
        let arrays = layouts[..n]
            .iter()
            .map(|p| Self::plane_array(&guard, base, p))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(slf.py(), arrays)
    }

    /// samples() -> numpy array (audio) of shape (samples, channels), dtype int16
    /// (pcm_s16) or float32 (pcm_f32). A read-only view into the ring.
    fn samples<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let h = *this.media("samples()")?;
        if !h.format.is_audio() {
            return Err(BadMediaHeader::new_err(format!(
                "samples() needs an audio frame; frame {} is {} video (use planes())",
                this.seq,
                format_name(h.format)
            )));
        }
        let (guard, base) = ViewGuard::new(slf)?;
        let (layouts, _) = plane_layouts(&h);
        Self::plane_array(&guard, base, &layouts[0])
    }

    /// tobytes() -> bytes: a copy of the payload.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        // The copy is made under the frame's lock, so a release on another thread
        // waits for it (the bytes object is allocated before: nothing in the copy
        // calls into Python).
        PyBytes::new_with(py, self.len as usize, |buf| {
            let h = lock(&self.hold);
            match (&h.frame, h.state) {
                (Some(f), State::Held) => {
                    buf.copy_from_slice(f.payload());
                    Ok(())
                }
                _ => Err(self.released_error()),
            }
        })
    }

    fn __repr__(&self) -> String {
        let state = match lock(&self.hold).state {
            State::Held => "",
            State::Pending => " released(pending views)",
            State::Released => " released",
        };
        match &self.media {
            Some(m) if m.format.is_video() => format!(
                "<shmring.Frame seq={} stream={} {} {}x{} sequence={} {} bytes{state}>",
                self.seq,
                self.meta.stream,
                format_name(m.format),
                m.width,
                m.height,
                m.sequence,
                self.len
            ),
            Some(m) => format!(
                "<shmring.Frame seq={} stream={} {} {}Hz x{} samples={} {} bytes{state}>",
                self.seq,
                self.meta.stream,
                format_name(m.format),
                m.sample_rate,
                m.channels,
                m.samples,
                self.len
            ),
            None => format!(
                "<shmring.Frame seq={} stream={} kind={} {} bytes{state}>",
                self.seq, self.meta.stream, self.meta.kind, self.len
            ),
        }
    }
}
