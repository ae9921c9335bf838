//! `Producer` and `Reservation`: usable from any thread. The core's producer is
//! `Send`, not `Sync`: it lives behind a lock that a call takes without the GIL,
//! and that nothing holds while calling into Python.

//!
//! The folder: this file is `Producer`; `reservation.rs` is `Reservation`, the
//! space it claims and the views of it.

mod reservation;

pub use reservation::*;

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMemoryView, PyTuple, PyWeakrefMethods, PyWeakrefReference};
use shmring::media::{kind, MediaHeader, SEQUENCE_AUTO};
use shmring::{Address, ArgNames, FullPolicy, Meta, Producer, Segment};

use crate::args::{opt, Int};
use crate::cleanup::{lock, CreatedRing};
use crate::consumer::{fields_dict, secs, where_args, PyConsumer};
use crate::errors::{Closed, ConfigError, Error, IntoPy, Released};
use crate::media::{parse_format, plane_layouts, Elem};
use crate::views::{array_of, make_readonly, Plane};

/// A producer attached to a ring: writes records in place (zero copy).
///
/// Producer(name=None, *, fd=None, eventfd_fd=None, fds=None, ring=None,
///          on_full="block", timeout=1.0, address=None, connect_timeout=None)
///
/// * ``Producer("cam0")`` attaches to ``/dev/shm/cam0`` (an eventfd ring also
///   needs ``eventfd_fd=``).
/// * ``Producer(fds=consumer_descriptors)`` attaches to a ring received as its
///   descriptors (the consumer's ``descriptors()``, inherited or passed, in that
///   order; a memfd ring's include its lock file); ``Producer(fd=N,
///   eventfd_fd=M)`` to a named ring's file. The producer takes ownership of
///   them. Do not close other descriptors of the ring's lock file in this process
///   while it is attached: that drops the liveness lock the consumer checks.
/// * ``Producer(ring=consumer)`` attaches to a consumer's ring in this process.
/// * ``Producer(address="unix:/run/cam0.sock")`` reaches the ring by its address,
///   the text every binding and the ``shmring`` command take (see ``Consumer``):
///   ``NAME``, ``unix:PATH``, ``fd:SEG[,LOCK][,EVENTFD]`` (taken over, as with
///   ``fds=``), ``create:...``, ``memfd:...``. ``connect_timeout`` (seconds; None:
///   the library's default) bounds each step of a socket's hand-off.
///
/// Full ring: ``on_full="block"`` waits up to ``timeout`` seconds for space and
/// then raises Timeout (NoConsumer if no consumer is alive); ``on_full="fail"``
/// raises Full at once. The drop is counted in the ring's stats either way.
///
/// Writing: ``with producer.reserve(n, stream=1, kind=0) as buf:`` gives a writable
/// memoryview of ``n`` bytes inside the ring, committed when the block ends and
/// aborted if it raises. ``reserve_video()`` / ``reserve_audio()`` write the shared
/// media header and give numpy arrays of the planes / samples to fill.
/// ``send(data)`` copies a bytes-like object in as one record.
///
/// Threads: a producer may be used from any thread; its calls run one at a time
/// (a call waits, without the GIL, for another thread's). It has at most one open
/// reservation: ``reserve*()``, ``send()`` and ``end_stream()`` on another thread
/// wait for it to end (up to the producer's ``timeout``; ``on_full="fail"``: not
/// at all), then raise ``shmring.Error``; on the thread that opened it they raise
/// at once. Give each thread a producer of its own to write concurrently.
#[pyclass(frozen, module = "shmring._shmring", name = "Producer")]
pub struct PyProducer {
    /// None once closed. A reservation open in it (from `reserve_raw`) belongs to
    /// the one live `PyReservation` that made it.
    inner: Mutex<Option<Producer>>,
    /// The thread that opened the reservation open in `inner` (locked inside it).
    reserved_by: Mutex<Option<ThreadId>>,
    /// Notified (under `inner`) when a reservation ends or the producer closes.
    ended: Condvar,
    /// The ring, for what needs no producer (counters, mapping); None once closed.
    seg: Mutex<Option<Arc<Segment>>>,
    /// The ring's name, for messages.
    label: String,
    slot: u32,
    /// A named ring this producer created (`address="create:..."`).
    created: Option<Arc<CreatedRing>>,
}

