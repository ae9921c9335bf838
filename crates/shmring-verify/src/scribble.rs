//! `scribble`: a live process writes random bytes at random places of the segment
//! (control block, slot table, claim log, data) while real producer processes write
//! and the consumer (here, every call with a timeout and a watchdog) reads. The
//! consumer must never crash or hang; it reports corruption and resets the ring.
//! Once the scribbler is stopped, the ring must work again for new producers.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring::{Config, Error, Segment};

use crate::common::{ms, spawn_self, state, verify_record, Flags, Kid, Report, Watchdog};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How long the scribbler runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Producer processes running at once (1..=64).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Ring capacity in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub capacity: u64,
    /// Scribbles (1..16 random bytes each) per second.
    #[arg(long, default_value_t = 2000)]
    pub writes_per_sec: u64,
    /// Also scribble the identity line (magic, sizes), which no reset restores.
    #[arg(long)]
    pub hit_identity: bool,
    /// No record for this long (ms) while producers run: reset the ring.
    #[arg(long, default_value_t = 300)]
    pub stall_ms: u64,
    /// Records each new producer writes after the scribbler is stopped.
    #[arg(long, default_value_t = 2000)]
    pub recovery_records: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("scribble");
    let seg = match Segment::create_memfd("verify-scribble", &Config::with_capacity(a.capacity)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("scribble: create segment: {e}");
            return 2;
        }
    };
    let flags = match Flags::create(4096) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("scribble: flag table: {e}");
            return 2;
        }
    };
    let mut consumer = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("scribble: consumer: {e}");
            return 2;
        }
    };
    let fd = seg.fd().as_raw_fd();
    let spawn = |inst: u32, count: u64| {
        let args: Vec<String> = vec![
            "child-producer".into(),
            format!("--fd={fd}"),
            format!("--flags-fd={}", flags.raw_fd()),
            format!("--instance={inst}"),
            "--min-size=256".into(),
            "--max-size=65536".into(),
            "--block-ms=200".into(),
            format!("--count={count}"),
        ];
        spawn_self(&args, &[fd, flags.raw_fd()], false)
    };
    let mut next_inst = 0u32;
    let mut producers: Vec<Kid> = Vec::new();
    for _ in 0..a.producers {
        match spawn(next_inst, 0) {
            Ok(k) => producers.push(k),
            Err(e) => {
                eprintln!("scribble: spawn producer: {e}");
                return 2;
            }
        }
        next_inst += 1;
    }
    let mut sargs = vec![
        "child-scribbler".to_string(),
        format!("--fd={fd}"),
        format!("--writes-per-sec={}", a.writes_per_sec),
    ];
    if a.hit_identity {
        sargs.push("--hit-identity".into());
    }
    let mut scribbler = match spawn_self(&sargs, &[fd], false) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("scribble: spawn scribbler: {e}");
            return 2;
        }
    };

    let call_timeout = Duration::from_millis(50);
    let wd = Watchdog::new("scribble consumer call", Duration::from_secs(10));
    let (mut ok_frames, mut bad_frames, mut corrupt, mut resets) = (0u64, 0u64, 0u64, 0u64);
    let (mut too_many, mut other_err, mut restarts) = (0u64, 0u64, 0u64);
    let mut exit_kinds: Vec<String> = Vec::new();
    let mut corrupt_whats: Vec<&'static str> = Vec::new();
    let mut max_call = Duration::ZERO;
    let (mut stalls, stall_after) = (0u64, Duration::from_millis(a.stall_ms));
    let mut last_frame = Instant::now();
    let started = Instant::now();
    let mut last_check = Instant::now();
    while started.elapsed() < Duration::from_secs(a.seconds) {
        let reset = {
            wd.arm();
            let t = Instant::now();
            let r = consumer.next_timeout(Some(call_timeout));
            let took = t.elapsed();
            wd.disarm();
            max_call = max_call.max(took);
            let mut reset = false;
            match r {
                Ok(Some(f)) => {
                    last_frame = Instant::now();
                    match verify_record(f.payload()) {
                        Ok(_) => ok_frames += 1,
                        Err(_) => bad_frames += 1,
                    }
                }
                Ok(None) => {
                    // A scribbled claim can stall the ring (a "claimed" entry naming a
                    // live producer is waited for): the application's remedy is a reset.
                    if last_frame.elapsed() > stall_after {
                        stalls += 1;
                        reset = true;
                    }
                }
                Err(Error::Corrupt { what, .. }) => {
                    corrupt += 1;
                    if !corrupt_whats.contains(&what) {
                        corrupt_whats.push(what);
                    }
                    reset = true;
                }
                Err(Error::TooManyHeld { .. }) => {
                    too_many += 1;
                    reset = true;
                }
                Err(e) => {
                    other_err += 1;
                    if exit_kinds.len() < 8 {
                        exit_kinds.push(format!("consumer error: {e}"));
                    }
                }
            }
            reset
        };
        if reset {
            let _ = consumer.reset();
            resets += 1;
            last_frame = Instant::now();
        }
        // Producers may give up on a scribbled ring: replace them.
        if last_check.elapsed() > Duration::from_millis(100) {
            last_check = Instant::now();
            for k in producers.iter_mut() {
                if let Some(st) = k.exited() {
                    restarts += 1;
                    if exit_kinds.len() < 8 {
                        exit_kinds.push(format!("producer exited: {st}"));
                    }
                    match spawn(next_inst, 0) {
                        Ok(n) => *k = n,
                        Err(e) => {
                            eprintln!("scribble: spawn producer: {e}");
                            return 2;
                        }
                    }
                    next_inst += 1;
                }
            }
        }
    }
    // Stop the scribbler, then everyone who wrote during the storm.
    scribbler.kill();
    for k in producers.iter_mut() {
        k.kill();
    }
    let stormed = started.elapsed();
    let storm_stats = seg.stats();
    let _ = consumer.reset();
    resets += 1;

    // Recovery: new honest producers, every record verified, exactly once.
    let first = next_inst;
    let mut fresh: Vec<Kid> = Vec::new();
    for _ in 0..a.producers {
        match spawn(next_inst, a.recovery_records) {
            Ok(k) => fresh.push(k),
            Err(e) => {
                eprintln!("scribble: spawn producer: {e}");
                return 2;
            }
        }
        next_inst += 1;
    }
    let n = a.producers as usize;
    let mut next = vec![0u64; n];
    let (mut rec_ok, mut rec_bad, mut rec_stale, mut rec_order, mut rec_err) = (0u64, 0, 0, 0, 0);
    let t = Instant::now();
    let guard = Duration::from_secs(60);
    while next.iter().any(|&x| x < a.recovery_records) && t.elapsed() < guard {
        wd.arm();
        let r = consumer.next_timeout(Some(Duration::from_millis(100)));
        wd.disarm();
        match r {
            Ok(Some(f)) => match verify_record(f.payload()) {
                Ok((inst, s)) if inst >= first && ((inst - first) as usize) < n => {
                    let i = (inst - first) as usize;
                    if s == next[i] {
                        next[i] += 1;
                        rec_ok += 1;
                    } else {
                        rec_order += 1;
                    }
                }
                Ok(_) => rec_stale += 1,
                Err(_) => rec_bad += 1,
            },
            Ok(None) => {
                // Every new producer is gone and nothing is left in the ring (e.g.
                // they could not attach): nothing more can come.
                if fresh
                    .iter_mut()
                    .all(|k| k.is_reaped() || k.exited().is_some())
                    && seg.stats().records_in_flight == 0
                {
                    break;
                }
            }
            Err(e) => {
                rec_err += 1;
                if exit_kinds.len() < 8 {
                    exit_kinds.push(format!("after the storm: {e}"));
                }
                break;
            }
        }
    }
    let mut clean_exits = 0;
    for k in fresh.iter_mut() {
        if k.wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success())
        {
            clean_exits += 1;
        }
    }
    let done_lines = (first..next_inst)
        .filter(|&i| flags.line(i as usize).state.load(Ordering::SeqCst) == state::DONE)
        .count();

    rep.fig("seconds", (stormed.as_secs_f64() * 10.0).round() / 10.0);
    rep.fig("scribbles_per_sec_requested", a.writes_per_sec);
    rep.fig("identity_line_scribbled", a.hit_identity);
    rep.fig("corruptions_detected", corrupt);
    rep.fig("corruption_kinds", corrupt_whats.join("; "));
    rep.fig("too_many_held", too_many);
    rep.fig("resets", resets);
    rep.fig("stalls_reset", stalls);
    let perr: u64 = (0..first)
        .map(|i| flags.line(i as usize).other_errors.load(Ordering::SeqCst))
        .sum();
    let pnc: u64 = (0..first)
        .map(|i| {
            flags.line(i as usize).no_consumer.load(Ordering::SeqCst)
                + flags.line(i as usize).timeouts.load(Ordering::SeqCst)
        })
        .sum();
    rep.fig("producer_errors_during_storm", perr);
    rep.fig("producer_timeouts_during_storm", pnc);
    rep.fig("frames_verified", ok_frames);
    rep.fig("frames_bad_payload", bad_frames);
    rep.fig("consumer_other_errors", other_err);
    rep.fig("consumer_max_call_ms", ms(max_call.as_nanos() as u64));
    rep.fig("producer_restarts", restarts);
    rep.fig(
        "stats_corruption_during_storm_falsifiable",
        storm_stats.corruption,
    );
    rep.fig("recovery_frames_verified", rec_ok);
    for e in &exit_kinds {
        rep.note(e.clone());
    }
    rep.check(
        "consumer never crashed or hung",
        true,
        format!(
            "{} calls' longest took {} ms with a {} ms timeout (a watchdog ends the run on a hang)",
            ok_frames + bad_frames + corrupt,
            ms(max_call.as_nanos() as u64),
            call_timeout.as_millis()
        ),
    );
    rep.check(
        "scribbling was detected",
        corrupt + bad_frames + too_many + stalls > 0,
        format!(
            "{corrupt} Corrupt errors, {bad_frames} damaged payloads caught by checksum, \
             {stalls} stalls ended by a reset"
        ),
    );
    rep.check(
        "the ring works again after the scribbler stops",
        rec_ok == a.recovery_records * n as u64
            && rec_bad + rec_stale + rec_order + rec_err == 0
            && clean_exits == n
            && done_lines == n,
        format!(
            "{rec_ok} of {} records verified exactly once; {rec_bad} bad, {rec_stale} stale, \
             {rec_order} out of order, {rec_err} errors; {clean_exits}/{n} producers finished",
            a.recovery_records * n as u64
        ),
    );
    rep.finish(a.json)
}
