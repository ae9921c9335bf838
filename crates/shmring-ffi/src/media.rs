//! The media header: build, parse and locate planes (the rules are the core's,
//! `shmring::media`).

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

use shmring::media::{
    self, flags, EndOfStream, Format, MediaError, MediaHeader, MediaRecord, MEDIA_HEADER_SIZE,
    MEDIA_MAGIC, MEDIA_VERSION, MEDIA_VERSION_1, SEQUENCE_AUTO,
};

use crate::handles::*;
use crate::status::shmring_status::*;
use crate::status::*;

/// Meta.kind: opaque bytes.
pub const SHMRING_KIND_RAW: u32 = 0;

/// Meta.kind: a media header, then video planes.
pub const SHMRING_KIND_VIDEO: u32 = 1;

/// Meta.kind: a media header, then interleaved samples.
pub const SHMRING_KIND_AUDIO: u32 = 2;

/// Media format: planar YUV 4:2:0 (Y, U, V).
pub const SHMRING_FORMAT_I420: u32 = 1;

/// Media format: Y plane, then interleaved UV.
pub const SHMRING_FORMAT_NV12: u32 = 2;

/// Media format: packed 8-bit RGBA.
pub const SHMRING_FORMAT_RGBA: u32 = 3;

/// Media format: interleaved signed 16-bit PCM.
pub const SHMRING_FORMAT_PCM_S16: u32 = 16;

/// Media format: interleaved 32-bit float PCM.
pub const SHMRING_FORMAT_PCM_F32: u32 = 17;

/// "SMH1" little-endian.
pub const SHMRING_MEDIA_MAGIC: u32 = 0x3148_4d53;

/// The version written (version 1 headers are read too: no frame rate, no flags).
pub const SHMRING_MEDIA_VERSION: u16 = 2;

/// The first version of the media header.
pub const SHMRING_MEDIA_VERSION_1: u16 = 1;

pub const SHMRING_MEDIA_HEADER_SIZE: usize = 128;

/// A header's `sequence` asking the committing producer to number the record: 0,
/// 1, 2, ... per stream id and kind, after the stream's last record from that
/// producer.
pub const SHMRING_SEQUENCE_AUTO: u64 = u64::MAX;

/// A header's `flags`: the record ends its stream (of its kind); no format, no
/// planes (see shmring_producer_end_stream, shmring_media_read).
pub const SHMRING_MEDIA_END_OF_STREAM: u32 = 1;

// The header's literals must be the core's values.
const _: () = {
    use shmring::media::kind;
    assert!(SHMRING_KIND_RAW == kind::RAW);
    assert!(SHMRING_KIND_VIDEO == kind::VIDEO);
    assert!(SHMRING_KIND_AUDIO == kind::AUDIO);
    assert!(SHMRING_FORMAT_I420 == Format::I420 as u32);
    assert!(SHMRING_FORMAT_NV12 == Format::Nv12 as u32);
    assert!(SHMRING_FORMAT_RGBA == Format::Rgba as u32);
    assert!(SHMRING_FORMAT_PCM_S16 == Format::PcmS16 as u32);
    assert!(SHMRING_FORMAT_PCM_F32 == Format::PcmF32 as u32);
    assert!(SHMRING_MEDIA_MAGIC == MEDIA_MAGIC);
    assert!(SHMRING_MEDIA_VERSION == MEDIA_VERSION);
    assert!(SHMRING_MEDIA_VERSION_1 == MEDIA_VERSION_1);
    assert!(SHMRING_SEQUENCE_AUTO == SEQUENCE_AUTO);
    assert!(SHMRING_MEDIA_END_OF_STREAM == flags::END_OF_STREAM);
    assert!(SHMRING_MEDIA_HEADER_SIZE == MEDIA_HEADER_SIZE);
};

