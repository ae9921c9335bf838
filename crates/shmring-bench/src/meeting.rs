//! The meeting workload: N participants, each a 1280x720@30 I420 video stream and a
//! 10 ms 48 kHz stereo audio stream, every stream sent by a thread of its own in
//! one of two producer processes, into one consumer that reads every byte. The
//! same records on every transport; latency is measured per kind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Barrier, Mutex};

use shmring::{Consumer, FullPolicy, Meta, Producer};

use crate::args::{Role, WorkerArgs};
use crate::kit::{self, allocs_now, cpu_s, fd_args, media_kind, ready, Checker, Pacer, Res, STALL};
use crate::report::WorkerReport;
use crate::transport::Transport;
use crate::wire::{
    parse_header, put_header, tcp_connect, ws_accept, Header, SharedWs, WsFrames, END, END_ALL, HDR,
};

/// One 1280x720 I420 frame.
pub const VIDEO_BYTES: usize = 1280 * 720 * 3 / 2;
/// 10 ms of 48 kHz stereo, 16-bit.
pub const AUDIO_BYTES: usize = 480 * 2 * 2;
const VIDEO_PER_S: f64 = 30.0;
const AUDIO_PER_S: f64 = 100.0;
/// Producer processes.
pub const PRODUCERS: u32 = 2;
/// The most participants (stream numbers must fit in 8 bits on the ring).
pub const MAX_PARTICIPANTS: u32 = 64;

/// Stream `2p` is participant p's video, `2p + 1` its audio.
pub fn stream_size(stream: usize) -> usize {
    if stream.is_multiple_of(2) {
        VIDEO_BYTES
    } else {
        AUDIO_BYTES
    }
}

fn interval_ns(stream: usize) -> f64 {
    1e9 / if stream.is_multiple_of(2) {
        VIDEO_PER_S
    } else {
        AUDIO_PER_S
    }
}

/// Bytes and records per second of a meeting of `n`.
pub fn rate(n: u32) -> (f64, f64) {
    let n = n as f64;
    (
        n * (VIDEO_BYTES as f64 * VIDEO_PER_S + AUDIO_BYTES as f64 * AUDIO_PER_S),
        n * (VIDEO_PER_S + AUDIO_PER_S),
    )
}

/// The table's heading.
pub fn describe(n: u32) -> String {
    let (bytes, records) = rate(n);
    format!(
        "{n} participants x (1280x720@30 I420 + 10 ms 48 kHz stereo), {} sending threads in \
         {PRODUCERS} producer processes, one consumer; {:.1} MB/s, {records:.0} records/s",
        2 * n,
        bytes / 1e6
    )
}

/// The most sending threads of `--scale producers` (stream numbers must fit in 8
/// bits on the ring).
pub const MAX_THREADS: u32 = 64;

/// What the sending threads of a run send, a thread per stream: each stream's
/// record size and schedule, and which producer process sends it.
#[derive(Debug, Clone)]
pub struct Streams {
    sizes: Vec<usize>,
    /// ns between records (0: as fast as it goes).
    interval_ns: Vec<f64>,
    /// Streams that go together to one process (a participant's two).
    group: usize,
    /// Producer processes.
    parts: u32,
}

impl Streams {
    /// A meeting of `n` participants sent by `parts` processes, participants round robin.
    pub fn meeting(n: u32, parts: u32) -> Streams {
        let all = 0..2 * n as usize;
        Streams {
            sizes: all.clone().map(stream_size).collect(),
            interval_ns: all.map(interval_ns).collect(),
            group: 2,
            parts: parts.max(1),
        }
    }

    /// `n` streams of `size`-byte records, `bps` bytes per second in all (0: as fast
    /// as they go), sent by `parts` processes, streams round robin.
    pub fn uniform(n: u32, size: usize, bps: f64, parts: u32) -> Streams {
        let iv = if bps > 0.0 {
            size as f64 * 1e9 * n as f64 / bps
        } else {
            0.0
        };
        Streams {
            sizes: vec![size; n as usize],
            interval_ns: vec![iv; n as usize],
            group: 1,
            parts: parts.max(1),
        }
    }

