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
//! With `--encode` (built with the `gst` feature) each stream id's video and audio
//! go into one MP4 instead, timed by their capture timestamps
//! ([`crate::gst_encode`]).

use std::io;
use std::path::{Path, PathBuf};

use shmring::media::{self, kind, Format, MediaRecord, MEDIA_HEADER_SIZE};
use shmring::Meta;

use crate::output::{FileReport, OutFile, WriteCounters};

/// Streams beyond this many (per recorder) are refused: a hostile producer cannot
/// make the recorder open unbounded files.
pub const MAX_STREAMS: usize = 64;
/// Files per stream (format changes) beyond which records of yet another format
/// are skipped: a stream flipping formats cannot make the recorder open a file
/// per record.
pub const MAX_PARTS: u32 = 100;
/// Malformed headers reported one by one (the rest are only counted).
const REPORT_MALFORMED: u64 = 5;

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
    /// Not media, a format the container cannot hold, or too many streams.
    Skipped,
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
    files: Vec<FileReport>,
}

impl Stream {
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
    pub files: Vec<FileReport>,
}

/// Everything the recorder did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub streams: Vec<StreamReport>,
    pub malformed: u64,
    pub first_malformed: Option<String>,
    pub other_kinds: u64,
    pub refused_streams: u64,
    pub writes: WriteCounters,
    pub error: Option<String>,
}

/// Records media records into files, one per stream (and format).
pub struct Recorder {
    opts: RecorderOptions,
    streams: Vec<Stream>,
    malformed: u64,
    first_malformed: Option<String>,
    other_kinds: u64,
    refused_streams: u64,
    video_frames: u64,
    audio_packets: u64,
    scratch: Box<[u8]>,
    writes_closed: WriteCounters,
    /// `--encode` in process: one muxed file per stream id.
    #[cfg(feature = "gst")]
    participants: Vec<crate::gst_encode::Participant>,
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

impl Recorder {
    /// A recorder writing into `opts.dir` (checked writable).
    pub fn new(opts: RecorderOptions) -> Result<Recorder, String> {
        check_output_dir(&opts.dir)?;
        Ok(Recorder {
            opts,
            streams: Vec::with_capacity(8),
            malformed: 0,
            first_malformed: None,
            other_kinds: 0,
            refused_streams: 0,
            video_frames: 0,
            audio_packets: 0,
            scratch: vec![0u8; 4096].into_boxed_slice(),
            writes_closed: WriteCounters::default(),
            #[cfg(feature = "gst")]
            participants: Vec::new(),
        })
    }

