//! The shared media header (see `shmring::media`) as seen from Python: format
//! names, header dictionaries, and the numpy layout of each plane.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use shmring::media::{self, kind, Format, MediaHeader, MediaRecord, MEDIA_HEADER_SIZE};

use crate::errors::{BadMediaHeader, ConfigError};

/// The name Python gives a format: the core's ([`Format::name`]).
pub fn format_name(f: Format) -> &'static str {
    f.name()
}

/// A format by name (the core's names and aliases, any case); ConfigError naming
/// the valid ones otherwise.
pub fn parse_format(name: &str) -> PyResult<Format> {
    name.parse()
        .map_err(|e: media::UnknownFormat| ConfigError::new_err(e.to_string()))
}

/// The header as a dict (for `Frame.header()` and `parse_media_header`).
pub fn header_dict<'py>(py: Python<'py>, h: &MediaHeader) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let n = h.planes as usize;
    d.set_item("format", format_name(h.format))?;
    d.set_item("width", h.width)?;
    d.set_item("height", h.height)?;
    d.set_item("sample_rate", h.sample_rate)?;
    d.set_item("channels", h.channels)?;
    d.set_item("samples", h.samples)?;
    d.set_item("pts_ns", h.pts_ns)?;
    d.set_item("sequence", h.sequence)?;
    d.set_item("planes", h.planes)?;
    d.set_item("stride", h.stride[..n].to_vec())?;
    d.set_item("offset", h.offset[..n].to_vec())?;
    d.set_item("size", h.size[..n].to_vec())?;
    d.set_item("fps_num", h.fps_num)?;
    d.set_item("fps_den", h.fps_den)?;
    Ok(d)
}

/// numpy element type of a plane.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Elem {
    U8,
    I16,
    F32,
}

/// Shape (elements) and strides (bytes) of one plane, up to 3 dimensions.
#[derive(Clone, Copy, Debug)]
pub struct PlaneLayout {
    pub offset: usize,
    pub ndim: usize,
    pub shape: [usize; 3],
    pub strides: [usize; 3],
    pub elem: Elem,
}

/// The planes of a parsed header, shaped by the core's plane table
/// ([`MediaHeader::plane_table`]): (rows, columns) for a plane of one component per
/// element — Y, U, V of I420 and NV12's Y; audio's (samples, channels) — and (rows,
/// columns, components) otherwise: NV12's UV (h/2, w/2, 2), RGBA (h, w, 4). Row
/// strides are the header's. Every byte they address lies inside the planes that
/// [`MediaHeader::parse`] checked against the payload.
pub fn plane_layouts(h: &MediaHeader) -> ([PlaneLayout; 3], usize) {
    let table = h.plane_table();
    let elem = match h.format {
        Format::PcmS16 => Elem::I16,
        Format::PcmF32 => Elem::F32,
        _ => Elem::U8,
    };
    let mut out = [PlaneLayout {
        offset: 0,
        ndim: 2,
        shape: [0; 3],
        strides: [0; 3],
        elem,
    }; 3];
    for (i, (p, o)) in table.iter().zip(out.iter_mut()).enumerate() {
        let (rows, cols) = (p.rows as usize, p.columns as usize);
        let (stride, value) = (h.stride[i] as usize, p.component_bytes as usize);
        let element = p.element_bytes() as usize;
        o.offset = h.offset[i] as usize;
        if p.components == 1 {
            o.shape = [rows, cols, 0];
            o.strides = [stride, element, 0];
        } else {
            o.ndim = 3;
            o.shape = [rows, cols, p.components as usize];
            o.strides = [stride, element, value];
        }
    }
    (out, table.len())
}

