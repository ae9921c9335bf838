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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Video {
        format: Format,
        w: u32,
        h: u32,
        fps: (u32, u32),
    },
    Audio {
        format: Format,
        rate: u32,
        channels: u32,
    },
}

struct Stream {
    kind: u32,
    id: u32,
    /// The producer slot the stream belongs to (`None`: ended, anyone may start it).
    owner: Option<u32>,
    /// When the owner was last seen alive by a record from another slot.
    owner_seen: Option<Instant>,
    shape: Option<Shape>,
    out: Option<OutFile>,
    parts: u32,
    received: u64,
    gaps: u64,
    restarts: u64,
    ends: u64,
    last_seq: Option<u64>,
    malformed: u64,
    unsupported: u64,
    foreign: u64,
    dropped: u64,
    files: Vec<FileReport>,
}

impl Stream {
    fn new(kind: u32, id: u32) -> Stream {
        Stream {
            kind,
            id,
            owner: None,
            owner_seen: None,
            shape: None,
            out: None,
            parts: 0,
            received: 0,
            gaps: 0,
            restarts: 0,
            ends: 0,
            last_seq: None,
            malformed: 0,
            unsupported: 0,
            foreign: 0,
            dropped: 0,
            files: Vec::new(),
        }
    }

    /// Counts a gap (records lost) or a step back (a producer that started again).
    fn count_sequence(&mut self, seq: u64) {
        if let Some(last) = self.last_seq {
            if seq > last {
                self.gaps += seq - last - 1;
            } else {
                self.restarts += 1;
            }
        }
        self.last_seq = Some(seq);
    }

    fn report(&mut self) -> StreamReport {
        StreamReport {
            kind: kind_name(self.kind),
            stream: self.id,
            received: self.received,
            gaps: self.gaps,
            restarts: self.restarts,
            ends: self.ends,
            malformed: self.malformed,
            unsupported: self.unsupported,
            foreign: self.foreign,
            dropped: self.dropped,
            files: std::mem::take(&mut self.files),
        }
    }
}

/// Per-stream results.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub kind: &'static str,
    pub stream: u32,
    /// Records written to files.
    pub received: u64,
    /// Sequence numbers missing between consecutive records (records lost upstream).
    pub gaps: u64,
    /// Times the sequence went backwards (a producer restarted).
    pub restarts: u64,
    /// End-of-stream records (the producer ended the stream).
    pub ends: u64,
    pub malformed: u64,
    pub unsupported: u64,
    /// Records and ends of stream refused: they came from a slot other than the
    /// stream's owner while the owner was alive.
    pub foreign: u64,
    /// Video frames dropped because the encoder fell behind (`--encode`).
    pub dropped: u64,
    pub files: Vec<FileReport>,
}

/// Everything the recorder did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub streams: Vec<StreamReport>,
    /// Streams that left the table and did not fit in `streams` either.
    pub streams_unlisted: u64,
    pub malformed: u64,
    pub first_malformed: Option<String>,
    pub other_kinds: u64,
    /// Records of a new stream refused: its slot had no room left, or the table
    /// was full of live streams.
    pub refused_streams: u64,
    /// Records refused because another slot owns their stream (the sum of the
    /// streams' `foreign`).
    pub refused_foreign: u64,
    /// Records whose claim names no producer slot any more (a peer rewrote the
    /// claim log): refused.
    pub unattributed: u64,
    pub writes: WriteCounters,
    pub error: Option<String>,
}

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