    /// Housekeeping between records: names the encoded files whose muxer finished
    /// (a stream that ended while no record came since).
    pub fn poll(&mut self) {
        #[cfg(feature = "gst")]
        for p in &mut self.participants {
            p.poll_closing();
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

    /// Processes one record: validates the media header and writes the planes to
    /// the stream's file. Only an output error is returned; bad records are counted.
    pub fn process(&mut self, meta: Meta, payload: &[u8]) -> Result<Outcome, WriteError> {
        if meta.kind != kind::VIDEO && meta.kind != kind::AUDIO {
            self.other_kinds += 1;
            return Ok(Outcome::Skipped);
        }
        let si = match self
            .streams
            .iter()
            .position(|s| s.kind == meta.kind && s.id == meta.stream)
        {
            Some(i) => i,
            None if self.streams.len() >= MAX_STREAMS => {
                self.refused_streams += 1;
                return Ok(Outcome::Skipped);
            }
            None => {
                self.streams.push(Stream {
                    kind: meta.kind,
                    id: meta.stream,
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
                    files: Vec::new(),
                });
                self.streams.len() - 1
            }
        };
        if payload.len() < MEDIA_HEADER_SIZE {
            let len = payload.len();
            self.note_malformed(
                si,
                &meta,
                &format_args!("payload of {len} bytes cannot hold a media header"),
            );
            return Ok(Outcome::Malformed);
        }
        let hd = match media::read(meta.kind, payload) {
            Ok(MediaRecord::Frame(hd)) => hd,
            Ok(MediaRecord::End(end)) => return self.end_stream(si, end.sequence),
            Err(e) => {
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
                        "shmring record: stream {} changed format more than {MAX_PARTS} times; records in new formats are skipped",
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

    /// An end-of-stream record: the stream's file is finished (the next record of
    /// the stream, if one comes, starts the next part).
    fn end_stream(&mut self, si: usize, sequence: u64) -> Result<Outcome, WriteError> {
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
                self.participants.push(crate::gst_encode::Participant::new(
                    id,
                    &self.opts.dir,
                    self.opts.preset.name(),
                ));
                self.participants.len() - 1
            }
        };
        let p = &mut self.participants[pi];
        p.push(meta.kind, meta.timestamp_ns, hd, payload)
            .map_err(|source| WriteError {
                path: p.path(),
                source,
            })?;
        let s = &mut self.streams[si];
        s.count_sequence(hd.sequence);
        s.received += 1;
        if meta.kind == kind::VIDEO {
            self.video_frames += 1;
        } else {
            self.audio_packets += 1;
        }
        Ok(Outcome::Written)
    }

    /// Finishes the stream's current file (if any) and opens the next one.
    fn open(&mut self, si: usize, shape: Shape) -> Result<(), WriteError> {
        let s = &mut self.streams[si];
        if let Some(out) = s.out.take() {
            let rep = out.finish(None);
            self.writes_closed.add(&rep.writes);
            s.files.push(rep);
        }
        s.parts += 1;
        let suffix = if s.parts == 1 {
            String::new()
        } else {
            format!("-{}", s.parts)
        };
        let (name, r) = match shape {
            Shape::Video { w, h, fps, .. } => {
                let ext = if self.opts.encode { "mp4" } else { "y4m" };
                let path = self.opts.dir.join(format!("video-{}{suffix}.{ext}", s.id));
                // The header's nominal rate; --fps for a variable one.
                let fps = if fps.0 == 0 { self.opts.fps } else { fps };
                let encode = self.opts.encode.then(|| self.opts.preset.name());
                let r = OutFile::video(path.clone(), w, h, fps, encode);
                (path, r)
            }
            Shape::Audio {
                format,
                rate,
                channels,
            } => {
                let path = self.opts.dir.join(format!("audio-{}{suffix}.wav", s.id));
                (path.clone(), OutFile::audio(path, format, rate, channels))
            }
        };
        match r {
            Ok(out) => {
                s.out = Some(out);
                s.shape = Some(shape);
                Ok(())
            }
            Err(source) => {
                s.shape = None;
                Err(WriteError { path: name, source })
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
        let mut streams = Vec::with_capacity(self.streams.len());
        for s in self.streams.iter_mut() {
            if let Some(out) = s.out.take() {
                let note = error
                    .filter(|e| e.path == out.path())
                    .map(|e| e.source.to_string());
                let rep = out.finish(note);
                writes.add(&rep.writes);
                s.files.push(rep);
            }
            streams.push(StreamReport {
                kind: kind_name(s.kind),
                stream: s.id,
                received: s.received,
                gaps: s.gaps,
                restarts: s.restarts,
                ends: s.ends,
                malformed: s.malformed,
                unsupported: s.unsupported,
                files: std::mem::take(&mut s.files),
            });
        }
        Summary {
            streams,
            malformed: self.malformed,
            first_malformed: self.first_malformed.take(),
            other_kinds: self.other_kinds,
            refused_streams: self.refused_streams,
            writes,
            error: error.map(|e| e.to_string()),
        }
    }
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
                    "files": s.files.iter().map(|f| json!({
                        "path": f.path.display().to_string(), "units": f.units,
                        "bytes": f.bytes, "note": f.note, "write_calls": f.writes.calls,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "streams": streams,
            "malformed": self.malformed,
            "first_malformed": self.first_malformed,
            "other_kinds": self.other_kinds,
            "refused_streams": self.refused_streams,
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
            r.process(m, &frame(Format::I420, 64, 32, 0, 9)).unwrap(),
            Outcome::Written
        );
        let mut bad = frame(Format::I420, 64, 32, 1, 9);
        bad[0] = b'X';
        assert_eq!(r.process(m, &bad).unwrap(), Outcome::Malformed);
        assert_eq!(r.process(m, &[0u8; 100]).unwrap(), Outcome::Malformed);
        // A plane pointing outside the payload, with bytes otherwise identical to
        // the previous header's.
        let mut bad = frame(Format::I420, 64, 32, 2, 9);
        bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(r.process(m, &bad).unwrap(), Outcome::Malformed);
        let good = frame(Format::I420, 64, 32, 3, 9);
        assert_eq!(
            r.process(m, &good[..good.len() - 1]).unwrap(),
            Outcome::Malformed
        );
        // An audio format on a video record.
        let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 10, 0, 0).unwrap();
        let mut a = vec![0u8; hd.payload_len()];
        hd.write_to(&mut a).unwrap();
        assert_eq!(r.process(m, &a).unwrap(), Outcome::Malformed);
        assert_eq!(r.process(m, &good).unwrap(), Outcome::Written);
        assert_eq!(
            r.process(Meta::new(0, kind::RAW), &good).unwrap(),
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
        r.process(m, &frame(Format::I420, 64, 32, 0, 1)).unwrap();
        r.process(m, &frame(Format::I420, 128, 64, 1, 2)).unwrap();
        r.process(m, &frame(Format::I420, 128, 64, 2, 2)).unwrap();
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
            r.process(m, &frame(Format::I420, w, 16, i, 0)).unwrap();
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
        r.process(Meta::new(1, kind::VIDEO), &b).unwrap();
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
        r.process(Meta::new(2, kind::VIDEO), &b).unwrap();
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
            r.process(Meta::new(0, kind::AUDIO), &b).unwrap();
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
}