/// The media header at the start of a video/audio payload, byte for byte
/// (little-endian, 128 bytes; see crates/shmring/src/media/mod.rs). Build and parse it
/// with the shmring_media_* functions, which validate it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct shmring_media_header {
    /// SHMRING_MEDIA_MAGIC.
    pub magic: u32,
    /// SHMRING_MEDIA_VERSION.
    pub version: u16,
    /// SHMRING_MEDIA_HEADER_SIZE.
    pub header_size: u16,
    /// SHMRING_FORMAT_*.
    pub format: u32,
    pub width: u32,
    pub height: u32,
    pub sample_rate: u32,
    pub channels: u32,
    /// Per channel.
    pub samples: u32,
    pub pts_ns: u64,
    /// Per stream id and kind: 0, 1, 2, ...; SHMRING_SEQUENCE_AUTO: the committing
    /// producer numbers it.
    pub sequence: u64,
    /// Planes used (video 1..3, audio 1; 0 at an end of stream).
    pub planes: u32,
    /// SHMRING_MEDIA_END_OF_STREAM or 0.
    pub flags: u32,
    /// Bytes per row (audio: bytes per sample frame).
    pub stride: [u32; 4],
    /// Byte offset of each plane from the payload start.
    pub offset: [u32; 4],
    /// Byte size of each plane.
    pub size: [u32; 4],
    /// Video: nominal frame rate fps_num / fps_den; fps_num 0: variable. Set them
    /// after shmring_media_video (checked by shmring_media_write).
    pub fps_num: u32,
    pub fps_den: u32,
    pub reserved: [u8; 16],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<shmring_media_header>() == MEDIA_HEADER_SIZE);
    assert!(offset_of!(shmring_media_header, format) == 8);
    assert!(offset_of!(shmring_media_header, pts_ns) == 32);
    assert!(offset_of!(shmring_media_header, planes) == 48);
    assert!(offset_of!(shmring_media_header, stride) == 56);
    assert!(offset_of!(shmring_media_header, offset) == 72);
    assert!(offset_of!(shmring_media_header, flags) == 52);
    assert!(offset_of!(shmring_media_header, size) == 88);
    assert!(offset_of!(shmring_media_header, fps_num) == 104);
    assert!(offset_of!(shmring_media_header, fps_den) == 108);
    assert!(offset_of!(shmring_media_header, reserved) == 112);
};

impl shmring_media_header {
    pub(crate) fn from_core(h: &MediaHeader) -> Self {
        shmring_media_header {
            magic: MEDIA_MAGIC,
            version: MEDIA_VERSION,
            header_size: MEDIA_HEADER_SIZE as u16,
            format: h.format as u32,
            width: h.width,
            height: h.height,
            sample_rate: h.sample_rate,
            channels: h.channels,
            samples: h.samples,
            pts_ns: h.pts_ns,
            sequence: h.sequence,
            planes: h.planes,
            flags: 0,
            stride: h.stride,
            offset: h.offset,
            size: h.size,
            fps_num: h.fps_num,
            fps_den: h.fps_den,
            reserved: [0; 16],
        }
    }

    fn from_end(e: &EndOfStream) -> Self {
        shmring_media_header {
            magic: MEDIA_MAGIC,
            version: MEDIA_VERSION,
            header_size: MEDIA_HEADER_SIZE as u16,
            pts_ns: e.pts_ns,
            sequence: e.sequence,
            flags: flags::END_OF_STREAM,
            ..Default::default()
        }
    }

    pub(crate) fn to_core(self) -> Res<MediaHeader> {
        let format = Format::from_u32(self.format)
            .ok_or_else(|| fail!(SHMRING_ERR_MEDIA, "unknown media format {}", self.format))?;
        if self.planes == 0 || self.planes > 4 {
            return Err(fail!(
                SHMRING_ERR_MEDIA,
                "{} planes, expected 1 to 4",
                self.planes
            ));
        }
        if self.flags != 0 {
            return Err(fail!(
                SHMRING_ERR_MEDIA,
                "flags {:#x}: an end of stream is written by shmring_producer_end_stream",
                self.flags
            ));
        }
        MediaHeader {
            format,
            width: self.width,
            height: self.height,
            sample_rate: self.sample_rate,
            channels: self.channels,
            samples: self.samples,
            pts_ns: self.pts_ns,
            sequence: self.sequence,
            planes: self.planes,
            stride: self.stride,
            offset: self.offset,
            size: self.size,
            fps_num: 0,
            fps_den: 1,
        }
        .with_frame_rate(self.fps_num, self.fps_den)
        .map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))
    }
}

