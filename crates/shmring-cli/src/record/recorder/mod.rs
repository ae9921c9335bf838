//! The recorder's core: one record from the ring in, written to its stream's file.
//!
//! [`Recorder::process`] takes a payload in place (zero-copy, straight from the
//! ring), validates its media header, and writes the planes through the stream's
//! 64 KiB buffer. In the steady state it allocates nothing: streams, files and
//! buffers are set up on a stream's first record (or when its format changes).
//! Every record's media header is read and checked by the core ([`media::read`]:
//! one local copy of the shared bytes, every plane checked against the payload).
//!
//! A stream whose format or size changes mid-stream continues in a new file:
//! `video-<stream>-2.y4m`, `video-<stream>-3.y4m`, ... (the same for audio); so
//! does a stream that ended (an end-of-stream record) and starts again.
//!
//! **Who may write a stream.** A stream (a stream id's video, or its audio)
//! belongs to the producer slot whose record started it, until that slot ends it
//! (an end-of-stream record) or its producer is gone (its slot's lock; another
//! slot's next record then takes the stream over). Records and ends of stream
//! from any other slot are refused and counted (`foreign`), so one producer can
//! neither end nor fill another's stream. Each slot has room for
//! [`STREAMS_PER_SLOT`] streams at once: a producer that starts more has its new
//! streams refused (`refused_streams`), and the others keep theirs.
//!
//! With `--encode` (built with the `gst` feature) each stream id's video and audio
//! go into one MP4 instead, timed by their capture timestamps
//! ([`crate::record::gst_encode`]).

//!
//! The folder: this file is the [`Recorder`]; `stream.rs` one stream's state
//! and file; `report.rs` what a run reports ([`Summary`], [`StreamReport`]);
//! `tests.rs` its tests.

mod report;
mod stream;
#[cfg(test)]
mod tests;

pub use report::*;
use stream::*;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shmring::layout::MAX_PRODUCERS;
use shmring::media::{self, kind, Format, MediaRecord, MAX_FRAME_RATE, MEDIA_HEADER_SIZE};
use shmring::Meta;

#[cfg(feature = "gst")]
use crate::record::gst_encode::Taken;
use crate::record::output::{FileReport, OutFile, WriteCounters};

/// Streams one producer slot may hold at once (a stream id's video and its audio
/// are two): a producer cannot take the room of another.
pub const STREAMS_PER_SLOT: u32 = 32;
/// Streams the recorder keeps at most. A stream that ended (and whose files are
/// finished) leaves the table when room is needed; its files stay in the summary.
pub const MAX_STREAMS: usize = 1024;
/// Streams that left the table listed one by one in the summary (the rest are
/// counted).
const MAX_RETIRED: usize = 4096;
/// Files per stream (format changes, ends and restarts) beyond which its records
/// that would start yet another file are skipped: a stream flipping formats
/// cannot make the recorder open a file per record. With `--encode`, files per
/// stream id.
pub const MAX_PARTS: u32 = 100;
/// Malformed headers reported one by one (the rest are only counted).
const REPORT_MALFORMED: u64 = 5;
/// How long a stream's owner, once seen alive, is taken to be alive when another
/// slot writes to the stream (one `fcntl` per this at most, however many records
/// come).
const OWNER_RECHECK: Duration = Duration::from_millis(50);

/// Where and how to record.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    pub dir: PathBuf,
    /// Frame rate written in Y4M headers when the media header gives none (a
    /// variable rate).
    pub fps: (u32, u32),
    /// Video to H.264 MP4 (with the `gst` feature: video and audio of each stream id
    /// muxed in one MP4, in process; without: video through an ffmpeg child).
    pub encode: bool,
    /// x264's speed preset for `encode`.
    pub preset: crate::cli::Preset,
    /// Print malformed-header messages on stderr.
    pub verbose: bool,
}

