//! `record --encode` in process: one MP4 per stream id (a participant), its video
//! encoded to H.264 and its audio to AAC (Opus where no AAC encoder is installed),
//! muxed, in a GStreamer pipeline of this process:
//!
//! ```text
//! appsrc (video) ! x264enc ! h264parse ! mp4mux ! filesink
//! appsrc (audio) ! audiorate ! audioconvert ! audioresample ! avenc_aac ! mp4mux
//! ```
//!
//! **Timing.** Every buffer is timed by its record's capture timestamp (the record
//! header's `timestamp_ns`), from the participant's first record: a 15 fps camera,
//! a 25 fps one and a variable-rate track all give a file as long as their capture,
//! and audio stays where it was captured against the video: `audiorate` follows the
//! audio's capture timestamps, filling a gap with silence and dropping an overlap
//! past [`AUDIO_TOLERANCE_NS`], so an audio device whose clock runs apart from the
//! capture clock does not drift from the video over a long meeting. The header's
//! nominal frame rate goes into the caps (0/1 when variable). Two things players
//! do are made up for: they play the AAC encoder's priming (the muxer writes no
//! edit list), so audio goes into the encoder that much ahead of its capture time
//! ([`AUDIO_ENCODERS`]); and the muxer starts every track at the file's start, so
//! a video that starts after its audio has its first frame shown from there.
//!
//! **Tracks.** The muxer needs every track before it writes, so a participant's
//! first records are kept (copied) until both kinds have arrived, or for
//! [`GRACE_NS`] of capture: a participant that sends only audio gets an audio-only
//! file. A kind that joins later, or a format that changes, ends the file and starts
//! the participant's next part (`stream-ID-2.mp4`, ...). An end-of-stream record of
//! a kind ends that track; once every track has ended the file is finished.
//!
//! **Robust files.** The MP4 is fragmented (a fragment a second, a key frame at
//! least every two seconds, no B-frames so that video starts at its first capture):
//! cut anywhere, by a full disk or a killed process, it plays up to its last whole
//! fragment. It is written as `NAME.part` and renamed once the muxer finished it.
//!
//! **Copies.** The recorder is the ring's consumer and releases each record when
//! it returns, while the encoder keeps frames for its look-ahead: each frame is
//! copied once, from the ring into a buffer of a pool the encoder reads. The video
//! input queue is bounded (two seconds of frames, at most [`VIDEO_QUEUE_BYTES`])
//! and a live frame never waits for it: one that finds it full is dropped,
//! counted (the stream's `dropped`) and said once per participant, so an encoder
//! that falls behind (too many participants for the cores, a starved host) costs
//! frames of its own file, never the ring: the recorder keeps reading, and
//! producers never find the ring full because of it. (Frames stamped ahead of the
//! clock, written faster than real time by a producer that can wait, wait for the
//! encoder while it takes frames.) The queue holds seconds, not a few frames,
//! because the muxer waits for both tracks: far more than audio ever lags behind
//! video (the AAC encoder's delay and the producers' order, tens of milliseconds).
//! Audio is small and queues unbounded.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gst::prelude::*;
use gst_video::prelude::*;
use shmring::media::{kind, Format, MediaHeader};

use crate::record::output::{FileReport, WriteCounters};
use crate::record::recorder::{taken, MAX_PARTS};

/// How long (capture time) a participant's first records wait for its other kind.
pub const GRACE_NS: u64 = 500_000_000;
/// Most bytes kept while waiting (a hostile producer cannot make the recorder keep more).
const GRACE_BYTES: usize = 64 << 20;
/// At most this many bytes of it.
const VIDEO_QUEUE_BYTES: u64 = 64 << 20;
/// Least time between two frames' timestamps (several ticks of the MP4 track's
/// time scale, so two frames never round to one time).
const MIN_FRAME_GAP: gst::ClockTime = gst::ClockTime::from_mseconds(1);
/// How long the video encoder may take no frame before a frame that waits for it
/// is dropped (see [`Muxed::room_for_video`]).
const ENCODER_STUCK: Duration = Duration::from_secs(1);
/// Longest wait for the encoder to take a frame, or to finish a file.
const ENCODER_WAIT: Duration = Duration::from_secs(60);
/// How far the audio's samples may run from its capture timestamps before
/// `audiorate` fills or drops (half a 25 fps frame).
pub const AUDIO_TOLERANCE_NS: u64 = 20_000_000;
/// Ticks per second of the video track's clock (the MPEG clock: every common
/// frame rate is a whole number of ticks).
const VIDEO_TIMESCALE: u32 = 90_000;
/// AAC encoders in order of preference, then Opus, each with the priming it puts
/// before the first sample it is given, in samples: players play it (mp4mux
/// writes no edit list to skip it), so the video is put that much later to stay
/// with the audio. Measured for `avenc_aac` and `voaacenc` (at 44.1 and 48 kHz);
/// `fdkaacenc` unmeasured (0: not corrected); Opus's pre-skip is in the file.
const AUDIO_ENCODERS: [(&str, u64); 4] = [
    ("avenc_aac", 1024),
    ("voaacenc", 1600),
    ("fdkaacenc", 0),
    ("opusenc", 0),
];

