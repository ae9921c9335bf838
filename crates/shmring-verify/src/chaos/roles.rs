//! The processes of a chaos run (hidden subcommands of this executable): a
//! producer process with several threads, and the three readers (the ring's
//! consumer, a tethered consumer, a tap). Each logs what it did (see `log.rs`)
//! and stops when the orchestrator creates its stop file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shmring::{Address, Consumer, ConsumerOptions, Error, FullPolicy, Meta, Tap};

use super::check::stream_id;
use super::log::{error_code, Event, Kind, Writer};
use crate::child::{attach_fd, attach_producer, RingFds};
use crate::common::{fill_body, seal_record, verify_record, Rng, REC_HDR};

/// The kind every chaos record carries (opaque to shmring).
const KIND: u32 = 0x0c;

/// A producer process of a chaos run.
#[derive(Debug, Clone, clap::Args)]
pub struct ProducerArgs {
    /// The ring's descriptors (inherited), comma-separated.
    #[arg(long)]
    pub fd: RingFds,
    /// This process's instance number (its streams are `instance << 4 | thread`).
    #[arg(long)]
    pub instance: u32,
    #[arg(long)]
    pub threads: u32,
    #[arg(long)]
    pub min_size: u64,
    #[arg(long)]
    pub max_size: u64,
    /// Bytes per second this process writes, over all its threads.
    #[arg(long)]
    pub rate: u64,
    /// Per thousand records, the thread stalls inside its reservation ...
    #[arg(long)]
    pub stall_per_mille: u64,
    /// ... for up to this long (ms): a thread stuck on a lock, not the process.
    #[arg(long)]
    pub stall_max_ms: u64,
    #[arg(long)]
    pub log: PathBuf,
    /// Stop (finish the record at hand, exit) once this file exists.
    #[arg(long)]
    pub stop: PathBuf,
}

/// A reader of a chaos run.
#[derive(Debug, Clone, clap::Args)]
pub struct ReaderArgs {
    /// The ring's descriptors (inherited), comma-separated: the writable ones
    /// for a consumer, one read-only descriptor for a tap.
    #[arg(long)]
    pub fd: RingFds,
    /// `consumer`, `tethered` or `tap`.
    #[arg(long)]
    pub role: String,
    #[arg(long)]
    pub log: PathBuf,
    #[arg(long)]
    pub stop: PathBuf,
    /// A tap of a named ring opens it by this name, read-only (a file of
    /// /dev/shm is not sealed as a memfd is, so it is not taken as a descriptor).
    #[arg(long)]
    pub name: Option<String>,
}

fn now_ns() -> u64 {
    shmring::now_ns()
}

/// Checks `stop` at most every 10 ms.
struct StopFile<'a> {
    path: &'a Path,
    last: Instant,
    set: bool,
}

impl StopFile<'_> {
    fn new(path: &Path) -> StopFile<'_> {
        StopFile {
            path,
            last: Instant::now(),
            set: false,
        }
    }

    fn set(&mut self) -> bool {
        if !self.set && self.last.elapsed() >= Duration::from_millis(10) {
            self.last = Instant::now();
            self.set = self.path.exists();
        }
        self.set
    }
}

pub fn producer(a: ProducerArgs) -> i32 {
    let seg = match attach_fd(&a.fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chaos producer {}: {e}", a.instance);
            return 2;
        }
    };
    let log = match Writer::create(&a.log) {
        Ok(w) => std::sync::Arc::new(w),
        Err(e) => {
            eprintln!("chaos producer {}: {}: {e}", a.instance, a.log.display());
            return 2;
        }
    };
    let threads: Vec<_> = (0..a.threads.max(1))
        .map(|t| {
            let (seg, log, a) = (seg.clone(), log.clone(), a.clone());
            std::thread::spawn(move || produce(&seg, &log, &a, t))
        })
        .collect();
    let mut code = 0;
    for t in threads {
        if t.join().map_or(true, |c| c != 0) {
            code = 3;
        }
    }
    code
}