/// What happened to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// An end-of-stream record: the stream's file was finished.
    Ended,
    /// Media header rejected; counted and skipped.
    Malformed,
    /// Not media, a format the container cannot hold, or too many parts.
    Skipped,
    /// Not the stream owner's, or no room for one more stream of its slot; counted.
    Refused,
}

/// A write failed: the recording cannot go on.
#[derive(Debug)]
pub struct WriteError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for WriteError {}

/// Records media records into files, one per stream (and format).
pub struct Recorder {
    opts: RecorderOptions,
    streams: Vec<Stream>,
    /// (kind, stream id) → index in `streams`.
    index: HashMap<(u32, u32), usize>,
    /// Streams each producer slot owns now.
    owned: Vec<u32>,
    /// Slots told that they have no room left.
    said_room: Vec<bool>,
    /// Is a producer slot's holder alive? (Every slot is, until told otherwise.)
    alive: Box<dyn FnMut(u32) -> bool>,
    /// Streams that left the table (ended, files finished), for the summary.
    retired: Vec<StreamReport>,
    retired_unlisted: u64,
    /// Files already in the directory are kept: a new file takes the next free
    /// name (streams have left the table, or files a killed recorder left were
    /// finished).
    keep_existing: bool,
    malformed: u64,
    first_malformed: Option<String>,
    other_kinds: u64,
    refused_streams: u64,
    refused_foreign: u64,
    unattributed: u64,
    said: Said,
    video_frames: u64,
    audio_packets: u64,
    scratch: Box<[u8]>,
    writes_closed: WriteCounters,
    /// `--encode` in process: one muxed file per stream id.
    #[cfg(feature = "gst")]
    participants: Vec<crate::record::gst_encode::Participant>,
}

/// What was said once already.
#[derive(Default)]
struct Said {
    foreign: bool,
    table_full: bool,
    frame_rate: bool,
}

