//! `chaos`: honest producers under ordinary faults, and a checker over what every
//! process logged (`check.rs` says what must hold).
//!
//! Producer processes, each with several threads, write checksummed, numbered
//! records of 64 B to 3 MB into one ring, while the ring's consumer, a tethered
//! consumer and a tap (each its own process, with the library's default options)
//! log every record they get. Meanwhile the run SIGKILLs producer processes
//! (and starts new ones), stops them with SIGSTOP for 10 ms to 10 s (Ctrl-Z, a
//! debugger, a cgroup quota) and lets them go on with SIGCONT, stops the
//! tethered consumer and the tap too, and threads stall inside their
//! reservations on their own (a capture thread stuck on a lock). With
//! `--full-shm` the ring is a named one in a `/dev/shm` of its own (a private
//! tmpfs a little larger than the ring), which another file fills to the last
//! byte now and then for up to 5 s (Docker gives containers 64 MB): the ring's
//! memory was reserved when it was made, so nothing of it may change, and a ring
//! made meanwhile must be refused as what it is, a full `/dev/shm`. At the end it
//! lets everything go on, stops the producers, lets the readers drain, and
//! checks the logs and the ring's counters.
//!
//! ```text
//!   orchestrator ── SIGKILL / SIGSTOP / SIGCONT ──▶ producer processes (threads)
//!        │                                               │ reserve, fill, commit
//!        │ creates the ring (memfd)                       ▼        log: p-N.log
//!        └──────────────────────────────────────▶  the ring ──▶ consumer   consumer.log
//!                                                              ──▶ tethered tethered.log
//!                                                              ──▶ tap      tap.log
//! ```

mod check;
mod log;
mod roles;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shmring::{Address, Config, ConsumerOptions};

use crate::child::RingFds;
use crate::common::{ChildGuard, Report, Rng};
pub use roles::{producer, reader, ProducerArgs, ReaderArgs};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How long the faults go on (seconds).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Producer processes running at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub producers: u32,
    /// Threads per producer process (each its own producer on the ring).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub threads: u32,
    /// Ring capacity in bytes (the library's default).
    #[arg(long, default_value_t = Config::DEFAULT_CAPACITY)]
    pub capacity: u64,
    /// Record sizes (bytes), spread evenly over the powers of two between.
    #[arg(long, default_value_t = 64)]
    pub min_size: u64,
    #[arg(long, default_value_t = 3 << 20)]
    pub max_size: u64,
    /// Bytes per second each producer process writes.
    #[arg(long, default_value_t = 12 << 20)]
    pub rate: u64,
    /// Longest SIGSTOP of a producer process (ms); stops last 10 ms to this,
    /// spread evenly over the powers of two.
    #[arg(long, default_value_t = 10_000)]
    pub max_stop_ms: u64,
    /// Per thousand records, a thread stalls inside its reservation for up to
    /// `--stall-max-ms`.
    #[arg(long, default_value_t = 5)]
    pub stall_per_mille: u64,
    #[arg(long, default_value_t = 3000)]
    pub stall_max_ms: u64,
    /// Scheduling allowance over the wait bound (one claim timeout plus one
    /// liveness interval, the library's defaults), for a loaded host (ms).
    #[arg(long, default_value_t = 1000)]
    pub wait_slack_ms: u64,
    /// The ring is named, in a `/dev/shm` of its own (a private tmpfs of the
    /// ring's size and 16 MiB more; needs `unshare --mount`) that another file
    /// fills now and then.
    #[arg(long)]
    pub full_shm: bool,
    /// Set by the run itself once inside its private `/dev/shm`.
    #[arg(long, hide = true)]
    pub in_private_shm: bool,
    /// Keep the logs (their directory is printed).
    #[arg(long)]
    pub keep_logs: bool,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

/// A producer process: its instance number and its guard.
struct Producer {
    instance: u32,
    kid: ChildGuard,
    /// Stopped until then.
    stopped_until: Option<Instant>,
}

/// Another process stopped until then.
struct Stoppable {
    kid: ChildGuard,
    stopped_until: Option<Instant>,
}

/// What the faults did.
#[derive(Default)]
struct Faults {
    kills: u64,
    stops: u64,
    longest_stop: Duration,
    reader_stops: u64,
    most_pinned: u64,
    most_stopped_at_once: u64,
    /// Times `/dev/shm` was filled to the last byte.
    shm_fills: u64,
    /// Rings made while it was full, and what they got when not `NoSpace`.
    shm_refusals: u64,
    shm_misreported: Vec<String>,
}

