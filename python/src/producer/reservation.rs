//! `Reservation`: space claimed in the ring, filled in place through views that
//! become read-only when it ends.

use super::*;

/// Space claimed in the ring by ``Producer.reserve*()``: fill it in place, then
/// ``commit()`` (or leave the ``with`` block); ``abort()`` or an exception in the
/// block gives the space back unpublished.
///
/// Views: the buffer protocol (``memoryview(res)``), ``array()``, ``planes()``
/// (video) and ``samples()`` (audio) are writable views into the ring. Arrays from
/// ``array()``/``planes()``/``samples()`` and the memoryview given by ``with``
/// become read-only / released when the reservation is committed or aborted.
/// Other buffer exports (``memoryview(res)``, ``numpy.frombuffer(res)``) must be
/// gone by then: commit/abort raise BufferError otherwise and the space stays
/// claimed until the reservation object itself is gone (then it is aborted), so a
/// view never writes into space that was handed on.
#[pyclass(frozen, module = "shmring._shmring", name = "Reservation")]
pub struct PyReservation {
    pub(crate) state: Mutex<ResState>,
    pub(crate) meta: Meta,
    /// Stamp the timestamp at commit.
    pub(crate) stamp: bool,
    pub(crate) media: Option<MediaHeader>,
    /// The claim's address in this process.
    pub(crate) addr: usize,
    pub(crate) len: isize,
    /// Keeps the mapping while arrays of the reservation (read-only once it ends)
    /// may still be read, whatever becomes of the producer.
    pub(crate) _mapping: Arc<Segment>,
    pub(crate) producer: Py<PyProducer>,
}

/// What changes as a reservation is used; nothing holds it while calling into
/// Python.
pub(crate) struct ResState {
    /// The claim is still open in the producer (from `reserve_raw`).
    pub(crate) open: bool,
    pub(crate) exports: u32,
    pub(crate) arrays: Vec<Py<PyWeakrefReference>>,
    /// The memoryview handed out by `__enter__`.
    pub(crate) entered: Option<Py<PyAny>>,
}

impl Drop for PyReservation {
    fn drop(&mut self) {
        let open = std::mem::replace(&mut lock(&self.state).open, false);
        if open {
            // The producer cannot be closed while this claim is open; its lock is
            // held only by calls that never wait while a claim is open.
            let producer = self.producer.get();
            if let Some(p) = lock(&producer.inner).as_mut() {
                p.abort_raw();
                producer.reservation_ended();
            }
        }
    }
}

impl PyReservation {
    fn released_error() -> PyErr {
        Released::new_err("the reservation was already committed or aborted")
    }

    fn check_open(&self) -> PyResult<()> {
        if lock(&self.state).open {
            Ok(())
        } else {
            Err(Self::released_error())
        }
    }

    fn track(&self, arr: &Bound<'_, PyAny>) -> PyResult<()> {
        let w = PyWeakrefReference::new(arr)?.unbind();
        lock(&self.state).arrays.push(w);
        Ok(())
    }

    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        let entered = {
            let mut st = lock(&self.state);
            if !st.open {
                return Err(Self::released_error());
            }
            st.entered.take()
        };
        if let Some(mv) = entered {
            if let Err(e) = mv.bind(py).call_method0("release") {
                lock(&self.state).entered = Some(mv);
                return Err(PyBufferError::new_err(format!(
                    "the reservation's memoryview is still exported ({}); delete the \
                     arrays made from it before the reservation ends",
                    e.value(py)
                )));
            }
        }
        let arrays = {
            let mut st = lock(&self.state);
            if !st.open {
                return Err(Self::released_error());
            }
            if st.exports > 0 {
                return Err(PyBufferError::new_err(format!(
                    "{} buffer view(s) of the reservation still exist; delete them before \
                     the reservation ends (it stays claimed until they and it are gone)",
                    st.exports
                )));
            }
            st.open = false;
            std::mem::take(&mut st.arrays)
        };
        for w in arrays {
            if let Some(a) = w.bind(py).upgrade() {
                make_readonly(&a);
            }
        }
        let mut meta = self.meta;
        let len = self.len as usize;
        let stamp = self.stamp;
        // The producer cannot be closed while this claim is open.
        let producer = self.producer.get();
        producer.locked(py, |p| {
            let r = if commit {
                if stamp {
                    meta.timestamp_ns = shmring::now_ns();
                }
                p.commit_raw(len, meta).map_err(Fail::from)
            } else {
                p.abort_raw();
                Ok(())
            };
            producer.reservation_ended();
            r
        })
    }

    fn plane_arrays<'py>(slf: &Bound<'py, Self>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let this = slf.get();
        this.check_open()?;
        let Some(h) = this.media else {
            return Err(Error::new_err(
                "planes()/samples() need a reservation from reserve_video() or reserve_audio()",
            ));
        };
        let (layouts, n) = plane_layouts(&h);
        let mut out = Vec::with_capacity(n);
        for p in &layouts[..n] {
            let plane = Plane {
                offset: p.offset,
                shape: &p.shape[..p.ndim],
                byte_strides: &p.strides[..p.ndim],
            };
            let owner = slf.clone().into_any();
            let base = this.addr as *mut u8;
            // SAFETY: the header was built for this reservation's length (payload_len),
            // so every plane lies inside it; the array keeps the reservation, hence the
            // mapping, alive.
            let a = unsafe {
                match p.elem {
                    Elem::U8 => array_of::<u8>(owner, base, &plane, true),
                    Elem::I16 => array_of::<i16>(owner, base, &plane, true),
                    Elem::F32 => array_of::<f32>(owner, base, &plane, true),
                }
            }?;
            this.track(&a)?;
            out.push(a);
        }
        Ok(out)
    }
}

