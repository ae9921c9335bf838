//! The media header: a small, versioned header at the start of a media record's
//! payload, shared by every language (`include/shmring.h` and the Python package
//! mirror it byte for byte).
//!
//! ```text
//!  offset size field
//!   0     4   magic        "SMH1" (0x31484d53 little-endian)
//!   4     2   version      1
//!   6     2   header_size  128 (plane data may start here)
//!   8     4   format       Format (I420, NV12, RGBA, PCM s16, PCM f32)
//!  12     4   width        pixels (video)
//!  16     4   height       pixels (video)
//!  20     4   sample_rate  Hz (audio)
//!  24     4   channels     (audio, interleaved)
//!  28     4   samples      per channel (audio)
//!  32     8   pts_ns       presentation timestamp, nanoseconds
//!  40     8   sequence     per-stream frame/packet number
//!  48     4   planes       number of planes used (video 1..=3, audio 1)
//!  52     4   reserved
//!  56    16   stride[4]    bytes per row of each plane (audio: bytes per frame)
//!  72    16   offset[4]    byte offset of each plane from the payload start
//!  88    16   size[4]      byte size of each plane
//! 104    24   reserved     zero
//! ```
//! Plane offsets are 64-byte aligned in headers built here; a reader must accept
//! any offsets that pass [`MediaHeader::parse`].

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
pub const MEDIA_VERSION: u16 = 1;
pub const MEDIA_HEADER_SIZE: usize = 128;

/// Largest width and height of a video frame, in pixels (an RGBA frame this size
/// is 1 GiB, so every plane size and offset fits the header's u32 fields).
pub const MAX_DIMENSION: u32 = 16384;
/// Most channels of an audio packet.
pub const MAX_CHANNELS: u32 = 64;
/// Most samples (per channel) of an audio packet.
pub const MAX_SAMPLES: u32 = 1 << 24;
/// Audio sample rates accepted, in Hz.
pub const SAMPLE_RATES: std::ops::RangeInclusive<u32> = 1000..=768_000;

/// Sample and pixel formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Format {
    /// Planar YUV 4:2:0: Y, then U, then V (U and V at half width and height).
    I420 = 1,
    /// Y plane, then interleaved UV at half height.
    Nv12 = 2,
    /// Packed 8-bit RGBA.
    Rgba = 3,
    /// Interleaved signed 16-bit PCM.
    PcmS16 = 16,
    /// Interleaved 32-bit float PCM.
    PcmF32 = 17,
}

impl Format {
    pub fn from_u32(v: u32) -> Option<Format> {
        Some(match v {
            1 => Format::I420,
            2 => Format::Nv12,
            3 => Format::Rgba,
            16 => Format::PcmS16,
            17 => Format::PcmF32,
            _ => return None,
        })
    }
    pub fn is_video(self) -> bool {
        matches!(self, Format::I420 | Format::Nv12 | Format::Rgba)
    }
    pub fn is_audio(self) -> bool {
        !self.is_video()
    }
    /// Bytes per sample (audio formats).
    pub fn sample_bytes(self) -> u32 {
        match self {
            Format::PcmS16 => 2,
            Format::PcmF32 => 4,
            _ => 0,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Format::I420 => "I420",
            Format::Nv12 => "NV12",
            Format::Rgba => "RGBA",
            Format::PcmS16 => "PCM s16",
            Format::PcmF32 => "PCM f32",
        }
    }
}

/// A parsed, validated media header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaHeader {
    pub format: Format,
    pub width: u32,
    pub height: u32,
    pub sample_rate: u32,
    pub channels: u32,
    pub samples: u32,
    pub pts_ns: u64,
    pub sequence: u64,
    pub planes: u32,
    pub stride: [u32; 4],
    pub offset: [u32; 4],
    pub size: [u32; 4],
}

/// Why a media header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed media header: {0}")]
pub struct MediaError(pub String);

fn check_video_size(width: u32, height: u32) -> Result<(), MediaError> {
    let ok = 1..=MAX_DIMENSION;
    if !ok.contains(&width) || !ok.contains(&height) {
        return Err(MediaError(format!(
            "video size {width}x{height} outside 1x1..{MAX_DIMENSION}x{MAX_DIMENSION}"
        )));
    }
    Ok(())
}

fn check_audio_shape(sample_rate: u32, channels: u32, samples: u32) -> Result<(), MediaError> {
    if !(1..=MAX_CHANNELS).contains(&channels)
        || !SAMPLE_RATES.contains(&sample_rate)
        || samples > MAX_SAMPLES
    {
        return Err(MediaError(format!(
            "audio of {channels} channels x {samples} samples at {sample_rate} Hz is outside \
             1..{MAX_CHANNELS} channels, 0..{MAX_SAMPLES} samples, {}..{} Hz",
            SAMPLE_RATES.start(),
            SAMPLE_RATES.end()
        )));
    }
    Ok(())
}

