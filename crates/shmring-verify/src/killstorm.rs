//! `killstorm`: SIGKILL a random producer process at a random moment, over and
//! over, while the others keep producing; replace each victim with a new process.
//!
//! Exactness of "killed mid-reservation": before killing, the victim is stopped
//! (SIGSTOP, and waitpid reports it stopped), so the state it published in its flag
//! line is the state it dies in. Producers publish RESERVING before `reserve`, IN
//! (with the claim's sequence) once it returned, COMMITTING before `commit` and OUT
//! once it returned. In RESERVING and COMMITTING the claim may or may not exist, so
//! a victim found there is resumed (SIGCONT) and stopped again a moment later: every
//! kill then lands either in IN (a claim exists and will never be committed: it must
//! be counted as abandoned exactly once) or outside (nothing to clean up).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shmring::{Address, Config, Segment};

use crate::common::{
    ms, quantile, seq_after, state, verify_record, ChildGuard, Flags, Report, Rng, Watchdog,
    SEQ_MASK,
};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kills (each followed by a replacement producer).
    #[arg(long, default_value_t = 1000)]
    pub cycles: u32,
    /// Producer processes running at once (1..=64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Ring capacity in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub capacity: u64,
    /// Record sizes (bytes).
    #[arg(long, default_value_t = 64 << 10)]
    pub min_size: u64,
    #[arg(long, default_value_t = 1 << 20)]
    pub max_size: u64,
    /// Producers fill reservations in steps of this many bytes ...
    #[arg(long, default_value_t = 32 << 10)]
    pub chunk: usize,
    /// ... pausing this long after each step (µs), so kills land mid-reservation.
    #[arg(long, default_value_t = 200)]
    pub chunk_pause_us: u64,
    /// Random pause between a producer's records, up to (µs).
    #[arg(long, default_value_t = 4000)]
    pub gap_us: u64,
    /// Random delay before each kill, up to (ms).
    #[arg(long, default_value_t = 20)]
    pub max_delay_ms: u64,
    /// The consumer must resume within this long after every kill (ms).
    #[arg(long, default_value_t = 500)]
    pub resume_budget_ms: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

struct Pending {
    instance: u32,
    dead_seq: Option<u64>,
    at: Instant,
    abandoned_before: u64,
}

#[derive(Default)]
struct Seen {
    next: Vec<u64>,
    received: u64,
    bytes: u64,
    duplicates: u64,
    gaps: u64,
    bad: u64,
    unknown: u64,
    errors: u64,
    first_problem: Option<String>,
    drain_timed_out: bool,
}

