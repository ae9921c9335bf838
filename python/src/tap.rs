//! `Tap`: a read-only observer that copies records as they go by
//! (`shmring::Tap`), and the `TapFrame` it returns.

use std::sync::Mutex;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use shmring::{Address, Filter, Tap, TapOptions};

use crate::args::{opt, Int};
use crate::cleanup::lock;
use crate::consumer::{address_of, fields_dict, own_fd, secs, step_until};
use crate::errors::{Closed, ConfigError, IntoPy};

/// A record a tap copied: ``data`` (bytes) and the record's metadata.
#[pyclass(frozen, get_all, module = "shmring._shmring", name = "TapFrame")]
pub struct PyTapFrame {
    /// The payload, copied out of the ring (never torn).
    data: Py<PyBytes>,
    stream: u32,
    /// A ``shmring.Kind``, or an int for another kind.
    kind: Py<PyAny>,
    /// Capture time in ns.
    timestamp: u64,
    flags: u32,
    /// The ring's record number (low 28 bits).
    seq: u64,
}

#[pymethods]
impl PyTapFrame {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.data.bind(py).as_bytes().len()
    }

    fn __bytes__(&self, py: Python<'_>) -> Py<PyBytes> {
        self.data.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<shmring.TapFrame seq={} stream={} kind={} len={}>",
            self.seq,
            self.stream,
            self.kind.bind(py),
            self.__len__(py)
        )
    }
}

/// A read-only tap on a ring: copies records as they go by, never slowing the
/// ring's producers or consumers (it writes nothing to the ring), and counts what
/// it misses.
///
/// Tap(name=None, *, fd=None, every=None, kind=None, stream=None,
///     poll_interval=None, skip_pending_after=None, address=None)
///
/// * ``Tap("cam0")`` opens ``/dev/shm/cam0`` read-only.
/// * ``Tap(fd=n)`` maps a memfd ring from a descriptor (e.g.
///   ``os.dup(ring.read_only_fileno())`` or an observer's); the tap takes
///   ownership of it.
/// * ``Tap(address="unix:/run/cam0.sock")`` maps the ring its address names
///   read-only (the text of ``Consumer(address=)``): a named ring, the ring a
///   consumer serves on a socket (observed), or the first of ``fd:`` descriptors
///   (taken over).
///
/// It starts at the newest record. ``every=n`` takes every n-th record that
/// matches ``kind`` and ``stream`` (None: any); ``poll_interval`` is how long an
/// idle tap sleeps between looks and ``skip_pending_after`` when it steps over a
/// record still being written (seconds; None: the library's defaults).
/// ``tap.next(timeout=None)`` returns a TapFrame (None on timeout). A record
/// overwritten while it was copied is never returned: it is counted in
/// ``stats()["lost"]`` and ``["torn"]``; a tap that falls a ring behind jumps to
/// the newest record and counts what it skipped. The ring cannot list its taps:
/// ``stats()`` is the tap's own. A tap may be used from any thread, one call at a
/// time (a call waits, without the GIL, for another thread's).
#[pyclass(frozen, module = "shmring._shmring", name = "Tap")]
pub struct PyTap {
    inner: Mutex<TapState>,
    name: String,
}

struct TapState {
    /// None once closed.
    tap: Option<Tap>,
    /// The copy of the record being read (its capacity kept between records).
    buf: Vec<u8>,
}

impl PyTap {
    fn closed_error(&self) -> PyErr {
        Closed::new_err(format!("tap of {} is closed", self.name))
    }
}

