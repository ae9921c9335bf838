//! `Tap`: a read-only observer that copies records as they go by
//! (`shmring::Tap`), and the `TapFrame` it returns.

use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use shmring::{Address, Filter, Tap, TapOptions};

use crate::consumer::{address_of, fields_dict, own_fd, secs, SIGNAL_CHECK};
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
/// ``stats()`` is the tap's own.
#[pyclass(module = "shmring._shmring", name = "Tap")]
pub struct PyTap {
    inner: Option<Tap>,
    /// The copy of the record being read (its capacity kept between records).
    buf: Vec<u8>,
    name: String,
}

impl PyTap {
    fn get(&mut self) -> PyResult<&mut Tap> {
        self.inner
            .as_mut()
            .ok_or_else(|| Closed::new_err(format!("tap of {} is closed", self.name)))
    }
}

/// A filter's kind or stream as Python gives it (a tap's and a consumer's): None
/// takes any.
pub(crate) fn filter(v: Option<i64>, what: &str) -> PyResult<Option<u32>> {
    v.map(|v| {
        u32::try_from(v)
            .map_err(|_| ConfigError::new_err(format!("{what} must be 0..2**32-1, got {v}")))
    })
    .transpose()
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
        fd: Option<i32>,
        every: Option<u32>,
        kind: Option<i64>,
        stream: Option<i64>,
        poll_interval: Option<f64>,
        skip_pending_after: Option<f64>,
        address: Option<&str>,
    ) -> PyResult<Self> {
        let d = TapOptions::default();
        let opts = TapOptions {
            every: every.unwrap_or(d.every),
            filter: Filter {
                kind: filter(kind, "kind")?,
                stream: filter(stream, "stream")?,
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
            (None, Some(f), None) => Address::Descriptors(vec![own_fd(f, "fd")?]),
            (None, None, Some(text)) => address_of(text)?,
        };
        let ro = py.detach(|| address.open_read_only()).py_err()?;
        Ok(PyTap {
            name: ro.name().to_string(),
            inner: Some(Tap::new(ro, opts)),
            buf: Vec::new(),
        })
    }

    /// next(timeout=None) -> TapFrame | None
    ///
    /// The next record the tap takes, copied, waiting up to ``timeout`` seconds
    /// (None: forever). None when the time runs out. The GIL is released while
    /// waiting and copying.
    #[pyo3(signature = (timeout=None))]
    fn next(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyTapFrame>> {
        let deadline = timeout
            .map(|t| secs(t, "timeout"))
            .transpose()?
            .map(|t| Instant::now() + t);
        loop {
            let step = match deadline {
                None => SIGNAL_CHECK,
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK),
            };
            let tap = self
                .inner
                .as_mut()
                .ok_or_else(|| Closed::new_err(format!("tap of {} is closed", self.name)))?;
            let buf = &mut self.buf;
            let got = py.detach(|| tap.next_into(buf, Some(step))).py_err()?;
            if let Some(f) = got {
                return Ok(Some(PyTapFrame {
                    data: PyBytes::new(py, &self.buf).unbind(),
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
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(py, &self.get()?.stats())
    }

    /// The ring's name, for messages.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Unmaps the ring. Idempotent.
    fn close(&mut self) {
        self.inner = None;
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!(
            "<shmring.Tap {}{}>",
            self.name,
            if self.inner.is_none() { " closed" } else { "" }
        )
    }
}
