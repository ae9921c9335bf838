//! The roles child processes play (hidden subcommands of this executable).

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::{Address, Error, FullPolicy, Meta, Segment};

use crate::common::{
    fill_body, seal_record, state, verify_record, ChildGuard, Flags, Rng, REC_HDR,
};
use shmring_testkit::{Peer, Target};

/// A ring's descriptors as a child inherits them, in the order of
/// `Segment::descriptors`; on the command line `--fd=N,M`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingFds(pub Vec<i32>);

impl RingFds {
    /// The descriptors of `seg`, to be inherited by a child.
    pub fn of(seg: &Segment) -> RingFds {
        use std::os::fd::AsRawFd;
        RingFds(seg.descriptors().iter().map(|f| f.as_raw_fd()).collect())
    }

    /// These descriptors and `more`, for a child's inherit list.
    pub fn with(&self, more: &[i32]) -> Vec<i32> {
        [&self.0[..], more].concat()
    }
}

impl std::fmt::Display for RingFds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.0.iter().map(|n| n.to_string()).collect();
        f.write_str(&list.join(","))
    }
}

impl std::str::FromStr for RingFds {
    type Err = String;
    fn from_str(s: &str) -> Result<RingFds, String> {
        s.split(',')
            .map(|n| {
                n.parse()
                    .map_err(|_| format!("{n:?} is not a descriptor number"))
            })
            .collect::<Result<_, _>>()
            .map(RingFds)
    }
}

/// Attaches to a ring's descriptors inherited from the orchestrator.
pub fn attach_fd(fds: &RingFds) -> Result<Arc<Segment>, String> {
    let owned = fds
        .0
        .iter()
        // SAFETY: the orchestrator left these descriptors open for us and nothing
        // else in this process owns them.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    Address::Descriptors(owned)
        .open()
        .map_err(|e| format!("attach the ring's descriptors: {e}"))
}

/// Attaches a producer, waiting up to 10 s for a free slot (a killed
/// predecessor's is reaped meanwhile).
pub fn attach_producer(seg: &Arc<Segment>) -> Result<shmring::Producer, String> {
    let t0 = Instant::now();
    loop {
        match seg.producer() {
            Ok(p) => return Ok(p),
            Err(Error::NoSlot { .. }) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(format!("attach producer: {e}")),
        }
    }
}

/// Starts producer process `instance` (`child-producer`) on the ring `fd`,
/// publishing its progress in line `instance` of `flags`, with the `extra`
/// arguments that say how it writes ([`ProducerArgs`]).
pub fn spawn_producer(
    fd: &RingFds,
    flags: &Flags,
    instance: u32,
    extra: &[String],
) -> std::io::Result<ChildGuard> {
    let mut args: Vec<String> = vec![
        "child-producer".into(),
        format!("--fd={fd}"),
        format!("--flags-fd={}", flags.raw_fd()),
        format!("--instance={instance}"),
    ];
    args.extend_from_slice(extra);
    ChildGuard::spawn_self(&args, &fd.with(&[flags.raw_fd()]), false)
}

/// Producer processes 0 to `n - 1` ([`spawn_producer`]); Err says which failed.
pub fn spawn_producers(
    fd: &RingFds,
    flags: &Flags,
    n: u32,
    extra: &[String],
) -> Result<Vec<ChildGuard>, String> {
    (0..n)
        .map(|i| {
            spawn_producer(fd, flags, i, extra).map_err(|e| format!("spawn producer {i}: {e}"))
        })
        .collect()
}

