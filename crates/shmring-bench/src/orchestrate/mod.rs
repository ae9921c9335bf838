//! `shmring bench`: runs each transport's two workers, gathers their reports, and
//! prints the table, the JSON and the plot. The experiments are here; running one
//! (launch, supervise, gather) is in `running`, `--scale` in `scale`, the whole
//! bot (`--workload bot`) in `bot`, the worker processes in `worker`, the tables in
//! `tables`.

use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use shmring::{Address, Config, Segment};
use shmring_host::status::{Look, StatusLine};

use crate::args::{parse, BenchArgs, ModeArg, WorkloadArg};
use crate::report::{Row, WorkerReport};
use crate::sys::{grow_pipe, pipe, Inheritable};
use crate::transport::{Set, Transport};
use crate::work::{AUDIO_RECORD, FRAME_1080P_I420};
use shmring_host::{open_descriptors, proc_memory, CpuMeter};

mod bot;
mod running;
mod scale;
mod tables;
mod worker;

use running::{drive, launch, sum_reports, supervise, Failure};
use tables::{add_ratios, combine, fill_row, print_table};
use worker::Worker;

const GIB: f64 = (1u64 << 30) as f64;

/// One sample of a worker process, psrecord-style.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub t_s: f64,
    /// CPU % of one core since the previous sample.
    pub cpu_pct: f64,
    pub rss_kib: u64,
}

/// CPU/RSS over time of one run's producer and consumer.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub label: String,
    pub producer: Vec<Sample>,
    pub consumer: Vec<Sample>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Video,
    Audio,
    Meeting,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Video => "video",
            Workload::Audio => "audio",
            Workload::Meeting => "meeting",
        }
    }
    /// Its largest record.
    fn size(self) -> usize {
        match self {
            Workload::Video => FRAME_1080P_I420,
            Workload::Audio => AUDIO_RECORD,
            Workload::Meeting => meeting::VIDEO_BYTES,
        }
    }
}

pub(crate) use crate::meeting;

#[derive(Clone)]
struct Plan {
    seconds: f64,
    frames: Option<u64>,
    rate_bps: f64,
    ring_mib: u64,
    huge_pages: bool,
    corrupt_every: Option<u64>,
    participants: u32,
}