/// Why a call on the producer failed, made into a Python exception once the GIL
/// is back.
enum Fail {
    Closed,
    /// A reservation is open: `shmring.Error` with this message.
    Open(String),
    Core(shmring::Error),
    Config(String),
}

impl From<shmring::Error> for Fail {
    fn from(e: shmring::Error) -> Fail {
        Fail::Core(e)
    }
}

impl PyProducer {
    fn attach(seg: Arc<Segment>, policy: FullPolicy, created: bool) -> PyResult<Self> {
        let mut p = Producer::new(seg.clone()).py_err()?;
        p.set_policy(policy);
        Ok(PyProducer {
            label: seg.name().to_string(),
            slot: p.slot(),
            created: created.then(|| CreatedRing::register(&seg)),
            inner: Mutex::new(Some(p)),
            reserved_by: Mutex::new(None),
            ended: Condvar::new(),
            seg: Mutex::new(Some(seg)),
        })
    }

    fn fail(&self, f: Fail) -> PyErr {
        match f {
            Fail::Closed => self.closed_error(),
            Fail::Open(msg) => Error::new_err(msg),
            Fail::Core(e) => crate::errors::to_py(e),
            Fail::Config(msg) => ConfigError::new_err(msg),
        }
    }

    fn closed_error(&self) -> PyErr {
        Closed::new_err(format!("ring {}: the producer is closed", self.label))
    }

    /// The ring; `Closed` once closed.
    fn seg(&self) -> PyResult<Arc<Segment>> {
        lock(&self.seg).clone().ok_or_else(|| self.closed_error())
    }

    /// Runs `f` on the producer, waiting without the GIL for another thread's call.
    fn locked<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Producer) -> Result<R, Fail> + Send,
    ) -> PyResult<R> {
        let inner = &self.inner;
        py.detach(|| match lock(inner).as_mut() {
            Some(p) => f(p),
            None => Err(Fail::Closed),
        })
        .map_err(|e| self.fail(e))
    }

    /// [`Self::locked`] for a call that needs no reservation open (a new
    /// reservation, a send, an end of stream, a policy change). A reservation
    /// another thread opened is waited for, up to the producer's full-ring wait;
    /// one this thread opened is an error at once (it would wait for itself).
    fn exclusive<R: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut Producer) -> Result<R, Fail> + Send,
    ) -> PyResult<R> {
        let me = std::thread::current().id();
        py.detach(|| {
            let mut g = lock(&self.inner);
            let mut deadline = None;
            loop {
                let Some(p) = g.as_mut() else {
                    return Err(Fail::Closed);
                };
                if !p.has_reservation() {
                    let r = f(p);
                    if p.has_reservation() {
                        *lock(&self.reserved_by) = Some(me);
                    }
                    return r;
                }
                let wait = match p.policy() {
                    FullPolicy::Block(t) => t,
                    FullPolicy::Fail => Duration::ZERO,
                };
                let now = Instant::now();
                let until = *deadline.get_or_insert(now + wait);
                if *lock(&self.reserved_by) == Some(me) || now >= until {
                    return Err(Fail::Open(format!(
                        "{what}: this producer has an open reservation; commit or abort it first{}",
                        if *lock(&self.reserved_by) == Some(me) {
                            String::new()
                        } else {
                            format!(" (another thread's, open for longer than {wait:?})")
                        }
                    )));
                }
                g = self
                    .ended
                    .wait_timeout(g, until - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        })
        .map_err(|e| self.fail(e))
    }

    /// A reservation ended (committed or aborted), under the producer's lock: a
    /// call waiting on another thread goes on.
    fn reservation_ended(&self) {
        *lock(&self.reserved_by) = None;
        self.ended.notify_all();
    }

    /// [`Self::reserve_impl`] for a record holding the media header `h`.
    fn reserve_media<'py>(
        slf: &Bound<'py, Self>,
        h: MediaHeader,
        meta: Meta,
        stamp: bool,
        timeout: Option<f64>,
        what: &str,
    ) -> PyResult<Bound<'py, PyReservation>> {
        Self::reserve_impl(slf, h.payload_len(), meta, stamp, timeout, Some(h), what)
    }

    fn reserve_impl<'py>(
        slf: &Bound<'py, Self>,
        len: usize,
        meta: Meta,
        stamp: bool,
        timeout: Option<f64>,
        media: Option<MediaHeader>,
        what: &str,
    ) -> PyResult<Bound<'py, PyReservation>> {
        let py = slf.py();
        let wait = wait_of(timeout)?;
        let mapping = slf.get().seg()?;
        // The address crosses the GIL-free closure as an integer.
        let (addr, len) = slf.get().exclusive(py, what, |p| {
            let r = p.reserve_raw(len, wait.unwrap_or(p.policy()))?;
            if let Some(h) = &media {
                // SAFETY: `r.ptr` points at `r.len` writable bytes of ring, ours until
                // commit or abort; nothing else refers to them yet.
                let payload = unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) };
                // The record is at least payload_len() bytes; write the header in place.
                if let Err(e) = h.write_to(payload) {
                    p.abort_raw();
                    return Err(Fail::Config(e.to_string()));
                }
            }
            Ok((r.ptr as usize, r.len))
        })?;
        let res = PyReservation {
            state: Mutex::new(ResState {
                open: true,
                exports: 0,
                arrays: Vec::new(),
                entered: None,
            }),
            meta,
            stamp,
            media,
            addr,
            len: len as isize,
            _mapping: mapping,
            producer: slf.clone().unbind(),
        };
        // On error the reservation is dropped, and its claim aborted.
        Bound::new(py, res)
    }
}

