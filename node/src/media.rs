//! The shared media header (`shmring::media`) as seen from JavaScript: format
//! names and header objects. Layout and validation are the core's.

use napi::{Env, JsObject};
use shmring::media::{self, Format, MediaHeader, MediaRecord};

use crate::errors::{error, INVALID_ARG};

/// The name JavaScript gives a format: the core's ([`Format::name`], the same as
/// the Python package's).
pub fn format_name(f: Format) -> &'static str {
    f.name()
}

/// A format by name (the core's names and aliases, any case); an invalid-argument
/// error naming the valid ones otherwise.
pub fn parse_format(env: Env, name: &str) -> napi::Result<Format> {
    name.parse()
        .map_err(|e: media::UnknownFormat| error(env, INVALID_ARG, &e.to_string()))
}

/// The header as a plain object: format, width, height, sampleRate, channels,
/// samples, ptsNs (bigint), sequence (bigint), fpsNum, fpsDen (video's nominal
/// frame rate; 0/1: variable), and planes [{offset, stride, size}].
pub fn header_object(env: Env, h: &MediaHeader) -> napi::Result<JsObject> {
    let mut o = env.create_object()?;
    o.set_named_property("format", env.create_string(format_name(h.format))?)?;
    o.set_named_property("width", env.create_uint32(h.width)?)?;
    o.set_named_property("height", env.create_uint32(h.height)?)?;
    o.set_named_property("sampleRate", env.create_uint32(h.sample_rate)?)?;
    o.set_named_property("channels", env.create_uint32(h.channels)?)?;
    o.set_named_property("samples", env.create_uint32(h.samples)?)?;
    o.set_named_property(
        "ptsNs",
        env.create_bigint_from_u64(h.pts_ns)?.into_unknown()?,
    )?;
    o.set_named_property(
        "sequence",
        env.create_bigint_from_u64(h.sequence)?.into_unknown()?,
    )?;
    o.set_named_property("fpsNum", env.create_uint32(h.fps_num)?)?;
    o.set_named_property("fpsDen", env.create_uint32(h.fps_den)?)?;
    let mut planes = env.create_array_with_length(h.planes as usize)?;
    for i in 0..h.planes as usize {
        let mut p = env.create_object()?;
        p.set_named_property("offset", env.create_uint32(h.offset[i])?)?;
        p.set_named_property("stride", env.create_uint32(h.stride[i])?)?;
        p.set_named_property("size", env.create_uint32(h.size[i])?)?;
        planes.set_element(i as u32, p)?;
    }
    o.set_named_property("planes", planes)?;
    Ok(o)
}

/// Reads a record of `kind` VIDEO or AUDIO (untrusted bytes: the core reads them
/// once and checks every plane against the payload): a frame's header, or the end
/// of its stream.
pub fn read(kind_: u32, payload: &[u8]) -> Result<MediaRecord, String> {
    media::read(kind_, payload).map_err(|e| e.to_string())
}