/// Checks that `dir` exists (creating it) and that files can be created in it.
pub fn check_output_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create output directory {}: {e}", dir.display()))?;
    let probe = dir.join(format!(".shmring-probe-{}", std::process::id()));
    std::fs::File::create(&probe)
        .map_err(|e| format!("cannot write to output directory {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Can `--encode` take a nominal frame rate of `num / den`? 0 (variable) and
/// 1/[`MAX_FRAME_RATE`] to [`MAX_FRAME_RATE`] frames per second (the core refuses
/// faster ones in every header); slower ones overflow the encoder's arithmetic.
pub fn encodable_rate(num: u32, den: u32) -> bool {
    num == 0 || (den > 0 && num as u64 * MAX_FRAME_RATE as u64 >= den as u64)
}

impl Recorder {
    /// A recorder writing into `opts.dir` (checked writable).
    pub fn new(opts: RecorderOptions) -> Result<Recorder, String> {
        check_output_dir(&opts.dir)?;
        #[cfg(feature = "gst")]
        if opts.encode {
            crate::record::gst_encode::prepare().map_err(|e| format!("--encode: {e}"))?;
        }
        Ok(Recorder {
            opts,
            streams: Vec::with_capacity(8),
            index: HashMap::with_capacity(8),
            owned: vec![0; MAX_PRODUCERS as usize],
            said_room: vec![false; MAX_PRODUCERS as usize],
            alive: Box::new(|_| true),
            retired: Vec::new(),
            retired_unlisted: 0,
            keep_existing: false,
            malformed: 0,
            first_malformed: None,
            other_kinds: 0,
            refused_streams: 0,
            refused_foreign: 0,
            unattributed: 0,
            said: Said::default(),
            video_frames: 0,
            audio_packets: 0,
            scratch: vec![0u8; 4096].into_boxed_slice(),
            writes_closed: WriteCounters::default(),
            #[cfg(feature = "gst")]
            participants: Vec::new(),
        })
    }

    /// How to tell whether a producer slot's holder is alive (the ring's
    /// [`shmring::Segment::producer_alive`]): a stream whose owner is gone passes
    /// to the next slot that writes it, and a gone owner's room is given back.
    pub fn set_liveness(&mut self, alive: impl FnMut(u32) -> bool + 'static) {
        self.alive = Box::new(alive);
    }

    /// Files already in the output directory are kept: each new file takes the
    /// next name that is free (`video-0-2.y4m`, ...).
    pub fn keep_existing_files(&mut self) {
        self.keep_existing = true;
    }

    /// Housekeeping between records: names the encoded files whose muxer finished
    /// (a stream that ended while no record came since), and frees the streams of
    /// producers that are gone.
    pub fn poll(&mut self) {
        #[cfg(feature = "gst")]
        for p in &mut self.participants {
            p.poll_closing();
        }
        for slot in 0..self.owned.len() {
            if self.owned[slot] > 0 && !(self.alive)(slot as u32) {
                for si in 0..self.streams.len() {
                    if self.streams[si].owner == Some(slot as u32) {
                        self.disown(si);
                    }
                }
            }
        }
    }

    pub fn video_frames(&self) -> u64 {
        self.video_frames
    }
    pub fn audio_packets(&self) -> u64 {
        self.audio_packets
    }
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    fn note_malformed(&mut self, si: usize, meta: &Meta, why: &dyn std::fmt::Display) {
        self.malformed += 1;
        self.streams[si].malformed += 1;
        if self.malformed <= REPORT_MALFORMED {
            let msg = format!(
                "stream {} ({}): {why}; record skipped",
                meta.stream,
                kind_name(meta.kind)
            );
            if self.opts.verbose {
                eprintln!("shmring record: {msg}");
            }
            self.first_malformed.get_or_insert(msg);
        }
    }

    /// Processes one record that producer slot `slot` committed (`None`: its claim
    /// names no slot any more): validates the media header and writes the planes
    /// to the stream's file. Only an output error is returned; bad and refused
    /// records are counted.
    pub fn process(
        &mut self,
        meta: Meta,
        slot: Option<u32>,
        payload: &[u8],
    ) -> Result<Outcome, WriteError> {
        if meta.kind != kind::VIDEO && meta.kind != kind::AUDIO {
            self.other_kinds += 1;
            return Ok(Outcome::Skipped);
        }
        let Some(slot) = slot.filter(|&s| (s as usize) < self.owned.len()) else {
            self.unattributed += 1;
            return Ok(Outcome::Refused);
        };
        let record = (payload.len() >= MEDIA_HEADER_SIZE).then(|| media::read(meta.kind, payload));
        let si = match self.index.get(&(meta.kind, meta.stream)) {
            Some(&i) => i,
            // An end of a stream that never started ends nothing.
            None if matches!(record, Some(Ok(MediaRecord::End(_)))) => return Ok(Outcome::Skipped),
            None => match self.new_stream(meta, slot) {
                Some(i) => i,
                None => return Ok(Outcome::Refused),
            },
        };
        if !self.admit(si, slot) {
            return Ok(Outcome::Refused);
        }
        let hd = match record {
            None => {
                let len = payload.len();
                self.note_malformed(
                    si,
                    &meta,
                    &format_args!("payload of {len} bytes cannot hold a media header"),
                );
                return Ok(Outcome::Malformed);
            }
            Some(Ok(MediaRecord::Frame(hd))) => hd,
            Some(Ok(MediaRecord::End(end))) => return self.end_stream(si, end.sequence),
            Some(Err(e)) => {
                self.note_malformed(si, &meta, &e);
                return Ok(Outcome::Malformed);
            }
        };
        let shape = match hd.format {
            Format::I420 | Format::Nv12 => Shape::Video {
                format: hd.format,
                w: hd.width,
                h: hd.height,
                fps: (hd.fps_num, hd.fps_den),
            },
            Format::PcmS16 | Format::PcmF32 => Shape::Audio {
                format: hd.format,
                rate: hd.sample_rate,
                channels: hd.channels,
            },
            Format::Rgba => {
                let s = &mut self.streams[si];
                s.unsupported += 1;
                if s.unsupported == 1 && self.opts.verbose {
                    eprintln!(
                        "shmring record: stream {}: {} video cannot be recorded (Y4M and the encoder take {} and {}); its frames are skipped",
                        meta.stream,
                        Format::Rgba,
                        Format::I420,
                        Format::Nv12
                    );
                }
                return Ok(Outcome::Skipped);
            }
        };
        if self.opts.encode && !encodable_rate(hd.fps_num, hd.fps_den) {
            self.streams[si].unsupported += 1;
            if !std::mem::replace(&mut self.said.frame_rate, true) && self.opts.verbose {
                eprintln!(
                    "shmring record: video stream {}: a nominal frame rate of {}/{} cannot be \
                     encoded (1/{MAX_FRAME_RATE} to {MAX_FRAME_RATE} frames per second, or 0 \
                     for a variable rate); such frames are skipped and counted as unsupported",
                    meta.stream, hd.fps_num, hd.fps_den
                );
            }
            return Ok(Outcome::Skipped);
        }
        #[cfg(feature = "gst")]
        if self.opts.encode {
            return self.encode(si, meta, &hd, payload);
        }
        let wav_full = matches!(shape, Shape::Audio { .. })
            && self.streams[si]
                .out
                .as_ref()
                .is_some_and(|o| o.wav_would_overflow(hd.samples as u64));
        if self.streams[si].shape != Some(shape) || wav_full {
            let s = &mut self.streams[si];
            if s.parts >= MAX_PARTS {
                s.unsupported += 1;
                if s.unsupported == 1 && self.opts.verbose {
                    eprintln!(
                        "shmring record: {} stream {} (producer slot {slot}) needed more than \
                         {MAX_PARTS} files (format changes, ends and restarts); its records that \
                         would start another are skipped",
                        kind_name(meta.kind),
                        meta.stream
                    );
                }
                return Ok(Outcome::Skipped);
            }
            self.open(si, shape)?;
        }
        let s = &mut self.streams[si];
        s.count_sequence(hd.sequence);
        let out = s.out.as_mut().expect("stream output open");
        let r = match shape {
            Shape::Video { .. } => out.write_video(&hd, payload, &mut self.scratch),
            Shape::Audio { .. } => out.write_audio(&hd, payload),
        };
        if let Err(source) = r {
            return Err(WriteError {
                path: out.path().to_path_buf(),
                source,
            });
        }
        s.received += 1;
        match shape {
            Shape::Video { .. } => self.video_frames += 1,
            Shape::Audio { .. } => self.audio_packets += 1,
        }
        Ok(Outcome::Written)
    }

    /// A stream's first record, from `slot`: a new entry owned by `slot`, if the
    /// slot has room and the table has (or can make) room.
    fn new_stream(&mut self, meta: Meta, slot: u32) -> Option<usize> {
        if !self.has_room(slot, meta) {
            return None;
        }
        if self.streams.len() >= MAX_STREAMS && !self.evict_one() {
            self.refused_streams += 1;
            if !std::mem::replace(&mut self.said.table_full, true) && self.opts.verbose {
                eprintln!(
                    "shmring record: {MAX_STREAMS} streams are live at once; new streams refused \
                     (counted) until one ends"
                );
            }
            return None;
        }
        self.streams.push(Stream::new(meta.kind, meta.stream));
        let si = self.streams.len() - 1;
        self.index.insert((meta.kind, meta.stream), si);
        self.own(si, slot);
        Some(si)
    }

    /// Does `slot` have room for one more stream? Says once per slot when not.
    fn has_room(&mut self, slot: u32, meta: Meta) -> bool {
        if self.owned[slot as usize] < STREAMS_PER_SLOT {
            return true;
        }
        self.refused_streams += 1;
        if !std::mem::replace(&mut self.said_room[slot as usize], true) && self.opts.verbose {
            eprintln!(
                "shmring record: producer slot {slot} holds {STREAMS_PER_SLOT} streams, the room \
                 of one producer; its new streams refused (first: {} stream {}), counted",
                kind_name(meta.kind),
                meta.stream
            );
        }
        false
    }

    /// May `slot` write stream `si`? Its owner may; a stream without owner goes to
    /// `slot` (room permitting); so does one whose owner is gone. Anyone else's
    /// records are refused and counted.
    fn admit(&mut self, si: usize, slot: u32) -> bool {
        let owner = self.streams[si].owner;
        if owner == Some(slot) {
            return true;
        }
        if let Some(o) = owner {
            if self.owner_alive(si, o) {
                let s = &mut self.streams[si];
                s.foreign += 1;
                self.refused_foreign += 1;
                if !std::mem::replace(&mut self.said.foreign, true) && self.opts.verbose {
                    eprintln!(
                        "shmring record: refused a record for {} stream {} from producer slot \
                         {slot}: the stream belongs to producer slot {o}, which started it and is \
                         alive; every such record is refused and counted (foreign)",
                        kind_name(s.kind),
                        s.id
                    );
                }
                return false;
            }
            self.disown(si);
        }
        let s = &self.streams[si];
        let meta = Meta::new(s.id, s.kind);
        if !self.has_room(slot, meta) {
            return false;
        }
        self.own(si, slot);
        true
    }

    /// Is `o`, the owner of stream `si`, alive? Asked at most every
    /// [`OWNER_RECHECK`] per stream while it is.
    fn owner_alive(&mut self, si: usize, o: u32) -> bool {
        let now = Instant::now();
        if let Some(seen) = self.streams[si].owner_seen {
            if now.duration_since(seen) < OWNER_RECHECK {
                return true;
            }
        }
        let alive = (self.alive)(o);
        self.streams[si].owner_seen = alive.then_some(now);
        alive
    }

    fn own(&mut self, si: usize, slot: u32) {
        let s = &mut self.streams[si];
        s.owner = Some(slot);
        s.owner_seen = None;
        self.owned[slot as usize] += 1;
    }

    /// Stream `si` belongs to nobody: the next record's slot takes it.
    fn disown(&mut self, si: usize) {
        if let Some(o) = self.streams[si].owner.take() {
            self.owned[o as usize] -= 1;
        }
    }

    /// Makes room in a full table: a stream that belongs to nobody and whose
    /// files are finished leaves it (its report is kept). False if none can.
    fn evict_one(&mut self) -> bool {
        let Some(si) = (0..self.streams.len()).find(|&i| self.retirable(i)) else {
            return false;
        };
        let mut s = self.streams.swap_remove(si);
        self.index.remove(&(s.kind, s.id));
        if let Some(moved) = self.streams.get(si) {
            self.index.insert((moved.kind, moved.id), si);
        }
        #[cfg(feature = "gst")]
        if !self.streams.iter().any(|o| o.id == s.id) {
            if let Some(pi) = self.participants.iter().position(|p| p.id() == s.id) {
                s.files
                    .extend(self.participants.swap_remove(pi).finish(None));
            }
        }
        self.keep_existing = true;
        if self.retired.len() < MAX_RETIRED {
            let r = s.report();
            self.retired.push(r);
        } else {
            self.retired_unlisted += 1;
        }
        true
    }

    /// Can stream `si` leave the table? Ended (no owner), no file open, and (with
    /// `--encode`) its stream id's files all finished.
    fn retirable(&self, si: usize) -> bool {
        let s = &self.streams[si];
        if s.owner.is_some() || s.out.is_some() {
            return false;
        }
        #[cfg(feature = "gst")]
        if self
            .participants
            .iter()
            .any(|p| p.id() == s.id && !p.is_idle())
        {
            return false;
        }
        true
    }

    /// An end-of-stream record: the stream's file is finished (the next record of
    /// the stream, if one comes, starts the next part) and the stream belongs to
    /// nobody until then.
    fn end_stream(&mut self, si: usize, sequence: u64) -> Result<Outcome, WriteError> {
        self.disown(si);
        let s = &mut self.streams[si];
        s.count_sequence(sequence);
        // The stream may start again from 0: that is not a restart.
        s.last_seq = None;
        s.ends += 1;
        #[cfg(feature = "gst")]
        if self.opts.encode {
            let (id, k) = (s.id, s.kind);
            if let Some(p) = self.participants.iter_mut().find(|p| p.id() == id) {
                p.end(k).map_err(|source| WriteError {
                    path: p.path(),
                    source,
                })?;
            }
            return Ok(Outcome::Ended);
        }
        if let Some(out) = s.out.take() {
            let rep = out.finish(None);
            self.writes_closed.add(&rep.writes);
            s.files.push(rep);
        }
        s.shape = None;
        Ok(Outcome::Ended)
    }

    /// `--encode` in process: the record goes into its stream id's MP4.
    #[cfg(feature = "gst")]
    fn encode(
        &mut self,
        si: usize,
        meta: Meta,
        hd: &media::MediaHeader,
        payload: &[u8],
    ) -> Result<Outcome, WriteError> {
        let id = meta.stream;
        let pi = match self.participants.iter().position(|p| p.id() == id) {
            Some(i) => i,
            None => {
                self.participants
                    .push(crate::record::gst_encode::Participant::new(
                        id,
                        &self.opts.dir,
                        self.opts.preset.name(),
                        self.keep_existing,
                    ));
                self.participants.len() - 1
            }
        };
        let p = &mut self.participants[pi];
        let dropped = p.dropped();
        let taken = p
            .push(meta.kind, meta.timestamp_ns, hd, payload)
            .map_err(|source| WriteError {
                path: p.path(),
                source,
            })?;
        // Frames dropped by this record's push: this frame, or the participant's
        // first frames, given to the encoder when its file started.
        let dropped = p.dropped() - dropped;
        if dropped > 0 {
            self.note_dropped(id, dropped, taken != Taken::Dropped);
        }
        let s = &mut self.streams[si];
        match taken {
            Taken::Yes => {}
            Taken::Dropped => {
                // It came: not a record lost upstream.
                s.count_sequence(hd.sequence);
                return Ok(Outcome::Skipped);
            }
            Taken::NoParts => {
                s.unsupported += 1;
                if s.unsupported == 1 && self.opts.verbose {
                    eprintln!(
                        "shmring record: stream {id} needed more than {MAX_PARTS} files (format \
                         changes, ends and restarts); its records that would start another are \
                         skipped"
                    );
                }
                return Ok(Outcome::Skipped);
            }
        }
        s.count_sequence(hd.sequence);
        s.received += 1;
        if meta.kind == kind::VIDEO {
            self.video_frames += 1;
        } else {
            self.audio_packets += 1;
        }
        Ok(Outcome::Written)
    }

    /// `n` video frames of stream id `id` dropped: its encoder fell behind
    /// (`earlier`: frames counted as received when they were kept for the file's
    /// start). Said the first time for each stream.
    #[cfg(feature = "gst")]
    fn note_dropped(&mut self, id: u32, n: u64, earlier: bool) {
        let Some(&si) = self.index.get(&(kind::VIDEO, id)) else {
            return;
        };
        let s = &mut self.streams[si];
        if earlier {
            s.received -= n.min(s.received);
            self.video_frames -= n.min(self.video_frames);
        }
        if s.dropped == 0 && self.opts.verbose {
            eprintln!(
                "shmring record: video stream {id}: its encoder fell behind; frames it has no \
                 room for are dropped (counted), so that the ring is never held"
            );
        }
        s.dropped += n;
    }

    /// Finishes the stream's current file (if any) and opens the next one.
    fn open(&mut self, si: usize, shape: Shape) -> Result<(), WriteError> {
        let s = &mut self.streams[si];
        if let Some(out) = s.out.take() {
            let rep = out.finish(None);
            self.writes_closed.add(&rep.writes);
            s.files.push(rep);
        }
        let name = |parts: u32| {
            let suffix = if parts == 1 {
                String::new()
            } else {
                format!("-{parts}")
            };
            let (what, ext) = match shape {
                Shape::Video { .. } if self.opts.encode => ("video", "mp4"),
                Shape::Video { .. } => ("video", "y4m"),
                Shape::Audio { .. } => ("audio", "wav"),
            };
            self.opts.dir.join(format!("{what}-{}{suffix}.{ext}", s.id))
        };
        s.parts += 1;
        // A stream that left the table and came back starts its numbering again:
        // the names its files took are skipped (as are files found finished).
        while self.keep_existing && s.parts < MAX_PARTS && taken(&name(s.parts)) {
            s.parts += 1;
        }
        let path = name(s.parts);
        let r = match shape {
            Shape::Video { w, h, fps, .. } => {
                // The header's nominal rate; --fps for a variable one.
                let fps = if fps.0 == 0 { self.opts.fps } else { fps };
                let encode = self.opts.encode.then(|| self.opts.preset.name());
                OutFile::video(path.clone(), w, h, fps, encode)
            }
            Shape::Audio {
                format,
                rate,
                channels,
            } => OutFile::audio(path.clone(), format, rate, channels),
        };
        match r {
            Ok(out) => {
                s.out = Some(out);
                s.shape = Some(shape);
                Ok(())
            }
            Err(source) => {
                s.shape = None;
                Err(WriteError { path, source })
            }
        }
    }

    /// Finishes every file (`error`: a write error that stops the recording, noted
    /// in the files it concerns) and reports.
    pub fn finish(mut self, error: Option<&WriteError>) -> Summary {
        #[cfg(feature = "gst")]
        for p in std::mem::take(&mut self.participants) {
            let id = p.id();
            let note = error
                .filter(|e| e.path == p.path())
                .map(|e| e.source.to_string());
            let files = p.finish(note);
            // Listed with the stream id's video (or its audio, if it had none).
            let at = self
                .streams
                .iter()
                .position(|s| s.id == id && s.kind == kind::VIDEO)
                .or_else(|| self.streams.iter().position(|s| s.id == id));
            if let Some(i) = at {
                self.streams[i].files.extend(files);
            }
        }
        let mut writes = self.writes_closed;
        let mut streams = std::mem::take(&mut self.retired);
        streams.reserve(self.streams.len());
        for s in self.streams.iter_mut() {
            if let Some(out) = s.out.take() {
                let note = error
                    .filter(|e| e.path == out.path())
                    .map(|e| e.source.to_string());
                let rep = out.finish(note);
                writes.add(&rep.writes);
                s.files.push(rep);
            }
            streams.push(s.report());
        }
        Summary {
            streams,
            streams_unlisted: self.retired_unlisted,
            malformed: self.malformed,
            first_malformed: self.first_malformed.take(),
            other_kinds: self.other_kinds,
            refused_streams: self.refused_streams,
            refused_foreign: self.refused_foreign,
            unattributed: self.unattributed,
            writes,
            error: error.map(|e| e.to_string()),
        }
    }
}

/// Is `path` (or its `.part`) there already?
pub(crate) fn taken(path: &Path) -> bool {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    path.exists() || Path::new(&part).exists()
}

pub fn kind_name(k: u32) -> &'static str {
    match k {
        kind::VIDEO => "video",
        kind::AUDIO => "audio",
        _ => "other",
    }
}
