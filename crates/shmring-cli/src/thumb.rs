//! Video thumbnails: a frame scaled down by a whole factor (nearest sample) into
//! 8-bit RGB, and written as PNG. The planes are found through the frame's media
//! header ([`MediaHeader::plane`]), so padded strides and every video format the
//! core knows are read as the core lays them out.

use std::io::{self, BufWriter};
use std::path::Path;

use shmring::media::{Format, MediaHeader};

/// The whole factor that brings `width` down to at most `max_width` (at least 1).
pub fn factor(width: u32, max_width: u32) -> u32 {
    width.div_ceil(max_width.max(1)).max(1)
}

/// The size of the thumbnail of a `width` x `height` frame at most `max_width` wide.
pub fn size(width: u32, height: u32, max_width: u32) -> (u32, u32) {
    let f = factor(width, max_width);
    ((width / f).max(1), (height / f).max(1))
}

/// BT.601 limited-range YCbCr to RGB, in integers.
fn rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let c = 298 * (y as i32 - 16);
    let (d, e) = (u as i32 - 128, v as i32 - 128);
    let clamp = |x: i32| ((x + 128) >> 8).clamp(0, 255) as u8;
    [
        clamp(c + 409 * e),
        clamp(c - 100 * d - 208 * e),
        clamp(c + 516 * d),
    ]
}

/// Scales the video frame in `payload` (whose header `hd` was parsed from it) into
/// `out` as RGB rows, at most `max_width` wide; returns the thumbnail's size.
/// `None` for a header that is not video. `out` keeps its capacity between frames.
pub fn scale(
    hd: &MediaHeader,
    payload: &[u8],
    max_width: u32,
    out: &mut Vec<u8>,
) -> Option<(u32, u32)> {
    if !hd.format.is_video() {
        return None;
    }
    let f = factor(hd.width, max_width) as usize;
    let (tw, th) = size(hd.width, hd.height, max_width);
    out.clear();
    out.reserve(tw as usize * th as usize * 3);
    let plane = |i: usize| match i < hd.planes as usize {
        true => hd.plane(payload, i),
        false => &[][..],
    };
    let (y_plane, p1, p2) = (plane(0), plane(1), plane(2));
    // Where the element of plane `i` under pixel (x, y) starts: the plane table
    // gives each plane's rows and columns (chroma's are the pixels' halves, rounded
    // up), the header its stride.
    let table = hd.plane_table();
    let (w, h) = (hd.width as usize, hd.height as usize);
    let at = |i: usize, x: usize, y: usize| {
        let p = &table[i];
        (y * p.rows as usize / h) * hd.stride[i] as usize
            + (x * p.columns as usize / w) * p.element_bytes() as usize
    };
    for ty in 0..th as usize {
        let sy = ty * f;
        for tx in 0..tw as usize {
            let sx = tx * f;
            let px = match hd.format {
                Format::I420 => rgb(y_plane[at(0, sx, sy)], p1[at(1, sx, sy)], p2[at(2, sx, sy)]),
                Format::Nv12 => {
                    let uv = at(1, sx, sy);
                    rgb(y_plane[at(0, sx, sy)], p1[uv], p1[uv + 1])
                }
                Format::Rgba => {
                    let px = at(0, sx, sy);
                    [y_plane[px], y_plane[px + 1], y_plane[px + 2]]
                }
                Format::PcmS16 | Format::PcmF32 => return None,
            };
            out.extend_from_slice(&px);
        }
    }
    Some((tw, th))
}

/// Writes `rgb` (`width` x `height`, 8-bit RGB rows) as a PNG file at `path`:
/// into `path.part` first, renamed when complete.
pub fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> io::Result<()> {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    let file = std::fs::File::create(&part)?;
    let mut enc = png::Encoder::new(BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let r = enc
        .write_header()
        .and_then(|mut w| {
            w.write_image_data(rgb)?;
            w.finish()
        })
        .map_err(io::Error::other);
    match r {
        Ok(()) => std::fs::rename(&part, path),
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(format: Format, w: u32, h: u32) -> (MediaHeader, Vec<u8>) {
        let hd = MediaHeader::video(format, w, h, 0, 0).unwrap();
        let mut b = vec![0u8; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        (hd, b)
    }

    #[test]
    fn sizes_come_down_by_a_whole_factor() {
        assert_eq!(size(1920, 1080, 320), (320, 180));
        assert_eq!(size(1280, 720, 320), (320, 180));
        assert_eq!(size(1000, 500, 320), (250, 125));
        assert_eq!(size(200, 100, 320), (200, 100));
        assert_eq!(size(4, 2, 1), (1, 1));
        assert_eq!(size(4, 2, 0), (1, 1));
    }

    #[test]
    fn i420_nv12_and_rgba_give_the_same_colours() {
        // Mid grey with a white top-left quarter, 8x4, scaled by 2.
        let (hd, mut b) = frame(Format::I420, 8, 4);
        for y in 0..4 {
            for x in 0..8 {
                b[hd.offset[0] as usize + y * hd.stride[0] as usize + x] =
                    if x < 4 && y < 2 { 235 } else { 126 };
            }
        }
        for p in 1..3 {
            let o = hd.offset[p] as usize;
            b[o..o + hd.size[p] as usize].fill(128);
        }
        let mut out = Vec::new();
        assert_eq!(scale(&hd, &b, 4, &mut out), Some((4, 2)));
        assert_eq!(&out[..3], &[255, 255, 255]);
        assert_eq!(&out[out.len() - 3..], &[128, 128, 128]);
        let i420 = out.clone();

        let (hd, mut b) = frame(Format::Nv12, 8, 4);
        for y in 0..4 {
            for x in 0..8 {
                b[hd.offset[0] as usize + y * hd.stride[0] as usize + x] =
                    if x < 4 && y < 2 { 235 } else { 126 };
            }
        }
        let o = hd.offset[1] as usize;
        b[o..o + hd.size[1] as usize].fill(128);
        assert_eq!(scale(&hd, &b, 4, &mut out), Some((4, 2)));
        assert_eq!(out, i420);

        let (hd, mut b) = frame(Format::Rgba, 8, 4);
        for y in 0..4 {
            for x in 0..8 {
                let v = if x < 4 && y < 2 { 255 } else { 128 };
                let at = hd.offset[0] as usize + y * hd.stride[0] as usize + x * 4;
                b[at..at + 4].copy_from_slice(&[v, v, v, 255]);
            }
        }
        assert_eq!(scale(&hd, &b, 4, &mut out), Some((4, 2)));
        assert_eq!(out, i420);
    }

    #[test]
    fn audio_has_no_thumbnail_and_a_png_is_written_whole() {
        let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
        let mut b = vec![0u8; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        assert_eq!(scale(&hd, &b, 320, &mut Vec::new()), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.png");
        write_png(&path, 3, 2, &[7u8; 18]).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
        let r = dec.read_info().unwrap();
        assert_eq!((r.info().width, r.info().height), (3, 2));
        assert!(!dir.path().join("t.png.part").exists());
    }
}