/// How a producer process writes.
#[derive(Debug, Clone, clap::Args)]
pub struct ProducerArgs {
    /// The ring's descriptors (inherited), comma-separated.
    #[arg(long)]
    pub fd: RingFds,
    /// Flag-table descriptor (inherited).
    #[arg(long)]
    pub flags_fd: i32,
    /// This producer's instance number (its line in the flag table, its records' id).
    #[arg(long)]
    pub instance: u32,
    #[arg(long, default_value_t = 1024)]
    pub min_size: u64,
    #[arg(long, default_value_t = 65536)]
    pub max_size: u64,
    /// Bytes written per step while filling a reservation.
    #[arg(long, default_value_t = 1 << 20)]
    pub chunk: usize,
    /// Pause after each step (µs): makes reservations last.
    #[arg(long, default_value_t = 0)]
    pub chunk_pause_us: u64,
    /// Random pause between records, up to this many µs.
    #[arg(long, default_value_t = 0)]
    pub gap_us: u64,
    /// Full-ring policy: Block(ms); 0 = Fail.
    #[arg(long, default_value_t = 1000)]
    pub block_ms: u64,
    /// On Full/Timeout/NoConsumer: retry the same sequence (no gaps), or drop the
    /// record and count it.
    #[arg(long)]
    pub drop: bool,
    /// Stop after this many committed records (0: until asked to stop).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Media-like pacing in bytes/s (0: as fast as possible): 4 KiB audio every
    /// 20 ms, the rest as 1080p I420 video frames (3,110,400 bytes).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
}

pub const VIDEO_1080P_I420: u64 = 1920 * 1080 * 3 / 2;
pub const AUDIO_PACKET: u64 = 4096;

pub fn producer(a: ProducerArgs) -> i32 {
    let flags = match Flags::from_raw_fd(a.flags_fd) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("child-producer {}: flag table: {e}", a.instance);
            return 2;
        }
    };
    let line = flags.line(a.instance as usize);
    let fail = |msg: String| {
        eprintln!("child-producer {}: {msg}", a.instance);
        line.state
            .store(state::FAILED, std::sync::atomic::Ordering::SeqCst);
        2
    };
    let seg = match attach_fd(&a.fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut prod = match attach_producer(&seg) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let policy = if a.block_ms == 0 {
        FullPolicy::Fail
    } else {
        FullPolicy::Block(Duration::from_millis(a.block_ms))
    };
    prod.set_policy(policy);
    let max = seg
        .geometry()
        .max_record
        .min(a.max_size)
        .max(REC_HDR as u64);
    let min = a.min_size.clamp(REC_HDR as u64, max);
    let mut rng = Rng::seeded();
    use std::sync::atomic::Ordering::SeqCst;
    line.state.store(state::OUT, SeqCst);
    let start = Instant::now();
    let audio_every = Duration::from_millis(20);
    let video_rate = a.rate.saturating_sub(AUDIO_PACKET * 50);
    let video_every = if video_rate > 0 {
        Duration::from_secs_f64(VIDEO_1080P_I420 as f64 / video_rate as f64)
    } else {
        Duration::MAX
    };
    let (mut next_audio, mut next_video) = (start, start);
    let mut seq: u64 = 0;
    let mut committed: u64 = 0;
    while line.stop.load(SeqCst) == 0 && (a.count == 0 || committed < a.count) {
        let len = if a.rate > 0 {
            let now = Instant::now();
            let (due, video) = if next_video <= next_audio {
                (next_video, true)
            } else {
                (next_audio, false)
            };
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(20)));
                continue;
            }
            if video {
                next_video += video_every;
                VIDEO_1080P_I420.min(seg.geometry().max_record)
            } else {
                next_audio += audio_every;
                AUDIO_PACKET.max(min)
            }
        } else {
            if a.gap_us > 0 {
                std::thread::sleep(Duration::from_micros(rng.below(a.gap_us + 1)));
            }
            rng.range(min, max)
        } as usize;
        line.state.store(state::RESERVING, SeqCst);
        let t = Instant::now();
        let r = prod.reserve(len);
        let blocked = t.elapsed().as_nanos() as u64;
        if blocked > line.max_block_ns.load(SeqCst) {
            line.max_block_ns.store(blocked, SeqCst);
        }
        match r {
            Ok(mut r) => {
                line.claim_seq.store(r.seq(), SeqCst);
                line.state.store(state::IN, SeqCst);
                let pause = a.chunk_pause_us;
                let buf = r.payload();
                fill_body(buf, a.instance, seq, a.chunk, || {
                    if pause > 0 {
                        std::thread::sleep(Duration::from_micros(pause));
                    }
                });
                seal_record(buf, a.instance, seq);
                let kind = if len as u64 == AUDIO_PACKET { 2 } else { 1 };
                line.state.store(state::COMMITTING, SeqCst);
                let c = r.commit(Meta::new(a.instance, kind));
                line.attempts.fetch_add(1, SeqCst);
                match c {
                    Ok(()) => {
                        committed += 1;
                        seq += 1;
                        line.committed.store(committed, SeqCst);
                    }
                    Err(_) => {
                        // Abandoned (the ring was reset): the record is lost, never
                        // delivered; move on.
                        line.other_errors.fetch_add(1, SeqCst);
                        seq += 1;
                    }
                }
                line.state.store(state::OUT, SeqCst);
            }
            Err(e) => {
                line.state.store(state::OUT, SeqCst);
                match e {
                    Error::NoConsumer(_) => line.no_consumer.fetch_add(1, SeqCst),
                    Error::Timeout { .. } | Error::Full { .. } => {
                        line.timeouts.fetch_add(1, SeqCst)
                    }
                    _ => {
                        // Corrupt (the ring is being scribbled) and the like: count,
                        // back off, try again.
                        std::thread::sleep(Duration::from_millis(1));
                        line.other_errors.fetch_add(1, SeqCst)
                    }
                };
                if a.drop {
                    line.attempts.fetch_add(1, SeqCst);
                    seq += 1;
                }
            }
        }
    }
    drop(prod);
    line.state.store(state::DONE, SeqCst);
    0
}

