//! The media header: a small, versioned header at the start of a media record's
//! payload, shared by every language (`include/shmring.h`, the Python and Node
//! packages translate it through this module).
//!
//! ```text
//!  offset size field
//!   0     4   magic        "SMH1" (0x31484d53 little-endian)
//!   4     2   version      2 (version 1 is read too: no frame rate, no flags)
//!   6     2   header_size  128 (plane data may start here)
//!   8     4   format       Format (I420, NV12, RGBA, PCM s16, PCM f32); 0 at an end of stream
//!  12     4   width        pixels (video)
//!  16     4   height       pixels (video)
//!  20     4   sample_rate  Hz (audio)
//!  24     4   channels     (audio, interleaved)
//!  28     4   samples      per channel (audio)
//!  32     8   pts_ns       presentation timestamp, nanoseconds
//!  40     8   sequence     per stream and kind: 0, 1, 2, ... (SEQUENCE_AUTO: the producer numbers it)
//!  48     4   planes       number of planes used (video 1..=3, audio 1; 0 at an end of stream)
//!  52     4   flags        bit 0: END_OF_STREAM (version 2)
//!  56    16   stride[4]    bytes per row of each plane (audio: bytes per frame)
//!  72    16   offset[4]    byte offset of each plane from the payload start
//!  88    16   size[4]      byte size of each plane
//! 104     4   fps_num      video: nominal frame rate fps_num/fps_den; 0: variable (version 2)
//! 108     4   fps_den      1 or more when fps_num is not 0
//! 112    16   reserved     zero
//! ```
//! Plane offsets are 64-byte aligned in headers built here; a reader must accept
//! any offsets that pass [`MediaHeader::parse`].
//!
//! **Numbering.** `sequence` counts the records of one stream id and one kind (video
//! and audio are numbered apart), from 0, one more per record: a reader sees a gap as
//! a loss and a step back as a producer that started again. A header built with
//! [`SEQUENCE_AUTO`] is numbered by the [`crate::Producer`] that commits it (each
//! producer keeps the next number of the streams it writes).
//!
//! **End of stream.** A producer ends a stream of one kind with
//! [`crate::Producer::end_stream`]: a record of that kind whose payload is a header
//! alone, with the `END_OF_STREAM` flag, no format and no planes, numbered like a
//! frame. [`read`] tells the two apart ([`MediaRecord`]); [`MediaHeader::parse`]
//! refuses an end of stream, which carries no frame.
//!
//! **Versions.** Headers are written as version 2. A reader of version 1 (shmring
//! 0.1) refuses them by version, naming it; this reader accepts both.

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
/// The version written; [`MediaHeader::parse`] also reads [`MEDIA_VERSION_1`].
pub const MEDIA_VERSION: u16 = 2;
/// The first version: no frame rate, no flags (their bytes were reserved, zero).
pub const MEDIA_VERSION_1: u16 = 1;
pub const MEDIA_HEADER_SIZE: usize = 128;

/// `sequence` value asking the committing [`crate::Producer`] to number the record
/// (see the module's documentation).
pub const SEQUENCE_AUTO: u64 = u64::MAX;

/// Bits of the header's `flags` field (version 2).
pub mod flags {
    /// The record ends its stream (of its kind): no format, no planes.
    pub const END_OF_STREAM: u32 = 1;
    /// Every bit a reader of this version knows.
    pub const KNOWN: u32 = END_OF_STREAM;
}

/// Highest nominal frame rate a header may give, in frames per second.
pub const MAX_FRAME_RATE: u32 = 1000;

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
    /// Video: the nominal frame rate `fps_num / fps_den`; `fps_num` 0: variable or
    /// unknown (durations come from the timestamps). Audio: 0 / 1.
    pub fps_num: u32,
    pub fps_den: u32,
}

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
enum Raw {
    Frame([u8; MEDIA_HEADER_SIZE]),
    End(EndOfStream),
}

