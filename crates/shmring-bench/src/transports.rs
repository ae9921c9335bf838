//! The worker side: one end of one transport, in its own process.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use hdrhistogram::Histogram;
use shmring::{media::kind, Consumer, ConsumerOptions, FullPolicy, Meta, Segment};

use crate::args::{parse, Role, WorkerArgs};
use crate::report::WorkerReport;
use crate::sys::{adopt_fd, rusage_self, sleep_until_ns};
use crate::work::{checksum, corrupt, expected_checksum, fill_frame, AUDIO_RECORD};
use crate::{alloc_count, counting_installed};

type Res<T> = Result<T, String>;

/// Bytes of the per-frame header on stream transports (keeps the frame 64-byte aligned).
pub const HDR: usize = 64;
const MAGIC: u32 = 0x424d_4853; // "SHMB"
/// Header / Meta flag: end of stream.
pub const END: u32 = 1;
/// Header flag: the last frame of a producer process (the meeting's connections).
pub const END_ALL: u32 = 2;
/// Chromium splits WebSocket messages into frames of this many bytes.
pub const WS_FRAGMENT: usize = 131_000;
/// How long a consumer waits for the next frame before giving up.
pub const STALL: Duration = Duration::from_secs(10);

pub fn worker_main(args: &[String]) -> i32 {
    let a: WorkerArgs = match parse("shmring bench-worker", args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    let role = match a.role {
        Role::Producer => "producer",
        Role::Consumer => "consumer",
        Role::Floor => "floor",
    };
    let _ = allocs_now();
    let res = match (a.transport.as_str(), a.role) {
        ("wakeup", Role::Producer) => crate::wakeup::producer(&a),
        ("wakeup", Role::Consumer) => crate::wakeup::consumer(&a),
        (_, role) if a.meeting.is_some() => crate::meeting::worker(&a, role),
        ("floor", _) => floor(&a),
        (crate::twocore::NAME, _) => crate::twocore::run(&a),
        (t, Role::Producer) if is_shmring(t) => shm_producer(&a),
        (t, Role::Consumer) if is_shmring(t) => shm_consumer(&a),
        (UDS_TWO_READERS, Role::Producer) => fd_args(&a).and_then(|mut fds| {
            let (b, a2) = (fds.pop(), fds.pop());
            match (a2, b) {
                (Some(x), Some(y)) => stream_producer(&a, Both(File::from(x), File::from(y))),
                _ => Err("two --fd are required".into()),
            }
        }),
        (UDS_TWO_READERS, Role::Consumer) => two_stream_consumers(&a),
        ("uds" | "pipe", Role::Producer) => {
            fd_arg(&a).and_then(|fd| stream_producer(&a, std::fs::File::from(fd)))
        }
        ("uds" | "pipe", Role::Consumer) => fd_arg(&a).and_then(|fd| {
            ready();
            stream_consumer(&a, std::fs::File::from(fd))
        }),
        ("tcp", Role::Producer) => tcp_connect(&a).and_then(|s| stream_producer(&a, s)),
        ("tcp", Role::Consumer) => tcp_accept(&a).and_then(|s| stream_consumer(&a, s)),
        ("websocket", Role::Producer) => ws_producer(&a),
        ("websocket", Role::Consumer) => ws_consumer(&a),
        #[cfg(feature = "iceoryx2")]
        ("iceoryx2", Role::Producer) => crate::ice::producer(&a),
        #[cfg(feature = "iceoryx2")]
        ("iceoryx2", Role::Consumer) => crate::ice::consumer(&a),
        (t, _) => Err(format!("unknown transport {t:?} for role {role}")),
    };
    match res {
        Ok(mut rep) => {
            let (u, s, rss) = rusage_self();
            (rep.utime_s, rep.stime_s, rep.maxrss_kib) = (u, s, rss);
            println!("{}", serde_json::to_string(&rep).unwrap_or_default());
            if rep.bad_checksums + rep.bad_sequence > 0 {
                eprintln!(
                    "{} {role}: {} of {} frames failed their checksum, {} arrived out of sequence",
                    a.transport, rep.bad_checksums, rep.frames, rep.bad_sequence
                );
                return 3;
            }
            0
        }
        Err(e) => {
            eprintln!("{} {role}: {e}", a.transport);
            1
        }
    }
}

pub fn fd_arg(a: &WorkerArgs) -> Res<OwnedFd> {
    adopt_fd(*a.fd.first().ok_or("--fd is required")?)
}

/// Every `--fd` given (one per producer for a consumer of several).
pub fn fd_args(a: &WorkerArgs) -> Res<Vec<OwnedFd>> {
    if a.fd.is_empty() {
        return Err("--fd is required".into());
    }
    a.fd.iter().map(|&n| adopt_fd(n)).collect()
}

/// Tells the parent this side is set up (the producer is started after this).
pub fn ready() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
}

