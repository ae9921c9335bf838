//! The bot workload's producer, in the role of the browser: one process, a thread
//! per stream (each participant a 1280x720@30 I420 video stream and a 10 ms 48 kHz
//! stereo S16 audio stream, at the real rate), writing media records as `shmring
//! record` reads them: the core's media header, then the planes or samples, with
//! the participant as the stream id and video or audio as the kind.
//!
//! On the ring every record is drawn in place in its reservation (zero copy) and
//! committed with its meta; on the WebSocket it is drawn into the thread's reused
//! send buffer after the frame header, which carries what the ring's meta carries
//! (kind, stream id, capture time), and sent as Chromium sends it. The picture
//! ([`picture`]) is the same on both. The recorder's side is `shmring record` itself
//! (`orchestrate::bot` runs it).
//!
//! This producer is Rust, on the core's API; the C ABI (`shmring_reserve`,
//! `shmring_commit`, ...) is a thin layer over the same calls.

pub mod picture;

use shmring::media::{kind, EndOfStream, Format, MediaHeader};
use shmring::{Address, FullPolicy, Meta};

use crate::args::WorkerArgs;
use crate::kit::{Res, STALL};
use crate::meeting::{produce_streams, Streams};
use crate::report::WorkerReport;
use crate::transport::Transport;
use crate::wire::{SharedWs, WsFrames, END_ALL};
use picture::{Picture, Tone};

/// The most participants of a bot: the recorder gives each WebSocket connection
/// (the browser's one) room for 32 streams, a participant's video and audio two.
pub const MAX_PARTICIPANTS: u32 = 16;
pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 720;
pub const FPS: u32 = 30;
pub const SAMPLE_RATE: u32 = 48_000;
pub const CHANNELS: u32 = 2;
/// Samples per channel in a 10 ms packet.
const SAMPLES: u32 = SAMPLE_RATE / 100;

/// The media header of participant `p`'s video or audio records (its time and
/// number filled per record).
fn header(video: bool) -> Res<MediaHeader> {
    let hd = if video {
        MediaHeader::video(Format::I420, WIDTH, HEIGHT, 0, 0)
            .and_then(|h| h.with_frame_rate(FPS, 1))
    } else {
        MediaHeader::audio(Format::PcmS16, SAMPLE_RATE, CHANNELS, SAMPLES, 0, 0)
    };
    hd.map_err(|e| e.to_string())
}

/// What a stream's records carry after their header.
enum Content<'a> {
    Picture(&'a Picture),
    Tone(Tone),
}

/// One stream's source: what its records are and how each is made.
struct Source<'a> {
    id: u32,
    kind: u32,
    base: MediaHeader,
    content: Content<'a>,
    /// Records made so far (the end of stream is numbered after them).
    made: u64,
}

impl<'a> Source<'a> {
    /// Stream `stream` of the meeting's plan (`2p` participant p's video, `2p + 1`
    /// its audio).
    fn new(stream: usize, pictures: &'a [Picture]) -> Res<Source<'a>> {
        let id = (stream / 2) as u32;
        let video = stream.is_multiple_of(2);
        Ok(Source {
            id,
            kind: if video { kind::VIDEO } else { kind::AUDIO },
            base: header(video)?,
            content: if video {
                Content::Picture(&pictures[id as usize])
            } else {
                Content::Tone(Tone::new(id, SAMPLE_RATE))
            },
            made: 0,
        })
    }

    fn len(&self) -> usize {
        self.base.payload_len()
    }

    /// Writes record `seq`, captured at `pts`, into `payload` (of [`Source::len`]).
    fn make(&mut self, seq: u64, pts: u64, payload: &mut [u8]) -> Res<()> {
        let hd = MediaHeader {
            pts_ns: pts,
            sequence: seq,
            ..self.base
        };
        hd.write_to(payload).map_err(|e| e.to_string())?;
        match &self.content {
            Content::Picture(p) => p.draw(seq, &hd, payload),
            Content::Tone(t) => {
                let (o, n) = (hd.offset[0] as usize, hd.size[0] as usize);
                t.fill(seq, &mut payload[o..o + n], CHANNELS as usize);
            }
        }
        self.made = seq + 1;
        Ok(())
    }

    /// The stream's end-of-stream record.
    fn end(&self) -> [u8; shmring::media::MEDIA_HEADER_SIZE] {
        EndOfStream {
            pts_ns: 0,
            sequence: self.made,
        }
        .to_bytes()
    }
}

/// The bot's producer (`--bot N`): into the named ring `--ring`, or over a
/// WebSocket to `--port`.
pub fn producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let n = a.bot.ok_or("--bot is required")?;
    if !(1..=MAX_PARTICIPANTS).contains(&n) {
        return Err(format!("--bot {n}: 1 to {MAX_PARTICIPANTS} participants"));
    }
    let plan = Streams::meeting(n, 1);
    let pictures: Vec<Picture> = (0..n).map(|p| Picture::new(WIDTH, HEIGHT, p)).collect();
    match a.transport {
        Transport::Shmring => ring(a, &plan, &pictures),
        Transport::WebSocket => websocket(a, &plan, &pictures),
        t => Err(format!("the bot workload has no {t} transport")),
    }
}

fn ring(a: &WorkerArgs, plan: &Streams, pictures: &[Picture]) -> Res<WorkerReport> {
    let name = a.ring.as_deref().ok_or("--ring is required")?;
    let seg = Address::named(name)
        .open()
        .map_err(|e| format!("ring {name}: {e}"))?;
    let es = |e: shmring::Error| format!("ring {name}: {e}");
    produce_streams(
        a,
        plan,
        (0..plan.count()).collect(),
        |stream| {
            let mut p = seg.producer().map_err(es)?;
            p.set_policy(FullPolicy::Block(STALL));
            Ok((p, Source::new(stream, pictures)?))
        },
        |(p, src), _, _, seq| {
            let pts = shmring::now_ns();
            // Drawn in place: the reservation is the frame.
            let mut r = p.reserve(src.len()).map_err(es)?;
            src.make(seq, pts, r.payload())?;
            r.commit(Meta::new(src.id, src.kind).with_timestamp(pts))
                .map_err(es)
        },
        |(p, src), _| p.end_stream(src.id, src.kind).map_err(es),
    )
}

fn websocket(a: &WorkerArgs, plan: &Streams, pictures: &[Picture]) -> Res<WorkerReport> {
    // The browser's one connection, shared by its threads; a record is sent
    // whole under the lock.
    let ws = SharedWs::connect(a)?;
    let lock = || ws.lock();
    let rep = produce_streams(
        a,
        plan,
        (0..plan.count()).collect(),
        |stream| {
            let src = Source::new(stream, pictures)?;
            Ok((WsFrames::new(src.len()), src))
        },
        |(frames, src), _, _, seq| {
            let (pts, id, len) = (shmring::now_ns(), src.id, src.len());
            // Drawn outside the lock, into the reused send buffer.
            let mut made = Ok(());
            frames.prepare((0, seq, id), len, |b| made = src.make(seq, pts, b));
            made?;
            frames.set_meta(src.kind, pts);
            frames.write(&mut *lock()?)
        },
        |(frames, src), _| {
            let end = src.end();
            frames.prepare((0, src.made, src.id), end.len(), |b| {
                b.copy_from_slice(&end)
            });
            frames.set_meta(src.kind, shmring::now_ns());
            frames.write(&mut *lock()?)
        },
    )?;
    WsFrames::new(0).send(&mut *lock()?, (END_ALL, 0, 0), 0, |_| {})?;
    Ok(rep)
}
