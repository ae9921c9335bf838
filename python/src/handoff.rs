//! The secure hand-off: `Listener` (a consumer serves its memfd on a Unix socket)
//! and `Observer` (a read-only view of a ring served that way). `Producer.connect`
//! is in `producer.rs`. The rules are the core's (`shmring::handoff`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shmring::handoff::{ListenerOptions, DEFAULT_CONNECT_TIMEOUT};
use shmring::{Address, Listener, ReadOnlySegment};

use crate::args::{each, opt, Int};
use crate::cleanup::{lock, register_listener, ListenerSlot};
use crate::consumer::{fields_dict, geometry_dict, secs, PyConsumer};
use crate::errors::{Closed, IntoPy};

/// Serves a consumer's ring on a Unix socket, from one background thread.
///
/// Listener(ring, path, *, allow_uids=(), allow_gids=(), max_pending=None,
///          hello_timeout=None, observers=True)
///
/// ``ring`` is a Consumer of a memfd ring (``Consumer(create=True, memfd=True)``);
/// ``path`` a socket path, or ``@name`` for a Linux abstract socket. Peers are
/// checked by the uid/gid the kernel records at connect: this process's uid, plus
/// ``allow_uids`` / ``allow_gids``. Producers (``Producer.connect(path)``) receive
/// the memfd and the eventfd; observers (``Observer.connect(path)``) a read-only
/// descriptor. ``max_pending`` / ``hello_timeout`` (seconds) bound waiting peers;
/// None keeps the library's defaults. ``observers=False`` refuses every observer
/// (rule ``role``). ``close()`` (or the end of a ``with`` block, or the
/// interpreter's exit) stops the thread and removes the socket.
#[pyclass(frozen, module = "shmring._shmring", name = "Listener")]
pub struct PyListener {
    /// Registered to be stopped at exit.
    inner: Arc<ListenerSlot>,
    socket: String,
}

impl PyListener {
    fn closed_error(&self) -> PyErr {
        Closed::new_err(format!("listener {} is closed", self.socket))
    }
}

impl Drop for PyListener {
    fn drop(&mut self) {
        // Stopping joins the listener's thread: without the GIL.
        if let Some(l) = lock(&self.inner).take() {
            Python::attach(|py| py.detach(|| drop(l)));
        }
    }
}