pub fn run(args: &[String]) -> i32 {
    let a: BenchArgs = match parse("shmring bench", args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let mut failed = false;
    if !(a.rate.is_finite() && a.rate > 0.0) {
        eprintln!(
            "shmring bench: --rate must be a positive number of MB/s, not {}",
            a.rate
        );
        return 2;
    }
    if let Some(s) = a.seconds {
        if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
            eprintln!("shmring bench: --seconds must be in (0, 3600], not {s}");
            return 2;
        }
    }
    if !(1..=100).contains(&a.repeat) {
        eprintln!(
            "shmring bench: --repeat must be from 1 to 100, not {}",
            a.repeat
        );
        return 2;
    }
    if !(1..=meeting::MAX_PARTICIPANTS).contains(&a.participants) {
        eprintln!(
            "shmring bench: --participants must be from 1 to {}, not {}",
            meeting::MAX_PARTICIPANTS,
            a.participants
        );
        return 2;
    }
    if !(1..=2048).contains(&a.ring_mib) || !a.ring_mib.is_power_of_two() {
        eprintln!(
            "shmring bench: --ring-mib must be a power of two from 1 to 2048, not {}",
            a.ring_mib
        );
        return 2;
    }
    if a.workload == WorkloadArg::Bot {
        return bot::run(&a);
    }
    let transports: Vec<Transport> = match &a.transports {
        Some(v) => {
            let mut list = Vec::new();
            for name in v.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
                match name.parse::<Transport>() {
                    Err(e) => {
                        eprintln!("shmring bench: {e}");
                        failed = true;
                    }
                    Ok(t) if !t.built() => {
                        eprintln!(
                            "shmring bench: transport {name:?} is not in this build (build \
                             shmring with the shmring-bench/{} feature)",
                            t.spec().feature.unwrap_or(name)
                        );
                        failed = true;
                    }
                    Ok(t) if !list.contains(&t) => list.push(t),
                    Ok(_) => {}
                }
            }
            list
        }
        None => Transport::default_set().collect(),
    };
    let scale = match scale::options(&a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shmring bench: {e}");
            return 2;
        }
    };
    let transports = match &scale {
        Some(sc) => match scale::transports(sc, a.transports.is_some().then_some(transports)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("shmring bench: {e}");
                return 2;
            }
        },
        None => transports,
    };
    let workloads: &[Workload] = match a.workload {
        WorkloadArg::Video => &[Workload::Video],
        WorkloadArg::Audio => &[Workload::Audio],
        WorkloadArg::All => &[Workload::Video, Workload::Audio],
        WorkloadArg::Meeting => &[Workload::Meeting],
        // Run by `bot::run` above.
        WorkloadArg::Bot => &[],
    };
    // The record sizes on a ring, by what carries them.
    let records: Vec<(&str, usize)> = match &scale {
        Some(sc) => scale::records(sc),
        None => workloads.iter().map(|w| (w.name(), w.size())).collect(),
    };
    // The ring size is checked once, against the core's rules, before any run.
    if transports.iter().any(|t| t.is_ring()) {
        for &(name, size) in &records {
            let fits = |mib: u64| {
                Config::for_records(mib << 20, size as u64)
                    .geometry()
                    .is_ok()
            };
            if !fits(a.ring_mib) {
                let least = (0..12).map(|k| 1u64 << k).find(|&m| fits(m));
                eprintln!(
                    "shmring bench: --ring-mib {}: a ring of {} MiB cannot hold two {} records \
                     of {} bytes{}; nothing was run",
                    a.ring_mib,
                    a.ring_mib,
                    name,
                    size,
                    least.map_or(String::new(), |m| format!(" (use --ring-mib {m} or more)"))
                );
                return 2;
            }
        }
    }
    let plan = Plan {
        seconds: a.seconds.unwrap_or(if a.quick { 1.0 } else { 5.0 }),
        frames: a.frames,
        rate_bps: a.rate * 1e6,
        ring_mib: a.ring_mib,
        huge_pages: a.huge_pages,
        corrupt_every: a.corrupt_every,
        participants: a.participants,
    };
    let modes: &[&str] = match a.mode {
        ModeArg::Rated => &["rated"],
        ModeArg::Unthrottled => &["unthrottled"],
        ModeArg::Both => &["rated", "unthrottled"],
    };
    // The meeting runs at its own, real rate.
    let modes_of = |w: Workload| -> &[&str] {
        if w == Workload::Meeting {
            &["rated"]
        } else {
            modes
        }
    };
    // Python receivers read video only; the second-reader rows are for the video
    // and 4 KiB workloads.
    let runs_of = |t: Transport, w: Workload| match t.set() {
        Set::Default => true,
        Set::SecondReader => w != Workload::Meeting,
        Set::Python => w == Workload::Video,
    };
    let repeat = a.repeat;
    if repeat > 1 {
        println!(
            "shmring bench: every transport {repeat} times, interleaved; each figure is the \
             median of the runs, with the smallest and largest beside the main ones"
        );
    }
    if let Some(sc) = &scale {
        let (mut rows, f) = scale::run(sc, &transports, modes, &plan, repeat);
        add_ratios(&mut rows);
        tables::print_scale(&rows, a.rate);
        quick_note(&a);
        let svg = crate::plot::scale_svg(&rows);
        return i32::from(!write_out(&a, &rows, svg) || f || failed);
    }

    let runs = workloads
        .iter()
        .map(|&w| modes_of(w).len() * transports.iter().filter(|&&t| runs_of(t, w)).count())
        .sum::<usize>() as u64
        * u64::from(repeat);
    let per_run_ms = (plan.seconds * 1000.0) as u64;
    let mut bar = progress(runs, per_run_ms);
    let started = Instant::now();
    let total = runs;
    let mut rows = Vec::new();
    let mut timelines = Vec::new();
    let mut done = 0u64;
    for &w in workloads {
        for &mode in modes_of(w) {
            let mut runs: Vec<Vec<Row>> = vec![Vec::new(); transports.len()];
            for rep in 0..repeat {
                for (i, &t) in transports.iter().enumerate() {
                    if !runs_of(t, w) {
                        continue; // the Python rows are the video story only
                    }
                    let nth = nth_run(rep, repeat);
                    bar.set(
                        format!(
                            "run {} of {total}: {t} {} {mode}{nth} ({:.0} s so far)",
                            done + 1,
                            w.name(),
                            started.elapsed().as_secs_f64()
                        ),
                        true,
                    );
                    let base = done * per_run_ms;
                    let (row, tl) = if t.set() == Set::Python {
                        let row = bar.suspend(|| {
                            crate::python::run_py(t, w.name(), mode, plan.seconds, a.rate)
                        });
                        (row, Timeline::default())
                    } else {
                        run_one(t, w, mode, &plan, &bar, base, per_run_ms)
                    };
                    done += 1;
                    bar.set_position(done * per_run_ms);
                    if let Some(e) = &row.error {
                        bar.suspend(|| {
                            eprintln!("shmring bench: {t} ({} {mode}{nth}): {e}", w.name())
                        });
                        failed = true;
                    }
                    if t == Transport::Shmring && rep == 0 {
                        timelines.push(tl);
                    }
                    runs[i].push(row);
                }
            }
            rows.extend(runs.into_iter().filter(|r| !r.is_empty()).map(combine));
        }
    }
    bar.finish();
    add_ratios(&mut rows);
    print_table(&rows, a.rate, plan.participants);
    quick_note(&a);
    let svg = match a.plot {
        Some(_) => crate::plot::svg(&rows, &timelines),
        None => String::new(),
    };
    failed |= !write_out(&a, &rows, svg);
    if failed {
        1
    } else {
        0
    }
}