/// `/dev/shm` filled by a file of another process, until `until`.
struct ShmFill {
    path: PathBuf,
    until: Instant,
}

impl ShmFill {
    /// Fills what is free in `/dev/shm`; then a ring made must be refused as
    /// `NoSpace` (counted in `f`).
    fn start(until: Instant, f: &mut Faults) -> Result<ShmFill, String> {
        use std::os::fd::AsFd;
        let path = PathBuf::from(format!("/dev/shm/chaos-filler-{}", std::process::id()));
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let st = rustix::fs::statvfs("/dev/shm").map_err(|e| format!("statvfs /dev/shm: {e}"))?;
        let free = st.f_bavail * st.f_frsize;
        if free > 0 {
            rustix::fs::fallocate(file.as_fd(), rustix::fs::FallocateFlags::empty(), 0, free)
                .map_err(|e| format!("filling /dev/shm ({free} bytes): {e}"))?;
        }
        f.shm_fills += 1;
        let extra = format!("chaos-while-full-{}", std::process::id());
        match Address::create(&extra, Config::with_capacity(1 << 20)).open() {
            Err(shmring::Error::NoSpace { .. }) => f.shm_refusals += 1,
            Err(e) => f.shm_misreported.push(e.to_string()),
            Ok(_) => f
                .shm_misreported
                .push("a 1 MiB ring was made in a full /dev/shm".into()),
        }
        Ok(ShmFill { path, until })
    }
}

impl Drop for ShmFill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn log_uniform(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    let (lb, hb) = (
        64 - lo.leading_zeros() as u64,
        64 - hi.leading_zeros() as u64,
    );
    let bits = rng.range(lb, hb);
    rng.range(lo, hi.min(1u64 << bits).max(lo))
}

pub fn run(a: Args) -> i32 {
    if a.full_shm && !a.in_private_shm {
        return in_private_shm(&a);
    }
    let mut report = Report::new("chaos");
    match run_inner(&a, &mut report) {
        Ok(()) => {}
        Err(e) => {
            report.check("the run itself", false, e);
        }
    }
    report.finish(a.json)
}