    /// The streams a worker takes part in: `--meeting N` or `--threads N`.
    pub fn of(a: &WorkerArgs) -> Res<Streams> {
        match (a.meeting, a.threads) {
            (Some(n), _) if !(1..=MAX_PARTICIPANTS).contains(&n) => Err(format!(
                "--meeting {n}: 1 to {MAX_PARTICIPANTS} participants"
            )),
            (Some(n), _) => Ok(Streams::meeting(n, a.producers)),
            (None, Some(n)) if !(1..=MAX_THREADS).contains(&n) => {
                Err(format!("--threads {n}: 1 to {MAX_THREADS} threads"))
            }
            (None, Some(_)) if a.size == 0 => Err("--size 0: records have bytes".into()),
            (None, Some(n)) => Ok(Streams::uniform(n, a.size, a.rate, a.producers)),
            (None, None) => Err("--meeting or --threads is required".into()),
        }
    }

    /// Every stream's record size.
    pub fn sizes(&self) -> Vec<usize> {
        self.sizes.clone()
    }

    pub fn size(&self, stream: usize) -> usize {
        self.sizes[stream]
    }

    /// How many streams (sending threads).
    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// The largest record.
    pub fn largest(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The streams producer process `part` sends.
    pub fn of_part(&self, part: u32) -> Vec<usize> {
        (0..self.count())
            .filter(|s| (s / self.group) as u32 % self.parts == part)
            .collect()
    }
}

/// On a ring, the stream number and the record's sequence share the u32 `stream`
/// field of the meta: 8 and 24 bits.
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

fn ring_tag(stream: usize, seq: u64) -> u32 {
    ((stream as u32) << SEQ_BITS) | (seq & SEQ_MASK) as u32
}

/// One side of the meeting on any transport but iceoryx2 (`ice::meeting`).
pub fn worker(a: &WorkerArgs, role: Role) -> Res<WorkerReport> {
    use Transport as T;
    let all = Streams::of(a)?;
    let s = &all;
    let mine = || all.of_part(a.part);
    match (a.transport, role) {
        (T::Floor, _) => floor(a, s),
        (T::Floor2Core, _) => crate::twocore::meeting(a, s),
        (T::Shmring | T::ShmringCopy | T::ShmringBudget, Role::Producer) => {
            shm_producer(a, s, mine())
        }
        (T::Shmring | T::ShmringCopy | T::ShmringBudget, Role::Consumer) => shm_consumer(a, s),
        (T::Uds | T::Pipe, Role::Producer) => {
            let fd = fd_args(a)?.remove(0);
            stream_producer(a, s, mine(), std::fs::File::from(fd))
        }
        (T::Uds | T::Pipe, Role::Consumer) => {
            let conns: Vec<std::fs::File> = fd_args(a)?.into_iter().map(Into::into).collect();
            ready();
            stream_consumer(s, conns, read_frames)
        }
        (T::Tcp, Role::Producer) => stream_producer(a, s, mine(), tcp_connect(a)?),
        (T::Tcp, Role::Consumer) => stream_consumer(s, accept_all(a)?, read_frames),
        (T::WebSocket, Role::Producer) => ws_producer(a, s, mine()),
        (T::WebSocket, Role::Consumer) => stream_consumer(s, accept_all(a)?, read_ws),
        (t, _) => Err(format!("the meeting has no {t} transport")),
    }
}

/// Runs one thread per stream of `streams` (of `plan`), each on its own schedule; every thread
/// makes its sender with `open`, then sends with `send(sender, pacer, stream, seq)`
/// and ends its stream with `end(sender, stream)`. CPU and allocations are those of
/// the whole process while the threads send.
pub fn produce_streams<S>(
    a: &WorkerArgs,
    plan: &Streams,
    streams: Vec<usize>,
    open: impl Fn(usize) -> Res<S> + Sync,
    send: impl Fn(&mut S, &Pacer, usize, u64) -> Res<()> + Sync,
    end: impl Fn(&mut S, usize) -> Res<()> + Sync,
) -> Res<WorkerReport> {
    let set = Barrier::new(streams.len() + 1);
    let go = Barrier::new(streams.len() + 1);
    let start = std::sync::atomic::AtomicU64::new(0);
    let (results, alloc0, cpu0, t0) = std::thread::scope(|sc| {
        let handles: Vec<_> = streams
            .iter()
            .map(|&stream| {
                let (set, go, start, open, send, end) = (&set, &go, &start, &open, &send, &end);
                sc.spawn(move || -> Res<u64> {
                    let sender = open(stream);
                    set.wait();
                    go.wait();
                    let mut sender = sender?;
                    let t0 = start.load(std::sync::atomic::Ordering::Acquire);
                    let iv = plan.interval_ns[stream];
                    // Streams start spread over their first interval, as independent
                    // cameras and microphones do.
                    let phase = (iv * (stream as f64 * 0.618_034).fract()) as u64;
                    let pacer = Pacer::stream(a, stream, t0, t0 + phase, iv);
                    let mut seq = 0;
                    while pacer.next(seq) {
                        send(&mut sender, &pacer, stream, seq)
                            .map_err(|e| format!("stream {stream} record {seq}: {e}"))?;
                        seq += 1;
                    }
                    end(&mut sender, stream).map_err(|e| format!("end of stream {stream}: {e}"))?;
                    Ok(seq)
                })
            })
            .collect();
        set.wait();
        let alloc0 = allocs_now();
        let cpu0 = cpu_s();
        let t0 = shmring::now_ns();
        start.store(t0, std::sync::atomic::Ordering::Release);
        go.wait();
        let results: Vec<Res<u64>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a sending thread panicked".into()))
            })
            .collect();
        (results, alloc0, cpu0, t0)
    });
    let alloc1 = allocs_now();
    let mut rep = WorkerReport {
        loop_cpu_s: cpu_s() - cpu0,
        start_ns: t0,
        end_ns: shmring::now_ns(),
        allocs: alloc0.zip(alloc1).map(|(x, y)| y.saturating_sub(x)),
        open_fds: shmring_host::open_descriptors(None),
        ..Default::default()
    };
    for (&stream, r) in streams.iter().zip(results) {
        let frames = r?;
        rep.frames += frames;
        rep.bytes += frames * plan.size(stream) as u64;
    }
    Ok(rep)
}