pub fn cpu_s() -> f64 {
    let (u, s, _) = rusage_self();
    u + s
}

static COUNTING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Allocations so far, if they are counted (checked once, before any measurement).
pub fn allocs_now() -> Option<u64> {
    COUNTING.get_or_init(counting_installed).then(alloc_count)
}

pub fn media_kind(size: usize) -> u32 {
    if size <= AUDIO_RECORD {
        kind::AUDIO
    } else {
        kind::VIDEO
    }
}

/// When and how much a producer sends.
pub struct Pacer {
    start: u64,
    frames: u64,
    deadline: u64,
    interval_ns: f64,
    corrupt_every: u64,
    stream: usize,
}

impl Pacer {
    pub fn new(a: &WorkerArgs) -> Pacer {
        let start = shmring::now_ns();
        let interval_ns = if a.rate > 0.0 {
            a.size as f64 * 1e9 / a.rate
        } else {
            0.0
        };
        Pacer::stream(a, 0, start, start, interval_ns)
    }
    /// Stream `stream`'s schedule: its first record due at `first`, one every
    /// `interval_ns` (0: unthrottled), until `start` + --seconds or --frames records.
    pub fn stream(
        a: &WorkerArgs,
        stream: usize,
        start: u64,
        first: u64,
        interval_ns: f64,
    ) -> Pacer {
        Pacer {
            start: first,
            frames: a.frames,
            deadline: start + (a.seconds.max(0.0) * 1e9) as u64,
            interval_ns,
            corrupt_every: a.corrupt_every.unwrap_or(0),
            stream,
        }
    }
    /// Waits for frame `seq`'s turn; false when the run is over.
    #[inline]
    pub fn next(&self, seq: u64) -> bool {
        if self.frames > 0 {
            if seq >= self.frames {
                return false;
            }
        } else if shmring::now_ns() >= self.deadline {
            return false;
        }
        if self.interval_ns > 0.0 {
            let due = self.start + (seq as f64 * self.interval_ns) as u64;
            if due > shmring::now_ns() {
                sleep_until_ns(due);
            }
        }
        true
    }
    /// Writes frame `seq` as a decoder would, damaged if `--corrupt-every` says so.
    #[inline]
    pub fn make(&self, buf: &mut [u8], seq: u64) {
        fill_frame(buf, pattern(self.stream, seq));
        if self.corrupt_every > 0 && seq % self.corrupt_every == self.corrupt_every - 1 {
            corrupt(buf);
        }
    }
    pub fn start(&self) -> u64 {
        self.start
    }
}

