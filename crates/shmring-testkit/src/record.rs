//! The checked record of every cross-process test, in every language (Rust here,
//! `python/tests/_record.py`, `node/test/helpers.js`, `go/record_test.go`): bytes
//! 0..4 the record's index (u32, little-endian), 4..8 the CRC-32 (IEEE, zlib's
//! `crc32`) of every byte after them (u32, little-endian), then the body. Any body
//! will do (the check is the checksum); the writers here fill it with a xorshift32
//! stream seeded by the index. At least [`HEADER`] bytes.
//!
//! ```
//! let mut buf = vec![0u8; 100];
//! shmring_testkit::record::fill(&mut buf, 7);
//! assert_eq!(shmring_testkit::record::index_of(&buf), Some(7));
//! buf[50] ^= 1;
//! assert_eq!(shmring_testkit::record::index_of(&buf), None);
//! ```

/// The index and the checksum.
pub const HEADER: usize = 8;

/// Writes record `index` over all of `buf` (at least [`HEADER`] bytes).
pub fn fill(buf: &mut [u8], index: u32) {
    assert!(
        buf.len() >= HEADER,
        "a checked record has at least {HEADER} bytes"
    );
    let mut x = 0x9e37_79b9u32 ^ index.wrapping_mul(0x85eb_ca6b);
    for b in &mut buf[HEADER..] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let sum = crc32fast::hash(&buf[HEADER..]);
    buf[..4].copy_from_slice(&index.to_le_bytes());
    buf[4..8].copy_from_slice(&sum.to_le_bytes());
}

/// The index of a checked record whose checksum holds; None otherwise (too short,
/// or a byte changed).
pub fn index_of(buf: &[u8]) -> Option<u32> {
    if buf.len() < HEADER {
        return None;
    }
    let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
    (crc32fast::hash(&buf[HEADER..]) == word(4)).then(|| word(0))
}

/// The length of record `index` as `ring-peer` writes it: 64 + (index × 7919) mod
/// 65536 bytes.
pub fn peer_len(index: u32) -> usize {
    64 + (index as usize * 7919) % 65536
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_zlibs_crc32() {
        // zlib.crc32(b"123456789") == 0xcbf43926 (the CRC-32 check value).
        let mut buf = b"\x05\0\0\0\x26\x39\xf4\xcb123456789".to_vec();
        assert_eq!(index_of(&buf), Some(5));
        buf[9] = b'0';
        assert_eq!(index_of(&buf), None);
        assert_eq!(index_of(&buf[..7]), None);
    }
}