/// The progress of `runs` runs of `per_run_ms` each: on a terminal a bar of the
/// planned milliseconds; elsewhere a line as each run starts.
fn progress(runs: u64, per_run_ms: u64) -> StatusLine {
    StatusLine::new(
        "shmring bench",
        Duration::ZERO,
        Look::Bar {
            len: runs * per_run_ms.max(1),
            template: "{spinner} [{elapsed_precise}] {wide_bar} {pos:>}/{len} ms {msg}",
        },
    )
}

/// " (run N of M)" when runs are repeated, else nothing.
fn nth_run(rep: u32, repeat: u32) -> String {
    if repeat > 1 {
        format!(" (run {} of {repeat})", rep + 1)
    } else {
        String::new()
    }
}

/// After the tables of a `--quick` run: what its figures are worth.
fn quick_note(a: &BenchArgs) {
    if a.quick {
        println!(
            "\n--quick: one-second runs, so these figures are indicative only; for figures \
             to rely on, run longer and repeated (--seconds 8 --repeat 3)"
        );
    }
}

/// Writes the JSON (`--json`) and the plot (`--plot`); false if one could not be.
fn write_out(a: &BenchArgs, rows: &[Row], svg: String) -> bool {
    let mut ok = true;
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&rows).unwrap_or_else(|_| "[]".into());
        match std::fs::write(path, text + "\n") {
            Ok(()) => println!("shmring bench: results (JSON) written to {}", shown(path)),
            Err(e) => {
                eprintln!("shmring bench: cannot write {}: {e}", path.display());
                ok = false;
            }
        }
    }
    if let Some(path) = &a.plot {
        match std::fs::write(path, svg) {
            Ok(()) => println!("shmring bench: plot (SVG) written to {}", shown(path)),
            Err(e) => {
                eprintln!("shmring bench: cannot write {}: {e}", path.display());
                ok = false;
            }
        }
    }
    ok
}