fn err(what: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("GStreamer encoder: {what}"))
}

fn make(name: &str) -> io::Result<gst::Element> {
    gst::ElementFactory::make(name)
        .build()
        .map_err(|_| missing(name))
}

/// What a record adds to a participant's file.
enum Pushed {
    Written,
    /// A video frame the encoder had no room for: dropped.
    Dropped,
    /// The record ended the file (a new kind, or a new format): the caller finishes
    /// it and gives the record to the next part.
    NewPart,
}

/// What became of a record given to a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// In its file (or kept until its file starts).
    Yes,
    /// A video frame its encoder had no room for: dropped, counted.
    Dropped,
    /// It would start a file past [`MAX_PARTS`]: not taken.
    NoParts,
}

/// The video track's shape: what must stay the same within one file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct VideoShape {
    format: Format,
    width: u32,
    height: u32,
    fps: (u32, u32),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct AudioShape {
    format: Format,
    rate: u32,
    channels: u32,
}

fn video_shape(hd: &MediaHeader) -> VideoShape {
    VideoShape {
        format: hd.format,
        width: hd.width,
        height: hd.height,
        fps: (hd.fps_num, hd.fps_den),
    }
}

fn audio_shape(hd: &MediaHeader) -> AudioShape {
    AudioShape {
        format: hd.format,
        rate: hd.sample_rate,
        channels: hd.channels,
    }
}

struct VideoTrack {
    appsrc: gst_app::AppSrc,
    shape: VideoShape,
    info: gst_video::VideoInfo,
    pool: gst::BufferPool,
    /// PTS and duration of the last frame pushed.
    last: Option<(gst::ClockTime, gst::ClockTime)>,
    ended: bool,
    /// The queue's level (bytes) when the encoder was found to take no frame: it
    /// is taken as stuck until the level goes below.
    stuck_at: Option<u64>,
}

struct AudioTrack {
    appsrc: gst_app::AppSrc,
    shape: AudioShape,
    /// A pool of packet-sized buffers, made for the first packet's size.
    pool: Option<(usize, gst::BufferPool)>,
    ended: bool,
    /// What the encoder puts before the first sample (see [`AUDIO_ENCODERS`]).
    priming: gst::ClockTime,
}

/// One MP4 being written.
struct Muxed {
    pipeline: gst::Pipeline,
    video: Option<VideoTrack>,
    audio: Option<AudioTrack>,
    /// Capture time of the file's start.
    t0: u64,
    tmp: PathBuf,
    path: PathBuf,
    frames: u64,
    samples: u64,
    /// Video frames dropped: the encoder's queue was full.
    dropped: u64,
    failed: Option<String>,
}

fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

impl Muxed {
    fn new(
        path: PathBuf,
        video: Option<VideoShape>,
        audio: Option<AudioShape>,
        t0: u64,
        preset: &str,
    ) -> io::Result<Muxed> {
        gst::init().map_err(err)?;
        let tmp = part_path(&path);
        let pipeline = gst::Pipeline::new();
        let mux = make("mp4mux")?;
        // A fragment a second: the file plays up to its last whole fragment if cut.
        mux.set_property("fragment-duration", 1000u32);
        let sink = make("filesink")?;
        sink.set_property("location", tmp.to_string_lossy().as_ref());
        pipeline.add_many([&mux, &sink]).map_err(err)?;
        mux.link(&sink).map_err(err)?;
        let video = match video {
            Some(shape) => Some(Self::video_track(&pipeline, &mux, shape, preset)?),
            None => None,
        };
        let audio = match audio {
            Some(shape) => Some(Self::audio_track(&pipeline, &mux, shape)?),
            None => None,
        };
        // Every thread of the pipeline (and x264's, which inherit it) runs below
        // the thread that reads the ring, so encoders that fall behind take what
        // CPU is left and drop frames, and never slow the reading.
        if let Some(bus) = pipeline.bus() {
            bus.set_sync_handler(|_, m| {
                if let gst::MessageView::StreamStatus(s) = m.view() {
                    if s.type_() == gst::StreamStatusType::Enter {
                        lower_this_thread();
                    }
                }
                gst::BusSyncReply::Pass
            });
        }
        pipeline.set_state(gst::State::Playing).map_err(err)?;
        Ok(Muxed {
            pipeline,
            video,
            audio,
            t0,
            tmp,
            path,
            frames: 0,
            samples: 0,
            dropped: 0,
            failed: None,
        })
    }