impl Drop for PyProducer {
    fn drop(&mut self) {
        if let Some(c) = &self.created {
            c.remove();
        }
    }
}

fn policy_from(on_full: &str, timeout: f64) -> PyResult<FullPolicy> {
    match on_full {
        "block" => Ok(FullPolicy::Block(secs(timeout, "timeout")?)),
        "fail" => Ok(FullPolicy::Fail),
        _ => Err(ConfigError::new_err(format!(
            "on_full must be \"block\" or \"fail\", got {on_full:?}"
        ))),
    }
}

/// A call's `timeout`: None follows the producer's policy, 0 (or less) fails fast,
/// more blocks that long.
fn wait_of(timeout: Option<f64>) -> PyResult<Option<FullPolicy>> {
    Ok(match timeout {
        None => None,
        Some(t) if t <= 0.0 => Some(FullPolicy::Fail),
        Some(t) => Some(FullPolicy::Block(secs(t, "timeout")?)),
    })
}

/// A record's metadata from the arguments of `reserve`/`send`; the bool says to
/// stamp the commit time.
fn meta_of(
    stream: &Int,
    kind_: &Int,
    timestamp: Option<Int>,
    flags: &Int,
) -> PyResult<(Meta, bool)> {
    let timestamp = opt::<u64>(timestamp, "timestamp")?;
    let m = Meta {
        stream: stream.get("stream")?,
        kind: kind_.get("kind")?,
        timestamp_ns: timestamp.unwrap_or(0),
        flags: flags.get("flags")?,
    };
    Ok((m, timestamp.is_none()))
}

/// A contiguous buffer of any bytes-like object, released on drop.
pub struct BufferGuard(ffi::Py_buffer);

impl BufferGuard {
    pub fn get(obj: &Bound<'_, PyAny>) -> PyResult<BufferGuard> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::zeroed();
        // SAFETY: `view` is writable storage for a Py_buffer; on success it is
        // released in Drop. PyBUF_SIMPLE asks for contiguous bytes.
        let rc =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // SAFETY: filled by a successful PyObject_GetBuffer.
        Ok(BufferGuard(unsafe { view.assume_init() }))
    }