/// Builds a video header (tight strides, 64-byte-aligned planes after the header)
/// for SHMRING_FORMAT_I420, _NV12 or _RGBA. SHMRING_ERR_INVALID_ARGUMENT for
/// another format or a width or height outside 1..16384.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_video(
    format: u32,
    width: u32,
    height: u32,
    pts_ns: u64,
    sequence: u64,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_video", || {
        let out = out_ptr(out, "out")?;
        let f = Format::from_u32(format)
            .filter(|f| f.is_video())
            .ok_or_else(|| {
                fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "format {format} is not a video format ({})",
                    NamesOf(Format::is_video)
                )
            })?;
        let h = MediaHeader::video(f, width, height, pts_ns, sequence)
            .map_err(|e| fail!(SHMRING_ERR_INVALID_ARGUMENT, "{e}"))?;
        *out = shmring_media_header::from_core(&h);
        ok()
    })
}

/// Builds an audio header (interleaved samples right after the header) for
/// SHMRING_FORMAT_PCM_S16 or _PCM_F32; `samples` is per channel.
/// SHMRING_ERR_INVALID_ARGUMENT for another format, channels outside 1..64, a
/// sample rate outside 1000..768000 Hz, or more than 2^24 samples.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_audio(
    format: u32,
    sample_rate: u32,
    channels: u32,
    samples: u32,
    pts_ns: u64,
    sequence: u64,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_audio", || {
        let out = out_ptr(out, "out")?;
        let f = Format::from_u32(format)
            .filter(|f| f.is_audio())
            .ok_or_else(|| {
                fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "format {format} is not an audio format ({})",
                    NamesOf(Format::is_audio)
                )
            })?;
        let h = MediaHeader::audio(f, sample_rate, channels, samples, pts_ns, sequence)
            .map_err(|e| fail!(SHMRING_ERR_INVALID_ARGUMENT, "{e}"))?;
        *out = shmring_media_header::from_core(&h);
        ok()
    })
}

/// Payload bytes a header describes (header plus planes): reserve this many.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_payload_len(
    hdr: *const shmring_media_header,
    out: *mut usize,
) -> shmring_status {
    entry("shmring_media_payload_len", || {
        let h = in_ptr(hdr, "hdr")?.to_core()?;
        *out_ptr(out, "out")? = h.payload_len();
        ok()
    })
}

/// Writes the header's 128 bytes at the start of `payload` (`len` bytes, which must
/// hold every plane the header describes). Allocates nothing.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_write(
    hdr: *const shmring_media_header,
    payload: *mut u8,
    len: usize,
) -> shmring_status {
    entry("shmring_media_write", || {
        let h = in_ptr(hdr, "hdr")?.to_core()?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        // SAFETY: the caller promises `len` writable bytes at `payload`.
        let buf = unsafe { std::slice::from_raw_parts_mut(payload, len) };
        h.write_to(buf)
            .map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))?;
        ok()
    })
}

/// Reads and validates the header at the start of `payload` (`len` bytes; e.g. a
/// frame's data and len): every plane is checked to lie inside the payload. The
/// bytes are read once, so a peer changing them cannot invalidate `*out`.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_parse(
    payload: *const u8,
    len: usize,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_parse", || {
        // SAFETY: the caller's promise on `payload` and `len`, passed on.
        unsafe { parse_into(payload, len, out, MediaHeader::parse) }
    })
}

/// shmring_media_parse, then the checks for a record of `kind` (a frame's
/// meta.kind): SHMRING_KIND_VIDEO needs a video format and a size the builders
/// accept, SHMRING_KIND_AUDIO an audio format and shape; any other kind carries no
/// media header. SHMRING_ERR_MEDIA, with the reason, otherwise. The one check for
/// a reader of media records.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_parse_for(
    kind: u32,
    payload: *const u8,
    len: usize,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_parse_for", || {
        // SAFETY: the caller's promise on `payload` and `len`, passed on.
        unsafe { parse_into(payload, len, out, |buf| MediaHeader::parse_for(kind, buf)) }
    })
}

/// Reads a record of `kind` (a frame's meta.kind): a frame's header, checked as
/// shmring_media_parse_for checks it, or the end of its stream, which a producer
/// writes with shmring_producer_end_stream: then `out->flags` has
/// SHMRING_MEDIA_END_OF_STREAM, `out->sequence` the number the stream's next record
/// would have had, and `out->format` and `out->planes` are 0. The one call for a
/// reader of media records that follows streams to their end.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_read(
    kind: u32,
    payload: *const u8,
    len: usize,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_read", || {
        let out = out_ptr(out, "out")?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        // SAFETY: the caller promises `len` readable bytes at `payload`.
        let buf = unsafe { std::slice::from_raw_parts(payload, len) };
        *out = match media::read(kind, buf).map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))? {
            MediaRecord::Frame(h) => shmring_media_header::from_core(&h),
            MediaRecord::End(e) => shmring_media_header::from_end(&e),
        };
        ok()
    })
}

