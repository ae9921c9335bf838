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
//!
//! The folder: this file is a participant (its pipeline started once its first
//! records say what it sends, fed and finished) and the encoders' set-up;
//! `muxed.rs` one MP4 being written: its tracks, their shapes, its parts.

mod muxed;

use muxed::*;

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