impl Summary {
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let streams: Vec<_> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "kind": s.kind, "stream": s.stream, "received": s.received,
                    "gaps": s.gaps, "restarts": s.restarts, "ends": s.ends,
                    "malformed": s.malformed,
                    "unsupported": s.unsupported,
                    "foreign": s.foreign,
                    "dropped": s.dropped,
                    "files": s.files.iter().map(|f| json!({
                        "path": f.path.display().to_string(), "units": f.units,
                        "bytes": f.bytes, "note": f.note, "write_calls": f.writes.calls,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "streams": streams,
            "streams_unlisted": self.streams_unlisted,
            "malformed": self.malformed,
            "first_malformed": self.first_malformed,
            "other_kinds": self.other_kinds,
            "refused_streams": self.refused_streams,
            "refused_foreign": self.refused_foreign,
            "unattributed": self.unattributed,
            "streams_per_slot": STREAMS_PER_SLOT,
            "parts_per_stream": MAX_PARTS,
            "write_calls": self.writes.calls,
            "bytes_written": self.writes.bytes,
            "bytes_per_write_avg": self.writes.average(),
            "bytes_per_write_max": self.writes.max,
            "error": self.error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::media::MediaHeader;

    fn rec(dir: &Path) -> Recorder {
        Recorder::new(RecorderOptions {
            dir: dir.to_path_buf(),
            fps: (25, 1),
            encode: false,
            preset: Default::default(),
            verbose: false,
        })
        .unwrap()
    }

    fn frame(format: Format, w: u32, h: u32, seq: u64, fill: u8) -> Vec<u8> {
        let hd = MediaHeader::video(format, w, h, 0, seq).unwrap();
        let mut b = vec![fill; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        b
    }

    #[test]
    fn malformed_headers_are_counted_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        let m = Meta::new(3, kind::VIDEO);
        assert_eq!(
            r.process(m, Some(0), &frame(Format::I420, 64, 32, 0, 9))
                .unwrap(),
            Outcome::Written
        );
        let mut bad = frame(Format::I420, 64, 32, 1, 9);
        bad[0] = b'X';
        assert_eq!(r.process(m, Some(0), &bad).unwrap(), Outcome::Malformed);
        assert_eq!(
            r.process(m, Some(0), &[0u8; 100]).unwrap(),
            Outcome::Malformed
        );
        // A plane pointing outside the payload, with bytes otherwise identical to
        // the previous header's.
        let mut bad = frame(Format::I420, 64, 32, 2, 9);
        bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(r.process(m, Some(0), &bad).unwrap(), Outcome::Malformed);
        let good = frame(Format::I420, 64, 32, 3, 9);
        assert_eq!(
            r.process(m, Some(0), &good[..good.len() - 1]).unwrap(),
            Outcome::Malformed
        );
        // An audio format on a video record.
        let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 10, 0, 0).unwrap();
        let mut a = vec![0u8; hd.payload_len()];
        hd.write_to(&mut a).unwrap();
        assert_eq!(r.process(m, Some(0), &a).unwrap(), Outcome::Malformed);
        assert_eq!(r.process(m, Some(0), &good).unwrap(), Outcome::Written);
        assert_eq!(
            r.process(Meta::new(0, kind::RAW), Some(0), &good).unwrap(),
            Outcome::Skipped
        );
        let s = r.finish(None);
        assert_eq!(s.malformed, 5);
        assert!(s.first_malformed.unwrap().contains("magic"));
        assert_eq!(s.streams[0].received, 2);
        assert_eq!(s.streams[0].gaps, 2); // sequences 1 and 2 never arrived intact
        let y4m = std::fs::read(dir.path().join("video-3.y4m")).unwrap();
        assert_eq!(
            y4m.len(),
            "YUV4MPEG2 W64 H32 F25:1 Ip A1:1 C420jpeg\n".len() + 2 * (6 + 64 * 32 * 3 / 2)
        );
    }

    #[test]
    fn a_format_change_starts_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        let m = Meta::new(0, kind::VIDEO);
        r.process(m, Some(0), &frame(Format::I420, 64, 32, 0, 1))
            .unwrap();
        r.process(m, Some(0), &frame(Format::I420, 128, 64, 1, 2))
            .unwrap();
        r.process(m, Some(0), &frame(Format::I420, 128, 64, 2, 2))
            .unwrap();
        let s = r.finish(None);
        let files: Vec<_> = s.streams[0]
            .files
            .iter()
            .map(|f| (f.path.clone(), f.units))
            .collect();
        assert_eq!(
            files,
            vec![
                (dir.path().join("video-0.y4m"), 1),
                (dir.path().join("video-0-2.y4m"), 2)
            ]
        );
        let two = std::fs::read(dir.path().join("video-0-2.y4m")).unwrap();
        assert!(two.starts_with(b"YUV4MPEG2 W128 H64 "));
        assert!(!dir.path().join("video-0.y4m.part").exists());
    }

    #[test]
    fn a_stream_flipping_formats_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        let m = Meta::new(0, kind::VIDEO);
        for i in 0..MAX_PARTS as u64 + 10 {
            let w = if i % 2 == 0 { 64 } else { 128 };
            r.process(m, Some(0), &frame(Format::I420, w, 16, i, 0))
                .unwrap();
        }
        let s = r.finish(None);
        assert_eq!(s.streams[0].files.len(), MAX_PARTS as usize);
        // Records in the last file's format still go in; the others are skipped.
        assert_eq!(s.streams[0].unsupported, 5);
        assert_eq!(s.streams[0].received, MAX_PARTS as u64 + 5);
    }