/// One thread's records: sizes spread evenly over powers of two from
/// `min_size` to `max_size`, written slowly enough to keep `rate`, each checked
/// by its readers (a checksum over the whole payload).
fn produce(seg: &std::sync::Arc<shmring::Segment>, log: &Writer, a: &ProducerArgs, t: u32) -> i32 {
    let stream = stream_id(a.instance, t);
    let mut p = match attach_producer(seg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("chaos producer {stream:#x}: {e}");
            return 2;
        }
    };
    p.set_policy(FullPolicy::Block(Duration::from_secs(1)));
    let mut rng = Rng(shmring_testkit::mix(
        ((a.instance as u64) << 8 | t as u64) ^ now_ns(),
    ));
    let (lo, hi) = (
        a.min_size.max(REC_HDR as u64),
        a.max_size.max(REC_HDR as u64),
    );
    let per_thread = (a.rate / a.threads.max(1) as u64).max(1);
    let mut stop = StopFile::new(&a.stop);
    let started = Instant::now();
    let mut sent_bytes = 0u64;
    let mut seq = 0u64;
    while !stop.set() {
        // Log-uniform between lo and hi: as many small records as large ones.
        let bits = rng.range(
            64 - lo.leading_zeros() as u64,
            64 - hi.leading_zeros() as u64,
        );
        let len = rng.range(lo, hi.min(1u64 << bits).max(lo)) as usize;
        let stall = rng.below(1000) < a.stall_per_mille;
        let stall_for = Duration::from_millis(rng.range(10, a.stall_max_ms.max(10)));
        let reserve_at = now_ns();
        match p.reserve(len) {
            Ok(mut r) => {
                let waited = now_ns() - reserve_at;
                let buf = r.payload();
                let chunk = (len / 4).max(64);
                let mut step = 0;
                fill_body(buf, stream, seq, chunk, || {
                    step += 1;
                    if stall && step == 2 {
                        std::thread::sleep(stall_for);
                    }
                });
                seal_record(buf, stream, seq);
                let ts = now_ns();
                match r.commit(Meta::new(stream, KIND).with_timestamp(ts)) {
                    Ok(()) => log.log(Event::new(Kind::Committed, stream, seq, ts, waited)),
                    Err(Error::Abandoned { .. }) => {
                        log.log(Event::new(Kind::Abandoned, stream, seq, ts, 0))
                    }
                    Err(e) => log.log(Event::new(Kind::Failed, stream, seq, error_code(&e), 0)),
                }
            }
            Err(Error::Timeout { .. } | Error::Full { .. } | Error::NoConsumer(_)) => {
                log.log(Event::new(Kind::Dropped, stream, seq, now_ns(), 0))
            }
            Err(e) => {
                log.log(Event::new(Kind::Failed, stream, seq, error_code(&e), 0));
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        seq += 1;
        sent_bytes += len as u64;
        // Keep to the rate: sleep until this many bytes are due.
        let due = Duration::from_secs_f64(sent_bytes as f64 / per_thread as f64);
        if let Some(ahead) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(ahead.min(Duration::from_millis(200)));
        }
    }
    0
}

pub fn reader(a: ReaderArgs) -> i32 {
    let log = match Writer::create(&a.log) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("chaos {}: {}: {e}", a.role, a.log.display());
            return 2;
        }
    };
    match a.role.as_str() {
        "tap" => tap(&a, &log),
        "consumer" | "tethered" => consume(&a, &log),
        other => {
            eprintln!("chaos reader: no role {other:?}");
            2
        }
    }
}

/// Logs a record a reader got: delivered if it checks (its payload's checksum,
/// and the stream its header names is the one its payload names), else torn.
/// `expelled` says whether the reader has been expelled meanwhile (a tethered
/// consumer: its frames are no longer protected once expelled, DESIGN §10); a
/// record that does not check then is logged as that expulsion (`false`:
/// attach again), never as torn. Every overwrite of a frame needs the expulsion
/// first, so asking after seeing the damage cannot miss it.
fn note(log: &Writer, payload: &[u8], meta: Meta, expelled: impl Fn() -> bool) -> bool {
    let torn = match verify_record(payload) {
        Ok((stream, seq)) if stream == meta.stream => {
            log.log(Event::new(
                Kind::Delivered,
                stream,
                seq,
                now_ns(),
                meta.timestamp_ns,
            ));
            return true;
        }
        Ok((stream, seq)) => Event::new(Kind::Torn, stream, seq, now_ns(), 0),
        Err(_) => Event::new(Kind::Torn, 0, 0, now_ns(), 0),
    };
    if expelled() {
        log.log(Event::new(Kind::Expelled, 0, 0, now_ns(), 0));
        return false;
    }
    log.log(torn);
    true
}

