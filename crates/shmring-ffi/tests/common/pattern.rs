//! The frame pattern and checksum of examples/c/frame_pattern.h, in Rust.
#![allow(dead_code)]

use shmring::media::{MediaHeader, MEDIA_HEADER_SIZE};

/// FNV-1a-style fold, 8 little-endian bytes at a time, then the tail bytewise.
pub fn checksum(data: &[u8]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    (h ^ (h >> 32)) as u32
}

/// Checksum of a media payload: the bytes after the header.
pub fn payload_checksum(payload: &[u8]) -> u32 {
    checksum(payload.get(MEDIA_HEADER_SIZE..).unwrap_or(&[]))
}

/// Expected byte at (plane, row, column) of frame `sequence`.
pub fn expected(sequence: u64, plane: usize, y: usize, x: usize) -> u8 {
    ((sequence as usize + y + 64 * plane + x) & 255) as u8
}

/// A ramp long enough to copy any row from any phase (as pattern_ramp in C).
pub fn ramp() -> Vec<u8> {
    (0..16384 + 256).map(|i| i as u8).collect()
}

/// Fills the planes of `payload` like pattern_fill in C.
pub fn fill(h: &MediaHeader, payload: &mut [u8], ramp: &[u8]) {
    for p in 0..h.planes as usize {
        let stride = h.stride[p] as usize;
        let rows = h.size[p] as usize / stride;
        let base = h.offset[p] as usize;
        for y in 0..rows {
            let phase = ((h.sequence as usize) + y + 64 * p) & 255;
            payload[base + y * stride..base + (y + 1) * stride]
                .copy_from_slice(&ramp[phase..phase + stride]);
        }
    }
}
