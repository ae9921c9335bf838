//! The synthetic capture source: a moving I420 test pattern with the frame number
//! written into the picture, and a sine tone.
//!
//! The frame number (low 32 bits) is drawn as a row of [`BITS`] square blocks in the
//! top-left corner of the luma plane, most significant bit first: white (235) for 1,
//! black (16) for 0. Blocks are [`block_size`] pixels wide (16 for 1080p), so the
//! number survives a round trip through any lossless file and reads back with
//! [`decode_frame_number`].

use shmring::media::{Format, MediaHeader};

/// Bits of the frame number drawn in the picture.
pub const BITS: u32 = 32;
const WHITE: u8 = 235;
const BLACK: u8 = 16;

/// Side of one bit block for a picture this size, or `None` if it is too small to
/// carry the number (width below 64 pixels).
pub fn block_size(width: u32, height: u32) -> Option<u32> {
    let bs = (width / BITS).min(16) & !1;
    if bs < 2 || height < bs {
        None
    } else {
        Some(bs)
    }
}

/// Reads the frame number back from a luma plane (`stride` bytes per row).
pub fn decode_frame_number(y: &[u8], width: u32, height: u32, stride: usize) -> Option<u32> {
    let bs = block_size(width, height)? as usize;
    let row = bs / 2;
    let mut n = 0u32;
    for b in 0..BITS as usize {
        let x = b * bs + bs / 2;
        let v = *y.get(row * stride + x)?;
        n = (n << 1) | u32::from(v >= 128);
    }
    Some(n)
}

/// A moving gradient: each frame is built from two precomputed rows by slicing, so
/// drawing a frame is a series of `memcpy`s and needs no allocation.
pub struct Pattern {
    width: usize,
    height: usize,
    bs: usize,
    /// Two periods of the luma gradient.
    luma: Vec<u8>,
    /// Two periods of the chroma gradient (half width).
    chroma: Vec<u8>,
}

impl Pattern {
    pub fn new(width: u32, height: u32) -> Result<Pattern, String> {
        let bs = block_size(width, height).ok_or_else(|| {
            format!(
                "video size {width}x{height} is too small to carry the frame number (need at least 64x16)"
            )
        })?;
        let table = Format::I420.plane_table(width, height);
        let (w, cw) = (table[0].columns as usize, table[1].columns as usize);
        let luma = (0..2 * w).map(|i| (16 + (i % w) * 219 / w) as u8).collect();
        let chroma = (0..2 * cw)
            .map(|i| (64 + (i % cw) * 128 / cw) as u8)
            .collect();
        Ok(Pattern {
            width: w,
            height: height as usize,
            bs: bs as usize,
            luma,
            chroma,
        })
    }

    /// Draws frame `n` into the planes `hd` describes inside `payload` (an I420
    /// header as built by [`MediaHeader::video`]).
    pub fn draw(&self, n: u64, hd: &MediaHeader, payload: &mut [u8]) {
        let (w, h) = (self.width, self.height);
        let chroma = hd.plane_table()[1];
        let (cw, ch) = (chroma.columns as usize, chroma.rows as usize);
        let (o, s) = (hd.offset, hd.stride);
        let (head, rest) = payload.split_at_mut(o[1] as usize);
        let y = &mut head[o[0] as usize..];
        let (u, v) = rest.split_at_mut((o[2] - o[1]) as usize);
        let shift = (n as usize * 8) % w;
        for r in 0..h {
            let at = (shift + r) % w;
            let row = &mut y[r * s[0] as usize..][..w];
            row.copy_from_slice(&self.luma[at..at + w]);
        }
        let cshift = (n as usize * 4) % cw;
        for r in 0..ch {
            let at = (cshift + r / 2) % cw;
            u[r * s[1] as usize..][..cw].copy_from_slice(&self.chroma[at..at + cw]);
            let vv = 96 + ((r + n as usize) % 64) as u8;
            v[r * s[2] as usize..][..cw].fill(vv);
        }
        // The frame number, MSB first, on a neutral-chroma band.
        let bs = self.bs;
        let num = n as u32;
        for b in 0..BITS as usize {
            let val = if (num >> (BITS as usize - 1 - b)) & 1 == 1 {
                WHITE
            } else {
                BLACK
            };
            for r in 0..bs {
                y[r * s[0] as usize + b * bs..][..bs].fill(val);
            }
        }
        let band = (BITS as usize * bs).div_ceil(2).min(cw);
        for r in 0..bs.div_ceil(2).min(ch) {
            u[r * s[1] as usize..][..band].fill(128);
            v[r * s[2] as usize..][..band].fill(128);
        }
    }
}

/// A sine tone, continuous across packets.
pub struct Tone {
    phase: f64,
    step: f64,
}

impl Tone {
    pub fn new(freq: f64, sample_rate: u32) -> Tone {
        Tone {
            phase: 0.0,
            step: std::f64::consts::TAU * freq / sample_rate as f64,
        }
    }

    /// Fills `out` (interleaved s16 little-endian, `channels` per frame).
    pub fn fill_s16(&mut self, out: &mut [u8], channels: usize) {
        for frame in out.chunks_exact_mut(2 * channels) {
            let s = ((self.phase.sin() * 8000.0) as i16).to_le_bytes();
            for c in frame.chunks_exact_mut(2) {
                c.copy_from_slice(&s);
            }
            self.phase += self.step;
            if self.phase > std::f64::consts::TAU {
                self.phase -= std::f64::consts::TAU;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_number_round_trips_at_several_sizes() {
        for (w, h) in [(1920, 1080), (320, 240), (64, 16), (101, 77)] {
            let p = Pattern::new(w, h).unwrap();
            let hd = MediaHeader::video(Format::I420, w, h, 0, 0).unwrap();
            let mut buf = vec![0u8; hd.payload_len()];
            for n in [0u64, 1, 2, 0x8000_0001, 123_456, u32::MAX as u64] {
                p.draw(n, &hd, &mut buf);
                let y = hd.plane(&buf, 0);
                assert_eq!(
                    decode_frame_number(y, w, h, w as usize),
                    Some(n as u32),
                    "{w}x{h} frame {n}"
                );
            }
        }
    }

    #[test]
    fn too_small_pictures_are_refused() {
        assert!(Pattern::new(63, 100).is_err());
        assert!(Pattern::new(640, 2).is_err());
    }

    #[test]
    fn tone_is_not_silent() {
        let mut t = Tone::new(440.0, 48000);
        let mut buf = [0u8; 480 * 4];
        t.fill_s16(&mut buf, 2);
        assert!(buf
            .chunks_exact(2)
            .any(|c| i16::from_le_bytes([c[0], c[1]]) > 1000));
    }
}