    #[test]
    fn nv12_and_padded_strides_become_tight_i420() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        // NV12 4x2: Y = 1..8, UV row = (10,20),(11,21)
        let mut hd = MediaHeader::video(Format::Nv12, 4, 2, 0, 0).unwrap();
        let mut b = vec![0u8; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        let (y0, c0) = (hd.offset[0] as usize, hd.offset[1] as usize);
        b[y0..y0 + 8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        b[c0..c0 + 4].copy_from_slice(&[10, 20, 11, 21]);
        r.process(Meta::new(1, kind::VIDEO), Some(0), &b).unwrap();
        // I420 4x2 with a luma stride of 8.
        hd = MediaHeader::video(Format::I420, 4, 2, 0, 0).unwrap();
        hd.stride[0] = 8;
        hd.size[0] = 16;
        hd.offset[1] = 256;
        hd.offset[2] = 320;
        let mut b = vec![0u8; 384];
        hd.write_to(&mut b).unwrap();
        b[128..144].copy_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8, 0, 0, 0, 0]);
        b[256..258].copy_from_slice(&[10, 11]);
        b[320..322].copy_from_slice(&[20, 21]);
        r.process(Meta::new(2, kind::VIDEO), Some(0), &b).unwrap();
        r.finish(None);
        let want: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 20, 21];
        for s in [1, 2] {
            let f = std::fs::read(dir.path().join(format!("video-{s}.y4m"))).unwrap();
            let body = &f[f.iter().position(|&c| c == b'\n').unwrap() + 1..];
            assert_eq!(&body[..6], b"FRAME\n");
            assert_eq!(&body[6..], want, "stream {s}");
        }
    }

    #[test]
    fn float_audio_gets_an_ieee_float_wav() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        let hd = MediaHeader::audio(Format::PcmF32, 44100, 1, 100, 0, 0).unwrap();
        let mut b = vec![0u8; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        for _ in 0..3 {
            r.process(Meta::new(0, kind::AUDIO), Some(0), &b).unwrap();
        }
        r.finish(None);
        let w = std::fs::read(dir.path().join("audio-0.wav")).unwrap();
        assert_eq!(w.len(), 56 + 1200);
        assert_eq!(&w[0..4], b"RIFF");
        assert_eq!(
            u32::from_le_bytes(w[4..8].try_into().unwrap()) as usize,
            w.len() - 8
        );
        assert_eq!(u16::from_le_bytes([w[20], w[21]]), 3);
        assert_eq!(&w[36..40], b"fact");
        assert_eq!(u32::from_le_bytes(w[44..48].try_into().unwrap()), 300);
        assert_eq!(&w[48..52], b"data");
        assert_eq!(u32::from_le_bytes(w[52..56].try_into().unwrap()), 1200);
    }

    #[test]
    fn unusable_output_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let e = check_output_dir(&file.join("sub")).unwrap_err();
        assert!(e.contains("plain-file/sub"), "{e}");
    }

    fn end() -> Vec<u8> {
        shmring::media::EndOfStream {
            pts_ns: 0,
            sequence: 0,
        }
        .to_bytes()
        .to_vec()
    }

    /// Slots `dead` are gone; every other slot is alive.
    fn with_dead(r: &mut Recorder, dead: &'static std::sync::Mutex<Vec<u32>>) {
        r.set_liveness(move |s| !dead.lock().unwrap().contains(&s));
    }

    #[test]
    fn a_stream_passes_to_another_slot_once_its_owner_is_gone() {
        static DEAD: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        with_dead(&mut r, &DEAD);
        let m = Meta::new(4, kind::VIDEO);
        let f = frame(Format::I420, 64, 32, 0, 1);
        assert_eq!(r.process(m, Some(1), &f).unwrap(), Outcome::Written);
        assert_eq!(r.process(m, Some(2), &f).unwrap(), Outcome::Refused);
        assert_eq!(r.process(m, Some(2), &end()).unwrap(), Outcome::Refused);
        // A record of a slot nobody can attribute is refused too.
        assert_eq!(r.process(m, None, &f).unwrap(), Outcome::Refused);
        DEAD.lock().unwrap().push(1);
        // Seen alive just now: the owner is asked again only after a while.
        std::thread::sleep(OWNER_RECHECK);
        assert_eq!(r.process(m, Some(2), &f).unwrap(), Outcome::Written);
        assert_eq!(r.process(m, Some(1), &f).unwrap(), Outcome::Refused);
        assert_eq!(r.process(m, Some(2), &end()).unwrap(), Outcome::Ended);
        // Ended: the next slot to write it starts it again.
        assert_eq!(r.process(m, Some(3), &f).unwrap(), Outcome::Written);
        let s = r.finish(None);
        assert_eq!(
            (
                s.streams[0].received,
                s.streams[0].foreign,
                s.streams[0].ends
            ),
            (3, 3, 1)
        );
        assert_eq!((s.refused_foreign, s.unattributed), (3, 1));
        assert_eq!(s.streams[0].files.len(), 2);
    }

    #[test]
    fn a_gone_slots_room_comes_back() {
        static DEAD: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        with_dead(&mut r, &DEAD);
        let a = |seq| {
            let hd = MediaHeader::audio(Format::PcmS16, 8000, 1, 8, 0, seq).unwrap();
            let mut b = vec![0u8; hd.payload_len()];
            hd.write_to(&mut b).unwrap();
            b
        };
        for id in 0..STREAMS_PER_SLOT + 5 {
            r.process(Meta::new(id, kind::AUDIO), Some(7), &a(0))
                .unwrap();
        }
        assert_eq!(r.refused_streams, 5);
        assert_eq!(
            r.process(Meta::new(100, kind::AUDIO), Some(7), &a(0))
                .unwrap(),
            Outcome::Refused
        );
        // Another slot has room of its own.
        assert_eq!(
            r.process(Meta::new(101, kind::AUDIO), Some(8), &a(0))
                .unwrap(),
            Outcome::Written
        );
        // Slot 7's producer is gone: its streams belong to nobody, its room is
        // back for the producer that takes the slot next.
        DEAD.lock().unwrap().push(7);
        r.poll();
        DEAD.lock().unwrap().clear();
        assert_eq!(
            r.process(Meta::new(100, kind::AUDIO), Some(7), &a(0))
                .unwrap(),
            Outcome::Written
        );
        assert_eq!(
            r.process(Meta::new(0, kind::AUDIO), Some(9), &a(1))
                .unwrap(),
            Outcome::Written
        );
    }

    /// A producer that starts and ends stream after stream (each leaves the table
    /// once it ended) cannot fill the table: others still get in, and no file of
    /// a stream that left is written over when its id comes back.
    #[test]
    fn ended_streams_leave_room_and_keep_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rec(dir.path());
        let hd = MediaHeader::audio(Format::PcmS16, 8000, 1, 8, 0, 0).unwrap();
        let mut a = vec![0u8; hd.payload_len()];
        hd.write_to(&mut a).unwrap();
        let e = end();
        for id in 0..MAX_STREAMS as u32 + 10 {
            let m = Meta::new(id, kind::AUDIO);
            assert_eq!(r.process(m, Some(1), &a).unwrap(), Outcome::Written);
            assert_eq!(r.process(m, Some(1), &e).unwrap(), Outcome::Ended);
        }
        assert_eq!(
            r.process(
                Meta::new(0, kind::VIDEO),
                Some(2),
                &frame(Format::I420, 8, 8, 0, 3)
            )
            .unwrap(),
            Outcome::Written
        );
        // Stream 0 left the table; its first file stays as it was.
        let m = Meta::new(0, kind::AUDIO);
        assert_eq!(r.process(m, Some(3), &a).unwrap(), Outcome::Written);
        r.process(m, Some(3), &a).unwrap();
        let s = r.finish(None);
        assert_eq!(s.refused_streams, 0);
        let len = |n: &str| std::fs::metadata(dir.path().join(n)).unwrap().len();
        assert_eq!(len("audio-0.wav"), 44 + 16);
        assert_eq!(len("audio-0-2.wav"), 44 + 32);
        let listed: usize = s.streams.iter().map(|s| s.files.len()).sum();
        assert_eq!(listed, MAX_STREAMS + 10 + 2);
    }
}
