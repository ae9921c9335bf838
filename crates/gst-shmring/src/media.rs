//! Translation between GStreamer caps and shmring media headers. The formats and
//! their plane layouts are the core's ([`shmring::media`]); this module only maps
//! names and checks what GStreamer hands us against them.

use gst::prelude::*;
use gst_audio::AudioFormat;
use gst_video::VideoFormat;
use shmring::media::{self, Format, MediaHeader, MEDIA_HEADER_SIZE};

/// Every media format of the core, with its GStreamer name.
const MAPPING: [(Format, Gst); 5] = [
    (Format::I420, Gst::Video(VideoFormat::I420)),
    (Format::Nv12, Gst::Video(VideoFormat::Nv12)),
    (Format::Rgba, Gst::Video(VideoFormat::Rgba)),
    (Format::PcmS16, Gst::Audio(AudioFormat::S16le)),
    (Format::PcmF32, Gst::Audio(AudioFormat::F32le)),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Gst {
    Video(VideoFormat),
    Audio(AudioFormat),
}

/// GStreamer's name for a video format of the core.
pub fn video_format(f: Format) -> Option<VideoFormat> {
    MAPPING.iter().find_map(|(c, g)| match g {
        Gst::Video(v) if *c == f => Some(*v),
        _ => None,
    })
}

fn audio_format(f: Format) -> Option<AudioFormat> {
    MAPPING.iter().find_map(|(c, g)| match g {
        Gst::Audio(a) if *c == f => Some(*a),
        _ => None,
    })
}

/// The caps every format of the core can be carried in (what the elements accept
/// and produce).
pub fn supported_caps() -> gst::Caps {
    let video: Vec<&str> = MAPPING
        .iter()
        .filter_map(|(_, g)| match g {
            Gst::Video(v) => Some(v.to_str().as_str()),
            _ => None,
        })
        .collect();
    let audio: Vec<&str> = MAPPING
        .iter()
        .filter_map(|(_, g)| match g {
            Gst::Audio(a) => Some(a.to_str().as_str()),
            _ => None,
        })
        .collect();
    let limit = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    let (dim, fps) = (limit(media::MAX_DIMENSION), limit(media::MAX_FRAME_RATE));
    let rates = (
        limit(*media::SAMPLE_RATES.start()),
        limit(*media::SAMPLE_RATES.end()),
    );
    let channels = limit(media::MAX_CHANNELS);
    let mut caps = gst::Caps::builder("video/x-raw")
        .field("format", gst::List::new(video))
        // The core's limits: caps never offer what a media header may not carry.
        .field("width", gst::IntRange::new(1, dim))
        .field("height", gst::IntRange::new(1, dim))
        .field(
            "framerate",
            gst::FractionRange::new(gst::Fraction::new(0, 1), gst::Fraction::new(fps, 1)),
        )
        .build();
    caps.merge(
        gst::Caps::builder("audio/x-raw")
            .field("format", gst::List::new(audio))
            .field("layout", "interleaved")
            .field("rate", gst::IntRange::new(rates.0, rates.1))
            .field("channels", gst::IntRange::new(1, channels))
            .build(),
    );
    caps
}

/// Do two headers describe the same caps and plane layout (everything but the
/// timestamps, sequence numbers and the audio packet length)?
pub fn same_shape(a: &MediaHeader, b: &MediaHeader) -> bool {
    a.format == b.format
        && a.width == b.width
        && a.height == b.height
        && a.sample_rate == b.sample_rate
        && a.channels == b.channels
        && (a.fps_num, a.fps_den) == (b.fps_num, b.fps_den)
        && (a.format.is_audio() || (a.stride == b.stride && a.offset == b.offset))
}

/// What a source makes of a header: caps, and for video where the planes lie.
pub struct Output {
    pub caps: gst::Caps,
    /// Video: the layout GStreamer assumes for these caps is not the header's, so
    /// buffers carry a `GstVideoMeta`.
    pub video_meta: bool,
    /// First plane byte and end of the last plane, from the payload start.
    pub span: (usize, usize),
    /// Video: per plane offset from `span.0` and stride.
    pub offsets: [usize; 4],
    pub strides: [i32; 4],
    pub planes: usize,
}

/// Marks `b`, made of a record with header `hd`: its timestamps, a
/// discontinuity, and the record's plane layout (`layout`: offsets and strides of
/// each plane) as a `GstVideoMeta` where the caps' layout is not the record's.
pub fn mark(
    b: &mut gst::BufferRef,
    hd: &MediaHeader,
    (pts, duration): (Option<gst::ClockTime>, Option<gst::ClockTime>),
    discont: bool,
    layout: Option<(&[usize], &[i32])>,
) -> Result<(), gst::glib::BoolError> {
    b.set_pts(pts);
    b.set_duration(duration);
    if discont {
        b.set_flags(gst::BufferFlags::DISCONT);
    }
    if let Some((offsets, strides)) = layout {
        let vf = video_format(hd.format).expect("a plane layout is video's");
        gst_video::VideoMeta::add_full(
            b,
            gst_video::VideoFrameFlags::empty(),
            vf,
            hd.width,
            hd.height,
            offsets,
            strides,
        )?;
    }
    Ok(())
}

/// How long a record with header `hd` lasts: audio by its samples, video by the
/// nominal frame `rate`, or at a variable rate the interval since the stream's
/// last video `pts` (`last`, which becomes `pts`).
pub fn duration(
    hd: &MediaHeader,
    rate: gst::Fraction,
    pts: Option<gst::ClockTime>,
    last: &mut Option<gst::ClockTime>,
) -> Option<gst::ClockTime> {
    if hd.format.is_audio() {
        gst::ClockTime::SECOND.mul_div_floor(hd.samples as u64, hd.sample_rate.max(1) as u64)
    } else if rate.numer() > 0 {
        gst::ClockTime::SECOND.mul_div_floor(rate.denom() as u64, rate.numer() as u64)
    } else {
        let previous = std::mem::replace(last, pts);
        pts.zip(previous)
            .and_then(|(now, before)| now.checked_sub(before))
    }
}

/// The header's nominal frame rate, or 0/1 (variable).
pub fn header_rate(hd: &MediaHeader) -> gst::Fraction {
    if hd.fps_num == 0 {
        gst::Fraction::new(0, 1)
    } else {
        // The core keeps both within i32 (check_frame_rate).
        gst::Fraction::new(hd.fps_num as i32, hd.fps_den as i32)
    }
}

/// The frame rate a video pad offers for `hd` given what downstream accepts
/// (`peer`: the peer's caps, or `None` when unknown): the header's nominal rate;
/// for a variable rate, 0/1 if downstream takes it, else the rate downstream asks
/// for (fixated to the nearest to 30/1), so `video/x-raw,framerate=30/1` or an
/// `avimux` negotiate instead of failing. The frames keep their capture timestamps
/// either way.
pub fn negotiated_rate(hd: &MediaHeader, peer: Option<&gst::Caps>) -> gst::Fraction {
    let nominal = header_rate(hd);
    if hd.fps_num != 0 || !hd.format.is_video() {
        return nominal;
    }
    let Some(peer) = peer else { return nominal };
    let Some(vf) = video_format(hd.format) else {
        return nominal;
    };
    let ours = gst::Caps::builder("video/x-raw")
        .field("format", vf.to_str())
        .field("width", hd.width as i32)
        .field("height", hd.height as i32)
        .field(
            "framerate",
            gst::FractionRange::new(gst::Fraction::new(0, 1), gst::Fraction::new(i32::MAX, 1)),
        )
        .build();
    let mut both = peer.intersect_with_mode(&ours, gst::CapsIntersectMode::First);
    if both.is_empty() {
        return nominal;
    }
    let variable = gst::Caps::builder("video/x-raw")
        .field("framerate", gst::Fraction::new(0, 1))
        .build();
    if both.can_intersect(&variable) {
        return nominal;
    }
    both.truncate();
    let caps = both.make_mut();
    if let Some(st) = caps.structure_mut(0) {
        st.fixate_field_nearest_fraction("framerate", gst::Fraction::new(30, 1));
        if let Ok(f) = st.get::<gst::Fraction>("framerate") {
            return f;
        }
    }
    nominal
}

/// Caps and plane layout for a validated header, with video frame rate `rate`
/// (see [`negotiated_rate`]). `Err` names what GStreamer refused (a header the
/// core accepts but GStreamer cannot express).
pub fn output_for(hd: &MediaHeader, rate: gst::Fraction) -> Result<Output, String> {
    let n = hd.planes as usize;
    let first = (0..n)
        .map(|i| hd.offset[i] as usize)
        .min()
        .unwrap_or(MEDIA_HEADER_SIZE);
    let end = (0..n)
        .map(|i| hd.offset[i] as usize + hd.size[i] as usize)
        .max()
        .unwrap_or(MEDIA_HEADER_SIZE);
    let mut offsets = [0usize; 4];
    let mut strides = [0i32; 4];
    for i in 0..n {
        offsets[i] = hd.offset[i] as usize - first;
        strides[i] = i32::try_from(hd.stride[i])
            .map_err(|_| format!("stride {} too large", hd.stride[i]))?;
    }
    if let Some(vf) = video_format(hd.format) {
        let info = gst_video::VideoInfo::builder(vf, hd.width, hd.height)
            .fps(rate)
            .build()
            .map_err(|e| format!("{} {}x{}: {e}", hd.format.name(), hd.width, hd.height))?;
        let caps = info
            .to_caps()
            .map_err(|e| format!("{} {}x{}: {e}", hd.format.name(), hd.width, hd.height))?;
        let default =
            (0..n).all(|i| info.offset()[i] == offsets[i] && info.stride()[i] == strides[i]);
        Ok(Output {
            caps,
            video_meta: !default,
            span: (first, end),
            offsets,
            strides,
            planes: n,
        })
    } else {
        let af = audio_format(hd.format)
            .ok_or_else(|| format!("no GStreamer format for {}", hd.format.name()))?;
        let info = gst_audio::AudioInfo::builder(af, hd.sample_rate, hd.channels)
            .layout(gst_audio::AudioLayout::Interleaved)
            .build()
            .map_err(|e| {
                format!(
                    "{} {} Hz {} channels: {e}",
                    hd.format.name(),
                    hd.sample_rate,
                    hd.channels
                )
            })?;
        let caps = info.to_caps().map_err(|e| {
            format!(
                "{} {} Hz {} channels: {e}",
                hd.format.name(),
                hd.sample_rate,
                hd.channels
            )
        })?;
        Ok(Output {
            caps,
            video_meta: false,
            span: (first, end),
            offsets,
            strides,
            planes: n,
        })
    }
}

/// What a sink writes for its caps.
#[derive(Debug, Clone)]
pub enum Input {
    Video {
        format: Format,
        info: gst_video::VideoInfo,
    },
    Audio {
        format: Format,
        info: gst_audio::AudioInfo,
    },
}

/// The core's format of the GStreamer format `g` (named `name`, of `kind`), or
/// why it cannot travel.
fn core_format(g: Gst, kind: &str, name: &str) -> Result<Format, String> {
    MAPPING
        .iter()
        .find_map(|(c, m)| (*m == g).then_some(*c))
        .ok_or_else(|| {
            format!(
                "{kind} format {name} is not supported (supported: {})",
                names()
            )
        })
}

impl Input {
    /// Reads negotiated caps. `Err` names the format or field that cannot travel.
    pub fn from_caps(caps: &gst::CapsRef) -> Result<Input, String> {
        let s = caps.structure(0).ok_or_else(|| "empty caps".to_string())?;
        match s.name().as_str() {
            "video/x-raw" => {
                let info = gst_video::VideoInfo::from_caps(caps)
                    .map_err(|e| format!("video caps {caps}: {e}"))?;
                let format =
                    core_format(Gst::Video(info.format()), "video", info.format().to_str())?;
                if info.is_interlaced() {
                    return Err("interlaced video is not supported".into());
                }
                Ok(Input::Video { format, info })
            }
            "audio/x-raw" => {
                let info = gst_audio::AudioInfo::from_caps(caps)
                    .map_err(|e| format!("audio caps {caps}: {e}"))?;
                let format =
                    core_format(Gst::Audio(info.format()), "audio", info.format().to_str())?;
                if info.layout() != gst_audio::AudioLayout::Interleaved {
                    return Err("non-interleaved audio is not supported".into());
                }
                Ok(Input::Audio { format, info })
            }
            other => Err(format!(
                "media type {other} is not supported (supported: video/x-raw, audio/x-raw)"
            )),
        }
    }

    /// The header for a buffer of `size` bytes whose planes start right after the
    /// header, with plane layout from `meta` (a buffer's `GstVideoMeta`) or else the
    /// caps. `Err` when the buffer does not hold what the header describes.
    pub fn header(
        &self,
        size: usize,
        meta: Option<&gst_video::VideoMeta>,
        pts_ns: u64,
        sequence: u64,
    ) -> Result<MediaHeader, String> {
        let hd = match self {
            Input::Video { format, info } => {
                let (stride, offset): (&[i32], &[usize]) = match meta {
                    Some(m) => (m.stride(), m.offset()),
                    None => (info.stride(), info.offset()),
                };
                let n = info.n_planes() as usize;
                let mut st = [0u32; 4];
                let mut of = [0u32; 4];
                for i in 0..n {
                    st[i] = u32::try_from(*stride.get(i).unwrap_or(&-1))
                        .map_err(|_| format!("plane {i}: negative stride"))?;
                    of[i] = u32::try_from(
                        offset
                            .get(i)
                            .copied()
                            .unwrap_or(usize::MAX)
                            .saturating_add(MEDIA_HEADER_SIZE),
                    )
                    .map_err(|_| format!("plane {i}: offset out of range"))?;
                }
                let fps = info.fps();
                let (num, den) = match (u32::try_from(fps.numer()), u32::try_from(fps.denom())) {
                    (Ok(n), Ok(d)) if n > 0 && d > 0 => (n, d),
                    _ => (0, 1),
                };
                MediaHeader::video_with_layout(
                    *format,
                    info.width(),
                    info.height(),
                    &st[..n],
                    &of[..n],
                    pts_ns,
                    sequence,
                )
                // A rate the header cannot carry travels as a variable one.
                .map(|h| h.with_frame_rate(num, den).unwrap_or(h))
                .map_err(|e| e.to_string())?
            }
            Input::Audio { format, info } => {
                let bpf = info.bpf() as usize;
                if !size.is_multiple_of(bpf) {
                    return Err(format!(
                        "audio buffer of {size} bytes is not a whole number of {bpf}-byte frames"
                    ));
                }
                let samples = u32::try_from(size / bpf)
                    .map_err(|_| format!("audio buffer of {size} bytes is too large"))?;
                MediaHeader::audio(
                    *format,
                    info.rate(),
                    info.channels(),
                    samples,
                    pts_ns,
                    sequence,
                )
                .map_err(|e| e.to_string())?
            }
        };
        if hd.payload_len() > MEDIA_HEADER_SIZE + size {
            return Err(format!(
                "buffer of {size} bytes is smaller than the {} bytes its caps describe",
                hd.payload_len() - MEDIA_HEADER_SIZE
            ));
        }
        Ok(hd)
    }

    /// Bytes of a frame in the caps' own layout (the pool's buffer size).
    pub fn frame_size(&self) -> usize {
        match self {
            Input::Video { info, .. } => info.size(),
            Input::Audio { info, .. } => info.bpf() as usize,
        }
    }

    pub fn is_video(&self) -> bool {
        matches!(self, Input::Video { .. })
    }

    /// The record kind this input is written as.
    pub fn kind(&self) -> u32 {
        if self.is_video() {
            shmring::media::kind::VIDEO
        } else {
            shmring::media::kind::AUDIO
        }
    }
}

fn names() -> String {
    MAPPING
        .iter()
        .map(|(_, g)| match g {
            Gst::Video(v) => v.to_str().to_string(),
            Gst::Audio(a) => a.to_str().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