impl Seen {
    fn problem(&mut self, p: String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(p);
        }
    }
}

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("killstorm");
    let cfg = Config {
        capacity: a.capacity,
        max_record: Some(a.max_size.min(a.capacity / 2 - 64)),
        ..Config::default()
    };
    let seg = match Address::memfd("verify-killstorm", cfg).open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("killstorm: create segment: {e}");
            return 2;
        }
    };
    // One line per producer process; replacements for processes that die on their own
    // take lines too (capped: beyond that the run stops with an error).
    let instances = 2 * (a.cycles + a.producers) as usize + 16;
    let flags = match Flags::create(instances) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!("killstorm: flag table: {e}");
            return 2;
        }
    };
    let pending: Arc<Mutex<Option<Pending>>> = Arc::new(Mutex::new(None));
    let resumes: Arc<Mutex<Vec<(u64, bool)>>> =
        Arc::new(Mutex::new(Vec::with_capacity(a.cycles as usize)));
    let finish = Arc::new(AtomicBool::new(false));

    // The consumer, in this process (a thread), every call with a timeout.
    let consumer = {
        let (seg, pending, resumes, finish) = (
            seg.clone(),
            pending.clone(),
            resumes.clone(),
            finish.clone(),
        );
        std::thread::spawn(move || consume(seg, instances, pending, resumes, finish))
    };
    // Wait until the consumer is attached before producers start.
    let t = Instant::now();
    while !seg.stats().consumer_attached && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }

    let fd = crate::child::RingFds::of(&seg);
    let spawn = |inst: u32| -> std::io::Result<ChildGuard> {
        if inst as usize >= instances {
            return Err(std::io::Error::other(
                "too many producer processes died on their own",
            ));
        }
        let extra: Vec<String> = vec![
            format!("--min-size={}", a.min_size),
            format!("--max-size={}", a.max_size),
            format!("--chunk={}", a.chunk),
            format!("--chunk-pause-us={}", a.chunk_pause_us),
            format!("--gap-us={}", a.gap_us),
            "--block-ms=1000".into(),
        ];
        crate::child::spawn_producer(&fd, &flags, inst, &extra)
    };
    let mut next_inst = 0u32;
    // The next producer instance, started; None (said) when it cannot be.
    let mut spawn_next = || -> Option<(u32, ChildGuard)> {
        let inst = next_inst;
        next_inst += 1;
        spawn(inst)
            .map_err(|e| eprintln!("killstorm: spawn producer: {e}"))
            .ok()
            .map(|k| (inst, k))
    };
    let mut kids: Vec<(u32, ChildGuard)> = Vec::new();
    for _ in 0..a.producers {
        let Some(k) = spawn_next() else { return 2 };
        kids.push(k);
    }
    let mut rng = Rng::seeded();
    let mut committed = vec![0u64; instances];
    let (mut kills, mut mid, mut ambiguous_retries, mut ambiguous_kills) = (0u64, 0u64, 0u64, 0u64);
    let (mut not_resumed, mut unexpected_exits) = (0u64, 0u64);
    let mut in_init = 0u64;
    let started = Instant::now();
    let progress_every = (a.cycles / 10).max(1);
    for cycle in 0..a.cycles {
        std::thread::sleep(Duration::from_micros(rng.below(a.max_delay_ms * 1000 + 1)));
        // Stop a victim at a moment where its state is exact.
        let mut tries = 0;
        let (idx, st) = loop {
            let idx = rng.below(kids.len() as u64) as usize;
            let (inst, kid) = &mut kids[idx];
            if !kid.pause() {
                unexpected_exits += 1;
                eprintln!("killstorm: producer {inst} exited on its own");
                committed[*inst as usize] =
                    flags.line(*inst as usize).committed.load(Ordering::SeqCst);
                let Some(k) = spawn_next() else { return 2 };
                kids[idx] = k;
                continue;
            }
            let st = flags.line(*inst as usize).state.load(Ordering::SeqCst);
            if (st == state::RESERVING || st == state::COMMITTING) && tries < 500 {
                kid.resume();
                ambiguous_retries += 1;
                tries += 1;
                std::thread::sleep(Duration::from_micros(rng.below(500)));
                continue;
            }
            break (idx, st);
        };
        let (inst, kid) = &mut kids[idx];
        let line = flags.line(*inst as usize);
        let is_mid = st == state::IN;
        if st == state::RESERVING || st == state::COMMITTING {
            ambiguous_kills += 1;
        }
        if st == state::INIT {
            in_init += 1;
        }
        let dead_seq = is_mid.then(|| line.claim_seq.load(Ordering::SeqCst) & SEQ_MASK);
        let abandoned_before = seg.stats().abandoned;
        *pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(Pending {
            instance: *inst,
            dead_seq,
            at: Instant::now(),
            abandoned_before,
        });
        kid.kill();
        kills += 1;
        mid += is_mid as u64;
        committed[*inst as usize] = line.committed.load(Ordering::SeqCst);
        let Some(k) = spawn_next() else { return 2 };
        kids[idx] = k;
        // Wait for the consumer to resume (guard, far above any budget).
        let t = Instant::now();
        loop {
            if pending.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                not_resumed += 1;
                *pending.lock().unwrap_or_else(|p| p.into_inner()) = None;
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if (cycle + 1) % progress_every == 0 {
            eprintln!(
                "killstorm: {} / {} kills ({mid} mid-reservation), {:.0} s",
                cycle + 1,
                a.cycles,
                started.elapsed().as_secs_f64()
            );
        }
    }
    // Stop the survivors cleanly; their counts are final once they say DONE.
    for (inst, _) in &kids {
        flags.line(*inst as usize).stop.store(1, Ordering::SeqCst);
    }
    for (inst, kid) in &mut kids {
        let st = kid.wait_or_kill(Duration::from_secs(20));
        let line = flags.line(*inst as usize);
        if !st.is_some_and(|s| s.success()) || line.state.load(Ordering::SeqCst) != state::DONE {
            unexpected_exits += 1;
            eprintln!("killstorm: producer {inst} did not stop cleanly: {st:?}");
        }
        committed[*inst as usize] = line.committed.load(Ordering::SeqCst);
    }
    finish.store(true, Ordering::SeqCst);
    let seen = consumer.join().unwrap_or_else(|_| Seen {
        errors: 1,
        first_problem: Some("consumer thread panicked".into()),
        ..Default::default()
    });
    let stats = seg.stats();
    let elapsed = started.elapsed();

    // Figures.
    let res = resumes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut all: Vec<u64> = res.iter().map(|r| r.0).collect();
    all.sort_unstable();
    let mut mids: Vec<u64> = res.iter().filter(|r| r.1).map(|r| r.0).collect();
    mids.sort_unstable();
    let mut outs: Vec<u64> = res.iter().filter(|r| !r.1).map(|r| r.0).collect();
    outs.sort_unstable();
    let total_committed: u64 = committed.iter().sum();
    let mut lost = 0u64;
    let mut extra = 0u64;
    for (i, &c) in committed.iter().enumerate() {
        let got = seen.next.get(i).copied().unwrap_or(0);
        lost += c.saturating_sub(got);
        extra += got.saturating_sub(c);
    }
    rep.fig("seconds", (elapsed.as_secs_f64() * 10.0).round() / 10.0);
    rep.fig("kills", kills);
    rep.fig("kills_mid_reservation", mid);
    rep.fig("kills_between_records", kills - mid);
    rep.fig("kills_before_attach", in_init);
    rep.fig("ambiguous_moment_retries", ambiguous_retries);
    rep.fig("kills_at_ambiguous_moment", ambiguous_kills);
    rep.fig("producer_processes", next_inst);
    rep.fig("stats_abandoned", stats.abandoned);
    rep.fig("stats_reaped_slots", stats.reaped_slots);
    rep.fig("resume_ms_p50", ms(quantile(&all, 0.5)));
    rep.fig("resume_ms_p99", ms(quantile(&all, 0.99)));
    rep.fig("resume_ms_max", ms(all.last().copied().unwrap_or(0)));
    rep.fig("resume_mid_ms_p50", ms(quantile(&mids, 0.5)));
    rep.fig("resume_mid_ms_p99", ms(quantile(&mids, 0.99)));
    rep.fig("resume_mid_ms_max", ms(mids.last().copied().unwrap_or(0)));
    rep.fig("resume_between_ms_p50", ms(quantile(&outs, 0.5)));
    rep.fig("resume_between_ms_p99", ms(quantile(&outs, 0.99)));
    rep.fig(
        "resume_between_ms_max",
        ms(outs.last().copied().unwrap_or(0)),
    );
    rep.fig("records_committed", total_committed);
    rep.fig("records_received", seen.received);
    rep.fig("records_lost", lost);
    rep.fig("records_uncommitted_delivered", extra);
    rep.fig("bytes_received", seen.bytes);
    rep.fig("stats_records_committed", stats.records_committed);
    rep.fig("stats_records_consumed", stats.records_consumed);

    // Properties.
    let budget = a.resume_budget_ms * 1_000_000;
    let max = all.last().copied().unwrap_or(0);
    rep.check(
        "consumer resumes after every kill",
        not_resumed == 0 && all.len() as u64 == kills && max <= budget,
        format!(
            "{} of {kills} kills resumed, max {} ms (budget {} ms)",
            all.len(),
            ms(max),
            a.resume_budget_ms
        ),
    );
    rep.check(
        "every committed record received exactly once, in order",
        lost == 0 && extra == 0 && seen.duplicates == 0 && seen.gaps == 0 && !seen.drain_timed_out,
        format!(
            "committed {total_committed}, received {}, lost {lost}, duplicates {}, gaps {}, \
             uncommitted delivered {extra}{}",
            seen.received,
            seen.duplicates,
            seen.gaps,
            if seen.drain_timed_out {
                ", drain timed out"
            } else {
                ""
            }
        ),
    );
    rep.check(
        "every record intact (checksum, header)",
        seen.bad == 0 && seen.unknown == 0,
        format!("{} bad, {} from unknown producers", seen.bad, seen.unknown),
    );
    rep.check(
        "consumer calls never fail",
        seen.errors == 0,
        format!(
            "{} errors{}",
            seen.errors,
            seen.first_problem
                .as_deref()
                .map(|p| format!(" (first: {p})"))
                .unwrap_or_default()
        ),
    );
    let abandoned_ok = if ambiguous_kills == 0 {
        stats.abandoned == mid
    } else {
        (mid..=mid + ambiguous_kills).contains(&stats.abandoned)
    };
    rep.check(
        "abandoned claims == kills mid-reservation",
        abandoned_ok,
        format!(
            "Stats.abandoned {} vs {mid} kills mid-reservation (+{ambiguous_kills} ambiguous)",
            stats.abandoned
        ),
    );
    rep.check(
        "stats agree (committed == consumed)",
        stats.records_committed == stats.records_consumed
            && stats.records_consumed == seen.received,
        format!(
            "committed {}, consumed {}, received {}",
            stats.records_committed, stats.records_consumed, seen.received
        ),
    );
    rep.check(
        "producers only die when killed",
        unexpected_exits == 0,
        format!("{unexpected_exits} unexpected exits"),
    );
    rep.finish(a.json)
}