// ---- floor: every thread writes its records and reads them back, no transport ----

fn floor(a: &WorkerArgs, plan: &Streams) -> Res<WorkerReport> {
    let all: Vec<usize> = (0..plan.count()).collect();
    let seen = Mutex::new(Checker::streams(plan.sizes()));
    let rep = produce_streams(
        a,
        plan,
        all,
        |stream| {
            let size = plan.size(stream);
            let mut ck = Checker::streams(plan.sizes());
            ck.begin();
            Ok((vec![0u8; size], ck))
        },
        |(buf, ck), pacer, stream, seq| {
            pacer.make(buf, seq);
            let ts = shmring::now_ns();
            ck.frame_on(stream, seq, u64::MAX, ts, shmring::now_ns(), buf);
            Ok(())
        },
        |(_, ck), stream| {
            ck.end(stream);
            let mine = std::mem::replace(ck, Checker::streams(Vec::new()));
            seen.lock().unwrap_or_else(|p| p.into_inner()).merge(mine);
            Ok(())
        },
    )?;
    let seen = seen
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .finish();
    Ok(WorkerReport {
        start_ns: rep.start_ns,
        loop_cpu_s: rep.loop_cpu_s,
        allocs: rep.allocs,
        open_fds: rep.open_fds.max(seen.open_fds),
        ..seen
    })
}

// ---- shmring: every thread its own producer handle on the one ring ----

fn shm_producer(a: &WorkerArgs, plan: &Streams, streams: Vec<usize>) -> Res<WorkerReport> {
    let seg = kit::ring(a)?;
    let copy = a.transport == Transport::ShmringCopy;
    let meta = |stream: usize, seq: u64, flags: u32| Meta {
        stream: ring_tag(stream, seq),
        kind: media_kind(plan.size(stream)),
        timestamp_ns: shmring::now_ns(),
        flags,
    };
    produce_streams(
        a,
        plan,
        streams,
        |stream| -> Res<(Producer, Vec<u8>)> {
            let mut p = seg.producer().map_err(|e| e.to_string())?;
            p.set_policy(FullPolicy::Block(STALL));
            let own = if copy {
                vec![0u8; plan.size(stream)]
            } else {
                Vec::new()
            };
            Ok((p, own))
        },
        |(p, own), pacer, stream, seq| {
            if copy {
                pacer.make(own, seq);
                return p.send(own, meta(stream, seq, 0)).map_err(|e| e.to_string());
            }
            let mut r = p.reserve(plan.size(stream)).map_err(|e| e.to_string())?;
            pacer.make(r.payload(), seq);
            r.commit(meta(stream, seq, 0)).map_err(|e| e.to_string())
        },
        |(p, _), stream| {
            let r = p.reserve(8).map_err(|e| e.to_string())?;
            r.commit(meta(stream, 0, END)).map_err(|e| e.to_string())
        },
    )
}