/// The ring's consumer or a tethered one, with the library's default options:
/// holds up to 16 frames at a time, for up to 20 ms, and releases them in a
/// shuffled order, checking each again just before it releases it (a frame must
/// not change while it is held: a late write into it is a torn record too). A
/// tethered one that is expelled attaches again (a new epoch of its log).
fn consume(a: &ReaderArgs, log: &Writer) -> i32 {
    let seg = match attach_fd(&a.fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chaos {}: {e}", a.role);
            return 2;
        }
    };
    let tethered = a.role == "tethered";
    let attach = || {
        if tethered {
            Consumer::tethered(seg.clone(), ConsumerOptions::default())
        } else {
            Consumer::new(seg.clone())
        }
    };
    let mut stop = StopFile::new(&a.stop);
    let mut rng = Rng(now_ns());
    'attach: loop {
        let consumer = match attach() {
            Ok(c) => c,
            Err(e) if tethered && !stop.set() => {
                eprintln!("chaos tethered: attach: {e}");
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                eprintln!("chaos {}: attach: {e}", a.role);
                return 2;
            }
        };
        log.log(Event::new(Kind::Attached, 0, 0, now_ns(), 0));
        let mut held = Vec::with_capacity(16);
        let mut since = Instant::now();
        let mut idle = 0;
        // Checks the frames held again and releases them; `false`: one changed
        // because this tethered consumer was expelled meanwhile (its frames are
        // no longer protected then, and it is told at its next call: DESIGN §10).
        let release = |held: &mut Vec<shmring::Frame<'_>>, rng: &mut Rng| {
            rng.shuffle(held);
            let changed = held
                .iter()
                .filter(|f| verify_record(f.payload()).is_err())
                .count();
            held.clear();
            if changed > 0 && !matches!(consumer.adopted(), Ok(true)) {
                log.log(Event::new(Kind::Expelled, 0, 0, now_ns(), 0));
                return false;
            }
            for _ in 0..changed {
                log.log(Event::new(Kind::Torn, 0, 0, now_ns(), 1));
            }
            true
        };
        loop {
            match consumer.next_timeout(Some(Duration::from_millis(20))) {
                Ok(Some(f)) => {
                    idle = 0;
                    if !note(log, f.payload(), f.meta(), || {
                        !matches!(consumer.adopted(), Ok(true))
                    }) {
                        drop(f);
                        continue 'attach;
                    }
                    if held.is_empty() {
                        since = Instant::now();
                    }
                    held.push(f);
                    if (held.len() > rng.below(16) as usize
                        || since.elapsed() > Duration::from_millis(rng.below(20)))
                        && !release(&mut held, &mut rng)
                    {
                        continue 'attach;
                    }
                }
                Ok(None) => {
                    if !release(&mut held, &mut rng) {
                        continue 'attach;
                    }
                    idle += 1;
                    // Stopping: once nothing came for a while after the stop file.
                    if stop.set() && idle >= 5 {
                        return 0;
                    }
                }
                Err(Error::Detached { .. }) if tethered => {
                    drop(held);
                    log.log(Event::new(Kind::Expelled, 0, 0, now_ns(), 0));
                    continue 'attach;
                }
                Err(e) => {
                    eprintln!("chaos {}: {e}", a.role);
                    return 3;
                }
            }
        }
    }
}

/// A tap on a read-only descriptor: every record it gets is checked; at the end
/// it logs what it counted lost.
fn tap(a: &ReaderArgs, log: &Writer) -> i32 {
    let ro = match &a.name {
        Some(name) => Address::named(name).open_read_only(),
        None => {
            let Some(&fd) = a.fd.0.first() else {
                eprintln!("chaos tap: no descriptor");
                return 2;
            };
            // SAFETY: the orchestrator left this descriptor open for us; nothing
            // else in this process owns it.
            let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            Address::Descriptors(vec![fd]).open_read_only()
        }
    };
    let ro = match ro {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos tap: {e}");
            return 2;
        }
    };
    let mut tap = Tap::new(ro, shmring::TapOptions::default());
    log.log(Event::new(Kind::Attached, 0, 0, now_ns(), 0));
    let mut stop = StopFile::new(&a.stop);
    let mut buf = Vec::new();
    let mut idle = 0;
    loop {
        match tap.next_into(&mut buf, Some(Duration::from_millis(20))) {
            Ok(Some(f)) => {
                idle = 0;
                note(log, &buf, f.meta, || false);
            }
            Ok(None) => {
                idle += 1;
                if stop.set() && idle >= 5 {
                    break;
                }
            }
            Err(e) => {
                eprintln!("chaos tap: {e}");
                return 3;
            }
        }
    }
    let st = tap.stats();
    log.log(Event::new(Kind::TapCounts, 0, 0, st.lost, st.torn));
    0
}