fn to_u32(v: u64, what: &str) -> Result<u32, MediaError> {
    u32::try_from(v).map_err(|_| MediaError(format!("{what} of {v} bytes does not fit 4 GiB")))
}

fn align64(v: u64) -> u64 {
    v.next_multiple_of(64)
}

impl MediaHeader {
    /// A video header with tight strides and 64-byte-aligned planes after the header.
    /// [`MediaError`] for an audio format or a size outside 1..=[`MAX_DIMENSION`].
    ///
    /// ```
    /// use shmring::media::{Format, MediaHeader};
    /// let h = MediaHeader::video(Format::I420, 1920, 1080, 0, 0).unwrap();
    /// assert_eq!(h.payload_len(), 128 + 1920 * 1080 * 3 / 2);
    /// assert!(MediaHeader::video(Format::I420, 0, 1080, 0, 0).is_err());
    /// assert!(MediaHeader::video(Format::PcmS16, 64, 64, 0, 0).is_err());
    /// ```
    pub fn video(
        format: Format,
        width: u32,
        height: u32,
        pts_ns: u64,
        sequence: u64,
    ) -> Result<Self, MediaError> {
        if !format.is_video() {
            return Err(MediaError(format!(
                "{} is not a video format",
                format.name()
            )));
        }
        check_video_size(width, height)?;
        let (w, h) = (width as u64, height as u64);
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        let plane_dims: &[(u64, u64)] = match format {
            Format::I420 => &[(w, h), (cw, ch), (cw, ch)],
            Format::Nv12 => &[(w, h), (cw * 2, ch)],
            _ => &[(w * 4, h)],
        };
        let mut hd = MediaHeader {
            format,
            width,
            height,
            sample_rate: 0,
            channels: 0,
            samples: 0,
            pts_ns,
            sequence,
            planes: plane_dims.len() as u32,
            stride: [0; 4],
            offset: [0; 4],
            size: [0; 4],
        };
        let mut at = MEDIA_HEADER_SIZE as u64;
        for (i, &(stride, rows)) in plane_dims.iter().enumerate() {
            at = align64(at);
            hd.stride[i] = to_u32(stride, "stride")?;
            hd.offset[i] = to_u32(at, "plane offset")?;
            hd.size[i] = to_u32(stride * rows, "plane size")?;
            at += stride * rows;
        }
        to_u32(at, "payload")?;
        Ok(hd)
    }

    /// A video header for planes laid out by someone else (another library's strides
    /// and offsets, e.g. GStreamer's), checked like a parsed header: one stride and one
    /// offset per plane of `format`, each stride at least the plane's row, each offset
    /// at or after the header. Plane sizes are stride × rows.
    pub fn video_with_layout(
        format: Format,
        width: u32,
        height: u32,
        stride: &[u32],
        offset: &[u32],
        pts_ns: u64,
        sequence: u64,
    ) -> Result<Self, MediaError> {
        if !format.is_video() {
            return Err(MediaError(format!(
                "{} is not a video format",
                format.name()
            )));
        }
        let mut hd = MediaHeader::video(format, width, height, pts_ns, sequence)?;
        let (want, count) = Self::expected(&hd);
        if stride.len() != count || offset.len() != count {
            return Err(MediaError(format!(
                "a {} frame has {count} planes; {} strides and {} offsets given",
                format.name(),
                stride.len(),
                offset.len()
            )));
        }
        for (i, &(min_stride, rows)) in want[..count].iter().enumerate() {
            let size = stride[i] as u64 * rows;
            if (stride[i] as u64) < min_stride
                || (offset[i] as usize) < MEDIA_HEADER_SIZE
                || size > u32::MAX as u64
                || offset[i] as u64 + size > u32::MAX as u64
            {
                return Err(MediaError(format!(
                    "plane {i} of a {} {width}x{height} frame: stride {} at offset {} does not fit",
                    format.name(),
                    stride[i],
                    offset[i]
                )));
            }
            hd.stride[i] = stride[i];
            hd.offset[i] = offset[i];
            hd.size[i] = size as u32;
        }
        Ok(hd)
    }