    fn video_track(
        pipeline: &gst::Pipeline,
        mux: &gst::Element,
        shape: VideoShape,
        preset: &str,
    ) -> io::Result<VideoTrack> {
        let format = match shape.format {
            Format::I420 => gst_video::VideoFormat::I420,
            Format::Nv12 => gst_video::VideoFormat::Nv12,
            f => return Err(err(format!("{} video cannot be encoded", f.name()))),
        };
        // 0/1: a variable frame rate; the timestamps time every frame.
        let fps = if shape.fps.0 == 0 {
            gst::Fraction::new(0, 1)
        } else {
            gst::Fraction::new(shape.fps.0 as i32, shape.fps.1 as i32)
        };
        let info = gst_video::VideoInfo::builder(format, shape.width, shape.height)
            .fps(fps)
            .build()
            .map_err(err)?;
        let caps = info.to_caps().map_err(err)?;
        // Two seconds of frames at the nominal rate (of a variable rate: at 30
        // fps), never fewer than 60: an encoder descheduled for a moment on a busy
        // host loses nothing, and a participant's first records (half a second)
        // go in at once.
        let max_frames = match shape.fps {
            (0, _) => 60,
            (n, d) => (2 * n as u64).div_ceil(d.max(1) as u64).max(60),
        };
        let appsrc = timed_source(&caps)
            .max_bytes(VIDEO_QUEUE_BYTES)
            .max_buffers(max_frames)
            .build();
        let enc = make("x264enc")?;
        // Constant quality 20 at the preset (veryfast by default), as `ffmpeg -crf
        // 20 -preset veryfast`; no B-frames (the video track starts at its first
        // frame, with no reordering delay to offset), a key frame at least every 2 s.
        enc.set_property_from_str("speed-preset", preset);
        enc.set_property_from_str("pass", "qual");
        enc.set_property("quantizer", 20u32);
        enc.set_property("bframes", 0u32);
        let keyint = if shape.fps.0 == 0 {
            60
        } else {
            (2 * shape.fps.0 / shape.fps.1.max(1)).clamp(1, 600)
        };
        enc.set_property("key-int-max", keyint);
        let parse = make("h264parse")?;
        pipeline
            .add_many([appsrc.upcast_ref(), &enc, &parse])
            .map_err(err)?;
        gst::Element::link_many([appsrc.upcast_ref(), &enc, &parse]).map_err(err)?;
        let pad = mux
            .request_pad_simple("video_%u")
            .ok_or_else(|| err("mp4mux gave no video pad"))?;
        // The track's clock: mp4mux derives one from the nominal rate, which is 0
        // (an unplayable track) for rates below 1 frame per second; frames are
        // timed by their capture times anyway.
        pad.set_property("trak-timescale", VIDEO_TIMESCALE);
        parse
            .static_pad("src")
            .expect("h264parse has a src pad")
            .link(&pad)
            .map_err(err)?;
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), info.size() as u32, 2, 0);
        pool.set_config(config).map_err(err)?;
        pool.set_active(true).map_err(err)?;
        Ok(VideoTrack {
            appsrc,
            shape,
            info,
            pool: pool.upcast(),
            last: None,
            ended: false,
            stuck_at: None,
        })
    }

    fn audio_track(
        pipeline: &gst::Pipeline,
        mux: &gst::Element,
        shape: AudioShape,
    ) -> io::Result<AudioTrack> {
        let format = match shape.format {
            Format::PcmS16 => gst_audio::AudioFormat::S16le,
            Format::PcmF32 => gst_audio::AudioFormat::F32le,
            f => return Err(err(format!("{} audio cannot be encoded", f.name()))),
        };
        let info = gst_audio::AudioInfo::builder(format, shape.rate, shape.channels)
            .layout(gst_audio::AudioLayout::Interleaved)
            .build()
            .map_err(err)?;
        let caps = info.to_caps().map_err(err)?;
        // Unbounded: the muxer waits for both tracks, so the recorder must never
        // wait for audio while the video it would push next is what the muxer needs.
        let appsrc = timed_source(&caps).max_bytes(0).build();
        let rate = make("audiorate")?;
        rate.set_property("tolerance", AUDIO_TOLERANCE_NS);
        let convert = make("audioconvert")?;
        let resample = make("audioresample")?;
        let (enc, priming) = AUDIO_ENCODERS
            .iter()
            .find_map(|(n, priming)| {
                let e = gst::ElementFactory::make(n).build().ok()?;
                Some((e, *priming))
            })
            .ok_or_else(no_audio_encoder)?;
        let chain = [appsrc.upcast_ref(), &rate, &convert, &resample, &enc];
        pipeline.add_many(chain).map_err(err)?;
        gst::Element::link_many(chain).map_err(err)?;
        let pad = mux
            .request_pad_simple("audio_%u")
            .ok_or_else(|| err("mp4mux gave no audio pad"))?;
        enc.static_pad("src")
            .expect("an encoder has a src pad")
            .link(&pad)
            .map_err(err)?;
        Ok(AudioTrack {
            appsrc,
            shape,
            pool: None,
            ended: false,
            priming: gst::ClockTime::SECOND
                .mul_div_round(priming, shape.rate as u64)
                .unwrap_or(gst::ClockTime::ZERO),
        })
    }

    /// The first error on the bus, if one came (the file cannot go on).
    fn check(&mut self) -> io::Result<()> {
        if self.failed.is_none() {
            if let Some(bus) = self.pipeline.bus() {
                if let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
                    if let gst::MessageView::Error(e) = m.view() {
                        self.failed = Some(e.error().to_string());
                    }
                }
            }
        }
        match &self.failed {
            Some(f) => Err(io::Error::other(format!("{}: {f}", self.tmp.display()))),
            None => Ok(()),
        }
    }

    fn pts(&self, capture_ns: u64) -> gst::ClockTime {
        gst::ClockTime::from_nseconds(capture_ns.saturating_sub(self.t0))
    }

    /// Is there room in the video encoder's queue for a frame captured at
    /// `capture_ns`? A live frame (captured by now) never waits: waiting would
    /// only make every record behind it later, and hold the ring; it finds room or
    /// is dropped. A frame stamped ahead of the clock (records written faster than
    /// real time, which can wait) waits while the encoder takes frames, and is
    /// dropped once it takes none for [`ENCODER_STUCK`] with the audio queue
    /// empty (its muxer waiting for audio, which is in the ring behind this
    /// frame), as are the frames after it until it takes one again.
    fn room_for_video(&mut self, capture_ns: u64) -> io::Result<bool> {
        let live = capture_ns <= shmring::now_ns();
        let v = self.video.as_mut().expect("checked by the caller");
        let size = v.info.size() as u64;
        let full = |v: &VideoTrack| {
            v.appsrc.current_level_bytes() + size > VIDEO_QUEUE_BYTES
                || v.appsrc.current_level_buffers() >= v.appsrc.max_buffers()
        };
        if !full(v) {
            v.stuck_at = None;
            return Ok(true);
        }
        if live {
            return self.check().map(|()| false);
        }
        let (mut level, mut moved) = (v.appsrc.current_level_bytes(), Instant::now());
        if let Some(at) = v.stuck_at {
            if level >= at {
                return self.check().map(|()| false);
            }
        }
        loop {
            self.check()?;
            // The muxer waits for audio that has not come: it is in the ring,
            // behind this frame.
            let starved = self
                .audio
                .as_ref()
                .is_some_and(|a| !a.ended && a.appsrc.current_level_buffers() == 0);
            let v = self.video.as_mut().expect("checked by the caller");
            if !full(v) {
                v.stuck_at = None;
                return Ok(true);
            }
            let now = v.appsrc.current_level_bytes();
            if now < level {
                (level, moved) = (now, Instant::now());
            } else if starved && moved.elapsed() >= ENCODER_STUCK {
                v.stuck_at = Some(now);
                return Ok(false);
            } else if moved.elapsed() >= ENCODER_WAIT {
                return Err(err("the video encoder took no frame for 60 s"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Pushes a frame to the encoder; false when its queue was full (the frame is
    /// dropped and counted).
    fn push_video(
        &mut self,
        capture_ns: u64,
        hd: &MediaHeader,
        payload: &[u8],
    ) -> io::Result<bool> {
        let mut pts = self.pts(capture_ns);
        if !self.room_for_video(capture_ns)? {
            self.dropped += 1;
            return Ok(false);
        }
        let v = self.video.as_mut().expect("checked by the caller");
        let buffer = v.pool.acquire_buffer(None).map_err(err)?;
        let mut frame = gst_video::VideoFrame::from_buffer_writable(buffer, &v.info)
            .map_err(|_| err("cannot map a pool buffer"))?;
        for (p, plane) in hd.plane_table().iter().enumerate() {
            // The core's planes (Y, U, V; or Y, UV interleaved) are GStreamer's.
            let (rows, row) = (plane.rows as usize, plane.row_bytes() as usize);
            let src = hd.plane(payload, p);
            let (src_stride, dst_stride) =
                (hd.stride[p] as usize, frame.plane_stride()[p] as usize);
            let dst = frame.plane_data_mut(p as u32).map_err(err)?;
            for r in 0..rows {
                dst[r * dst_stride..r * dst_stride + row]
                    .copy_from_slice(&src[r * src_stride..r * src_stride + row]);
            }
        }
        let mut buffer = frame.into_buffer();
        // The muxer starts every track at the file's start: a first frame captured
        // after it (its participant's audio came first) is shown from the start,
        // as a player shows a first frame, so that every frame keeps its time.
        let lead = if v.last.is_none() {
            pts
        } else {
            gst::ClockTime::ZERO
        };
        // Frames keep their order, a track tick apart at least: a capture time at or
        // before the previous one (a producer that started again), or within
        // [`MIN_FRAME_GAP`] of it (a late producer catching up), is moved after it,
        // so no two frames share a timestamp in the file.
        if let Some((last, _)) = v.last {
            if pts < last + MIN_FRAME_GAP {
                pts = last + MIN_FRAME_GAP;
            }
        }
        let duration = match v.shape.fps {
            (0, _) => v
                .last
                .map(|(last, d)| pts.checked_sub(last).unwrap_or(d))
                .unwrap_or(gst::ClockTime::from_mseconds(33)),
            (n, d) => gst::ClockTime::SECOND
                .mul_div_floor(d as u64, n as u64)
                .unwrap_or(gst::ClockTime::from_mseconds(33)),
        };
        {
            let b = buffer.get_mut().expect("a pool buffer is ours");
            b.set_pts(pts - lead);
            b.set_duration(duration + lead);
        }
        v.last = Some((pts, duration));
        v.appsrc
            .push_buffer(buffer)
            .map_err(|e| err(format!("the video encoder stopped ({e:?})")))?;
        self.frames += 1;
        self.check().map(|()| true)
    }

    fn push_audio(&mut self, capture_ns: u64, hd: &MediaHeader, payload: &[u8]) -> io::Result<()> {
        let a = self.audio.as_mut().expect("checked by the caller");
        let rate = a.shape.rate as u64;
        // The encoder's priming plays before the first sample given: each sample
        // goes in that much earlier than it was captured, so it plays when it was
        // captured; the samples that would go in before the file's start are cut.
        let at = (capture_ns as i128 - self.t0 as i128 - a.priming.nseconds() as i128)
            .max(i64::MIN as i128);
        let skip = if at < 0 {
            ((-at) as u128 * rate as u128).div_ceil(1_000_000_000) as usize
        } else {
            0
        };
        if skip >= hd.samples as usize {
            return Ok(());
        }
        let pts = gst::ClockTime::from_nseconds(
            (at + (skip as u128 * 1_000_000_000 / rate as u128) as i128).max(0) as u64,
        );
        let plane = hd.plane(payload, 0);
        let samples = hd.plane_table()[0];
        let frame = samples.row_bytes() as usize;
        let (count, bytes) = (
            hd.samples as usize - skip,
            (hd.samples as usize - skip) * frame,
        );
        if a.pool.is_none() {
            let pool = gst::BufferPool::new();
            let mut config = pool.config();
            config.set_params(None, bytes as u32, 2, 0);
            pool.set_config(config).map_err(err)?;
            pool.set_active(true).map_err(err)?;
            a.pool = Some((bytes, pool));
        }
        let mut buffer = match &a.pool {
            Some((size, pool)) if *size == bytes => pool.acquire_buffer(None).map_err(err)?,
            _ => gst::Buffer::with_size(bytes).map_err(err)?,
        };
        {
            let b = buffer.get_mut().expect("a new buffer is ours");
            {
                let mut map = b.map_writable().map_err(err)?;
                let stride = hd.stride[0] as usize;
                if stride == frame {
                    map.copy_from_slice(&plane[skip * frame..skip * frame + bytes]);
                } else {
                    for s in 0..count {
                        let from = (skip + s) * stride;
                        map[s * frame..(s + 1) * frame].copy_from_slice(&plane[from..from + frame]);
                    }
                }
            }
            b.set_pts(pts);
            b.set_duration(gst::ClockTime::SECOND.mul_div_floor(count as u64, rate));
        }
        a.appsrc
            .push_buffer(buffer)
            .map_err(|e| err(format!("the audio encoder stopped ({e:?})")))?;
        self.samples += count as u64;
        self.check()
    }

    /// Ends one track (`k`); true once every track has ended.
    fn end(&mut self, k: u32) -> bool {
        if k == kind::VIDEO {
            if let Some(v) = self.video.as_mut().filter(|v| !v.ended) {
                let _ = v.appsrc.end_of_stream();
                v.ended = true;
            }
        } else if let Some(a) = self.audio.as_mut().filter(|a| !a.ended) {
            let _ = a.appsrc.end_of_stream();
            a.ended = true;
        }
        self.video.as_ref().is_none_or(|v| v.ended) && self.audio.as_ref().is_none_or(|a| a.ended)
    }

    /// Ends every track.
    fn end_all(&mut self) {
        self.end(kind::VIDEO);
        self.end(kind::AUDIO);
    }

    /// Has the muxer finished (EOS) or failed? Waits up to `wait`.
    fn done(&mut self, wait: gst::ClockTime) -> Option<Result<(), String>> {
        if let Some(f) = &self.failed {
            return Some(Err(f.clone()));
        }
        let bus = self.pipeline.bus()?;
        let types = [gst::MessageType::Eos, gst::MessageType::Error];
        // (A zero timeout must not go through timed_pop_filtered, which gives up
        // before it looks.)
        let m = if wait.is_zero() {
            bus.pop_filtered(&types)?
        } else {
            bus.timed_pop_filtered(wait, &types)?
        };
        Some(match m.view() {
            gst::MessageView::Error(e) => {
                let f = e.error().to_string();
                self.failed = Some(f.clone());
                Err(f)
            }
            _ => Ok(()),
        })
    }

    /// Stops the pipeline and names the file: renamed when the muxer finished it,
    /// left under `.part` otherwise (readable up to its last whole fragment).
    fn close(self, outcome: Result<(), String>, note: Option<String>) -> FileReport {
        let _ = self.pipeline.set_state(gst::State::Null);
        let bytes = std::fs::metadata(&self.tmp).map(|m| m.len()).unwrap_or(0);
        let mut report = FileReport {
            path: self.path.clone(),
            units: self.frames,
            bytes,
            note,
            writes: WriteCounters::default(),
        };
        match outcome {
            Ok(()) => {
                if let Err(e) = std::fs::rename(&self.tmp, &self.path) {
                    report.note = Some(format!(
                        "renaming {} to {}: {e}",
                        self.tmp.display(),
                        self.path.display()
                    ));
                }
            }
            Err(e) => {
                report.path = self.tmp.clone();
                report.note = Some(format!(
                    "{e}; the file ends early: it plays up to its last whole fragment"
                ));
            }
        }
        report
    }

    /// Ends every track and waits for the file to be finished.
    fn finish(mut self, note: Option<String>) -> FileReport {
        self.end_all();
        let outcome = self
            .done(gst::ClockTime::from_seconds(ENCODER_WAIT.as_secs()))
            .unwrap_or_else(|| Err("the encoder did not finish the file within 60 s".into()));
        self.close(outcome, note)
    }
}

/// A participant's first records, copied, while its other kind may still come.
struct Early {
    k: u32,
    capture_ns: u64,
    hd: MediaHeader,
    payload: Vec<u8>,
}

#[derive(Default)]
struct Pending {
    records: Vec<Early>,
    bytes: usize,
    video: Option<VideoShape>,
    audio: Option<AudioShape>,
}

enum State {
    Idle,
    Pending(Pending),
    Recording(Box<Muxed>),
}

/// The files of one stream id: one MP4 at a time, muxing its video and audio.
pub struct Participant {
    id: u32,
    dir: PathBuf,
    preset: &'static str,
    parts: u32,
    /// Skip file names already taken (a stream id that left the recorder's table
    /// and came back).
    skip_taken: bool,
    state: State,
    /// Files whose tracks have all ended, waiting for the muxer to finish them.
    closing: Vec<Muxed>,
    /// Video frames dropped in files no longer being written.
    dropped_before: u64,
    files: Vec<FileReport>,
}

impl Participant {
    /// The files of stream id `id` in `dir`, encoded at x264 `preset`
    /// (`skip_taken`: file names already there are skipped, not replaced).
    pub fn new(id: u32, dir: &Path, preset: &'static str, skip_taken: bool) -> Participant {
        Participant {
            id,
            dir: dir.to_path_buf(),
            preset,
            parts: 0,
            skip_taken,
            state: State::Idle,
            closing: Vec::new(),
            dropped_before: 0,
            files: Vec::new(),
        }
    }

    /// Adds one record (`k` video or audio, validated `hd` over `payload`).
    pub fn push(
        &mut self,
        k: u32,
        capture_ns: u64,
        hd: &MediaHeader,
        payload: &[u8],
    ) -> io::Result<Taken> {
        self.poll_closing();
        loop {
            match &mut self.state {
                State::Idle if self.parts >= MAX_PARTS => return Ok(Taken::NoParts),
                State::Idle => self.state = State::Pending(Pending::default()),
                State::Pending(p) => {
                    let fits = |p: &Pending| match k {
                        kind::VIDEO => p.video.is_none_or(|s| s == video_shape(hd)),
                        _ => p.audio.is_none_or(|s| s == audio_shape(hd)),
                    };
                    if !fits(p) {
                        // A format change before the file started: start it now.
                        self.start()?;
                        continue;
                    }
                    if k == kind::VIDEO {
                        p.video = Some(video_shape(hd));
                    } else {
                        p.audio = Some(audio_shape(hd));
                    }
                    let n = hd.payload_len().min(payload.len());
                    p.bytes += n;
                    p.records.push(Early {
                        k,
                        capture_ns,
                        hd: *hd,
                        payload: payload[..n].to_vec(),
                    });
                    let first = p.records.iter().map(|r| r.capture_ns).min().unwrap_or(0);
                    if (p.video.is_some() && p.audio.is_some())
                        || capture_ns.saturating_sub(first) >= GRACE_NS
                        || p.bytes >= GRACE_BYTES
                    {
                        self.start()?;
                    }
                    return Ok(Taken::Yes);
                }
                State::Recording(m) => match Self::add(m, k, capture_ns, hd, payload)? {
                    Pushed::Written => return Ok(Taken::Yes),
                    Pushed::Dropped => return Ok(Taken::Dropped),
                    Pushed::NewPart => {
                        self.end_file();
                        continue;
                    }
                },
            }
        }
    }

    fn add(
        m: &mut Muxed,
        k: u32,
        capture_ns: u64,
        hd: &MediaHeader,
        payload: &[u8],
    ) -> io::Result<Pushed> {
        match k {
            kind::VIDEO => match &m.video {
                Some(v) if !v.ended && v.shape == video_shape(hd) => {
                    if !m.push_video(capture_ns, hd, payload)? {
                        return Ok(Pushed::Dropped);
                    }
                }
                _ => return Ok(Pushed::NewPart),
            },
            _ => match &m.audio {
                Some(a) if !a.ended && a.shape == audio_shape(hd) => {
                    m.push_audio(capture_ns, hd, payload)?
                }
                _ => return Ok(Pushed::NewPart),
            },
        }
        Ok(Pushed::Written)
    }

    /// Starts the file with the kinds the early records have, and writes them.
    fn start(&mut self) -> io::Result<()> {
        let State::Pending(p) = std::mem::replace(&mut self.state, State::Idle) else {
            return Ok(());
        };
        if p.records.is_empty() {
            return Ok(());
        }
        self.parts += 1;
        while self.skip_taken && self.parts < MAX_PARTS && taken(&self.part_name(self.parts)) {
            self.parts += 1;
        }
        let path = self.part_name(self.parts);
        let t0 = p.records.iter().map(|r| r.capture_ns).min().unwrap_or(0);
        let mut m = Muxed::new(path, p.video, p.audio, t0, self.preset)?;
        // In capture order, so the muxer sees each track's records in time.
        let mut records = p.records;
        records.sort_by_key(|r| r.capture_ns);
        for r in &records {
            if let Err(e) = Self::add(&mut m, r.k, r.capture_ns, &r.hd, &r.payload) {
                self.state = State::Recording(Box::new(m));
                return Err(e);
            }
        }
        self.state = State::Recording(Box::new(m));
        Ok(())
    }

    /// The producer ended its stream of kind `k`.
    pub fn end(&mut self, k: u32) -> io::Result<()> {
        self.poll_closing();
        if let State::Pending(p) = &mut self.state {
            let has = |s: &Pending| match k {
                kind::VIDEO => s.video.is_some(),
                _ => s.audio.is_some(),
            };
            if !has(p) {
                return Ok(());
            }
            // Whatever came is all there is of this kind: start the file.
            self.start()?;
        }
        if let State::Recording(m) = &mut self.state {
            if m.end(k) {
                self.end_file();
            }
        }
        Ok(())
    }

    /// Ends the current file's tracks; it is finished in the background.
    fn end_file(&mut self) {
        if let State::Recording(mut m) = std::mem::replace(&mut self.state, State::Idle) {
            m.end_all();
            self.dropped_before += std::mem::take(&mut m.dropped);
            self.closing.push(*m);
        }
    }

    /// Names the files whose muxer has finished.
    pub fn poll_closing(&mut self) {
        let mut i = 0;
        while i < self.closing.len() {
            match self.closing[i].done(gst::ClockTime::ZERO) {
                Some(outcome) => {
                    let m = self.closing.swap_remove(i);
                    self.files.push(m.close(outcome, None));
                }
                None => i += 1,
            }
        }
    }

    /// Finishes every file (`note`: why the recording stops early, if it does).
    pub fn finish(mut self, note: Option<String>) -> Vec<FileReport> {
        if matches!(self.state, State::Pending(_)) {
            if let Err(e) = self.start() {
                eprintln!("shmring record: stream {}: {e}", self.id);
            }
        }
        if let State::Recording(m) = std::mem::replace(&mut self.state, State::Idle) {
            self.files.push(m.finish(note.clone()));
        }
        for m in std::mem::take(&mut self.closing) {
            self.files.push(m.finish(None));
        }
        self.files
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Video frames dropped so far because the encoder fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped_before
            + match &self.state {
                State::Recording(m) => m.dropped,
                _ => 0,
            }
    }

    /// No file open or being finished.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle) && self.closing.is_empty()
    }

    /// The name of the participant's file number `part` (1: no suffix).
    fn part_name(&self, part: u32) -> PathBuf {
        let suffix = if part == 1 {
            String::new()
        } else {
            format!("-{part}")
        };
        self.dir.join(format!("stream-{}{suffix}.mp4", self.id))
    }

    /// The file being written, for error messages.
    pub fn path(&self) -> PathBuf {
        match &self.state {
            State::Recording(m) => m.tmp.clone(),
            _ => self.dir.join(format!("stream-{}.mp4", self.id)),
        }
    }
}

/// How much lower than the recorder's own the encoding threads' priority is
/// (nice levels: each takes about a fifth off a thread's share of a busy CPU).
const ENCODER_NICE: i32 = 5;

/// Lowers the calling thread's priority by [`ENCODER_NICE`] (on Linux a nice
/// value is a thread's own; threads it starts inherit it).
fn lower_this_thread() {
    use rustix::process::{getpriority_process, setpriority_process};
    if let Ok(now) = getpriority_process(None) {
        let _ = setpriority_process(None, (now + ENCODER_NICE).min(19));
    }
}

/// Loads GStreamer and every element `--encode` uses, so that a missing plugin is
/// said before recording starts and no participant's first file waits for the
/// plugins to load (the first load takes most of a second).
pub fn prepare() -> io::Result<()> {
    gst::init().map_err(err)?;
    for name in [
        "appsrc",
        "x264enc",
        "h264parse",
        "mp4mux",
        "filesink",
        "audiorate",
        "audioconvert",
        "audioresample",
    ] {
        let f = gst::ElementFactory::find(name).ok_or_else(|| missing(name))?;
        f.load().map_err(|_| missing(name))?;
    }
    let audio = AUDIO_ENCODERS
        .iter()
        .find_map(|(n, _)| gst::ElementFactory::find(n)?.load().ok());
    audio.ok_or_else(no_audio_encoder)?;
    Ok(())
}

fn missing(name: &str) -> io::Error {
    err(format!(
        "element {name} is missing (install the GStreamer plugin sets: base, good, bad, ugly, libav)"
    ))
}

fn no_audio_encoder() -> io::Error {
    let names: Vec<&str> = AUDIO_ENCODERS.iter().map(|(n, _)| *n).collect();
    err(format!(
        "no AAC or Opus encoder ({}): install gstreamer1.0-libav",
        names.join(", ")
    ))
}

/// An appsrc of `caps` fed with buffers timed by capture time (not live), which
/// never blocks the recorder: a full queue is the caller's to handle.
fn timed_source(caps: &gst::Caps) -> gst_app::app_src::AppSrcBuilder<'_> {
    gst_app::AppSrc::builder()
        .caps(caps)
        .format(gst::Format::Time)
        .is_live(false)
        .block(false)
}