#[pymethods]
impl PyListener {
    #[new]
    #[pyo3(signature = (ring, path, *, allow_uids=Vec::new(), allow_gids=Vec::new(),
        max_pending=None, hello_timeout=None, observers=true))]
    fn new(
        ring: PyRef<'_, PyConsumer>,
        path: PathBuf,
        allow_uids: Vec<Int>,
        allow_gids: Vec<Int>,
        max_pending: Option<Int>,
        hello_timeout: Option<f64>,
        observers: bool,
    ) -> PyResult<Self> {
        let allow_uids = each::<u32>(&allow_uids, "allow_uids")?;
        let allow_gids = each::<u32>(&allow_gids, "allow_gids")?;
        let max_pending = opt::<usize>(max_pending, "max_pending")?;
        let seg = ring.segment()?;
        let mut o = ListenerOptions::default();
        for u in allow_uids {
            o = o.allow_uid(u);
        }
        for g in allow_gids {
            o = o.allow_gid(g);
        }
        if !observers {
            o.observers = shmring::handoff::Allow::nobody();
        }
        if let Some(n) = max_pending {
            o.max_pending = n;
        }
        if let Some(t) = hello_timeout {
            o.hello_timeout = secs(t, "hello_timeout")?;
        }
        let l = Listener::bind(&seg, &path, o)
            .and_then(Listener::spawn)
            .py_err()?;
        Ok(PyListener {
            socket: l.socket().to_string(),
            inner: register_listener(l),
        })
    }

    /// What the listener did: producers, observers, refused (and by rule), pending.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = lock(&self.inner).as_ref().map(|l| l.stats());
        fields_dict(py, &stats.ok_or_else(|| self.closed_error())?)
    }

    /// The socket's path (or ``@name``).
    #[getter]
    fn socket(&self) -> &str {
        &self.socket
    }

    /// Stops the listener's thread and removes the socket. Connected producers
    /// keep producing. Idempotent.
    fn close(&self, py: Python<'_>) {
        let l = lock(&self.inner).take();
        if let Some(l) = l {
            py.detach(|| drop(l));
        }
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "<shmring.Listener {}{}>",
            self.socket,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// A read-only view of a ring served on a socket: counters and geometry.
///
/// ``Observer.connect(path, timeout=None)``, or ``Observer.open(address,
/// timeout=None)`` for any ring address. The ring is mapped read-only: nothing
/// here can write into it. Usable from any thread.
#[pyclass(frozen, module = "shmring._shmring", name = "Observer")]
pub struct PyObserver {
    /// None once closed.
    inner: Mutex<Option<Arc<ReadOnlySegment>>>,
    socket: String,
}

impl PyObserver {
    fn get(&self) -> PyResult<Arc<ReadOnlySegment>> {
        lock(&self.inner)
            .clone()
            .ok_or_else(|| Closed::new_err(format!("observer of {} is closed", self.socket)))
    }

    fn new(obs: ReadOnlySegment, socket: String) -> PyObserver {
        PyObserver {
            inner: Mutex::new(Some(Arc::new(obs))),
            socket,
        }
    }
}

#[pymethods]
impl PyObserver {
    /// Observer.connect(path, timeout=None): asks the consumer serving ``path`` for
    /// a read-only descriptor. Raises ``Refused`` naming the rule it failed.
    #[staticmethod]
    #[pyo3(signature = (path, timeout=None))]
    fn connect(py: Python<'_>, path: PathBuf, timeout: Option<f64>) -> PyResult<Self> {
        let t = match timeout {
            Some(s) => secs(s, "timeout")?,
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        let socket = path.display().to_string();
        let obs = py
            .detach(|| Address::Socket(path).open_read_only_timeout(t))
            .py_err()?;
        Ok(PyObserver::new(obs, socket))
    }

    /// Observer.open(address, timeout=None): maps the ring ``address`` names
    /// read-only (the text of ``Consumer(address=)``): a named ring opened
    /// read-only, the ring a consumer serves on a socket (``unix:PATH``, as
    /// ``connect``), or the first of ``fd:`` descriptors (taken over).
    #[staticmethod]
    #[pyo3(signature = (address, timeout=None))]
    fn open(py: Python<'_>, address: &str, timeout: Option<f64>) -> PyResult<Self> {
        let t = match timeout {
            Some(s) => secs(s, "timeout")?,
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        let a = crate::consumer::address_of(address)?;
        let socket = a.describe();
        let obs = py.detach(|| a.open_read_only_timeout(t)).py_err()?;
        Ok(PyObserver::new(obs, socket))
    }

    /// A snapshot of the ring's counters as a dict (as ``Consumer.stats()``).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(py, &self.get()?.stats())
    }

    /// The ring's layout (as ``Consumer.geometry()``).
    fn geometry<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        geometry_dict(py, self.get()?.geometry())
    }

    /// The observer's descriptor (owned by it: do not close it): the read-only one
    /// received, unless this process already had the ring open (a process keeps one
    /// descriptor per ring), as when a consumer observes its own ring.
    fn fileno(&self) -> PyResult<i32> {
        Ok(std::os::fd::AsRawFd::as_raw_fd(&self.get()?.fd()))
    }

    /// The read-only mapping: (address, length).
    fn mapping(&self) -> PyResult<(usize, usize)> {
        let (p, n) = self.get()?.mapping();
        Ok((p as usize, n))
    }

    /// Unmaps the ring (once nothing on another thread still reads it). Idempotent.
    fn close(&self) {
        let obs = lock(&self.inner).take();
        drop(obs);
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!("<shmring.Observer {}>", self.socket)
    }
}