    /// An audio header: interleaved samples right after the header.
    pub fn audio(
        format: Format,
        sample_rate: u32,
        channels: u32,
        samples: u32,
        pts_ns: u64,
        sequence: u64,
    ) -> Result<Self, MediaError> {
        if !format.is_audio() {
            return Err(MediaError(format!(
                "{} is not an audio format",
                format.name()
            )));
        }
        check_audio_shape(sample_rate, channels, samples)?;
        let frame = format.sample_bytes() * channels;
        let size = to_u32(frame as u64 * samples as u64, "audio data")?;
        to_u32(MEDIA_HEADER_SIZE as u64 + size as u64, "payload")?;
        Ok(MediaHeader {
            format,
            width: 0,
            height: 0,
            sample_rate,
            channels,
            samples,
            pts_ns,
            sequence,
            planes: 1,
            stride: [frame, 0, 0, 0],
            offset: [MEDIA_HEADER_SIZE as u32, 0, 0, 0],
            size: [size, 0, 0, 0],
        })
    }

    /// [`MediaHeader::parse`], then the checks for a record of `kind`
    /// ([`kind::VIDEO`] or [`kind::AUDIO`]): a format of that kind and the sizes the
    /// constructors accept. What every reader of media records calls.
    pub fn parse_for(k: u32, payload: &[u8]) -> Result<MediaHeader, MediaError> {
        let hd = MediaHeader::parse(payload)?;
        match k {
            kind::VIDEO => {
                if !hd.format.is_video() {
                    return Err(MediaError(format!(
                        "video record carries audio format {}",
                        hd.format.name()
                    )));
                }
                check_video_size(hd.width, hd.height)?;
            }
            kind::AUDIO => {
                if !hd.format.is_audio() {
                    return Err(MediaError(format!(
                        "audio record carries video format {}",
                        hd.format.name()
                    )));
                }
                check_audio_shape(hd.sample_rate, hd.channels, hd.samples)?;
            }
            other => {
                return Err(MediaError(format!(
                    "record kind {other} carries no media header (expected video or audio)"
                )))
            }
        }
        Ok(hd)
    }

    /// Payload bytes needed: header plus planes.
    pub fn payload_len(&self) -> usize {
        (0..self.planes as usize)
            .map(|i| self.offset[i] as usize + self.size[i] as usize)
            .max()
            .unwrap_or(MEDIA_HEADER_SIZE)
            .max(MEDIA_HEADER_SIZE)
    }