/// `parse` on the `len` bytes at `payload`, the header into `*out`.
///
/// # Safety
/// `payload` is NULL or points to `len` readable bytes.
unsafe fn parse_into(
    payload: *const u8,
    len: usize,
    out: *mut shmring_media_header,
    parse: impl FnOnce(&[u8]) -> Result<MediaHeader, MediaError>,
) -> Res<shmring_status> {
    let out = out_ptr(out, "out")?;
    if payload.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
    }
    // SAFETY: the caller promises `len` readable bytes at `payload`.
    let buf = unsafe { std::slice::from_raw_parts(payload, len) };
    let h = parse(buf).map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))?;
    *out = shmring_media_header::from_core(&h);
    ok()
}

/// Plane `index` of a payload whose header `hdr` was parsed from (`len` bytes):
/// `*data`, `*size` (checked to lie inside the payload).
#[no_mangle]
pub unsafe extern "C" fn shmring_media_plane(
    hdr: *const shmring_media_header,
    payload: *const u8,
    len: usize,
    index: u32,
    data: *mut *const u8,
    size: *mut usize,
) -> shmring_status {
    entry("shmring_media_plane", || {
        let h = in_ptr(hdr, "hdr")?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        if index >= h.planes.min(4) {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "plane {index}: the header has {} planes",
                h.planes
            ));
        }
        let (o, s) = (
            h.offset[index as usize] as usize,
            h.size[index as usize] as usize,
        );
        if o + s > len {
            return Err(fail!(
                SHMRING_ERR_MEDIA,
                "plane {index} at {o}..{} lies outside the {len}-byte payload",
                o + s
            ));
        }
        // SAFETY: o + s <= len, inside the caller's payload.
        *out_ptr(data, "data")? = unsafe { payload.add(o) };
        *out_ptr(size, "size")? = s;
        ok()
    })
}

/// The core's names of the formats that pass its test, with their numbers, as
/// text: "i420 (1), nv12 (2), rgba (3)" (written into an error message without
/// allocating).
struct NamesOf(fn(Format) -> bool);

impl std::fmt::Display for NamesOf {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = Format::ALL.into_iter().filter(|f| (self.0)(*f));
        for (i, f) in which.enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(out, "{sep}{f} ({})", f as u32)?;
        }
        Ok(())
    }
}

/// The core's format names as C strings, made once.
fn c_names() -> &'static [(Format, CString)] {
    static NAMES: OnceLock<Vec<(Format, CString)>> = OnceLock::new();
    NAMES.get_or_init(|| {
        Format::ALL
            .into_iter()
            .map(|f| (f, CString::new(f.name()).expect("no NUL in a format name")))
            .collect()
    })
}

/// The name of SHMRING_FORMAT_* `format`: "i420", "nv12", "rgba", "pcm_s16" or
/// "pcm_f32" (the names every binding gives and takes); NULL for a number that is
/// no format. Static: never freed.
#[no_mangle]
pub extern "C" fn shmring_media_format_name(format: u32) -> *const c_char {
    c_names()
        .iter()
        .find(|(f, _)| *f as u32 == format)
        .map_or(std::ptr::null(), |(_, n)| n.as_ptr())
}

/// The SHMRING_FORMAT_* named `name` (a name shmring_media_format_name gives, or
/// the alias "s16" or "f32"; any case) into `*out`. SHMRING_ERR_INVALID_ARGUMENT
/// for another name; shmring_last_error() lists the valid ones.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_format_parse(
    name: *const c_char,
    out: *mut u32,
) -> shmring_status {
    entry("shmring_media_format_parse", || {
        let out = out_ptr(out, "out")?;
        let f: Format = c_str(name, "name")?
            .parse()
            .map_err(|e| fail!(SHMRING_ERR_INVALID_ARGUMENT, "{e}"))?;
        *out = f as u32;
        ok()
    })
}