/// Runs a producer loop: `send(pacer, seq)` makes and sends one frame.
pub fn produce(a: &WorkerArgs, mut send: impl FnMut(&Pacer, u64) -> Res<()>) -> Res<WorkerReport> {
    let alloc0 = allocs_now();
    let cpu0 = cpu_s();
    let pacer = Pacer::new(a);
    let mut seq = 0u64;
    while pacer.next(seq) {
        send(&pacer, seq).map_err(|e| format!("frame {seq}: {e}"))?;
        seq += 1;
    }
    let end = shmring::now_ns();
    let alloc1 = allocs_now();
    let loop_cpu_s = cpu_s() - cpu0;
    Ok(WorkerReport {
        loop_cpu_s,
        frames: seq,
        bytes: seq * a.size as u64,
        start_ns: pacer.start(),
        end_ns: end,
        allocs: alloc0.zip(alloc1).map(|(x, y)| y - x),
        ..Default::default()
    })
}

/// The consumer's checks and latency histograms, for one stream or several (the
/// meeting: each stream its own sequence, record size and end).
pub struct Checker {
    sizes: Vec<usize>,
    expected: Vec<u64>,
    ended: Vec<bool>,
    hist: Histogram<u64>,
    /// By kind when there are several streams: [audio, video].
    by_kind: Option<[Histogram<u64>; 2]>,
    rep: WorkerReport,
    alloc0: Option<u64>,
    cpu0: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// The fill pattern's number of record `seq` of stream `stream`: streams never
/// share a pattern, so a record delivered to the wrong stream fails its checksum.
#[inline]
pub fn pattern(stream: usize, seq: u64) -> u64 {
    seq ^ ((stream as u64) << 40)
}

impl Checker {
    pub fn new(size: usize) -> Checker {
        Checker::streams(vec![size])
    }
    /// Stream `i` carries records of `sizes[i]` bytes.
    pub fn streams(sizes: Vec<usize>) -> Checker {
        let n = sizes.len();
        Checker {
            expected: vec![0; n],
            ended: vec![false; n],
            by_kind: (n > 1).then(|| [histogram(), histogram()]),
            sizes,
            hist: histogram(),
            rep: WorkerReport::default(),
            alloc0: None,
            cpu0: 0.0,
        }
    }
    /// Frames checked so far.
    pub fn frames(&self) -> u64 {
        self.rep.frames
    }
    /// Call right before the first receive, after setup.
    pub fn begin(&mut self) {
        self.alloc0 = allocs_now();
        self.cpu0 = cpu_s();
    }
    /// A frame arrived: `seq` as carried (compared under `seq_mask`), send time
    /// `ts`, arrival `now`. Reads every byte.
    #[inline]
    pub fn frame(&mut self, seq: u64, seq_mask: u64, ts: u64, now: u64, payload: &[u8]) {
        self.frame_on(0, seq, seq_mask, ts, now, payload)
    }
    /// A frame of stream `stream` arrived (see [`Checker::frame`]).
    #[inline]
    pub fn frame_on(
        &mut self,
        stream: usize,
        seq: u64,
        seq_mask: u64,
        ts: u64,
        now: u64,
        payload: &[u8],
    ) {
        if self.rep.frames == 0 {
            self.rep.start_ns = now;
        }
        let lat = now.saturating_sub(ts).max(1);
        let _ = self.hist.record(lat);
        self.rep.frames += 1;
        self.rep.bytes += payload.len() as u64;
        self.rep.end_ns = now;
        let Some(&size) = self.sizes.get(stream) else {
            self.rep.bad_sequence += 1;
            self.rep.bad_checksums += 1;
            return;
        };
        if let Some(h) = self.by_kind.as_mut() {
            let _ = h[usize::from(media_kind(size) == kind::VIDEO)].record(lat);
        }
        let expected = self.expected[stream];
        if seq != expected & seq_mask || self.ended[stream] {
            self.rep.bad_sequence += 1;
        }
        if payload.len() != size
            || checksum(payload) != expected_checksum(pattern(stream, expected), size)
        {
            self.rep.bad_checksums += 1;
        }
        self.expected[stream] += 1;
    }
    /// Stream `stream` said it has ended.
    pub fn end(&mut self, stream: usize) {
        if let Some(e) = self.ended.get_mut(stream) {
            *e = true;
        }
    }
    /// Have all streams ended?
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }
    /// Adds what another checker of the same streams saw (one reader per connection).
    pub fn merge(&mut self, o: Checker) {
        let _ = self.hist.add(&o.hist);
        if let (Some(a), Some(b)) = (self.by_kind.as_mut(), o.by_kind.as_ref()) {
            for (x, y) in a.iter_mut().zip(b) {
                let _ = x.add(y);
            }
        }
        for i in 0..self.sizes.len().min(o.sizes.len()) {
            self.expected[i] += o.expected[i];
            self.ended[i] |= o.ended[i];
        }
        let (r, q) = (&mut self.rep, o.rep);
        if q.frames > 0 {
            r.start_ns = if r.frames > 0 {
                r.start_ns.min(q.start_ns)
            } else {
                q.start_ns
            };
            r.end_ns = r.end_ns.max(q.end_ns);
        }
        r.frames += q.frames;
        r.bytes += q.bytes;
        r.bad_checksums += q.bad_checksums;
        r.bad_sequence += q.bad_sequence;
    }
    /// A report; its CPU and allocations are counted from [`Checker::begin`].
    pub fn finish(mut self) -> WorkerReport {
        let alloc1 = allocs_now();
        self.rep.loop_cpu_s = cpu_s() - self.cpu0;
        self.rep.allocs = self.alloc0.zip(alloc1).map(|(x, y)| y.saturating_sub(x));
        let q = |h: &Histogram<u64>| {
            (!h.is_empty()).then(|| {
                [
                    h.value_at_quantile(0.5),
                    h.value_at_quantile(0.99),
                    h.value_at_quantile(0.999),
                ]
            })
        };
        if let Some([p50, p99, p999]) = q(&self.hist) {
            self.rep.lat_p50_ns = Some(p50);
            self.rep.lat_p99_ns = Some(p99);
            self.rep.lat_p999_ns = Some(p999);
            self.rep.lat_max_ns = Some(self.hist.max());
        }
        if let Some([a, v]) = &self.by_kind {
            self.rep.lat_audio_ns = q(a);
            self.rep.lat_video_ns = q(v);
        }
        self.rep
    }
}

