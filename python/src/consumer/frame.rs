//! `Frame`: a record handed out in place, its views counted, released when it is
//! released and no view is left (deferred release).

use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
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
    pub(crate) hold: Mutex<Hold>,
    pub(crate) meta: Meta,
    pub(crate) seq: u64,
    /// The payload's address in this process (metadata: kept after release).
    pub(crate) address: usize,
    pub(crate) media: Option<MediaHeader>,
    /// An end-of-stream record's contents.
    pub(crate) end: Option<EndOfStream>,
    pub(crate) media_error: Option<String>,
    /// The payload length, pointed to by exported buffers' `shape`.
    pub(crate) len: isize,
}

/// A frame's record and the views of it.
pub(crate) struct Hold {
    /// The core's frame, until handed back (it keeps the mapping).
    pub(crate) frame: Option<SharedFrame>,
    pub(crate) state: State,
    /// Live buffer exports and numpy views.
    pub(crate) views: u32,
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