#[pymethods]
impl PyReservation {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        let this = slf.get();
        {
            let mut st = lock(&this.state);
            if !st.open {
                return Err(Self::released_error());
            }
            st.exports += 1;
        }
        // SAFETY: `view` is a valid Py_buffer to fill. The claim is ours until commit
        // or abort, which refuse to run while exports exist; shape/strides point at
        // fields of this object, which the buffer references.
        unsafe {
            crate::views::fill_byte_view(
                view,
                slf.clone().into_any().into_ptr(),
                this.addr as *mut c_void,
                &this.len,
                false,
                flags,
            )
        };
        Ok(())
    }

    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: *mut ffi::Py_buffer) {
        let mut st = lock(&slf.get().state);
        st.exports = st.exports.saturating_sub(1);
    }

    /// commit(): publishes the record. Raises Abandoned if the claim was taken
    /// (the ring was reset, or this producer was judged dead).
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true)
    }

    /// abort(): gives the space back without publishing.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false)
    }

    /// True while the reservation can still be written and committed.
    #[getter]
    fn open(&self) -> bool {
        lock(&self.state).open
    }

    fn __len__(&self) -> usize {
        self.len as usize
    }

    /// Payload address in this process (inside ``Producer.mapping()``).
    #[getter]
    fn address(&self) -> usize {
        self.addr
    }

    /// array() -> writable uint8 numpy view of the whole payload.
    fn array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        this.check_open()?;
        let n = this.len as usize;
        let plane = Plane {
            offset: 0,
            shape: &[n],
            byte_strides: &[1],
        };
        // SAFETY: the whole reservation; the array keeps it alive.
        let a =
            unsafe { array_of::<u8>(slf.clone().into_any(), this.addr as *mut u8, &plane, true) }?;
        this.track(&a)?;
        Ok(a)
    }

    /// planes() -> tuple of writable plane arrays (reserve_video).
    fn planes<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(slf.py(), Self::plane_arrays(slf)?)
    }

    /// samples() -> writable (samples, channels) array (reserve_audio).
    fn samples<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let is_audio = slf.get().media.is_some_and(|m| m.format.is_audio());
        if !is_audio {
            return Err(Error::new_err(
                "samples() needs a reservation from reserve_audio()",
            ));
        }
        Ok(Self::plane_arrays(slf)?.remove(0))
    }

    /// ``with`` yields: the plane arrays (reserve_video), the samples array
    /// (reserve_audio), or a writable memoryview (reserve).
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        match slf.get().media {
            Some(h) if h.format.is_video() => Ok(Self::planes(slf)?.into_any()),
            Some(_) => Self::samples(slf),
            None => {
                let mv = PyMemoryView::from(slf.as_any())?.into_any();
                lock(&slf.get().state).entered = Some(mv.clone().unbind());
                Ok(mv)
            }
        }
    }

    /// Commits on a normal exit, aborts on an exception.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.open() {
            return Ok(false);
        }
        let ok = exc_type.is_none_or(|t| t.is_none());
        self.finish(py, ok)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<shmring.Reservation {} bytes stream={} kind={}{}>",
            self.len,
            self.meta.stream,
            self.meta.kind,
            if self.open() { "" } else { " closed" }
        )
    }
}