// ---- floor: the same work, one process, no transport ----

fn floor(a: &WorkerArgs) -> Res<WorkerReport> {
    let pool_frames = ((a.ring_mib << 20) as usize / a.size.max(1)).clamp(2, 1 << 16);
    let mut pool = vec![0u8; pool_frames * a.size];
    let mut checker = Checker::new(a.size);
    let mut reader_allocs = 0u64;
    let counting = allocs_now().is_some();
    checker.begin();
    let rep = produce(a, |p, seq| {
        let i = (seq as usize % pool_frames) * a.size;
        let buf = &mut pool[i..i + a.size];
        p.make(buf, seq);
        let ts = shmring::now_ns();
        let before = alloc_count();
        checker.frame(seq, u64::MAX, ts, shmring::now_ns(), buf);
        reader_allocs += alloc_count() - before;
        Ok(())
    })?;
    let seen = checker.finish();
    Ok(WorkerReport {
        allocs: rep.allocs.map(|w| w.saturating_sub(reader_allocs)),
        allocs_reader: counting.then_some(reader_allocs),
        ..WorkerReport {
            start_ns: rep.start_ns,
            loop_cpu_s: rep.loop_cpu_s,
            ..seen
        }
    })
}

// ---- shmring, zero-copy and one-copy ----

/// The ring from its descriptors, one `--fd` each, in the order of
/// `Segment::descriptors`.
pub fn shm_segment(a: &WorkerArgs) -> Res<std::sync::Arc<Segment>> {
    Segment::from_descriptors(fd_args(a)?).map_err(|e| format!("cannot map the ring: {e}"))
}

