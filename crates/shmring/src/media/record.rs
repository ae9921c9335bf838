//! What a media record's payload is: a frame's header, or the end of its stream.

use super::{
    flags, kind, u32_at, u64_at, MediaError, MediaHeader, MEDIA_HEADER_SIZE, MEDIA_MAGIC,
    MEDIA_VERSION, MEDIA_VERSION_1,
};

/// The end of a stream: what [`read`] returns for an end-of-stream record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndOfStream {
    /// The stream's end, in the stream's presentation time (0: not given).
    pub pts_ns: u64,
    /// The number the stream's next record would have had.
    pub sequence: u64,
}

impl EndOfStream {
    /// The header bytes of an end-of-stream record (numbered by the producer unless
    /// `sequence` is given).
    pub fn to_bytes(&self) -> [u8; MEDIA_HEADER_SIZE] {
        let mut b = [0u8; MEDIA_HEADER_SIZE];
        b[0..4].copy_from_slice(&MEDIA_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&MEDIA_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(MEDIA_HEADER_SIZE as u16).to_le_bytes());
        b[32..40].copy_from_slice(&self.pts_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.sequence.to_le_bytes());
        b[52..56].copy_from_slice(&flags::END_OF_STREAM.to_le_bytes());
        b
    }
}

/// A media record's payload, read: a frame's header, or the end of its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaRecord {
    Frame(MediaHeader),
    End(EndOfStream),
}

/// Reads a record of `kind` ([`kind::VIDEO`] or [`kind::AUDIO`]): its frame's header,
/// checked as [`MediaHeader::parse_for`] checks it, or the end of its stream. What
/// every reader of media records calls.
///
/// ```
/// use shmring::media::{self, kind, EndOfStream, MediaRecord};
/// let end = EndOfStream { pts_ns: 5, sequence: 9 }.to_bytes();
/// let got = media::read(kind::VIDEO, &end).unwrap();
/// assert_eq!(got, MediaRecord::End(EndOfStream { pts_ns: 5, sequence: 9 }));
/// ```
pub fn read(k: u32, payload: &[u8]) -> Result<MediaRecord, MediaError> {
    match Raw::load(payload)? {
        Raw::End(e) if k == kind::VIDEO || k == kind::AUDIO => Ok(MediaRecord::End(e)),
        Raw::End(_) => Err(MediaError(format!(
            "record kind {k} carries no media header (expected video or audio)"
        ))),
        Raw::Frame(b) => {
            MediaHeader::check_for(k, MediaHeader::check(&b, payload)?).map(MediaRecord::Frame)
        }
    }
}

/// The header bytes, copied once from shared memory, after the checks every
/// header passes (magic, version, size, flags).
pub(super) enum Raw {
    Frame([u8; MEDIA_HEADER_SIZE]),
    End(EndOfStream),
}

impl Raw {
    pub(super) fn load(payload: &[u8]) -> Result<Raw, MediaError> {
        if payload.len() < MEDIA_HEADER_SIZE {
            return Err(MediaError(format!(
                "payload of {} bytes is shorter than the {MEDIA_HEADER_SIZE}-byte header",
                payload.len()
            )));
        }
        let mut b = [0u8; MEDIA_HEADER_SIZE];
        b.copy_from_slice(&payload[..MEDIA_HEADER_SIZE]); // one read of shared bytes
        let magic = u32_at(&b, 0);
        if magic != MEDIA_MAGIC {
            return Err(MediaError(format!(
                "magic {magic:#x}, expected {MEDIA_MAGIC:#x}"
            )));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != MEDIA_VERSION && version != MEDIA_VERSION_1 {
            return Err(MediaError(format!(
                "version {version}, expected {MEDIA_VERSION_1} or {MEDIA_VERSION}"
            )));
        }
        let size = u16::from_le_bytes([b[6], b[7]]);
        if size as usize != MEDIA_HEADER_SIZE {
            return Err(MediaError(format!(
                "header size {size}, expected {MEDIA_HEADER_SIZE}"
            )));
        }
        if version == MEDIA_VERSION_1 {
            // Reserved (zero) in version 1: no flags, no frame rate.
            b[52..56].fill(0);
            b[104..112].fill(0);
        }
        let f = u32_at(&b, 52);
        if f & !flags::KNOWN != 0 {
            return Err(MediaError(format!("unknown flags {f:#x}")));
        }
        if f & flags::END_OF_STREAM != 0 {
            if u32_at(&b, 8) != 0 || u32_at(&b, 48) != 0 {
                return Err(MediaError(
                    "an end of stream carries a format or planes".into(),
                ));
            }
            return Ok(Raw::End(EndOfStream {
                pts_ns: u64_at(&b, 32),
                sequence: u64_at(&b, 40),
            }));
        }
        Ok(Raw::Frame(b))
    }
}
