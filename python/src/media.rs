//! The shared media header (see `shmring::media`) as seen from Python: format
//! names, header dictionaries, and the numpy layout of each plane.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use shmring::media::{self, kind, Format, MediaHeader, MediaRecord, MEDIA_HEADER_SIZE};

use crate::errors::{BadMediaHeader, ConfigError};

/// Python names of the formats.
pub fn format_name(f: Format) -> &'static str {
    match f {
        Format::I420 => "i420",
        Format::Nv12 => "nv12",
        Format::Rgba => "rgba",
        Format::PcmS16 => "pcm_s16",
        Format::PcmF32 => "pcm_f32",
    }
}

pub fn parse_format(name: &str) -> PyResult<Format> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "i420" => Format::I420,
        "nv12" => Format::Nv12,
        "rgba" => Format::Rgba,
        "pcm_s16" | "s16" => Format::PcmS16,
        "pcm_f32" | "f32" => Format::PcmF32,
        _ => {
            return Err(ConfigError::new_err(format!(
                "unknown media format {name:?}: expected i420, nv12, rgba, pcm_s16 or pcm_f32"
            )))
        }
    })
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

/// The planes of a parsed header: Y, U, V for I420; Y, UV (h/2, w/2, 2) for NV12;
/// (h, w, 4) for RGBA; (samples, channels) for audio. Every byte they address lies
/// inside the planes that [`MediaHeader::parse`] checked against the payload.
pub fn plane_layouts(h: &MediaHeader) -> ([PlaneLayout; 3], usize) {
    let (w, ht) = (h.width as usize, h.height as usize);
    let (cw, ch) = (w.div_ceil(2), ht.div_ceil(2));
    let st = |i: usize| h.stride[i] as usize;
    let off = |i: usize| h.offset[i] as usize;
    let p2 = |i: usize, rows: usize, cols: usize| PlaneLayout {
        offset: off(i),
        ndim: 2,
        shape: [rows, cols, 0],
        strides: [st(i), 1, 0],
        elem: Elem::U8,
    };
    let empty = p2(0, 0, 0);
    match h.format {
        Format::I420 => ([p2(0, ht, w), p2(1, ch, cw), p2(2, ch, cw)], 3),
        Format::Nv12 => (
            [
                p2(0, ht, w),
                PlaneLayout {
                    offset: off(1),
                    ndim: 3,
                    shape: [ch, cw, 2],
                    strides: [st(1), 2, 1],
                    elem: Elem::U8,
                },
                empty,
            ],
            2,
        ),
        Format::Rgba => (
            [
                PlaneLayout {
                    offset: off(0),
                    ndim: 3,
                    shape: [ht, w, 4],
                    strides: [st(0), 4, 1],
                    elem: Elem::U8,
                },
                empty,
                empty,
            ],
            1,
        ),
        f @ (Format::PcmS16 | Format::PcmF32) => (
            [
                PlaneLayout {
                    offset: off(0),
                    ndim: 2,
                    shape: [h.samples as usize, h.channels as usize, 0],
                    strides: [st(0), f.sample_bytes() as usize, 0],
                    elem: if f == Format::PcmS16 {
                        Elem::I16
                    } else {
                        Elem::F32
                    },
                },
                empty,
                empty,
            ],
            1,
        ),
    }
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