fn shm_consumer(a: &WorkerArgs, plan: &Streams) -> Res<WorkerReport> {
    let seg = kit::ring(a)?;
    let c =
        Consumer::with_options(seg, a.transport.consumer_options()).map_err(|e| e.to_string())?;
    let mut ck = Checker::streams(plan.sizes());
    ready();
    ck.begin();
    while !ck.all_ended() {
        let f = c
            .next_timeout(Some(STALL))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| stalled(ck.frames()))?;
        let now = shmring::now_ns();
        let stream = (f.stream() >> SEQ_BITS) as usize;
        if f.meta().flags & END != 0 {
            ck.end(stream);
            continue;
        }
        let seq = f.stream() as u64 & SEQ_MASK;
        ck.frame_on(stream, seq, SEQ_MASK, f.timestamp_ns(), now, f.payload());
    }
    Ok(ck.finish())
}

fn stalled(frames: u64) -> String {
    format!("no record for {} s after {frames} records", STALL.as_secs())
}

// ---- byte streams and WebSocket: one connection per producer process, shared by
// its threads (a whole record is written under the lock) ----

fn stream_producer<W: Write + Send>(
    a: &WorkerArgs,
    plan: &Streams,
    streams: Vec<usize>,
    conn: W,
) -> Res<WorkerReport> {
    let conn = Mutex::new(conn);
    let write = |buf: &[u8]| -> Res<()> {
        let mut c = conn.lock().map_err(|_| "a sending thread panicked")?;
        c.write_all(buf).map_err(|e| e.to_string())
    };
    let rep = produce_streams(
        a,
        plan,
        streams,
        |stream| Ok(vec![0u8; HDR + plan.size(stream)]),
        |buf, pacer, stream, seq| {
            pacer.make(&mut buf[HDR..], seq);
            let len = buf.len() - HDR;
            put_header(&mut buf[..HDR], 0, seq, len, stream as u32);
            write(buf)
        },
        |buf, stream| {
            put_header(&mut buf[..HDR], END, 0, 0, stream as u32);
            write(&buf[..HDR])
        },
    )?;
    let mut last = [0u8; HDR];
    put_header(&mut last, END_ALL, 0, 0, 0);
    let mut c = conn.into_inner().map_err(|_| "a sending thread panicked")?;
    c.write_all(&last)
        .and_then(|_| c.flush())
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

fn ws_producer(a: &WorkerArgs, plan: &Streams, streams: Vec<usize>) -> Res<WorkerReport> {
    let ws = SharedWs::connect(a)?;
    let lock = || ws.lock();
    let rep = produce_streams(
        a,
        plan,
        streams,
        |stream| Ok(WsFrames::new(plan.size(stream))),
        |frames, pacer, stream, seq| {
            // Made outside the lock: only the sending is serialised.
            frames.prepare((0, seq, stream as u32), plan.size(stream), |b| {
                pacer.make(b, seq)
            });
            frames.write(&mut *lock()?)
        },
        |frames, stream| frames.send(&mut *lock()?, (END, 0, stream as u32), 0, |_| {}),
    )?;
    WsFrames::new(0).send(&mut *lock()?, (END_ALL, 0, 0), 0, |_| {})?;
    Ok(rep)
}

fn accept_all(a: &WorkerArgs) -> Res<Vec<TcpStream>> {
    let l = std::net::TcpListener::from(fd_args(a)?.remove(0));
    ready();
    (0..a.producers.max(1))
        .map(|_| {
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            let _ = s.set_nodelay(true);
            Ok(s)
        })
        .collect()
}

/// Reads one connection to its END_ALL, checking every record.
type ReadConn<C> = fn(C, &Streams, &mut Checker) -> Res<()>;

/// One reading thread per connection, their checks added up.
fn stream_consumer<C: Send>(plan: &Streams, conns: Vec<C>, read: ReadConn<C>) -> Res<WorkerReport> {
    let mut ck = Checker::streams(plan.sizes());
    ck.begin();
    let parts: Vec<Res<Checker>> = std::thread::scope(|sc| {
        let hs: Vec<_> = conns
            .into_iter()
            .map(|c| {
                sc.spawn(move || {
                    let mut mine = Checker::streams(plan.sizes());
                    read(c, plan, &mut mine).map(|_| mine)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a reading thread panicked".into()))
            })
            .collect()
    });
    for p in parts {
        ck.merge(p?);
    }
    if !ck.all_ended() {
        return Err("a producer's connection ended before all its streams did".into());
    }
    Ok(ck.finish())
}

/// What a record's header says: the end of the connection, the end of a stream
/// (recorded), or a record of `stream` with `len` bytes of payload.
enum Next {
    Done,
    Again,
    Record(usize),
}

fn next(h: &Header, plan: &Streams, ck: &mut Checker) -> Res<Next> {
    let stream = h.stream as usize;
    if h.flags & END_ALL != 0 {
        return Ok(Next::Done);
    }
    if h.flags & END != 0 {
        ck.end(stream);
        return Ok(Next::Again);
    }
    if stream >= plan.count() || h.len != plan.size(stream) as u64 {
        return Err(format!("a record of {} bytes on stream {stream}", h.len));
    }
    Ok(Next::Record(stream))
}

fn read_frames<R: Read>(mut s: R, plan: &Streams, ck: &mut Checker) -> Res<()> {
    let mut buf = vec![0u8; HDR + plan.largest()];
    loop {
        s.read_exact(&mut buf[..HDR])
            .map_err(|e| format!("read: {e}"))?;
        let h = parse_header(&buf[..HDR])?;
        let stream = match next(&h, plan, ck)? {
            Next::Done => return Ok(()),
            Next::Again => continue,
            Next::Record(stream) => stream,
        };
        let body = &mut buf[HDR..HDR + h.len as usize];
        s.read_exact(body).map_err(|e| format!("read: {e}"))?;
        // Arrived: the whole record is here.
        let now = shmring::now_ns();
        ck.frame_on(stream, h.seq, u64::MAX, h.ts, now, body);
    }
}

fn read_ws(s: TcpStream, plan: &Streams, ck: &mut Checker) -> Res<()> {
    use tungstenite::Message;
    let mut ws = ws_accept(s)?;
    loop {
        let Message::Binary(b) = ws.read().map_err(|e| format!("read: {e}"))? else {
            continue;
        };
        let now = shmring::now_ns();
        let h = parse_header(&b)?;
        let stream = match next(&h, plan, ck)? {
            Next::Done => return Ok(()),
            Next::Again => continue,
            Next::Record(stream) => stream,
        };
        if b.len() != HDR + h.len as usize {
            return Err(format!("a message of {} bytes on stream {stream}", b.len()));
        }
        ck.frame_on(stream, h.seq, u64::MAX, h.ts, now, &b[HDR..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::media::kind;

    fn kind_of(stream: usize) -> u32 {
        media_kind(stream_size(stream))
    }

    #[test]
    fn participants_are_split_over_the_producers_and_every_stream_has_its_kind() {
        let n = 9;
        let m = Streams::meeting(n, PRODUCERS);
        let mut all: Vec<usize> = (0..PRODUCERS).flat_map(|p| m.of_part(p)).collect();
        all.sort();
        assert_eq!(all, (0..18).collect::<Vec<_>>());
        assert_eq!(m.of_part(0), [0, 1, 4, 5, 8, 9, 12, 13, 16, 17]);
        // Threads of one size: round robin one by one, at the rate in all.
        let u = Streams::uniform(5, 1000, 5e6, 2);
        assert_eq!((u.of_part(0), u.of_part(1)), (vec![0, 2, 4], vec![1, 3]));
        assert_eq!(u.interval_ns, [1e6; 5], "1,000 records/s each");
        assert_eq!(kind_of(4), kind::VIDEO);
        assert_eq!(kind_of(5), kind::AUDIO);
        assert_eq!(media_kind(AUDIO_BYTES), kind::AUDIO);
        assert_eq!(media_kind(VIDEO_BYTES), kind::VIDEO);
        let tag = ring_tag(17, (1 << 24) + 5);
        assert_eq!((tag >> SEQ_BITS, tag as u64 & SEQ_MASK), (17, 5));
    }
}