impl Raw {
    fn load(payload: &[u8]) -> Result<Raw, MediaError> {
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

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Streams a producer numbers at once; a producer writing more evicts the one it
/// wrote longest ago (whose next record is then numbered from 0 again).
const NUMBERED_STREAMS: usize = 8;

/// The next `sequence` of each stream (id and kind) a producer writes: what it fills
/// in a header built with [`SEQUENCE_AUTO`]. A fixed table, so committing allocates
/// nothing.
#[derive(Debug, Default)]
pub(crate) struct Numbering {
    /// (stream id, kind, next sequence, last use).
    next: [(u32, u32, u64, u64); NUMBERED_STREAMS],
    used: usize,
    clock: u64,
}

impl Numbering {
    /// Numbers the media header at the start of `payload` (a record of `kind` for
    /// `stream`, in the committing producer's own reservation) if it asks for it,
    /// and notes the number either way. Anything that is not a media header of a
    /// known version is left alone.
    pub(crate) fn number(&mut self, stream: u32, k: u32, payload: &mut [u8]) {
        if (k != kind::VIDEO && k != kind::AUDIO) || payload.len() < MEDIA_HEADER_SIZE {
            return;
        }
        let version = u16::from_le_bytes([payload[4], payload[5]]);
        if u32_at(payload, 0) != MEDIA_MAGIC
            || (version != MEDIA_VERSION && version != MEDIA_VERSION_1)
        {
            return;
        }
        self.clock += 1;
        let at = match self.next[..self.used]
            .iter()
            .position(|e| e.0 == stream && e.1 == k)
        {
            Some(i) => i,
            None => {
                let i = if self.used < NUMBERED_STREAMS {
                    self.used += 1;
                    self.used - 1
                } else {
                    (0..NUMBERED_STREAMS)
                        .min_by_key(|&i| self.next[i].3)
                        .expect("a full table")
                };
                self.next[i] = (stream, k, 0, 0);
                i
            }
        };
        let e = &mut self.next[at];
        let mut seq = u64_at(payload, 40);
        if seq == SEQUENCE_AUTO {
            seq = e.2;
            payload[40..48].copy_from_slice(&seq.to_le_bytes());
        }
        e.2 = seq.wrapping_add(1);
        e.3 = self.clock;
    }
}

#[cfg(not(loom))]
impl crate::Producer {
    /// Ends stream `stream` of kind `k` ([`kind::VIDEO`] or [`kind::AUDIO`]): commits
    /// an end-of-stream record (see the module's documentation), numbered after the
    /// stream's last record from this producer. Readers end that stream there
    /// (`shmringsrc` sends EOS, `shmring record` closes the stream's file).
    ///
    /// ```
    /// use shmring::media::{self, kind, Format, MediaHeader, MediaRecord, SEQUENCE_AUTO};
    /// use shmring::{Config, Meta, Segment};
    /// let seg = Segment::create_memfd("doc-end", &Config::with_capacity(1 << 20))?;
    /// let consumer = seg.consumer()?;
    /// let mut producer = seg.producer()?;
    /// let hd = MediaHeader::video(Format::I420, 16, 16, 0, SEQUENCE_AUTO).unwrap();
    /// let mut frame = vec![0u8; hd.payload_len()];
    /// hd.write_to(&mut frame).unwrap();
    /// producer.send(&frame, Meta::new(3, kind::VIDEO))?; // numbered 0
    /// producer.end_stream(3, kind::VIDEO)?;              // numbered 1
    /// let f = consumer.try_next()?.unwrap();
    /// assert!(matches!(media::read(f.kind(), f.payload()), Ok(MediaRecord::Frame(h)) if h.sequence == 0));
    /// drop(f);
    /// let f = consumer.try_next()?.unwrap();
    /// assert!(matches!(media::read(f.kind(), f.payload()), Ok(MediaRecord::End(e)) if e.sequence == 1));
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn end_stream(&mut self, stream: u32, k: u32) -> Result<(), crate::Error> {
        if k != kind::VIDEO && k != kind::AUDIO {
            return Err(crate::Error::Config(format!(
                "end_stream: kind {k} is not a media kind (video {}, audio {})",
                kind::VIDEO,
                kind::AUDIO
            )));
        }
        let end = EndOfStream {
            pts_ns: 0,
            sequence: SEQUENCE_AUTO,
        };
        self.send(&end.to_bytes(), crate::Meta::new(stream, k))
    }
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
            fps_num: 0,
            fps_den: 1,
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
    /// constructors accept. An end of stream is refused (see [`read`], which takes
    /// both).
    pub fn parse_for(k: u32, payload: &[u8]) -> Result<MediaHeader, MediaError> {
        Self::check_for(k, MediaHeader::parse(payload)?)
    }

    fn check_for(k: u32, hd: MediaHeader) -> Result<MediaHeader, MediaError> {
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
    /// header is refused: it carries no frame (see [`read`]).
    pub fn parse(payload: &[u8]) -> Result<MediaHeader, MediaError> {
        match Raw::load(payload)? {
            Raw::Frame(b) => Self::check(&b, payload),
            Raw::End(_) => Err(MediaError(
                "an end-of-stream record carries no frame".into(),
            )),
        }
    }

    /// The frame header in `b` (loaded from `payload`), checked.
    fn check(b: &[u8; MEDIA_HEADER_SIZE], payload: &[u8]) -> Result<MediaHeader, MediaError> {
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

    #[test]
    fn version_1_headers_are_read_without_rate_or_flags() {
        let h = MediaHeader::video(Format::I420, 64, 32, 7, 8)
            .unwrap()
            .with_frame_rate(25, 1)
            .unwrap();
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        assert_eq!(u16::from_le_bytes([buf[4], buf[5]]), MEDIA_VERSION);
        assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
        // The same bytes as version 1: what followed was reserved, so it is ignored.
        buf[4..6].copy_from_slice(&MEDIA_VERSION_1.to_le_bytes());
        buf[52] = 0xff;
        let v1 = MediaHeader::parse(&buf).unwrap();
        assert_eq!((v1.fps_num, v1.fps_den), (0, 1));
        assert_eq!(v1.sequence, 8);
        buf[4..6].copy_from_slice(&3u16.to_le_bytes());
        assert!(MediaHeader::parse(&buf)
            .unwrap_err()
            .0
            .contains("version 3"));
    }

    #[test]
    fn frame_rates_are_checked() {
        let v = MediaHeader::video(Format::Nv12, 64, 32, 0, 0).unwrap();
        assert!(v.with_frame_rate(0, 0).is_ok());
        assert!(v.with_frame_rate(1000, 1).is_ok());
        assert!(v.with_frame_rate(1001, 1).is_err());
        assert!(v.with_frame_rate(30, 0).is_err());
        let a = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
        assert!(a.with_frame_rate(30, 1).is_err());
        let mut buf = vec![0u8; v.payload_len()];
        v.write_to(&mut buf).unwrap();
        buf[104..108].copy_from_slice(&30u32.to_le_bytes());
        buf[108..112].copy_from_slice(&0u32.to_le_bytes()); // 30/0
        assert!(MediaHeader::parse(&buf)
            .unwrap_err()
            .0
            .contains("frame rate"));
    }

    #[test]
    fn end_of_stream_is_read_apart_from_frames() {
        let end = EndOfStream {
            pts_ns: 1,
            sequence: 2,
        };
        let b = end.to_bytes();
        assert_eq!(read(kind::AUDIO, &b).unwrap(), MediaRecord::End(end));
        assert!(read(kind::RAW, &b).is_err());
        assert!(MediaHeader::parse(&b)
            .unwrap_err()
            .0
            .contains("end-of-stream"));
        let mut bad = b;
        bad[48] = 1; // planes
        assert!(read(kind::VIDEO, &bad).is_err());
        let mut bad = b;
        bad[52] = 2; // an unknown flag
        assert!(read(kind::VIDEO, &bad).unwrap_err().0.contains("flags"));
        // A frame reads as one.
        let h = MediaHeader::audio(Format::PcmS16, 48000, 1, 4, 0, 5).unwrap();
        let mut buf = vec![0u8; h.payload_len()];
        h.write_to(&mut buf).unwrap();
        assert_eq!(read(kind::AUDIO, &buf).unwrap(), MediaRecord::Frame(h));
        assert!(read(kind::VIDEO, &buf).is_err());
    }

    #[test]
    fn numbering_fills_auto_sequences_per_stream_and_kind() {
        let mut n = Numbering::default();
        let header = |seq: u64| {
            let h = MediaHeader::audio(Format::PcmS16, 48000, 1, 4, 0, seq).unwrap();
            let mut b = vec![0u8; h.payload_len()];
            h.write_to(&mut b).unwrap();
            b
        };
        let seq = |b: &[u8]| u64::from_le_bytes(b[40..48].try_into().unwrap());
        let mut got = vec![];
        for (stream, k, given) in [
            (0, kind::AUDIO, SEQUENCE_AUTO),
            (0, kind::AUDIO, SEQUENCE_AUTO),
            (0, kind::VIDEO, SEQUENCE_AUTO), // video is numbered apart
            (1, kind::AUDIO, SEQUENCE_AUTO), // so is another stream
            (0, kind::AUDIO, 10),            // given: kept, and followed
            (0, kind::AUDIO, SEQUENCE_AUTO),
            (0, kind::RAW, SEQUENCE_AUTO), // not media: untouched
        ] {
            let mut b = header(given);
            n.number(stream, k, &mut b);
            got.push(seq(&b));
        }
        assert_eq!(got, vec![0, 1, 0, 0, 10, 11, SEQUENCE_AUTO]);
        let mut end = EndOfStream {
            pts_ns: 0,
            sequence: SEQUENCE_AUTO,
        }
        .to_bytes();
        n.number(0, kind::AUDIO, &mut end);
        assert_eq!(seq(&end), 12);
        // More streams than the table holds: the one written longest ago starts again.
        for s in 2..2 + NUMBERED_STREAMS as u32 {
            let mut b = header(SEQUENCE_AUTO);
            n.number(s, kind::AUDIO, &mut b);
        }
        let mut b = header(SEQUENCE_AUTO);
        n.number(0, kind::VIDEO, &mut b);
        assert_eq!(seq(&b), 0);
    }
}
