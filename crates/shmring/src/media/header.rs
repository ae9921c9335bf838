//! A frame's media header: built for a shape, checked when read, its planes laid out.

use super::record::Raw;
use super::{
    kind, u32_at, u64_at, Format, MediaError, PlaneTable, MAX_CHANNELS, MAX_DIMENSION,
    MAX_FRAME_RATE, MAX_SAMPLES, MEDIA_HEADER_SIZE, MEDIA_MAGIC, MEDIA_VERSION, SAMPLE_RATES,
};

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
    /// Video: the nominal frame rate `fps_num / fps_den`; `fps_num` 0: variable or
    /// unknown (durations come from the timestamps). Audio: 0 / 1.
    pub fps_num: u32,
    pub fps_den: u32,
}

/// `format` is a video format (`video`) or an audio one, or why not.
fn check_kind(format: Format, video: bool) -> Result<(), MediaError> {
    if format.is_video() == video {
        return Ok(());
    }
    let kind = if video { "a video" } else { "an audio" };
    Err(MediaError(format!(
        "{} is not {kind} format",
        format.name()
    )))
}

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

/// A frame rate a header may carry: audio none (0), video `num / den` with `den` at
/// least 1 and at most [`MAX_FRAME_RATE`] frames per second (`num` 0: variable).
fn check_frame_rate(format: Format, num: u32, den: u32) -> Result<(), MediaError> {
    if num == 0 {
        return Ok(());
    }
    if format.is_audio() {
        return Err(MediaError(format!(
            "audio ({}) carries no frame rate, {num}/{den} given",
            format.name()
        )));
    }
    if den == 0 || den > i32::MAX as u32 || num as u64 > MAX_FRAME_RATE as u64 * den as u64 {
        return Err(MediaError(format!(
            "frame rate {num}/{den} is outside 0 (variable) and {MAX_FRAME_RATE} frames per second"
        )));
    }
    Ok(())
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
        check_kind(format, true)?;
        check_video_size(width, height)?;
        let table = format.plane_table(width, height);
        let mut hd = MediaHeader {
            format,
            width,
            height,
            sample_rate: 0,
            channels: 0,
            samples: 0,
            pts_ns,
            sequence,
            planes: table.len() as u32,
            stride: [0; 4],
            offset: [0; 4],
            size: [0; 4],
            fps_num: 0,
            fps_den: 1,
        };
        let mut at = MEDIA_HEADER_SIZE as u64;
        for (i, p) in table.iter().enumerate() {
            at = align64(at);
            hd.stride[i] = to_u32(p.row_bytes(), "stride")?;
            hd.offset[i] = to_u32(at, "plane offset")?;
            hd.size[i] = to_u32(p.bytes(), "plane size")?;
            at += p.bytes();
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
        check_kind(format, true)?;
        let mut hd = MediaHeader::video(format, width, height, pts_ns, sequence)?;
        let table = hd.plane_table();
        let count = table.len();
        if stride.len() != count || offset.len() != count {
            return Err(MediaError(format!(
                "a {} frame has {count} planes; {} strides and {} offsets given",
                format.name(),
                stride.len(),
                offset.len()
            )));
        }
        for (i, p) in table.iter().enumerate() {
            let size = stride[i] as u64 * p.rows as u64;
            if (stride[i] as u64) < p.row_bytes()
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
        check_kind(format, false)?;
        check_audio_shape(sample_rate, channels, samples)?;
        let data = format.plane_table(channels, samples)[0];
        let frame = to_u32(data.row_bytes(), "audio frame")?;
        let size = to_u32(data.bytes(), "audio data")?;
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
            fps_num: 0,
            fps_den: 1,
        })
    }

    /// The same video header with a nominal frame rate of `num / den` frames per
    /// second (`num` 0: variable, the default). [`MediaError`] for audio, a `den` of
    /// 0 or a rate above [`MAX_FRAME_RATE`].
    ///
    /// ```
    /// use shmring::media::{Format, MediaHeader};
    /// let h = MediaHeader::video(Format::I420, 640, 360, 0, 0).unwrap();
    /// assert_eq!((h.fps_num, h.fps_den), (0, 1));
    /// let h = h.with_frame_rate(30000, 1001).unwrap();
    /// assert_eq!((h.fps_num, h.fps_den), (30000, 1001));
    /// assert!(h.with_frame_rate(30, 0).is_err());
    /// ```
    pub fn with_frame_rate(mut self, num: u32, den: u32) -> Result<Self, MediaError> {
        check_frame_rate(self.format, num, den)?;
        self.fps_num = num;
        self.fps_den = if num == 0 { 1 } else { den };
        Ok(self)
    }

    /// [`MediaHeader::parse`], then the checks for a record of `kind`
    /// ([`kind::VIDEO`] or [`kind::AUDIO`]): a format of that kind and the sizes the
    /// constructors accept. An end of stream is refused (see [`read`](super::read), which takes
    /// both).
    pub fn parse_for(k: u32, payload: &[u8]) -> Result<MediaHeader, MediaError> {
        Self::check_for(k, MediaHeader::parse(payload)?)
    }

    pub(super) fn check_for(k: u32, hd: MediaHeader) -> Result<MediaHeader, MediaError> {
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
        b[104..108].copy_from_slice(&self.fps_num.to_le_bytes());
        b[108..112].copy_from_slice(&self.fps_den.to_le_bytes());
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
    /// read once, every plane checked to lie inside the payload). An end-of-stream
    /// header is refused: it carries no frame (see [`read`](super::read)).
    pub fn parse(payload: &[u8]) -> Result<MediaHeader, MediaError> {
        match Raw::load(payload)? {
            Raw::Frame(b) => Self::check(&b, payload),
            Raw::End(_) => Err(MediaError(
                "an end-of-stream record carries no frame".into(),
            )),
        }
    }

    /// The frame header in `b` (loaded from `payload`), checked.
    pub(super) fn check(
        b: &[u8; MEDIA_HEADER_SIZE],
        payload: &[u8],
    ) -> Result<MediaHeader, MediaError> {
        let format = Format::from_u32(u32_at(b, 8))
            .ok_or_else(|| MediaError(format!("unknown format {}", u32_at(b, 8))))?;
        let planes = u32_at(b, 48);
        if planes == 0 || planes > 4 {
            return Err(MediaError(format!("{planes} planes, expected 1 to 4")));
        }
        let (fps_num, fps_den) = (u32_at(b, 104), u32_at(b, 108));
        check_frame_rate(format, fps_num, fps_den)?;
        let mut hd = MediaHeader {
            format,
            width: u32_at(b, 12),
            height: u32_at(b, 16),
            sample_rate: u32_at(b, 20),
            channels: u32_at(b, 24),
            samples: u32_at(b, 28),
            pts_ns: u64_at(b, 32),
            sequence: u64_at(b, 40),
            planes,
            stride: [0; 4],
            offset: [0; 4],
            size: [0; 4],
            fps_num,
            fps_den: if fps_num == 0 { 1 } else { fps_den },
        };
        for i in 0..4 {
            hd.stride[i] = u32_at(b, 56 + 4 * i);
            hd.offset[i] = u32_at(b, 72 + 4 * i);
            hd.size[i] = u32_at(b, 88 + 4 * i);
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
        for (i, p) in hd.plane_table().iter().enumerate() {
            if i >= planes as usize
                || (hd.stride[i] as u64) < p.row_bytes()
                || hd.size[i] as u64 != hd.stride[i] as u64 * p.rows as u64
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

    /// The planes of this header's format at its size (video: width x height;
    /// audio: channels x samples): what each plane holds, whatever its stride.
    ///
    /// ```
    /// use shmring::media::{Format, MediaHeader};
    /// let h = MediaHeader::video(Format::Nv12, 7, 5, 0, 0).unwrap();
    /// let t = h.plane_table();
    /// assert_eq!(t.len(), h.planes as usize);
    /// assert_eq!((t[1].columns, t[1].rows, t[1].components), (4, 3, 2));
    /// assert_eq!(h.size[1] as u64, t[1].bytes());
    /// ```
    pub fn plane_table(&self) -> PlaneTable {
        if self.format.is_video() {
            self.format.plane_table(self.width, self.height)
        } else {
            self.format.plane_table(self.channels, self.samples)
        }
    }

    /// Plane `i` of `payload` (which this header was parsed from).
    pub fn plane<'a>(&self, payload: &'a [u8], i: usize) -> &'a [u8] {
        let (o, s) = (self.offset[i] as usize, self.size[i] as usize);
        &payload[o..o + s]
    }
}