fn run_inner(a: &Args, report: &mut Report) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("shmring-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _cleanup = Cleanup {
        dir: dir.clone(),
        keep: a.keep_logs,
    };
    let cfg = Config {
        capacity: a.capacity,
        max_producers: 64,
        ..Config::for_records(a.capacity, a.max_size)
    };
    let name = format!("chaos-{}", std::process::id());
    let seg = if a.full_shm {
        Address::create(&name, cfg).open()
    } else {
        Address::memfd("chaos", cfg).open()
    }
    .map_err(|e| e.to_string())?;
    let fds = RingFds::of(&seg);
    let stop_producers = dir.join("stop-producers");
    let stop_readers = dir.join("stop-readers");
    let spawn_reader = |role: &str, fds: &RingFds| {
        let args = vec![
            "child-chaos-reader".to_string(),
            format!("--fd={fds}"),
            format!("--role={role}"),
            format!("--log={}", dir.join(format!("{role}.log")).display()),
            format!("--stop={}", stop_readers.display()),
        ];
        let args = if a.full_shm && role == "tap" {
            [args, vec![format!("--name={name}")]].concat()
        } else {
            args
        };
        ChildGuard::spawn_self(&args, &fds.0, false).map_err(|e| format!("spawn {role}: {e}"))
    };
    let mut consumer = spawn_reader("consumer", &fds)?;
    wait_for("the consumer to attach", Duration::from_secs(30), || {
        seg.stats().consumer_attached
    })?;
    let ro = seg.read_only_fd().map_err(|e| e.to_string())?;
    let ro_fds = RingFds(vec![std::os::fd::AsRawFd::as_raw_fd(&ro)]);
    let mut tether = Stoppable {
        kid: spawn_reader("tethered", &fds)?,
        stopped_until: None,
    };
    let mut tap = Stoppable {
        kid: spawn_reader("tap", &ro_fds)?,
        stopped_until: None,
    };
    let spawn_producer = |instance: u32| {
        let args = vec![
            "child-chaos-producer".to_string(),
            format!("--fd={fds}"),
            format!("--instance={instance}"),
            format!("--threads={}", a.threads),
            format!("--min-size={}", a.min_size),
            format!("--max-size={}", a.max_size),
            format!("--rate={}", a.rate),
            format!("--stall-per-mille={}", a.stall_per_mille),
            format!("--stall-max-ms={}", a.stall_max_ms),
            format!("--log={}", producer_log(&dir, instance).display()),
            format!("--stop={}", stop_producers.display()),
        ];
        ChildGuard::spawn_self(&args, &fds.0, false)
            .map_err(|e| format!("spawn producer {instance}: {e}"))
    };
    let mut next_instance = 0u32;
    let mut producers = Vec::new();
    for _ in 0..a.producers {
        producers.push(Producer {
            instance: next_instance,
            kid: spawn_producer(next_instance)?,
            stopped_until: None,
        });
        next_instance += 1;
    }
    let mut killed: Vec<u32> = Vec::new();
    let mut f = Faults::default();
    let mut rng = Rng::seeded();
    let mut fill: Option<ShmFill> = None;
    let end = Instant::now() + Duration::from_secs(a.seconds);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.range(20, 200)));
        let now = Instant::now();
        if fill.as_ref().is_some_and(|x| x.until <= now) {
            fill = None;
        }
        if a.full_shm && fill.is_none() && rng.below(20) == 0 {
            let ms = log_uniform(&mut rng, 100, 5000);
            fill = Some(ShmFill::start(now + Duration::from_millis(ms), &mut f)?);
        }
        for p in &mut producers {
            if p.stopped_until.is_some_and(|t| t <= now) {
                p.kid.resume();
                p.stopped_until = None;
            }
        }
        for r in [&mut tether, &mut tap] {
            if r.stopped_until.is_some_and(|t| t <= now) {
                r.kid.resume();
                r.stopped_until = None;
            }
        }
        let stopped = producers
            .iter()
            .filter(|p| p.stopped_until.is_some())
            .count() as u64;
        f.most_stopped_at_once = f.most_stopped_at_once.max(stopped);
        f.most_pinned = f.most_pinned.max(seg.stats().pinned_bytes);
        if let Some(st) = consumer.exited() {
            return Err(format!("the consumer exited ({st})"));
        }
        let i = rng.below(producers.len() as u64) as usize;
        match rng.below(100) {
            0..=29 => {
                // SIGKILL, running or stopped, and a new process in its place.
                let mut old = std::mem::replace(
                    &mut producers[i],
                    Producer {
                        instance: next_instance,
                        kid: spawn_producer(next_instance)?,
                        stopped_until: None,
                    },
                );
                next_instance += 1;
                old.kid.kill();
                killed.push(old.instance);
                f.kills += 1;
            }
            30..=69 if producers[i].stopped_until.is_none() => {
                let ms = log_uniform(&mut rng, 10, a.max_stop_ms.max(10));
                if producers[i].kid.pause() {
                    producers[i].stopped_until = Some(now + Duration::from_millis(ms));
                    f.stops += 1;
                    f.longest_stop = f.longest_stop.max(Duration::from_millis(ms));
                }
            }
            70..=84 => {
                let r = if rng.below(2) == 0 {
                    &mut tether
                } else {
                    &mut tap
                };
                if r.stopped_until.is_none() && r.kid.pause() {
                    let ms = log_uniform(&mut rng, 10, 2000);
                    r.stopped_until = Some(now + Duration::from_millis(ms));
                    f.reader_stops += 1;
                }
            }
            _ => {}
        }
        for p in &mut producers {
            if let Some(st) = p.kid.exited() {
                return Err(format!("producer {} exited on its own ({st})", p.instance));
            }
        }
    }
    // Everything goes on; the producers stop; the readers drain.
    drop(fill);
    for p in &mut producers {
        p.kid.resume();
    }
    tether.kid.resume();
    tap.kid.resume();
    std::fs::write(&stop_producers, b"").map_err(|e| e.to_string())?;
    for p in &mut producers {
        match p.kid.wait_for(Duration::from_secs(60)) {
            Some(st) if st.success() => {}
            other => {
                return Err(format!(
                    "producer {} did not stop cleanly: {other:?}",
                    p.instance
                ))
            }
        }
    }
    wait_for(
        "the consumer to drain the ring",
        Duration::from_secs(60),
        || seg.stats().records_in_flight == 0,
    )?;
    // Pins of claims taken back go once their holders settle: the consumer looks
    // every liveness interval.
    let _ = wait_for("the pins to go", Duration::from_secs(10), || {
        seg.stats().pinned_bytes == 0
    });
    std::fs::write(&stop_readers, b"").map_err(|e| e.to_string())?;
    for (name, kid) in [
        ("consumer", &mut consumer),
        ("tethered", &mut tether.kid),
        ("tap", &mut tap.kid),
    ] {
        match kid.wait_for(Duration::from_secs(60)) {
            Some(st) if st.success() => {}
            other => return Err(format!("the {name} did not stop cleanly: {other:?}")),
        }
    }
    let stats = seg.stats();
    let read = |p: &Path| log::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut run = check::Run {
        threads: a.threads,
        owner: read(&dir.join("consumer.log"))?,
        tether: read(&dir.join("tethered.log"))?,
        tap: read(&dir.join("tap.log"))?,
        stats,
        wait_bound_ns: wait_bound(a).as_nanos() as u64,
        ..Default::default()
    };
    for instance in 0..next_instance {
        run.producers.push(check::Incarnation {
            instance,
            killed: killed.contains(&instance),
            events: read(&producer_log(&dir, instance))?,
        });
    }
    let v = check::check(&run);
    report.fig("seconds", a.seconds);
    report.fig("producer_processes", next_instance as u64);
    report.fig("threads_per_process", a.threads as u64);
    report.fig("kills", f.kills);
    report.fig("stops", f.stops);
    report.fig("longest_stop_ms", f.longest_stop.as_millis() as u64);
    report.fig("most_stopped_at_once", f.most_stopped_at_once);
    report.fig("reader_stops", f.reader_stops);
    report.fig("most_pinned_bytes", f.most_pinned);
    report.fig("expired_claims", stats.expired_claims);
    report.fig("stalled_claims", stats.stalled_claims);
    report.fig("abandoned_claims", stats.abandoned);
    report.fig("pin_paddings", stats.pin_paddings);
    report.fig("bytes_consumed", stats.bytes_consumed);
    report.fig("wait_bound_ms", wait_bound(a).as_millis() as u64);
    if a.full_shm {
        report.fig("shm_fills", f.shm_fills);
        report.check(
            "a ring made while /dev/shm is full is refused as a full /dev/shm",
            f.shm_misreported.is_empty() && f.shm_refusals == f.shm_fills,
            format!(
                "{} of {} refused as NoSpace{}",
                f.shm_refusals,
                f.shm_fills,
                f.shm_misreported
                    .first()
                    .map(|e| format!("; otherwise: {e}"))
                    .unwrap_or_default()
            ),
        );
    }
    for (name, value) in &v.figures {
        report.fig(name, *value);
    }
    for (name, ok, detail) in v.checks {
        report.check(name, ok, detail);
    }
    if a.keep_logs {
        report.note(format!("logs kept in {}", dir.display()));
    }
    Ok(())
}