fn shm_producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let seg = shm_segment(a)?;
    let mut p = seg.producer().map_err(|e| e.to_string())?;
    p.set_policy(FullPolicy::Block(STALL));
    let k = media_kind(a.size);
    let rep = if a.transport != "shmring-copy" {
        produce(a, |pacer, seq| {
            let mut r = p.reserve(a.size).map_err(|e| e.to_string())?;
            pacer.make(r.payload(), seq);
            let meta = Meta {
                stream: seq as u32,
                kind: k,
                timestamp_ns: shmring::now_ns(),
                flags: 0,
            };
            r.commit(meta).map_err(|e| e.to_string())
        })?
    } else {
        let mut own = vec![0u8; a.size];
        produce(a, |pacer, seq| {
            pacer.make(&mut own, seq);
            let meta = Meta {
                stream: seq as u32,
                kind: k,
                timestamp_ns: shmring::now_ns(),
                flags: 0,
            };
            p.send(&own, meta).map_err(|e| e.to_string())
        })?
    };
    let r = p.reserve(8).map_err(|e| format!("end of stream: {e}"))?;
    r.commit(Meta::new(0, k).with_flags(END))
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

/// The latency budget of the `shmring-budget` row: its consumer lets a record wait
/// up to this long, so one wake-up serves many records.
pub const BUDGET_ROW: Duration = Duration::from_millis(1);

/// The consumer options of a shmring row: the library's defaults, plus the latency
/// budget for `shmring-budget`.
pub(crate) fn consumer_options(transport: &str) -> ConsumerOptions {
    ConsumerOptions {
        latency_budget: (transport == "shmring-budget").then_some(BUDGET_ROW),
        ..ConsumerOptions::default()
    }
}

/// The Unix-socket row with two readers: the producer writes every record to two
/// sockets, the consumer process reads each on a thread.
pub const UDS_TWO_READERS: &str = "uds-2readers";

/// The rows with a second reader (video and 4 KiB workloads only).
pub const SECOND_READER_ROWS: &[&str] = &["shmring-tethered", "shmring-tap", UDS_TWO_READERS];

/// Writes everything to both.
struct Both<A, B>(A, B);

impl<A: Write, B: Write> Write for Both<A, B> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.1.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

/// Two readers of the same stream, each on its own socket; the second must get
/// every frame the first got.
fn two_stream_consumers(a: &WorkerArgs) -> Res<WorkerReport> {
    let mut fds = fd_args(a)?;
    if fds.len() != 2 {
        return Err("two --fd are required".into());
    }
    let second = File::from(fds.pop().expect("two"));
    let first = File::from(fds.pop().expect("two"));
    let a2 = a.clone();
    ready();
    let t = std::thread::spawn(move || stream_consumer(&a2, second));
    let rep = stream_consumer(a, first)?;
    let other = t
        .join()
        .map_err(|_| "the second reader panicked".to_string())??;
    // Damage the first reader found is reported as on every row.
    if rep.bad_checksums + rep.bad_sequence > 0 {
        return Ok(rep);
    }
    if other.frames != rep.frames || other.bad_checksums + other.bad_sequence > 0 {
        return Err(format!(
            "the second reader got {} frames ({} bad), the first {}",
            other.frames,
            other.bad_checksums + other.bad_sequence,
            rep.frames
        ));
    }
    Ok(rep)
}

/// Is `t` one of the shmring rows (one ring, the same producer)?
pub fn is_shmring(t: &str) -> bool {
    matches!(
        t,
        "shmring" | "shmring-copy" | "shmring-budget" | "shmring-tethered" | "shmring-tap"
    )
}