/// A path as the user can find it: absolute.
fn shown(p: &std::path::Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// What a transport needs set up by the parent before its workers start.
enum Wiring {
    None,
    /// Each producer gets its own descriptors (one, or one per reader); the
    /// consumer all the other ends.
    Fds(Vec<Vec<Inheritable>>, Vec<Inheritable>),
    /// Consumer gets the listener, producers the port.
    Listener(Inheritable, u16),
    /// Every side maps the same ring (memfd).
    Ring(std::sync::Arc<Segment>),
    /// Both sides map the same page (the wake-up row).
    Page(std::os::fd::OwnedFd),
    /// Every side opens the same iceoryx2 service.
    Service(String),
}

/// Connects the sides of transport `t` for records of up to `size` bytes.
fn wire(t: Transport, size: usize, producers: u32, plan: &Plan) -> Result<Wiring, String> {
    let io = |e: std::io::Error| format!("setup: {e}");
    let pairs = |make: &dyn Fn() -> Result<(Inheritable, Inheritable), String>| {
        let mut v = (Vec::new(), Vec::new());
        for _ in 0..producers {
            let (p, c) = make()?;
            v.0.push(vec![p]);
            v.1.push(c);
        }
        Ok::<_, String>(Wiring::Fds(v.0, v.1))
    };
    let socket_pair = || {
        let (p, c) = UnixStream::pair().map_err(io)?;
        Ok::<_, String>((
            Inheritable::new(&p).map_err(io)?,
            Inheritable::new(&c).map_err(io)?,
        ))
    };
    Ok(match t {
        t if t.is_ring() => {
            let cfg = Config {
                huge_pages: plan.huge_pages,
                ..Config::for_records(plan.ring_mib << 20, size as u64)
            };
            Wiring::Ring(Address::memfd("shmring-bench", cfg).open().map_err(|e| {
                format!("setup: {e} (a {size}-byte record needs --ring-mib of at least twice that)")
            })?)
        }
        Transport::Uds => pairs(&socket_pair)?,
        // One producer writing every record to two sockets, a reader on each.
        Transport::UdsTwoReaders => {
            let (p1, c1) = socket_pair()?;
            let (p2, c2) = socket_pair()?;
            Wiring::Fds(vec![vec![p1, p2]], vec![c1, c2])
        }
        Transport::Pipe => pairs(&|| {
            let (r, w) = pipe().map_err(io)?;
            grow_pipe(&w, 1 << 20);
            Ok((
                Inheritable::new(&w).map_err(io)?,
                Inheritable::new(&r).map_err(io)?,
            ))
        })?,
        Transport::Tcp | Transport::WebSocket => {
            let l = TcpListener::bind("127.0.0.1:0").map_err(io)?;
            let port = l.local_addr().map_err(io)?.port();
            Wiring::Listener(Inheritable::new(&l).map_err(io)?, port)
        }
        Transport::Iceoryx2 => {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Wiring::Service(format!("shmring-bench-{}-{n}", std::process::id()))
        }
        Transport::Wakeup => Wiring::Page(crate::wakeup::page().map_err(io)?),
        Transport::Floor
        | Transport::Floor2Core
        | Transport::Shmring
        | Transport::ShmringCopy
        | Transport::ShmringBudget
        | Transport::ShmringTethered
        | Transport::ShmringTap
        | Transport::PyWebsocket
        | Transport::PyShmring => Wiring::None,
    })
}

fn run_one(
    t: Transport,
    w: Workload,
    mode: &str,
    plan: &Plan,
    bar: &StatusLine,
    base_ms: u64,
    per_run_ms: u64,
) -> (Row, Timeline) {
    let rated = mode == "rated";
    let meeting = w == Workload::Meeting;
    let wakeup = t == Transport::Wakeup;
    let (meeting_bps, meeting_rps) = meeting::rate(plan.participants);
    // The wake-up row pings on the workload's schedule: a frame's, or for the
    // meeting the average record's.
    let (size, rate_bps) = match (meeting, wakeup) {
        (true, true) => ((meeting_bps / meeting_rps) as usize, meeting_bps),
        (true, false) => (w.size(), meeting_bps),
        (false, _) => (w.size(), plan.rate_bps),
    };
    let producers = if meeting && !wakeup {
        meeting::PRODUCERS
    } else {
        1
    };
    let mut row = Row::empty(t, w.name(), mode, if wakeup { 0 } else { w.size() as u64 });
    let mut tl = Timeline {
        label: format!("{t} {} {mode}", w.name()),
        ..Default::default()
    };
    let mut common = worker_args(t, size, if rated { rate_bps } else { 0.0 }, plan);
    if meeting && !wakeup {
        common.extend([
            "--meeting".into(),
            plan.participants.to_string(),
            "--producers".into(),
            producers.to_string(),
        ]);
    }
    let mut stats = None;
    let res = drive(
        t,
        (size, producers),
        &common,
        plan,
        (bar, base_ms, per_run_ms),
        &mut tl,
        &mut stats,
    );
    if let Some(st) = stats {
        row.ring_producer_waits = Some(st.producer_waits);
        row.ring_consumer_waits = Some(st.consumer_waits);
        row.ring_peak_occupancy = Some(st.peak_occupancy);
    }
    let plan = Plan {
        rate_bps,
        ..plan.clone()
    };
    match res {
        Ok((p, c)) => fill_row(&mut row, &p, c.as_ref(), rated, &plan),
        Err(b) => {
            let (e, p, c) = *b;
            if let Some(p) = p {
                fill_row(&mut row, &p, c.as_ref(), rated, &plan);
            }
            row.error = Some(e);
        }
    }
    (row, tl)
}

/// The arguments every worker of a run of `t` gets: records of up to `size`
/// bytes, `rate_bps` bytes a second (0: unthrottled), and what `plan` says.
fn worker_args(t: Transport, size: usize, rate_bps: f64, plan: &Plan) -> Vec<String> {
    let mut v = vec![
        "--transport".to_string(),
        t.name().to_string(),
        "--size".into(),
        size.to_string(),
        "--frames".into(),
        plan.frames.unwrap_or(0).to_string(),
        "--seconds".into(),
        plan.seconds.to_string(),
        "--rate".into(),
        rate_bps.to_string(),
        "--ring-mib".into(),
        plan.ring_mib.to_string(),
    ];
    if let Some(n) = plan.corrupt_every {
        v.extend(["--corrupt-every".into(), n.to_string()]);
    }
    if plan.huge_pages {
        v.push("--huge-pages".into());
    }
    v
}