/// A consumer process for consumer-crash: prints `G instance seq` for every record
/// (before releasing it), holds up to `hold` frames and releases them shuffled.
pub fn consumer(fd: &RingFds, hold: usize) -> i32 {
    let seg = match attach_fd(fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("child-consumer: {e}");
            return 2;
        }
    };
    let t0 = Instant::now();
    let consumer = loop {
        match seg.consumer() {
            Ok(c) => break c,
            Err(Error::ConsumerBusy(_)) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => {
                eprintln!("child-consumer: attach: {e}");
                return 2;
            }
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "READY");
    let _ = out.flush();
    let mut rng = Rng::seeded();
    let hold = hold.max(1);
    let mut held = Vec::with_capacity(hold);
    let mut lines = String::with_capacity(hold * 32);
    loop {
        let got = match consumer.next_timeout(Some(Duration::from_millis(50))) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("child-consumer: {e}");
                return 3;
            }
        };
        let idle = got.is_none();
        if let Some(f) = got {
            match verify_record(f.payload()) {
                Ok((inst, seq)) => {
                    use std::fmt::Write as _;
                    let _ = writeln!(lines, "G {inst} {seq}");
                }
                Err(e) => {
                    eprintln!("child-consumer: bad record at claim {}: {e}", f.seq());
                    return 4;
                }
            }
            held.push(f);
        }
        if held.len() >= hold || (idle && !held.is_empty()) {
            // Report before releasing: a record released unreported would look lost.
            if out
                .write_all(lines.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                return 5;
            }
            lines.clear();
            for i in (1..held.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                held.swap(i, j);
            }
            held.clear();
        }
    }
}

/// Writes random bytes at random places of one region of the segment until killed
/// (see `scribble::REGIONS`; "all": anywhere but the identity line).
pub fn scribbler(fd: &RingFds, writes_per_sec: u64, region: &str) -> i32 {
    let seg = match attach_fd(fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("child-scribbler: {e}");
            return 2;
        }
    };
    let peer = Peer::new(&seg);
    let targets: Vec<Target> = match region {
        "all" => vec![Target::Control, Target::Slots, Target::Log, Target::Data],
        name => match Target::named(name) {
            Some(t) => vec![t],
            None => {
                eprintln!("child-scribbler: unknown region {name:?}");
                return 2;
            }
        },
    };
    let regions: Vec<std::ops::Range<usize>> = targets.iter().map(|&t| peer.target(t)).collect();
    let mut rng = Rng::seeded();
    let pause = Duration::from_nanos(1_000_000_000 / writes_per_sec.max(1));
    loop {
        let r = &regions[rng.below(regions.len() as u64) as usize];
        let (lo, hi) = (r.start as u64, r.end as u64);
        let n = rng.range(1, 16).min(hi - lo);
        let at = rng.range(lo, hi - n);
        let word = rng.next().to_le_bytes();
        let bytes: Vec<u8> = (0..n).map(|i| word[(i % 8) as usize]).collect();
        // Races with every peer on purpose (that is the test).
        peer.put_bytes(at as usize, &bytes);
        std::thread::sleep(pause);
    }
}