    /// The bytes of the header.
    pub fn to_bytes(&self) -> [u8; MEDIA_HEADER_SIZE] {
        let mut b = [0u8; MEDIA_HEADER_SIZE];
        b[0..4].copy_from_slice(&MEDIA_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&MEDIA_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(MEDIA_HEADER_SIZE as u16).to_le_bytes());
        let u32s = [
            (8, self.format as u32),
            (12, self.width),
            (16, self.height),
            (20, self.sample_rate),
            (24, self.channels),
            (28, self.samples),
            (48, self.planes),
        ];
        for (at, v) in u32s {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        b[32..40].copy_from_slice(&self.pts_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.sequence.to_le_bytes());
        for i in 0..4 {
            b[56 + 4 * i..60 + 4 * i].copy_from_slice(&self.stride[i].to_le_bytes());
            b[72 + 4 * i..76 + 4 * i].copy_from_slice(&self.offset[i].to_le_bytes());
            b[88 + 4 * i..92 + 4 * i].copy_from_slice(&self.size[i].to_le_bytes());
        }
        b
    }

    /// Writes the header at the start of `payload`.
    pub fn write_to(&self, payload: &mut [u8]) -> Result<(), MediaError> {
        if payload.len() < self.payload_len() {
            return Err(MediaError(format!(
                "payload of {} bytes is smaller than the {} the header describes",
                payload.len(),
                self.payload_len()
            )));
        }
        payload[..MEDIA_HEADER_SIZE].copy_from_slice(&self.to_bytes());
        Ok(())
    }

    /// Reads and validates the header at the start of `payload` (untrusted bytes:
    /// read once, every plane checked to lie inside the payload).
    pub fn parse(payload: &[u8]) -> Result<MediaHeader, MediaError> {
        if payload.len() < MEDIA_HEADER_SIZE {
            return Err(MediaError(format!(
                "payload of {} bytes is shorter than the {MEDIA_HEADER_SIZE}-byte header",
                payload.len()
            )));
        }
        let mut b = [0u8; MEDIA_HEADER_SIZE];
        b.copy_from_slice(&payload[..MEDIA_HEADER_SIZE]); // one read of shared bytes
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let u16_at = |at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
        if u32_at(0) != MEDIA_MAGIC {
            return Err(MediaError(format!(
                "magic {:#x}, expected {MEDIA_MAGIC:#x}",
                u32_at(0)
            )));
        }
        if u16_at(4) != MEDIA_VERSION {
            return Err(MediaError(format!(
                "version {}, expected {MEDIA_VERSION}",
                u16_at(4)
            )));
        }
        if u16_at(6) as usize != MEDIA_HEADER_SIZE {
            return Err(MediaError(format!(
                "header size {}, expected {MEDIA_HEADER_SIZE}",
                u16_at(6)
            )));
        }
        let format = Format::from_u32(u32_at(8))
            .ok_or_else(|| MediaError(format!("unknown format {}", u32_at(8))))?;
        let planes = u32_at(48);
        if planes == 0 || planes > 4 {
            return Err(MediaError(format!("{planes} planes, expected 1 to 4")));
        }
        let mut hd = MediaHeader {
            format,
            width: u32_at(12),
            height: u32_at(16),
            sample_rate: u32_at(20),
            channels: u32_at(24),
            samples: u32_at(28),
            pts_ns: u64_at(32),
            sequence: u64_at(40),
            planes,
            stride: [0; 4],
            offset: [0; 4],
            size: [0; 4],
        };
        for i in 0..4 {
            hd.stride[i] = u32_at(56 + 4 * i);
            hd.offset[i] = u32_at(72 + 4 * i);
            hd.size[i] = u32_at(88 + 4 * i);
        }
        for i in 0..planes as usize {
            let end = hd.offset[i] as u64 + hd.size[i] as u64;
            if (hd.offset[i] as usize) < MEDIA_HEADER_SIZE || end > payload.len() as u64 {
                return Err(MediaError(format!(
                    "plane {i} at {}..{end} lies outside the {}-byte payload",
                    hd.offset[i],
                    payload.len()
                )));
            }
        }
        let (want, count) = Self::expected(&hd);
        for (i, &(stride, rows)) in want[..count].iter().enumerate() {
            if i >= planes as usize
                || (hd.stride[i] as u64) < stride
                || hd.size[i] as u64 != hd.stride[i] as u64 * rows
            {
                return Err(MediaError(format!(
                    "plane {i} of a {} {}x{} frame: stride {} size {} do not fit",
                    format.name(),
                    hd.width,
                    hd.height,
                    hd.stride.get(i).copied().unwrap_or(0),
                    hd.size.get(i).copied().unwrap_or(0)
                )));
            }
        }
        Ok(hd)
    }

    /// Minimum (stride, rows) of each plane the format needs, and how many planes.
    fn expected(hd: &MediaHeader) -> ([(u64, u64); 3], usize) {
        let (w, h) = (hd.width as u64, hd.height as u64);
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        match hd.format {
            Format::I420 => ([(w, h), (cw, ch), (cw, ch)], 3),
            Format::Nv12 => ([(w, h), (cw * 2, ch), (0, 0)], 2),
            Format::Rgba => ([(w * 4, h), (0, 0), (0, 0)], 1),
            f => (
                [
                    (
                        f.sample_bytes() as u64 * hd.channels as u64,
                        hd.samples as u64,
                    ),
                    (0, 0),
                    (0, 0),
                ],
                1,
            ),
        }
    }

    /// Plane `i` of `payload` (which this header was parsed from).
    pub fn plane<'a>(&self, payload: &'a [u8], i: usize) -> &'a [u8] {
        let (o, s) = (self.offset[i] as usize, self.size[i] as usize);
        &payload[o..o + s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn video_round_trip_and_layout() {
        let h = MediaHeader::video(Format::I420, 1920, 1080, 5, 6).unwrap();
        assert_eq!(h.offset[0], 128);
        assert_eq!(h.size[0], 1920 * 1080);
        assert_eq!(h.stride[1], 960);
        assert_eq!(h.offset[1] % 64, 0);
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
        // 1080p I420 payload is the frame plus the header (planes are 64-aligned).
        assert_eq!(h.payload_len(), 128 + 3_110_400);
    }

    #[test]
    fn video_with_layout_checks_and_round_trips() {
        // GStreamer's I420 layout for 322x2: strides rounded up to 4.
        let h = MediaHeader::video_with_layout(
            Format::I420,
            322,
            2,
            &[324, 164, 164],
            &[128, 128 + 648, 128 + 648 + 164],
            1,
            2,
        )
        .unwrap();
        assert_eq!(h.size, [648, 164, 164, 0]);
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
        let narrow = MediaHeader::video_with_layout(
            Format::I420,
            322,
            2,
            &[320, 164, 164],
            &[128, 800, 1000],
            0,
            0,
        );
        assert!(narrow.unwrap_err().0.contains("plane 0"));
        let planes = MediaHeader::video_with_layout(Format::Nv12, 4, 4, &[4], &[128], 0, 0);
        assert!(planes.unwrap_err().0.contains("2 planes"));
        let inside = MediaHeader::video_with_layout(Format::Rgba, 4, 4, &[16], &[64], 0, 0);
        assert!(inside.is_err());
    }

    #[test]
    fn audio_round_trip() {
        let h = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 1, 2).unwrap();
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        let p = MediaHeader::parse(&buf).unwrap();
        assert_eq!(p, h);
        assert_eq!(p.plane(&buf, 0).len(), 480 * 4);
    }