    pub fn bytes(&self) -> (*const u8, usize) {
        (self.0.buf as *const u8, self.0.len.max(0) as usize)
    }
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        // SAFETY: acquired by PyObject_GetBuffer; we hold the GIL wherever this drops.
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

/// A hand-off's timeout for each step, in seconds (None: the library's default).
fn connect_timeout_of(s: Option<f64>) -> PyResult<std::time::Duration> {
    match s {
        Some(s) => secs(s, "connect_timeout"),
        None => Ok(shmring::handoff::DEFAULT_CONNECT_TIMEOUT),
    }
}

#[pymethods]
impl PyProducer {
    #[new]
    #[pyo3(signature = (name=None, *, fd=None, eventfd_fd=None, fds=None, ring=None,
        on_full="block", timeout=1.0, address=None, connect_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: Option<&str>,
        fd: Option<Int>,
        eventfd_fd: Option<Int>,
        fds: Option<Vec<Int>>,
        ring: Option<PyRef<'_, PyConsumer>>,
        on_full: &str,
        timeout: f64,
        address: Option<&str>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let policy = policy_from(on_full, timeout)?;
        if let Some(r) = ring {
            if name.is_some()
                || fd.is_some()
                || eventfd_fd.is_some()
                || fds.is_some()
                || address.is_some()
            {
                return Err(ConfigError::new_err(
                    "ring= is the ring: give no name, address=, fd=, eventfd_fd= or fds= with it",
                ));
            }
            return Self::attach(r.segment()?, policy, false);
        }
        let t = connect_timeout_of(connect_timeout)?;
        let args = where_args(address, name, fd, eventfd_fd, fds)?;
        // SAFETY: the package documents that the descriptors given (fd=, fds=,
        // eventfd_fd=, an fd: address) are handed over.
        let a = unsafe { args.address(&ArgNames::PYTHON) }.py_err()?;
        let creates_named = matches!(a, Address::Create { .. });
        let seg = py.detach(|| a.open_timeout(t)).py_err()?;
        Self::attach(seg, policy, creates_named)
    }

    /// Producer.connect(path, *, on_full="block", timeout=1.0, connect_timeout=None)
    ///
    /// Gets the ring from a consumer serving it on the Unix socket ``path`` (``@name``
    /// for an abstract socket; see ``shmring.Listener``): the sealed memfd and, for
    /// an eventfd ring, the eventfd. ``connect_timeout`` (seconds; None: the
    /// library's default) bounds each step. Raises ``Refused`` naming the rule the
    /// consumer applied, ``NotFound`` (no socket), ``NoConsumer`` (a stale socket),
    /// ``Timeout``. The GIL is released while connecting.
    #[staticmethod]
    #[pyo3(signature = (path, *, on_full="block", timeout=1.0, connect_timeout=None))]
    fn connect(
        py: Python<'_>,
        path: std::path::PathBuf,
        on_full: &str,
        timeout: f64,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let policy = policy_from(on_full, timeout)?;
        let t = connect_timeout_of(connect_timeout)?;
        let seg = py
            .detach(|| Address::Socket(path).open_timeout(t))
            .py_err()?;
        Self::attach(seg, policy, false)
    }

    /// reserve(n, *, stream=0, kind=0, timestamp=None, flags=0, timeout=None)
    ///
    /// Claims ``n`` bytes in the ring. Use as ``with producer.reserve(n) as buf:``
    /// (a writable memoryview; committed at the end of the block, aborted on an
    /// exception), or call ``commit()`` / ``abort()``. ``timeout``: None follows
    /// the producer's full-ring policy, 0 fails fast, > 0 blocks that long.
    /// ``timestamp`` (ns) defaults to the commit time.
    #[pyo3(signature = (n, *, stream=Int::of(0), kind=Int::of(0), timestamp=None,
        flags=Int::of(0), timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn reserve<'py>(
        slf: &Bound<'py, Self>,
        n: Int,
        stream: Int,
        kind: Int,
        timestamp: Option<Int>,
        flags: Int,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyReservation>> {
        let n = n.get::<usize>("n")?;
        let (meta, stamp) = meta_of(&stream, &kind, timestamp, &flags)?;
        Self::reserve_impl(slf, n, meta, stamp, timeout, None, "reserve")
    }