/// The second reader of the `shmring-tethered` and `shmring-tap` rows, in a thread
/// of the consumer process: it reads (and checksums) every byte it gets.
struct SecondReader {
    thread: std::thread::JoinHandle<Res<(u64, u64)>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SecondReader {
    /// Starts the row's second reader; `owner` adopts a tethered one at once.
    fn start(a: &WorkerArgs, seg: &std::sync::Arc<Segment>, owner: &Consumer) -> Res<Option<Self>> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let size = a.size;
        let ok = move |stream: u32, payload: &[u8]| {
            payload.len() == size
                && checksum(payload) == expected_checksum(pattern(0, stream as u64), size)
        };
        let thread = match a.transport.as_str() {
            "shmring-tethered" => {
                let t = Consumer::tethered(seg.clone(), ConsumerOptions::default())
                    .map_err(|e| e.to_string())?;
                // The owner adopts it at its next look, before any record is sent.
                let _ = owner.try_next().map_err(|e| e.to_string())?;
                std::thread::spawn(move || {
                    let (mut frames, mut bad) = (0, 0);
                    loop {
                        let f = t
                            .next_timeout(Some(STALL))
                            .map_err(|e| e.to_string())?
                            .ok_or("the tethered reader got no frame")?;
                        if f.meta().flags & END != 0 {
                            return Ok((frames, bad));
                        }
                        frames += 1;
                        bad += u64::from(!ok(f.stream(), f.payload()));
                    }
                })
            }
            "shmring-tap" => {
                let fd = seg
                    .read_only_fd()
                    .and_then(|fd| {
                        fd.try_clone_to_owned().map_err(|e| shmring::Error::Os {
                            op: "dup",
                            segment: seg.label(),
                            source: e,
                        })
                    })
                    .map_err(|e| e.to_string())?;
                let ro = shmring::ReadOnlySegment::from_fd(fd).map_err(|e| e.to_string())?;
                let mut tap = shmring::Tap::new(ro, shmring::TapOptions::default());
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let (mut frames, mut bad) = (0, 0);
                    while !stop.load(Ordering::Acquire) {
                        let got = tap
                            .next_with(Some(Duration::from_millis(10)), |p, m| {
                                (m.flags & END != 0, ok(m.stream, p))
                            })
                            .map_err(|e| e.to_string())?;
                        match got {
                            Some((_, (true, _))) => break,
                            Some((_, (false, good))) => {
                                frames += 1;
                                bad += u64::from(!good);
                            }
                            None => {}
                        }
                    }
                    let st = tap.stats();
                    eprintln!(
                        "shmring-tap: the tap took {} records, lost {} ({} torn, never delivered)",
                        st.delivered, st.lost, st.torn
                    );
                    Ok((frames, bad))
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(SecondReader { thread, stop }))
    }

    /// Waits for it and checks what it read: intact frames only, and every frame
    /// the owner got for a tethered reader.
    fn finish(self, owner_frames: u64, tethered: bool) -> Res<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let (frames, bad) = self
            .thread
            .join()
            .map_err(|_| "the second reader panicked".to_string())??;
        if bad > 0 {
            return Err(format!(
                "the second reader got {bad} frames that failed their checksum"
            ));
        }
        if tethered && frames != owner_frames {
            return Err(format!(
                "the tethered reader got {frames} frames, the consumer {owner_frames}"
            ));
        }
        Ok(())
    }
}

fn shm_consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    let seg = shm_segment(a)?;
    let c = Consumer::with_options(seg.clone(), consumer_options(&a.transport))
        .map_err(|e| e.to_string())?;
    let second = SecondReader::start(a, &seg, &c)?;
    let mut ck = Checker::new(a.size);
    ready();
    ck.begin();
    loop {
        let f = c
            .next_timeout(Some(STALL))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "no frame for {} s after {} frames",
                    STALL.as_secs(),
                    ck.frames()
                )
            })?;
        let now = shmring::now_ns();
        if f.meta().flags & END != 0 {
            break;
        }
        ck.frame(
            f.stream() as u64,
            u32::MAX as u64,
            f.timestamp_ns(),
            now,
            f.payload(),
        );
    }
    let owner_frames = ck.frames();
    let rep = ck.finish();
    if let Some(s) = second {
        let checked = s.finish(owner_frames, a.transport == "shmring-tethered");
        // Damage the consumer found itself is reported as on every row.
        if rep.bad_checksums + rep.bad_sequence == 0 {
            checked?;
        }
    }
    Ok(rep)
}