fn consume(
    seg: Arc<Segment>,
    instances: usize,
    pending: Arc<Mutex<Option<Pending>>>,
    resumes: Arc<Mutex<Vec<(u64, bool)>>>,
    finish: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen {
        next: vec![0; instances],
        ..Default::default()
    };
    let c = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            seen.errors += 1;
            seen.problem(format!("attach consumer: {e}"));
            return seen;
        }
    };
    let wd = Watchdog::new("killstorm consumer call", Duration::from_secs(30));
    let mut finish_at: Option<Instant> = None;
    let resumed = |p: &mut Option<Pending>, ok: bool| {
        if ok {
            if let Some(q) = p.take() {
                resumes
                    .lock()
                    .unwrap_or_else(|x| x.into_inner())
                    .push((q.at.elapsed().as_nanos() as u64, q.dead_seq.is_some()));
            }
        }
    };
    loop {
        wd.arm();
        let r = c.next_timeout(Some(Duration::from_millis(100)));
        wd.disarm();
        match r {
            Ok(Some(f)) => {
                let fseq = f.seq() & SEQ_MASK;
                match verify_record(f.payload()) {
                    Ok((inst, s)) => {
                        seen.received += 1;
                        seen.bytes += f.len() as u64;
                        match seen.next.get_mut(inst as usize) {
                            None => seen.unknown += 1,
                            Some(n) if s == *n => *n += 1,
                            Some(n) => {
                                let n = *n;
                                if s < n {
                                    seen.duplicates += 1;
                                } else {
                                    seen.gaps += 1;
                                    seen.next[inst as usize] = s + 1;
                                }
                                seen.problem(format!("producer {inst}: got {s}, expected {n}"));
                            }
                        }
                        let mut p = pending.lock().unwrap_or_else(|x| x.into_inner());
                        let ok = p.as_ref().is_some_and(|q| {
                            inst != q.instance && q.dead_seq.is_none_or(|d| seq_after(fseq, d))
                                || q.dead_seq.is_some_and(|d| seq_after(fseq, d))
                        });
                        resumed(&mut p, ok);
                    }
                    Err(e) => {
                        seen.bad += 1;
                        seen.problem(format!("record at claim {}: {e}", f.seq()));
                    }
                }
            }
            Ok(None) => {
                let s = seg.stats();
                {
                    let mut p = pending.lock().unwrap_or_else(|x| x.into_inner());
                    let ok = p
                        .as_ref()
                        .is_some_and(|q| q.dead_seq.is_some() && s.abandoned > q.abandoned_before);
                    resumed(&mut p, ok);
                }
                if finish.load(Ordering::SeqCst) {
                    let t = *finish_at.get_or_insert_with(Instant::now);
                    if s.records_in_flight == 0 {
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(30) {
                        seen.drain_timed_out = true;
                        break;
                    }
                }
            }
            Err(e) => {
                seen.errors += 1;
                seen.problem(e.to_string());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    seen
}