/// Runs this same command again in a `/dev/shm` of its own, the ring's size and
/// 16 MiB more (a private mount namespace: nothing is mounted outside it), and
/// returns its exit code.
fn in_private_shm(a: &Args) -> i32 {
    let mib = (a.capacity >> 20) as u32 + 16;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("chaos: the program's own path: {e}");
            return 2;
        }
    };
    let seconds = a.seconds.saturating_add(600).min(u32::MAX as u64) as u32;
    let mut cmd = match shmring_testkit::small_shm::command(mib, seconds, &exe.to_string_lossy()) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("chaos --full-shm: a /dev/shm of its own cannot be made here: {why}");
            return 2;
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cmd.args(args).arg("--in-private-shm").status() {
        Ok(st) => st.code().unwrap_or(1),
        Err(e) => {
            eprintln!("chaos --full-shm: unshare: {e}");
            2
        }
    }
}

/// The longest a committed record may wait for the ring's consumer: one claim
/// timeout plus one liveness interval (the library's defaults, which every
/// process of the run uses), and the scheduling allowance.
fn wait_bound(a: &Args) -> Duration {
    let d = ConsumerOptions::default();
    d.claim_timeout.unwrap_or(Duration::ZERO)
        + d.liveness_interval
        + Duration::from_millis(a.wait_slack_ms)
}

fn producer_log(dir: &Path, instance: u32) -> PathBuf {
    dir.join(format!("p-{instance}.log"))
}

fn wait_for(what: &str, guard: Duration, mut cond: impl FnMut() -> bool) -> Result<(), String> {
    let t = Instant::now();
    while !cond() {
        if t.elapsed() > guard {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Removes the logs' directory (unless kept), however the run ends.
struct Cleanup {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