    /// reserve_video(width, height, *, format="i420", stream=0, pts_ns=None,
    ///               sequence=None, fps=None, timestamp=None, flags=0, timeout=None)
    ///
    /// Claims a video record and writes its media header. ``with`` yields the
    /// writable plane arrays: (Y, U, V) for i420, (Y, UV) for nv12, (RGBA,) for rgba.
    /// ``sequence=None``: the producer numbers the stream's frames 0, 1, 2, ...;
    /// ``fps=(num, den)``: the nominal frame rate (None: variable).
    #[pyo3(signature = (width, height, *, format="i420", stream=Int::of(0), pts_ns=None,
        sequence=None, fps=None, timestamp=None, flags=Int::of(0), timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn reserve_video<'py>(
        slf: &Bound<'py, Self>,
        width: Int,
        height: Int,
        format: &str,
        stream: Int,
        pts_ns: Option<Int>,
        sequence: Option<Int>,
        fps: Option<(Int, Int)>,
        timestamp: Option<Int>,
        flags: Int,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyReservation>> {
        let (width, height) = (width.get("width")?, height.get("height")?);
        let f = parse_format(format)?;
        let (num, den) = match fps {
            Some((n, d)) => (n.get("fps[0]")?, d.get("fps[1]")?),
            None => (0, 1),
        };
        let pts_ns = opt::<u64>(pts_ns, "pts_ns")?;
        let sequence = opt::<u64>(sequence, "sequence")?;
        let (mut meta, stamp) = meta_of(&stream, &Int::of(kind::VIDEO.into()), timestamp, &flags)?;
        if stamp {
            meta.timestamp_ns = shmring::now_ns();
        }
        let h = MediaHeader::video(
            f,
            width,
            height,
            pts_ns.unwrap_or(meta.timestamp_ns),
            sequence.unwrap_or(SEQUENCE_AUTO),
        )
        .and_then(|h| h.with_frame_rate(num, den))
        .map_err(|e| ConfigError::new_err(format!("reserve_video: {format}: {e}")))?;
        Self::reserve_media(slf, h, meta, stamp, timeout, "reserve_video")
    }

    /// reserve_audio(samples, *, channels=2, sample_rate=48000, format="pcm_s16",
    ///               stream=0, pts_ns=None, sequence=None, timestamp=None, flags=0,
    ///               timeout=None)
    ///
    /// Claims an audio record and writes its media header. ``with`` yields the
    /// writable (samples, channels) array (int16 or float32). ``sequence=None``: the
    /// producer numbers the stream's packets 0, 1, 2, ...
    #[pyo3(signature = (samples, *, channels=Int::of(2), sample_rate=Int::of(48000),
        format="pcm_s16", stream=Int::of(0), pts_ns=None, sequence=None, timestamp=None,
        flags=Int::of(0), timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn reserve_audio<'py>(
        slf: &Bound<'py, Self>,
        samples: Int,
        channels: Int,
        sample_rate: Int,
        format: &str,
        stream: Int,
        pts_ns: Option<Int>,
        sequence: Option<Int>,
        timestamp: Option<Int>,
        flags: Int,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyReservation>> {
        let samples = samples.get("samples")?;
        let channels = channels.get("channels")?;
        let sample_rate = sample_rate.get("sample_rate")?;
        let f = parse_format(format)?;
        let pts_ns = opt::<u64>(pts_ns, "pts_ns")?;
        let sequence = opt::<u64>(sequence, "sequence")?;
        let (mut meta, stamp) = meta_of(&stream, &Int::of(kind::AUDIO.into()), timestamp, &flags)?;
        if stamp {
            meta.timestamp_ns = shmring::now_ns();
        }
        let h = MediaHeader::audio(
            f,
            sample_rate,
            channels,
            samples,
            pts_ns.unwrap_or(meta.timestamp_ns),
            sequence.unwrap_or(SEQUENCE_AUTO),
        )
        .map_err(|e| ConfigError::new_err(format!("reserve_audio: {format}: {e}")))?;
        Self::reserve_media(slf, h, meta, stamp, timeout, "reserve_audio")
    }

