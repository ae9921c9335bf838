//! The media header: a small, versioned header at the start of a media record's
//! payload, shared by every language (`include/shmring.h`, the Python and Node
//! packages translate it through this module).
//!
//! ```text
//!  offset size field
//!   0     4   magic        "SMH1" (0x31484d53 little-endian)
//!   4     2   version      2 (version 1 is read too: no frame rate, no flags)
//!   6     2   header_size  128 (plane data may start here)
//!   8     4   format       Format (i420, nv12, rgba, pcm_s16, pcm_f32); 0 at an end of stream
//!  12     4   width        pixels (video)
//!  16     4   height       pixels (video)
//!  20     4   sample_rate  Hz (audio)
//!  24     4   channels     (audio, interleaved)
//!  28     4   samples      per channel (audio)
//!  32     8   pts_ns       presentation timestamp, nanoseconds
//!  40     8   sequence     per stream and kind: 0, 1, 2, ... (SEQUENCE_AUTO: the producer numbers it)
//!  48     4   planes       number of planes used (video 1..=3, audio 1; 0 at an end of stream)
//!  52     4   flags        bit 0: END_OF_STREAM (version 2)
//!  56    16   stride[4]    bytes per row of each plane (audio: bytes per frame)
//!  72    16   offset[4]    byte offset of each plane from the payload start
//!  88    16   size[4]      byte size of each plane
//! 104     4   fps_num      video: nominal frame rate fps_num/fps_den; 0: variable (version 2)
//! 108     4   fps_den      1 or more when fps_num is not 0
//! 112    16   reserved     zero
//! ```
//! Plane offsets are 64-byte aligned in headers built here; a reader must accept
//! any offsets that pass [`MediaHeader::parse`].
//!
//! **Numbering.** `sequence` counts the records of one stream id and one kind (video
//! and audio are numbered apart), from 0, one more per record: a reader sees a gap as
//! a loss and a step back as a producer that started again. A header built with
//! [`SEQUENCE_AUTO`] is numbered by the [`crate::Producer`] that commits it (each
//! producer keeps the next number of the streams it writes).
//!
//! **End of stream.** A producer ends a stream of one kind with
//! [`crate::Producer::end_stream`]: a record of that kind whose payload is a header
//! alone, with the `END_OF_STREAM` flag, no format and no planes, numbered like a
//! frame. [`read`] tells the two apart ([`MediaRecord`]); [`MediaHeader::parse`]
//! refuses an end of stream, which carries no frame.
//!
//! **Versions.** Headers are written as version 2. A reader of version 1 (shmring
//! 0.1) refuses them by version, naming it; this reader accepts both.
//!
//! By concept: `format` (the formats: names and the plane table), `header` (a
//! frame's header: build, check, lay out planes), `record`
//! (what a record's payload is: a frame or the end of its stream), `numbering` (a
//! producer's numbers and its end of stream).

mod format;
mod header;
// A producer's side: there is no producer in the loom build.
#[cfg(not(loom))]
mod numbering;
mod record;
#[cfg(test)]
mod tests;

pub use format::{Format, Plane, PlaneTable, UnknownFormat};
pub use header::MediaHeader;
#[cfg(not(loom))]
pub(crate) use numbering::Numbering;
pub use record::{read, EndOfStream, MediaRecord};

/// Values for [`crate::Meta::kind`].
pub mod kind {
    /// Opaque bytes.
    pub const RAW: u32 = 0;
    /// A video frame: payload starts with a [`super::MediaHeader`], then the planes.
    pub const VIDEO: u32 = 1;
    /// An audio packet: payload starts with a [`super::MediaHeader`], then samples.
    pub const AUDIO: u32 = 2;
}

/// `b"SMH1"` as a little-endian u32.
pub const MEDIA_MAGIC: u32 = u32::from_le_bytes(*b"SMH1");
/// The version written; [`MediaHeader::parse`] also reads [`MEDIA_VERSION_1`].
pub const MEDIA_VERSION: u16 = 2;
/// The first version: no frame rate, no flags (their bytes were reserved, zero).
pub const MEDIA_VERSION_1: u16 = 1;
pub const MEDIA_HEADER_SIZE: usize = 128;

/// `sequence` value asking the committing [`crate::Producer`] to number the record
/// (see the module's documentation).
pub const SEQUENCE_AUTO: u64 = u64::MAX;

/// Bits of the header's `flags` field (version 2).
pub mod flags {
    /// The record ends its stream (of its kind): no format, no planes.
    pub const END_OF_STREAM: u32 = 1;
    /// Every bit a reader of this version knows.
    pub const KNOWN: u32 = END_OF_STREAM;
}

/// Highest nominal frame rate a header may give, in frames per second.
pub const MAX_FRAME_RATE: u32 = 1000;

/// Largest width and height of a video frame, in pixels (an RGBA frame this size
/// is 1 GiB, so every plane size and offset fits the header's u32 fields).
pub const MAX_DIMENSION: u32 = 16384;
/// Most channels of an audio packet.
pub const MAX_CHANNELS: u32 = 64;
/// Most samples (per channel) of an audio packet.
pub const MAX_SAMPLES: u32 = 1 << 24;
/// Audio sample rates accepted, in Hz.
pub const SAMPLE_RATES: std::ops::RangeInclusive<u32> = 1000..=768_000;

/// Why a media header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed media header: {0}")]
pub struct MediaError(pub String);

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