/// Reads a record of `kind` (VIDEO and AUDIO: a frame's header with the core's
/// checks for that kind, or the end of its stream; any other kind: the header
/// alone).
pub fn read(kind_: u32, payload: &[u8]) -> PyResult<MediaRecord> {
    match kind_ {
        kind::VIDEO | kind::AUDIO => media::read(kind_, payload),
        _ => MediaHeader::parse(payload).map(MediaRecord::Frame),
    }
    .map_err(|e| BadMediaHeader::new_err(e.to_string()))
}

/// Parses and validates the media header of a media record's payload (header and
/// planes: every plane must lie inside it) and returns it as a dict. Raises
/// BadMediaHeader if it is malformed.
#[pyfunction]
fn parse_media_header<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let buf = crate::producer::BufferGuard::get(data)?;
    let (p, n) = buf.bytes();
    let bytes = if n == 0 || p.is_null() {
        &[][..]
    } else {
        // SAFETY: the exported buffer is `n` readable bytes while `buf` lives.
        unsafe { std::slice::from_raw_parts(p, n) }
    };
    let h = MediaHeader::parse(bytes).map_err(|e| BadMediaHeader::new_err(e.to_string()))?;
    header_dict(py, &h)
}

/// Payload bytes of a video frame (header plus planes) of this size and format.
#[pyfunction]
#[pyo3(signature = (width, height, format = "i420"))]
fn video_payload_len(width: u32, height: u32, format: &str) -> PyResult<usize> {
    let f = parse_format(format)?;
    MediaHeader::video(f, width, height, 0, 0)
        .map(|h| h.payload_len())
        .map_err(|e| ConfigError::new_err(format!("video_payload_len: {e}")))
}

/// The core's record kinds, by the names `shmring.Kind` gives them.
const KINDS: [(&str, u32); 3] = [
    ("RAW", kind::RAW),
    ("VIDEO", kind::VIDEO),
    ("AUDIO", kind::AUDIO),
];

/// The members of `shmring.Kind`, made once when the module is loaded.
static KIND_MEMBERS: PyOnceLock<Vec<(u32, Py<PyAny>)>> = PyOnceLock::new();

/// `shmring.Kind`: an `enum.IntEnum` of the core's record kinds.
fn kind_enum<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let members = PyList::new(py, KINDS)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("module", "shmring")?;
    kwargs.set_item("qualname", "Kind")?;
    let cls = py
        .import("enum")?
        .getattr("IntEnum")?
        .call(("Kind", members), Some(&kwargs))?;
    cls.setattr(
        "__doc__",
        "The kind of a record: RAW (opaque bytes), VIDEO and AUDIO (a media header, \
         then the planes or samples). A record's kind that is none of these is given \
         as a plain int.",
    )?;
    Ok(cls)
}

/// A record's kind as a `shmring.Kind` member, or the number itself when it is none
/// of the core's kinds.
pub fn kind_object(py: Python<'_>, k: u32) -> PyResult<Py<PyAny>> {
    let members = KIND_MEMBERS
        .get(py)
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("shmring.Kind is not made"))?;
    Ok(match members.iter().find(|(v, _)| *v == k) {
        Some((_, m)) => m.clone_ref(py),
        None => k.into_pyobject(py)?.into_any().unbind(),
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let kinds = kind_enum(py)?;
    let members = KINDS
        .iter()
        .map(|(name, v)| Ok((*v, kinds.getattr(*name)?.unbind())))
        .collect::<PyResult<Vec<_>>>()?;
    for (name, _) in KINDS {
        m.add(format!("KIND_{name}"), kinds.getattr(name)?)?;
    }
    m.add("Kind", kinds)?;
    // Set once per process: the module is initialised once.
    let _ = KIND_MEMBERS.set(py, members);
    m.add("MEDIA_HEADER_SIZE", MEDIA_HEADER_SIZE)?;
    m.add("MEDIA_VERSION", media::MEDIA_VERSION)?;
    m.add_function(wrap_pyfunction!(parse_media_header, m)?)?;
    m.add_function(wrap_pyfunction!(video_payload_len, m)?)?;
    Ok(())
}
