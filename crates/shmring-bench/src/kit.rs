//! The toolbox every worker uses: its descriptors and its "ready" line, the pacing of
//! a producer, the checks of a consumer, and what they count (CPU time, heap
//! allocations).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::Duration;

use hdrhistogram::Histogram;
use shmring::{media::kind, Address, Segment};
use shmring_host::{alloc_count, counting_installed, open_descriptors, rusage};

use crate::args::WorkerArgs;
use crate::report::WorkerReport;
use crate::sys::{adopt_fd, sleep_until_ns};
use crate::work::{checksum, corrupt, expected_checksum, fill_frame, AUDIO_RECORD};

pub type Res<T> = Result<T, String>;

/// How long a consumer waits for the next frame before giving up.
pub const STALL: Duration = Duration::from_secs(10);

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
    rusage(false).cpu_s()
}

static COUNTING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

static HISTOGRAM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether reports carry their whole latency histogram (`--histogram`: the bench
/// merges those of several consumers).
pub fn keep_histogram(on: bool) {
    HISTOGRAM.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// A latency histogram, ns, as the reports carry it.
pub fn histogram_of(pairs: &[[u64; 2]]) -> Histogram<u64> {
    let mut h = histogram();
    for &[v, n] in pairs {
        let _ = h.record_n(v, n);
    }
    h
}

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
        open_fds: open_descriptors(None),
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

pub fn histogram() -> Histogram<u64> {
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
        self.rep.open_fds = open_descriptors(None);
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
        if HISTOGRAM.load(std::sync::atomic::Ordering::Relaxed) {
            self.rep.lat_hist = Some(
                self.hist
                    .iter_recorded()
                    .map(|v| [v.value_iterated_to(), v.count_at_value()])
                    .collect(),
            );
        }
        self.rep
    }
}

/// The ring from its descriptors, one `--fd` each, in the order of
/// `Segment::descriptors`.
pub fn ring(a: &WorkerArgs) -> Res<std::sync::Arc<Segment>> {
    Address::Descriptors(fd_args(a)?)
        .open()
        .map_err(|e| format!("cannot map the ring: {e}"))
}
