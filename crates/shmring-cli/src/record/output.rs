//! Output files: Y4M video, WAV audio, or H.264 MP4 through an `ffmpeg` child (built
//! without the `gst` feature; with it, `--encode` goes through
//! [`crate::record::gst_encode`] instead).
//!
//! Every output goes through one fixed [`BUF_SIZE`] buffer (`BufWriter`); a plane
//! larger than the buffer's free room tops the buffer up, flushes it, and goes
//! straight from the ring to `write(2)`. Files are written under `NAME.part` and
//! renamed when finished, so a name without `.part` always means a complete file:
//! whole frames only, WAV sizes patched.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use shmring::media::{Format, MediaHeader};

/// Size of the one buffer each output file has.
pub const BUF_SIZE: usize = 64 * 1024;

/// What went to the kernel: `write` calls and bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteCounters {
    pub calls: u64,
    pub bytes: u64,
    pub max: u64,
}

impl WriteCounters {
    pub fn add(&mut self, o: &WriteCounters) {
        self.calls += o.calls;
        self.bytes += o.bytes;
        self.max = self.max.max(o.max);
    }
    pub fn average(&self) -> u64 {
        self.bytes.checked_div(self.calls).unwrap_or(0)
    }
}

enum Sink {
    File(File),
    Pipe(ChildStdin),
}