#[pymethods]
impl PyTap {
    #[new]
    #[pyo3(signature = (name=None, *, fd=None, every=None, kind=None, stream=None,
        poll_interval=None, skip_pending_after=None, address=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: Option<&str>,
        fd: Option<Int>,
        every: Option<Int>,
        kind: Option<Int>,
        stream: Option<Int>,
        poll_interval: Option<f64>,
        skip_pending_after: Option<f64>,
        address: Option<&str>,
    ) -> PyResult<Self> {
        let d = TapOptions::default();
        let opts = TapOptions {
            every: opt(every, "every")?.unwrap_or(d.every),
            filter: Filter {
                kind: opt(kind, "kind")?,
                stream: opt(stream, "stream")?,
            },
            poll_interval: match poll_interval {
                Some(t) => secs(t, "poll_interval")?,
                None => d.poll_interval,
            },
            skip_pending_after: match skip_pending_after {
                Some(t) => secs(t, "skip_pending_after")?,
                None => d.skip_pending_after,
            },
        };
        let address = match (name, fd, address) {
            (Some(_), Some(_), _) => {
                return Err(ConfigError::new_err(
                    "give either a ring name or fd=, not both",
                ))
            }
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err(ConfigError::new_err(
                    "address= says how to reach the ring: give no name or fd= with it",
                ))
            }
            (None, None, None) => {
                return Err(ConfigError::new_err("give a ring name, address= or fd="))
            }
            (Some(n), None, None) => Address::Named(n.into()),
            (None, Some(f), None) => Address::Descriptors(vec![own_fd(&f, "fd")?]),
            (None, None, Some(text)) => address_of(text)?,
        };
        let ro = py.detach(|| address.open_read_only()).py_err()?;
        Ok(PyTap {
            name: ro.name().to_string(),
            inner: Mutex::new(TapState {
                tap: Some(Tap::new(ro, opts)),
                buf: Vec::new(),
            }),
        })
    }

    /// next(timeout=None) -> TapFrame | None
    ///
    /// The next record the tap takes, copied, waiting up to ``timeout`` seconds
    /// (None: forever). None when the time runs out. The GIL is released while
    /// waiting and copying.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyTapFrame>> {
        let deadline = timeout
            .map(|t| secs(t, "timeout"))
            .transpose()?
            .map(|t| Instant::now() + t);
        loop {
            let step = step_until(deadline);
            let inner = &self.inner;
            // The copy leaves the lock with its buffer, which comes back after the
            // bytes object is made (the GIL is not taken under the lock).
            let got = py.detach(|| {
                let mut st = lock(inner);
                let st = &mut *st;
                let Some(tap) = st.tap.as_mut() else {
                    return Ok(None);
                };
                let got = tap.next_into(&mut st.buf, Some(step))?;
                Ok(Some(got.map(|f| (f, std::mem::take(&mut st.buf)))))
            });
            let got = got.py_err()?.ok_or_else(|| self.closed_error())?;
            if let Some((f, buf)) = got {
                let data = PyBytes::new(py, &buf).unbind();
                let mut st = lock(&self.inner);
                if st.buf.capacity() < buf.capacity() {
                    st.buf = buf;
                }
                drop(st);
                return Ok(Some(PyTapFrame {
                    data,
                    stream: f.meta.stream,
                    kind: crate::media::kind_object(py, f.meta.kind)?,
                    timestamp: f.meta.timestamp_ns,
                    flags: f.meta.flags,
                    seq: f.seq,
                }));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// The tap's own counters as a dict: delivered, lost (of which torn: found
    /// overwritten after they were copied), filtered (not taken because of every,
    /// kind or stream), skips (jumps to the newest record), lag (records between
    /// the tap and the newest now).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let stats = py.detach(|| lock(inner).tap.as_ref().map(Tap::stats));
        fields_dict(py, &stats.ok_or_else(|| self.closed_error())?)
    }

    /// The ring's name, for messages.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Unmaps the ring. Idempotent.
    fn close(&self, py: Python<'_>) {
        let inner = &self.inner;
        let tap = py.detach(|| lock(inner).tap.take());
        drop(tap);
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        let inner = &self.inner;
        py.detach(|| lock(inner).tap.is_none())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<shmring.Tap {}{}>",
            self.name,
            if self.closed(py) { " closed" } else { "" }
        )
    }
}