    #[test]
    fn rejects_planes_outside_payload_and_bad_fields() {
        let h = MediaHeader::video(Format::I420, 64, 64, 0, 0).unwrap();
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        assert!(MediaHeader::parse(&buf[..buf.len() - 1]).is_err());
        let mut bad = buf.clone();
        bad[0] = b'X';
        assert!(MediaHeader::parse(&bad).unwrap_err().0.contains("magic"));
        let mut bad = buf.clone();
        bad[8..12].copy_from_slice(&99u32.to_le_bytes());
        assert!(MediaHeader::parse(&bad).unwrap_err().0.contains("format"));
        let mut bad = buf.clone();
        bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(MediaHeader::parse(&bad).is_err());
        let mut bad = buf;
        bad[12..16].copy_from_slice(&1_000_000u32.to_le_bytes()); // width no longer fits
        assert!(MediaHeader::parse(&bad).is_err());
    }

    #[test]
    fn constructors_refuse_bad_shapes_instead_of_truncating() {
        let too_big = MAX_DIMENSION + 1;
        for (w, h) in [
            (0, 1),
            (1, 0),
            (too_big, 1),
            (1, too_big),
            (u32::MAX, u32::MAX),
        ] {
            let e = MediaHeader::video(Format::Rgba, w, h, 0, 0).unwrap_err();
            assert!(e.0.contains(&format!("{w}x{h}")), "{e}");
        }
        let big = MediaHeader::video(Format::Rgba, MAX_DIMENSION, MAX_DIMENSION, 0, 0).unwrap();
        assert_eq!(big.size[0] as u64, 4 * (MAX_DIMENSION as u64).pow(2));
        let e = MediaHeader::video(Format::PcmF32, 64, 64, 0, 0).unwrap_err();
        assert!(e.0.contains("not a video format"), "{e}");
        let e = MediaHeader::audio(Format::I420, 48000, 2, 480, 0, 0).unwrap_err();
        assert!(e.0.contains("not an audio format"), "{e}");
        for (rate, ch, n) in [
            (48000, 0, 1),
            (48000, 65, 1),
            (0, 2, 1),
            (48000, 2, MAX_SAMPLES + 1),
        ] {
            assert!(MediaHeader::audio(Format::PcmS16, rate, ch, n, 0, 0).is_err());
        }
        // The largest packet: 64 channels of f32 x 2^24 samples is 4 GiB: refused.
        let e =
            MediaHeader::audio(Format::PcmF32, 48000, MAX_CHANNELS, MAX_SAMPLES, 0, 0).unwrap_err();
        assert!(e.0.contains("4 GiB"), "{e}");
    }

    #[test]
    fn parse_for_checks_the_kind_and_the_limits() {
        let v = MediaHeader::video(Format::Nv12, 64, 32, 0, 0).unwrap();
        let mut buf = vec![0u8; v.payload_len()];
        v.write_to(&mut buf).unwrap();
        assert_eq!(MediaHeader::parse_for(kind::VIDEO, &buf).unwrap(), v);
        let e = MediaHeader::parse_for(kind::AUDIO, &buf).unwrap_err();
        assert!(e.0.contains("audio record carries video format"), "{e}");
        assert!(MediaHeader::parse_for(kind::RAW, &buf).is_err());
        let a = MediaHeader::audio(Format::PcmS16, 48000, 2, 10, 0, 0).unwrap();
        let mut abuf = vec![0u8; a.payload_len()];
        a.write_to(&mut abuf).unwrap();
        assert_eq!(MediaHeader::parse_for(kind::AUDIO, &abuf).unwrap(), a);
        // A header that parse() accepts but whose rate is outside the limits.
        abuf[20..24].copy_from_slice(&5u32.to_le_bytes());
        assert!(MediaHeader::parse(&abuf).is_ok());
        assert!(MediaHeader::parse_for(kind::AUDIO, &abuf).is_err());
    }
}