/// The file or pipe under the buffer, counting the writes that reach it.
struct Counting {
    sink: Sink,
    counters: WriteCounters,
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.sink {
            Sink::File(f) => f.write(buf)?,
            Sink::Pipe(p) => p.write(buf)?,
        };
        self.counters.calls += 1;
        self.counters.bytes += n as u64;
        self.counters.max = self.counters.max.max(n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a finished output holds.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub path: PathBuf,
    /// Video frames, or audio sample frames.
    pub units: u64,
    pub bytes: u64,
    /// Why the file ends early or is missing, if it does.
    pub note: Option<String>,
    pub writes: WriteCounters,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Y4m,
    Encoded,
    Wav { float: bool },
}

/// One output being written.
pub struct OutFile {
    container: Container,
    final_path: PathBuf,
    tmp_path: PathBuf,
    w: Option<BufWriter<Counting>>,
    child: Option<Child>,
    header_len: u64,
    /// Bytes per video frame (with its `FRAME\n`) or per audio sample frame.
    unit: u64,
    units: u64,
    /// Audio: bytes of one sample frame in the source (the header's stride).
    wav_channels: u16,
    wav_rate: u32,
}

fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// A WAV header for `frames` sample frames of `unit` bytes each (16-bit PCM, or
/// 32-bit IEEE float with its `fact` chunk), and its length.
fn wav_header(float: bool, unit: u64, channels: u16, rate: u32, frames: u64) -> ([u8; 64], usize) {
    let bits: u16 = if float { 32 } else { 16 };
    let block = unit as u16;
    let data = (frames * unit).min(u32::MAX as u64 - 64) as u32;
    let mut b = [0u8; 64];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        b[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    let extra = if float { 12 } else { 0 };
    let riff = 4 + 24 + extra + 8 + data + (data & 1);
    put(b"RIFF");
    put(&riff.to_le_bytes());
    put(b"WAVEfmt ");
    put(&16u32.to_le_bytes());
    put(&(if float { 3u16 } else { 1u16 }).to_le_bytes());
    put(&channels.to_le_bytes());
    put(&rate.to_le_bytes());
    put(&(rate * block as u32).to_le_bytes());
    put(&block.to_le_bytes());
    put(&bits.to_le_bytes());
    if float {
        put(b"fact");
        put(&4u32.to_le_bytes());
        put(&((data as u64 / unit.max(1)) as u32).to_le_bytes());
    }
    put(b"data");
    put(&data.to_le_bytes());
    (b, at)
}

/// Does `ffmpeg` run?
pub fn ffmpeg_available() -> bool {
    Command::new("ffmpeg")
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

impl OutFile {
    fn new(container: Container, final_path: PathBuf, sink: Sink, child: Option<Child>) -> Self {
        let tmp_path = part_path(&final_path);
        OutFile {
            container,
            final_path,
            tmp_path,
            w: Some(BufWriter::with_capacity(
                BUF_SIZE,
                Counting {
                    sink,
                    counters: WriteCounters::default(),
                },
            )),
            child,
            header_len: 0,
            unit: 0,
            units: 0,
            wav_channels: 0,
            wav_rate: 0,
        }
    }

    /// Final path of this output.
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// A Y4M file (`encode`: piped as Y4M into `ffmpeg`, which writes H.264 MP4 at
    /// that x264 preset).
    pub fn video(
        final_path: PathBuf,
        width: u32,
        height: u32,
        fps: (u32, u32),
        encode: Option<&str>,
    ) -> io::Result<OutFile> {
        let mut out = if let Some(preset) = encode {
            let tmp = part_path(&final_path);
            let rate = format!("{}/{}", fps.0, fps.1);
            let mut child = Command::new("ffmpeg")
                .args(["-hide_banner", "-loglevel", "error", "-y"])
                .args(["-f", "yuv4mpegpipe", "-r", &rate, "-i", "-"])
                .args(["-c:v", "libx264", "-preset", preset, "-crf", "20"])
                .args(["-pix_fmt", "yuv420p", "-f", "mp4"])
                .arg(&tmp)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| io::Error::new(e.kind(), format!("starting ffmpeg: {e}")))?;
            let stdin = child.stdin.take().expect("piped stdin");
            OutFile::new(
                Container::Encoded,
                final_path,
                Sink::Pipe(stdin),
                Some(child),
            )
        } else {
            let f = File::create(part_path(&final_path))?;
            OutFile::new(Container::Y4m, final_path, Sink::File(f), None)
        };
        let mut head = [0u8; 96];
        let n = {
            let mut c = io::Cursor::new(&mut head[..]);
            writeln!(
                c,
                "YUV4MPEG2 W{width} H{height} F{}:{} Ip A1:1 C420jpeg",
                fps.0, fps.1
            )?;
            c.position() as usize
        };
        out.header_len = n as u64;
        // "FRAME\n", then the I420 planes, tight.
        out.unit = 6 + Format::I420.plane_table(width, height).bytes();
        out.put(&head[..n])?;
        Ok(out)
    }

    /// A WAV file: 16-bit PCM or 32-bit IEEE float, sizes patched at the end.
    pub fn audio(
        final_path: PathBuf,
        format: Format,
        sample_rate: u32,
        channels: u32,
    ) -> io::Result<OutFile> {
        let float = format == Format::PcmF32;
        let f = File::create(part_path(&final_path))?;
        let mut out = OutFile::new(Container::Wav { float }, final_path, Sink::File(f), None);
        out.unit = format.plane_table(channels, 1)[0].row_bytes();
        out.wav_channels = channels as u16;
        out.wav_rate = sample_rate;
        let head = out.wav_header(0);
        out.header_len = head.1 as u64;
        out.put(&head.0[..head.1])?;
        Ok(out)
    }

    fn wav_header(&self, frames: u64) -> ([u8; 64], usize) {
        let float = matches!(self.container, Container::Wav { float: true });
        wav_header(float, self.unit, self.wav_channels, self.wav_rate, frames)
    }

    /// Frames (video) or sample frames (audio) written so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Would `more` sample frames push a WAV past its 4 GiB size fields?
    pub fn wav_would_overflow(&self, more: u64) -> bool {
        (self.units + more) * self.unit + self.header_len + 64 > u32::MAX as u64
    }

    /// Writes through the buffer. Data larger than the buffer's free room tops the
    /// buffer up first, so the kernel sees full 64 KiB writes or large planes
    /// written straight from the ring, never a tiny write before a big one.
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        let w = self.w.as_mut().expect("open output");
        let spare = w.capacity() - w.buffer().len();
        if !w.buffer().is_empty() && data.len() > spare {
            w.write_all(&data[..spare])?;
            w.write_all(&data[spare..])
        } else {
            w.write_all(data)
        }
    }

    /// Writes rows of `row` bytes from a plane with `stride` bytes per row.
    fn put_plane(
        &mut self,
        plane: &[u8],
        row: usize,
        rows: usize,
        stride: usize,
    ) -> io::Result<()> {
        if stride == row {
            self.put(&plane[..row * rows])
        } else {
            for r in 0..rows {
                self.put(&plane[r * stride..r * stride + row])?;
            }
            Ok(())
        }
    }

    /// Appends one video frame (I420 or NV12, any strides; NV12 chroma is split into
    /// I420 planes through `scratch`).
    pub fn write_video(
        &mut self,
        hd: &MediaHeader,
        payload: &[u8],
        scratch: &mut [u8],
    ) -> io::Result<()> {
        let table = hd.plane_table();
        self.put(b"FRAME\n")?;
        match hd.format {
            Format::I420 => {
                for (i, p) in table.iter().enumerate() {
                    let (row, rows) = (p.row_bytes() as usize, p.rows as usize);
                    self.put_plane(hd.plane(payload, i), row, rows, hd.stride[i] as usize)?;
                }
            }
            Format::Nv12 => {
                let (y, uv_plane) = (table[0], table[1]);
                let (row, rows) = (y.row_bytes() as usize, y.rows as usize);
                self.put_plane(hd.plane(payload, 0), row, rows, hd.stride[0] as usize)?;
                let uv = hd.plane(payload, 1);
                let stride = hd.stride[1] as usize;
                let row = uv_plane.row_bytes() as usize;
                for which in 0..2 {
                    for r in 0..uv_plane.rows as usize {
                        let row = &uv[r * stride..r * stride + row];
                        for chunk in row.chunks(2 * scratch.len()) {
                            let n = chunk.len() / 2;
                            for (d, s) in scratch[..n].iter_mut().zip(chunk.chunks_exact(2)) {
                                *d = s[which];
                            }
                            let part = &scratch[..n];
                            let w = self.w.as_mut().expect("open output");
                            w.write_all(part)?;
                        }
                    }
                }
            }
            _ => unreachable!("only I420 and NV12 reach write_video"),
        }
        self.units += 1;
        Ok(())
    }

    /// Appends one audio packet (interleaved samples; padded strides compacted).
    pub fn write_audio(&mut self, hd: &MediaHeader, payload: &[u8]) -> io::Result<()> {
        let plane = hd.plane(payload, 0);
        let frame = self.unit as usize;
        self.put_plane(plane, frame, hd.samples as usize, hd.stride[0] as usize)?;
        self.units += hd.samples as u64;
        Ok(())
    }

    /// Flushes, cuts the file back to whole frames if a write failed, patches the
    /// WAV sizes and renames `NAME.part` to `NAME`. `error` is a write error that
    /// already happened. Never leaves a complete-looking file that is not.
    pub fn finish(mut self, error: Option<String>) -> FileReport {
        let mut note = error;
        let mut w = self.w.take().expect("open output");
        if let Err(e) = w.flush() {
            note.get_or_insert_with(|| e.to_string());
        }
        // Drop whatever a failed flush left in the buffer.
        let (inner, _) = w.into_parts();
        let writes = inner.counters;
        let mut report = FileReport {
            path: self.final_path.clone(),
            units: self.units,
            bytes: writes.bytes,
            note: None,
            writes,
        };
        match inner.sink {
            Sink::File(f) => {
                let r = self.close_file(f, note.is_some());
                match r {
                    Ok((units, bytes)) => {
                        report.units = units;
                        report.bytes = bytes;
                    }
                    Err(e) => {
                        note.get_or_insert_with(|| e.to_string());
                    }
                }
                if report.units == 0 && note.is_some() {
                    let _ = std::fs::remove_file(&self.tmp_path);
                    report.note = note.map(|n| format!("{n}; nothing usable was written"));
                    return report;
                }
            }
            Sink::Pipe(stdin) => {
                drop(stdin);
                let status = self.child.take().expect("encoder child").wait();
                match status {
                    Ok(s) if s.success() => {}
                    Ok(s) => {
                        note = Some(format!(
                            "ffmpeg failed ({s}); its partial output is left at {}",
                            self.tmp_path.display()
                        ));
                        report.note = note;
                        return report;
                    }
                    Err(e) => {
                        report.note = Some(format!("waiting for ffmpeg: {e}"));
                        return report;
                    }
                }
                report.bytes = std::fs::metadata(&self.tmp_path)
                    .map(|m| m.len())
                    .unwrap_or(0);
            }
        }
        if let Err(e) = std::fs::rename(&self.tmp_path, &self.final_path) {
            note = Some(format!(
                "renaming {} to {}: {e}",
                self.tmp_path.display(),
                self.final_path.display()
            ));
        }
        report.note = note;
        report
    }

    /// Truncates to whole units (after a failed write) and patches a WAV header.
    /// Returns (units, bytes) of the file as left.
    fn close_file(&mut self, mut f: File, failed: bool) -> io::Result<(u64, u64)> {
        let len = f.metadata()?.len();
        let mut units = self.units;
        if failed || len != self.header_len + units * self.unit {
            units = len.saturating_sub(self.header_len) / self.unit.max(1);
            units = units.min(self.units);
            let keep = if len < self.header_len {
                0
            } else {
                self.header_len + units * self.unit
            };
            f.set_len(keep)?;
        }
        if let Container::Wav { .. } = self.container {
            if units > 0 || len >= self.header_len {
                let (head, n) = self.wav_header(units);
                f.seek(SeekFrom::Start(0))?;
                f.write_all(&head[..n])?;
                let data = units * self.unit;
                if data & 1 == 1 {
                    f.seek(SeekFrom::End(0))?;
                    f.write_all(&[0])?;
                }
            }
        }
        let bytes = f.metadata()?.len();
        if bytes < self.header_len {
            return Ok((0, bytes));
        }
        Ok((units, bytes))
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        // Not finished (a panic or early return): leave the `.part` name, stop ffmpeg.
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A file a recorder left unfinished (`NAME.part`: it was killed, or its machine
/// went down), as the next recorder on the same directory finished it.
#[derive(Debug, Clone)]
pub struct Repaired {
    /// The file's name now: `NAME` once finished, `NAME.part` if it could not be.
    pub path: PathBuf,
    /// What it holds: video frames, audio sample frames, or an MP4's fragments.
    pub units: u64,
    /// Why it could not be finished, if it could not.
    pub note: Option<String>,
}

/// Finishes every file a recorder left unfinished in `dir` (`video-*.y4m.part`,
/// `audio-*.wav.part`, `stream-*.mp4.part`, `video-*.mp4.part`): cut back to
/// what it holds whole (frames, sample frames, an MP4's fragments), sizes
/// patched, renamed to `NAME`. The caller makes sure no recorder is writing them.
pub fn repair_dir(dir: &Path) -> Vec<Repaired> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut parts: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            ["video-", "audio-", "stream-"]
                .iter()
                .any(|s| n.starts_with(s))
                && [".y4m.part", ".wav.part", ".mp4.part"]
                    .iter()
                    .any(|s| n.ends_with(s))
        })
        .collect();
    parts.sort();
    parts
        .into_iter()
        .map(|part| {
            let name = part.to_string_lossy();
            let r = if name.ends_with(".y4m.part") {
                repair_y4m(&part)
            } else if name.ends_with(".wav.part") {
                repair_wav(&part)
            } else {
                repair_mp4(&part)
            };
            let done = part.with_extension("");
            match r.and_then(|units| std::fs::rename(&part, &done).map(|_| units)) {
                Ok(units) => Repaired {
                    path: done,
                    units,
                    note: None,
                },
                Err(e) => Repaired {
                    path: part,
                    units: 0,
                    note: Some(e.to_string()),
                },
            }
        })
        .collect()
}

fn unusable(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// `part` opened to be finished, and its first `N` bytes (as many as it has).
fn open_part<const N: usize>(part: &Path) -> io::Result<(File, [u8; N], usize)> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(part)?;
    let mut head = [0u8; N];
    let n = io::Read::read(&mut f, &mut head)?;
    Ok((f, head, n))
}

/// A Y4M file cut back to its whole frames; how many.
fn repair_y4m(part: &Path) -> io::Result<u64> {
    let (f, head, n) = open_part::<96>(part)?;
    let line = head[..n]
        .iter()
        .position(|&c| c == b'\n')
        .filter(|_| head.starts_with(b"YUV4MPEG2 "))
        .ok_or_else(|| unusable("no Y4M header"))?;
    let dim = |tag: u8| -> Option<u32> {
        std::str::from_utf8(&head[..line])
            .ok()?
            .split(' ')
            .find_map(|w| w.strip_prefix(tag as char)?.parse().ok())
    };
    let (w, h) = dim(b'W')
        .zip(dim(b'H'))
        .ok_or_else(|| unusable("no size in the Y4M header"))?;
    let frame = 6 + Format::I420.plane_table(w, h).bytes();
    let header = line as u64 + 1;
    let frames = f.metadata()?.len().saturating_sub(header) / frame.max(1);
    f.set_len(header + frames * frame)?;
    Ok(frames)
}

/// A WAV file cut back to its whole sample frames, sizes patched; how many.
fn repair_wav(part: &Path) -> io::Result<u64> {
    let (mut f, head, n) = open_part::<64>(part)?;
    let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    if n < 44 || &head[0..4] != b"RIFF" || &head[8..16] != b"WAVEfmt " {
        return Err(unusable("no WAV header"));
    }
    let float = u16_at(20) == 3;
    let (channels, rate, block) = (u16_at(22), u32_at(24), u16_at(32) as u64);
    let header = if float { 56 } else { 44 };
    if block == 0 || n < header || &head[header - 8..header - 4] != b"data" {
        return Err(unusable("not a WAV header this recorder writes"));
    }
    let frames = f.metadata()?.len().saturating_sub(header as u64) / block;
    f.set_len(header as u64 + frames * block)?;
    let (b, len) = wav_header(float, block, channels, rate, frames);
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&b[..len])?;
    if frames * block % 2 == 1 {
        f.seek(SeekFrom::End(0))?;
        f.write_all(&[0])?;
    }
    Ok(frames)
}