// ---- byte streams: Unix socket, pipe, TCP ----

/// Writes a frame header, stamped now: flags, sequence, payload length, stream.
pub fn put_header(h: &mut [u8], flags: u32, seq: u64, len: usize, stream: u32) {
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&flags.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&shmring::now_ns().to_le_bytes());
    h[24..32].copy_from_slice(&(len as u64).to_le_bytes());
    h[32..36].copy_from_slice(&stream.to_le_bytes());
}

/// A frame header as read.
pub struct Header {
    pub flags: u32,
    pub seq: u64,
    pub ts: u64,
    pub len: u64,
    pub stream: u32,
}

pub fn parse_header(h: &[u8]) -> Res<Header> {
    if h.len() < HDR {
        return Err("stream out of step: short frame header".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
    if u32_at(0) != MAGIC {
        return Err("stream out of step: bad frame header".into());
    }
    Ok(Header {
        flags: u32_at(4),
        seq: u64_at(8),
        ts: u64_at(16),
        len: u64_at(24),
        stream: u32_at(32),
    })
}

/// (flags, seq, timestamp) of a frame header of a `size`-byte frame.
fn get_header(h: &[u8], size: usize) -> Res<(u32, u64, u64)> {
    let hd = parse_header(h)?;
    if hd.flags & END == 0 && hd.len != size as u64 {
        return Err(format!("frame of {} bytes, expected {size}", hd.len));
    }
    Ok((hd.flags, hd.seq, hd.ts))
}

fn stream_producer(a: &WorkerArgs, mut s: impl Write) -> Res<WorkerReport> {
    let mut buf = vec![0u8; HDR + a.size];
    let rep = produce(a, |pacer, seq| {
        pacer.make(&mut buf[HDR..], seq);
        put_header(&mut buf[..HDR], 0, seq, a.size, 0);
        s.write_all(&buf).map_err(|e| e.to_string())
    })?;
    // The end marker is a whole frame so the reader can always read fixed sizes.
    put_header(&mut buf[..HDR], END, 0, 0, 0);
    s.write_all(&buf)
        .and_then(|_| s.flush())
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

fn stream_consumer(a: &WorkerArgs, mut s: impl Read) -> Res<WorkerReport> {
    let mut buf = vec![0u8; HDR + a.size];
    let mut ck = Checker::new(a.size);
    ck.begin();
    loop {
        s.read_exact(&mut buf).map_err(|e| format!("read: {e}"))?;
        let now = shmring::now_ns();
        let (flags, seq, ts) = get_header(&buf, a.size)?;
        if flags & END != 0 {
            break;
        }
        ck.frame(seq, u64::MAX, ts, now, &buf[HDR..]);
    }
    Ok(ck.finish())
}

pub fn tcp_connect(a: &WorkerArgs) -> Res<TcpStream> {
    let port = a.port.ok_or("--port is required")?;
    let s = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

fn tcp_accept(a: &WorkerArgs) -> Res<TcpStream> {
    let l = TcpListener::from(fd_arg(a)?);
    ready();
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

// ---- WebSocket, as a browser sends it: masked, in 131,000-byte fragments ----

fn ws_config() -> tungstenite::protocol::WebSocketConfig {
    tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(256 << 20))
        .max_frame_size(Some(16 << 20))
}

/// The client side of a WebSocket to the consumer's port.
pub fn ws_connect(a: &WorkerArgs) -> Res<tungstenite::WebSocket<TcpStream>> {
    let s = tcp_connect(a)?;
    let url = format!("ws://127.0.0.1:{}/", a.port.unwrap_or(0));
    let (ws, _) = tungstenite::client::client_with_config(url.as_str(), s, Some(ws_config()))
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(ws)
}

/// The server side of a WebSocket on an accepted connection.
pub fn ws_accept(s: TcpStream) -> Res<tungstenite::WebSocket<TcpStream>> {
    tungstenite::accept_with_config(s, Some(ws_config())).map_err(|e| format!("handshake: {e}"))
}

/// Sends frames as a browser does: masked, in [`WS_FRAGMENT`]-byte fragments, from
/// one frame buffer reused for every frame.
pub struct WsFrames {
    spare: bytes::BytesMut,
}

impl WsFrames {
    pub fn new(body: usize) -> WsFrames {
        WsFrames {
            spare: bytes::BytesMut::zeroed(HDR + body),
        }
    }
    /// One frame of `body` bytes after the header, written by `fill`; an end marker
    /// (`flags` END or END_ALL) says its length is 0.
    pub fn send(
        &mut self,
        ws: &mut tungstenite::WebSocket<TcpStream>,
        head: (u32, u64, u32),
        body: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Res<()> {
        self.prepare(head, body, fill);
        self.write(ws)
    }
    /// Makes the next frame (see [`WsFrames::send`]) without sending it.
    pub fn prepare(
        &mut self,
        (flags, seq, stream): (u32, u64, u32),
        body: usize,
        fill: impl FnOnce(&mut [u8]),
    ) {
        if self.spare.len() != HDR + body {
            self.spare = bytes::BytesMut::zeroed(HDR + body);
        }
        fill(&mut self.spare[HDR..]);
        let len = if flags & (END | END_ALL) != 0 {
            0
        } else {
            body
        };
        put_header(&mut self.spare[..HDR], flags, seq, len, stream);
    }
    /// Sends the frame made by [`WsFrames::prepare`].
    pub fn write(&mut self, ws: &mut tungstenite::WebSocket<TcpStream>) -> Res<()> {
        use tungstenite::protocol::frame::coding::{Data, OpCode};
        use tungstenite::protocol::frame::Frame;
        use tungstenite::Message;
        let msg = std::mem::take(&mut self.spare).freeze();
        let total = msg.len();
        let mut off = 0;
        while off < total {
            let end = (off + WS_FRAGMENT).min(total);
            let op = if off == 0 {
                OpCode::Data(Data::Binary)
            } else {
                OpCode::Data(Data::Continue)
            };
            let f = Frame::message(msg.slice(off..end), op, end == total);
            ws.write(Message::Frame(f)).map_err(|e| e.to_string())?;
            off = end;
        }
        ws.flush().map_err(|e| e.to_string())?;
        // Every fragment has been copied (and masked) into the socket buffer: take the
        // frame buffer back for the next frame.
        if let Ok(b) = msg.try_into_mut() {
            self.spare = b;
        }
        Ok(())
    }
}

fn ws_producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let mut ws = ws_connect(a)?;
    let mut frames = WsFrames::new(a.size);
    let rep = produce(a, |pacer, seq| {
        frames.send(&mut ws, (0, seq, 0), a.size, |b| pacer.make(b, seq))
    })?;
    frames
        .send(&mut ws, (END, 0, 0), a.size, |_| {})
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

fn ws_consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    use tungstenite::Message;
    let mut ws = ws_accept(tcp_accept(a)?)?;
    let mut ck = Checker::new(a.size);
    ck.begin();
    loop {
        match ws.read().map_err(|e| format!("read: {e}"))? {
            Message::Binary(b) => {
                let now = shmring::now_ns();
                let (flags, seq, ts) = get_header(&b, a.size)?;
                if flags & END != 0 {
                    break;
                }
                ck.frame(seq, u64::MAX, ts, now, &b[HDR..]);
            }
            Message::Close(_) => {
                return Err("connection closed before the end of the stream".into())
            }
            _ => {}
        }
    }
    Ok(ck.finish())
}
