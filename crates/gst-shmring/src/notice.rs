//! The notice a sink leaves in the ring when the ring refuses one of its records as
//! too large: a short record of kind `RAW` (which every other reader skips), so
//! that the ring's consumer learns it too and says what to do (the capacity to
//! create the ring with) instead of waiting for records that never come.

use shmring::media::kind;
use shmring::Meta;

/// What a notice starts with (and its version, the last byte).
const MAGIC: [u8; 16] = *b"shmring-notice\0\x01";
/// Bytes of a notice.
pub const LEN: usize = MAGIC.len() + 24;

/// A record of `len` bytes of stream `stream`'s `kind` that the ring refused: its
/// records may be `max` bytes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub kind: u32,
    pub len: u64,
    pub max: u64,
}

impl TooLarge {
    /// The notice's payload.
    pub fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..16].copy_from_slice(&MAGIC);
        b[16..20].copy_from_slice(&self.kind.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.max.to_le_bytes());
        b
    }

    /// The notice's meta: stream `stream`, kind `RAW`.
    pub fn meta(stream: u32) -> Meta {
        Meta::new(stream, kind::RAW)
    }

    /// The notice a record of kind `RAW` carries, if it is one.
    pub fn read(record_kind: u32, payload: &[u8]) -> Option<TooLarge> {
        if record_kind != kind::RAW || payload.len() != LEN || payload[..16] != MAGIC {
            return None;
        }
        let u64_at =
            |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
        Some(TooLarge {
            kind: u32::from_le_bytes(payload[16..20].try_into().expect("4 bytes")),
            len: u64_at(24),
            max: u64_at(32),
        })
    }

    /// `video` or `audio`.
    pub fn kind_name(self) -> &'static str {
        if self.kind == kind::AUDIO {
            "audio"
        } else {
            "video"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_reads_back_and_nothing_else_is_one() {
        let n = TooLarge {
            kind: kind::VIDEO,
            len: 8_294_528,
            max: 4_194_304,
        };
        assert_eq!(TooLarge::read(kind::RAW, &n.to_bytes()), Some(n));
        assert_eq!(TooLarge::read(kind::VIDEO, &n.to_bytes()), None);
        assert_eq!(TooLarge::read(kind::RAW, b"frame"), None);
        let mut other = n.to_bytes();
        other[15] = 2;
        assert_eq!(TooLarge::read(kind::RAW, &other), None);
    }
}