/// A fragmented MP4 cut back to its last whole fragment (`moof` and its `mdat`);
/// how many fragments it keeps. An MP4 whose index comes at its end (ffmpeg's)
/// cannot be finished without it.
fn repair_mp4(part: &Path) -> io::Result<u64> {
    let (mut f, _, _) = open_part::<0>(part)?;
    let len = f.metadata()?.len();
    let (mut at, mut keep, mut fragments) = (0u64, 0u64, 0u64);
    let (mut moov, mut last) = (false, [0u8; 4]);
    while at + 8 <= len {
        let mut b = [0u8; 16];
        f.seek(SeekFrom::Start(at))?;
        io::Read::read_exact(&mut f, &mut b[..8])?;
        let kind: [u8; 4] = b[4..8].try_into().expect("4 bytes");
        let size = match u32::from_be_bytes(b[0..4].try_into().expect("4 bytes")) {
            0 => break,
            1 if at + 16 <= len => {
                io::Read::read_exact(&mut f, &mut b[8..16])?;
                u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"))
            }
            1 => break,
            s => s as u64,
        };
        if size < 8 || at + size > len {
            break;
        }
        at += size;
        match &kind {
            b"moov" => moov = true,
            b"mdat" if moov && &last == b"moof" => {
                fragments += 1;
                keep = at;
            }
            _ => {}
        }
        last = kind;
    }
    if fragments == 0 {
        return Err(unusable(
            "no whole fragment (an MP4 whose index was to come at its end cannot be finished)",
        ));
    }
    f.set_len(keep)?;
    Ok(fragments)
}