    /// send(data, *, stream=0, kind=0, timestamp=None, flags=0, timeout=None)
    ///
    /// Copies a bytes-like object (bytes, bytearray, memoryview, contiguous numpy
    /// array) into the ring as one record. The GIL is released while waiting for
    /// space and while copying.
    #[pyo3(signature = (data, *, stream=Int::of(0), kind=Int::of(0), timestamp=None,
        flags=Int::of(0), timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        stream: Int,
        kind: Int,
        timestamp: Option<Int>,
        flags: Int,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let (mut meta, stamp) = meta_of(&stream, &kind, timestamp, &flags)?;
        let wait = wait_of(timeout)?;
        let buf = BufferGuard::get(data)?;
        let (src, len) = buf.bytes();
        let src = src as usize;
        let r = self.exclusive(py, "send", |p| {
            let mut r = p.reserve_with(len, wait.unwrap_or(p.policy()))?;
            // SAFETY: `src` is the exported buffer (held by `buf` until after this
            // call), `len` bytes; the reservation is `len` bytes of ring.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, r.as_mut_ptr(), len) };
            if stamp {
                meta.timestamp_ns = shmring::now_ns();
            }
            Ok(r.commit(meta)?)
        });
        drop(buf);
        r
    }

    /// end_stream(*, stream=0, kind=KIND_VIDEO)
    ///
    /// Ends stream ``stream`` of ``kind`` (KIND_VIDEO or KIND_AUDIO): commits an
    /// end-of-stream record, numbered after the stream's last record from this
    /// producer. Readers end the stream there (``Frame.is_end``; shmringsrc sends
    /// EOS, ``shmring record`` closes the stream's file).
    #[pyo3(signature = (*, stream=Int::of(0), kind=Int::of(kind::VIDEO.into())))]
    fn end_stream(&self, py: Python<'_>, stream: Int, kind: Int) -> PyResult<()> {
        let stream: u32 = stream.get("stream")?;
        let kind: u32 = kind.get("kind")?;
        if kind != kind::VIDEO && kind != kind::AUDIO {
            return Err(ConfigError::new_err(format!(
                "end_stream: kind {kind} is not KIND_VIDEO or KIND_AUDIO"
            )));
        }
        self.exclusive(py, "end_stream", |p| Ok(p.end_stream(stream, kind)?))
    }

    /// The full-ring policy: "block" or "fail".
    #[getter]
    fn on_full(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.locked(py, |p| {
            Ok(match p.policy() {
                FullPolicy::Fail => "fail",
                FullPolicy::Block(_) => "block",
            })
        })
    }

    /// Seconds a blocking reserve waits for space (policy "block").
    #[getter]
    fn timeout(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        self.locked(py, |p| {
            Ok(match p.policy() {
                FullPolicy::Fail => None,
                FullPolicy::Block(d) => Some(d.as_secs_f64()),
            })
        })
    }

    /// set_policy(on_full, timeout=1.0): "block" (wait up to timeout seconds) or
    /// "fail" (raise Full at once).
    #[pyo3(signature = (on_full, timeout=1.0))]
    fn set_policy(&self, py: Python<'_>, on_full: &str, timeout: f64) -> PyResult<()> {
        let policy = policy_from(on_full, timeout)?;
        self.exclusive(py, "set_policy", |p| {
            p.set_policy(policy);
            Ok(())
        })
    }

    /// The producer slot this producer occupies in the ring.
    #[getter]
    fn slot(&self) -> PyResult<u32> {
        self.seg().map(|_| self.slot)
    }

    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.seg()?.name().to_string())
    }

    /// mapping() -> (address, length) of the ring's mapping in this process.
    fn mapping(&self) -> PyResult<(usize, usize)> {
        let (p, l) = self.seg()?.mapping();
        Ok((p as usize, l))
    }

    /// A snapshot of the ring's counters as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(py, &self.seg()?.stats())
    }

    /// The largest payload the ring accepts.
    #[getter]
    fn max_record(&self) -> PyResult<u64> {
        Ok(self.seg()?.geometry().max_record)
    }

    /// close(): detaches from the ring (frees the producer slot). Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        let p = py.detach(|| {
            let mut g = lock(inner);
            if g.as_ref().is_some_and(Producer::has_reservation) {
                return Err(Fail::Open(
                    "close: this producer has an open reservation; commit or abort it first".into(),
                ));
            }
            Ok(g.take())
        });
        let p = p.map_err(|e| self.fail(e))?;
        drop(p);
        drop(lock(&self.seg).take());
        if let Some(c) = &self.created {
            c.remove();
        }
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.seg).is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        if self.closed() {
            return format!("<shmring.Producer {} closed>", self.label);
        }
        format!("<shmring.Producer {} slot={}>", self.label, self.slot)
    }
}
