//! The work every transport carries: a decoder-like writer that writes every byte of
//! a frame with a per-frame pattern, and an encoder-like reader that reads every
//! byte and checks a checksum. The same functions for all transports.

/// A 1080p I420 frame: 1920 x 1080 x 1.5 bytes.
pub const FRAME_1080P_I420: usize = 1920 * 1080 * 3 / 2;
/// An audio-sized record.
pub const AUDIO_RECORD: usize = 4096;

#[inline]
fn base(seq: u64) -> u64 {
    seq.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Writes every byte of `buf` with frame `seq`'s pattern: little-endian u64 words
/// `base(seq) + i`, then the tail bytes `base(seq) as u8`.
#[inline(never)]
pub fn fill_frame(buf: &mut [u8], seq: u64) {
    let b = base(seq);
    let mut words = buf.chunks_exact_mut(8);
    for (i, w) in (&mut words).enumerate() {
        w.copy_from_slice(&b.wrapping_add(i as u64).to_le_bytes());
    }
    for t in words.into_remainder() {
        *t = b as u8;
    }
}

/// Reads every byte of `buf`: the wrapping sum of its little-endian u64 words plus
/// its tail bytes.
#[inline(never)]
pub fn checksum(buf: &[u8]) -> u64 {
    let words = buf.chunks_exact(8);
    let tail = words.remainder();
    // Four independent lanes so the adds are not one serial chain.
    let mut acc = [0u64; 4];
    let mut quads = buf[..buf.len() - tail.len()].chunks_exact(32);
    for q in &mut quads {
        for (k, a) in acc.iter_mut().enumerate() {
            let w = u64::from_le_bytes(q[k * 8..k * 8 + 8].try_into().unwrap());
            *a = a.wrapping_add(w);
        }
    }
    let mut sum = acc.iter().fold(0u64, |s, a| s.wrapping_add(*a));
    for w in quads.remainder().chunks_exact(8) {
        sum = sum.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
    }
    for t in tail {
        sum = sum.wrapping_add(*t as u64);
    }
    sum
}

/// What [`checksum`] gives for a `len`-byte frame `seq` written by [`fill_frame`].
pub fn expected_checksum(seq: u64, len: usize) -> u64 {
    let n = (len / 8) as u64;
    let b = base(seq);
    let tri = if n == 0 {
        0
    } else {
        (n as u128 * (n as u128 - 1) / 2) as u64
    };
    let tail = (len % 8) as u64 * (b as u8) as u64;
    n.wrapping_mul(b).wrapping_add(tri).wrapping_add(tail)
}

/// Damages a frame the way a bad transport would (one flipped byte): for the test
/// that proves corruption is detected.
pub fn corrupt(buf: &mut [u8]) {
    if let Some(b) = buf.get_mut(buf.len() / 2) {
        *b ^= 0x5A;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_closed_form() {
        for len in [0, 1, 7, 8, 9, 31, 32, 33, 64, 4096, 4099, FRAME_1080P_I420] {
            for seq in [0u64, 1, 2, 1000, u32::MAX as u64 + 5] {
                let mut buf = vec![0u8; len];
                fill_frame(&mut buf, seq);
                assert_eq!(
                    checksum(&buf),
                    expected_checksum(seq, len),
                    "len {len} seq {seq}"
                );
            }
        }
    }

    #[test]
    fn corruption_and_stale_frames_are_detected() {
        let mut buf = vec![0u8; 4096];
        fill_frame(&mut buf, 3);
        assert_ne!(checksum(&buf), expected_checksum(4, 4096), "a stale frame");
        corrupt(&mut buf);
        assert_ne!(checksum(&buf), expected_checksum(3, 4096), "a flipped byte");
    }
}
