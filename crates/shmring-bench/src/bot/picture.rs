//! What a participant's camera shows in the bot workload: a picture an encoder has
//! real but bounded work on, the same on every transport. A textured gradient
//! that pans slowly (motion the encoder finds by motion search), a shaded disc
//! that moves across it (new detail every frame), and the frame number as a row of
//! black and white blocks (changes every frame). Not noise, which no encoder
//! compresses, and not a still picture, which costs it nothing.
//!
//! Drawing is row copies from two precomputed periods of the background and span
//! fills: no allocation per frame.

use shmring::media::MediaHeader;

/// Side of the disc, in pixels (720p: a face-sized object).
const DISC: usize = 192;
/// Bits of the frame number drawn, and the side of each block.
const BITS: usize = 24;
const BLOCK: usize = 16;

/// One participant's picture of `width`x`height` I420 (even sides).
pub struct Picture {
    width: usize,
    height: usize,
    /// Two periods of a textured luma row.
    luma: Vec<u8>,
    /// Two periods of a chroma row (half width).
    chroma: Vec<u8>,
    /// Half the width of the disc on each of its rows.
    span: Vec<usize>,
    /// This participant's offset into the motion (participants differ).
    phase: usize,
}

impl Picture {
    pub fn new(width: u32, height: u32, participant: u32) -> Picture {
        let (w, cw) = (width as usize, width as usize / 2);
        let luma = (0..2 * w)
            .map(|i| {
                let x = i % w;
                // A gradient with a fine texture of a few levels: like a wall
                // behind a speaker, not a flat colour.
                let tex = ((x * 37) ^ (x >> 2) ^ ((x * x) >> 7)) & 15;
                (32 + x * 160 / w + tex) as u8
            })
            .collect();
        let chroma = (0..2 * cw)
            .map(|i| (96 + (i % cw) * 64 / cw) as u8)
            .collect();
        let r = DISC as f64 / 2.0;
        let span = (0..DISC)
            .map(|y| {
                let dy = y as f64 + 0.5 - r;
                (r * r - dy * dy).max(0.0).sqrt() as usize
            })
            .collect();
        Picture {
            width: w,
            height: height as usize,
            luma,
            chroma,
            span,
            phase: participant as usize * 97,
        }
    }

    /// Draws frame `n` into the I420 planes `hd` describes inside `payload`.
    pub fn draw(&self, n: u64, hd: &MediaHeader, payload: &mut [u8]) {
        let (w, h) = (self.width, self.height);
        let (cw, ch) = (w / 2, h / 2);
        let (o, s) = (hd.offset, hd.stride);
        let (ys, us, vs) = (s[0] as usize, s[1] as usize, s[2] as usize);
        let (head, rest) = payload.split_at_mut(o[1] as usize);
        let y = &mut head[o[0] as usize..];
        let (u, v) = rest.split_at_mut((o[2] - o[1]) as usize);
        let t = n as usize + self.phase;
        // The background pans 2 pixels a frame; each row starts 3 pixels on, so
        // the texture runs diagonally.
        for r in 0..h {
            let at = (t * 2 + r * 3) % w;
            y[r * ys..][..w].copy_from_slice(&self.luma[at..at + w]);
        }
        for r in 0..ch {
            let at = (t + r * 3 / 2) % cw;
            u[r * us..][..cw].copy_from_slice(&self.chroma[at..at + cw]);
            v[r * vs..][..cw].copy_from_slice(&self.chroma[cw - at % cw..][..cw]);
        }
        // The disc bounces between the picture's edges, 7 and 5 pixels a frame.
        let bounce = |pos: usize, room: usize| {
            let p = pos % (2 * room);
            if p < room {
                p
            } else {
                2 * room - p
            }
        };
        let (x0, y0) = (bounce(t * 7, w - DISC), bounce(t * 5, h - DISC));
        for (dy, &half) in self.span.iter().enumerate() {
            let row = &mut y[(y0 + dy) * ys..];
            let cx = x0 + DISC / 2;
            // Shaded: lighter towards its top, with a stripe that turns.
            let shade = 150 + (DISC - dy) / 3;
            let stripe = (dy + t) % 24 < 4;
            row[cx - half..cx + half].fill(if stripe { 60 } else { shade as u8 });
        }
        for dy in (0..DISC).step_by(2) {
            let half = self.span[dy] / 2;
            let (cr, cx) = ((y0 + dy) / 2, (x0 + DISC / 2) / 2);
            u[cr * us..][cx - half..cx + half].fill(100);
            v[cr * vs..][cx - half..cx + half].fill(170);
        }
        // The frame number, most significant bit first, in the top-left corner.
        for b in 0..BITS.min(w / BLOCK) {
            let on = (n >> (BITS - 1 - b)) & 1 == 1;
            for r in 0..BLOCK.min(h) {
                y[r * ys + b * BLOCK..][..BLOCK].fill(if on { 235 } else { 16 });
            }
        }
    }
}

/// A participant's microphone: one second of a tone of its own pitch (a whole
/// number of periods, so the second repeats without a seam), packet `seq` being
/// its `seq`-th slice: the same packet on every transport.
pub struct Tone {
    second: Vec<i16>,
}

impl Tone {
    pub fn new(participant: u32, sample_rate: u32) -> Tone {
        let hz = f64::from(220 + 55 * participant);
        let rate = f64::from(sample_rate);
        let second = (0..sample_rate)
            .map(|i| ((f64::from(i) * hz / rate * std::f64::consts::TAU).sin() * 6000.0) as i16)
            .collect();
        Tone { second }
    }

    /// Writes packet `seq` into `out`: `channels` interleaved little-endian S16
    /// samples a frame.
    pub fn fill(&self, seq: u64, out: &mut [u8], channels: usize) {
        let n = self.second.len();
        let frames = out.len() / (2 * channels);
        let start = (seq as usize).wrapping_mul(frames) % n;
        for (k, frame) in out.chunks_exact_mut(2 * channels).enumerate() {
            let s = self.second[(start + k) % n].to_le_bytes();
            for c in frame.chunks_exact_mut(2) {
                c.copy_from_slice(&s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::media::Format;

    #[test]
    fn frames_differ_from_each_other_and_between_participants_and_stay_in_range() {
        let hd = MediaHeader::video(Format::I420, 1280, 720, 0, 0).unwrap();
        let draw = |p: u32, n: u64| {
            let mut b = vec![0u8; hd.payload_len()];
            hd.write_to(&mut b).unwrap();
            Picture::new(1280, 720, p).draw(n, &hd, &mut b);
            b
        };
        let (a, b, c) = (draw(0, 10), draw(0, 11), draw(1, 10));
        assert_ne!(a, b, "the picture moves");
        assert_ne!(a, c, "participants differ");
        assert_eq!(a, draw(0, 10), "the same frame on every transport");
        for n in [0, 1, 1000, 123_456] {
            let f = draw(3, n);
            let y = &f[hd.offset[0] as usize..][..1280 * 720];
            assert!(y.iter().all(|&v| (16..=235).contains(&v)), "frame {n}");
        }
    }
}
