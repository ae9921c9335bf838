//! `scribble`: a live process writes random bytes at random places of one region
//! of the segment (the cursors, the whole control block, the slot table, the claim
//! log, the identity line, or the data) while real producer processes write and
//! the consumer (here, every call with a timeout and a watchdog) reads. The
//! consumer must never crash or hang. Then the scribbler is killed, and nothing
//! else happens: no process is restarted and the application never resets the
//! ring. The same producers' records must flow again (the consumer finds and
//! mends what it cannot reconcile by itself), and from then on every record must
//! arrive exactly once. Reported per region: the longest time, over the rounds,
//! from "scribbler stopped" to "a record produced after that was delivered".

use std::time::{Duration, Instant};

use shmring::{Address, Config, Error};

use crate::child::spawn_producers;
use crate::common::{ms, verify_record, ChildGuard, Flags, Report, Watchdog};

/// The regions the scribbler can be aimed at.
pub const REGIONS: &[&str] = &["cursors", "control", "slots", "log", "identity", "data"];

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How long the scribbler runs in each round.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
    /// Rounds per region; the recovery time reported is the longest.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Regions to scribble, one after the other (comma-separated): cursors,
    /// control, slots, log, identity, data.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cursors,control,slots,log,identity"
    )]
    pub targets: Vec<String>,
    /// Producer processes running throughout (1..=64).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Ring capacity in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub capacity: u64,
    /// Scribbles (1..16 random bytes each) per second.
    #[arg(long, default_value_t = 2000)]
    pub writes_per_sec: u64,
    /// After records flow again, how long every record must arrive exactly once (ms).
    #[arg(long, default_value_t = 1000)]
    pub check_ms: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

/// What the consumer saw during a storm and after it.
#[derive(Default)]
struct Round {
    frames_ok: u64,
    frames_bad: u64,
    errors: u64,
    recover: Option<Duration>,
    after_ok: u64,
    after_dup: u64,
    after_gap: u64,
    instances_after: usize,
}

pub fn run(a: Args) -> i32 {
    if let Some(bad) = a.targets.iter().find(|t| !REGIONS.contains(&t.as_str())) {
        eprintln!(
            "scribble: unknown region {bad:?}; one of {}",
            REGIONS.join(", ")
        );
        return 2;
    }
    let mut rep = Report::new("scribble");
    let seg = match Address::memfd("verify-scribble", Config::with_capacity(a.capacity)).open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("scribble: create segment: {e}");
            return 2;
        }
    };
    let flags = match Flags::create(256) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("scribble: flag table: {e}");
            return 2;
        }
    };
    let consumer = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("scribble: consumer: {e}");
            return 2;
        }
    };
    let fd = crate::child::RingFds::of(&seg);
    let extra: Vec<String> = vec![
        "--min-size=256".into(),
        "--max-size=65536".into(),
        "--block-ms=200".into(),
        "--count=0".into(),
    ];
    let mut producers = match spawn_producers(&fd, &flags, a.producers, &extra) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("scribble: {e}");
            return 2;
        }
    };
    let wd = Watchdog::new("scribble consumer call", Duration::from_secs(10));
    fn call<'c>(
        wd: &Watchdog,
        c: &'c shmring::Consumer,
    ) -> shmring::Result<Option<shmring::Frame<'c>>> {
        wd.arm();
        let r = c.next_timeout(Some(Duration::from_millis(50)));
        wd.disarm();
        r
    }
    let mut all_ok = true;
    for target in &a.targets {
        let mut worst: Option<Duration> = None;
        let mut total = Round::default();
        let mut failed_rounds = 0;
        for _ in 0..a.rounds.max(1) {
            let sargs = vec![
                "child-scribbler".to_string(),
                format!("--fd={fd}"),
                format!("--writes-per-sec={}", a.writes_per_sec),
                format!("--region={target}"),
            ];
            let mut scribbler = match ChildGuard::spawn_self(&sargs, &fd.0, false) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("scribble: spawn scribbler: {e}");
                    return 2;
                }
            };
            let mut r = Round::default();
            let storm = Instant::now();
            while storm.elapsed() < Duration::from_secs(a.seconds) {
                match call(&wd, &consumer) {
                    Ok(Some(f)) => match verify_record(f.payload()) {
                        Ok(_) => r.frames_ok += 1,
                        Err(_) => r.frames_bad += 1,
                    },
                    Ok(None) => {}
                    Err(_) => r.errors += 1,
                }
            }
            scribbler.kill();
            let stopped = Instant::now();
            let stopped_ns = shmring::now_ns();
            // Records flow again: one produced after the scribbler stopped arrives.
            let mut last: Vec<Option<u64>> = vec![None; a.producers as usize];
            let guard = Duration::from_secs(20);
            while r.recover.is_none() && stopped.elapsed() < guard {
                if let Ok(Some(f)) = call(&wd, &consumer) {
                    if let Ok((inst, seq)) = verify_record(f.payload()) {
                        if f.timestamp_ns() > stopped_ns {
                            r.recover = Some(stopped.elapsed());
                            if let Some(l) = last.get_mut(inst as usize) {
                                *l = Some(seq);
                            }
                        }
                    }
                }
            }
            // From then on, every record exactly once, in each producer's order.
            let check = Instant::now();
            while r.recover.is_some() && check.elapsed() < Duration::from_millis(a.check_ms) {
                match call(&wd, &consumer) {
                    Ok(Some(f)) => match verify_record(f.payload()) {
                        Ok((inst, seq)) => {
                            let Some(l) = last.get_mut(inst as usize) else {
                                r.after_gap += 1;
                                continue;
                            };
                            match *l {
                                Some(p) if seq <= p => r.after_dup += 1,
                                Some(p) if seq != p + 1 => r.after_gap += 1,
                                _ => r.after_ok += 1,
                            }
                            *l = Some(seq);
                        }
                        Err(_) => r.after_gap += 1,
                    },
                    Ok(None) => {}
                    Err(Error::Corrupt { .. }) | Err(_) => r.after_gap += 1,
                }
            }
            r.instances_after = last.iter().filter(|l| l.is_some()).count();
            let ok = r.recover.is_some()
                && r.after_dup == 0
                && r.after_gap == 0
                && r.instances_after == a.producers as usize;
            if !ok {
                failed_rounds += 1;
            }
            worst = worst.max(r.recover);
            total.frames_ok += r.frames_ok;
            total.frames_bad += r.frames_bad;
            total.errors += r.errors;
            total.after_ok += r.after_ok;
            total.after_dup += r.after_dup;
            total.after_gap += r.after_gap;
        }
        let exited = producers
            .iter_mut()
            .map(|k| k.exited().is_some())
            .filter(|&e| e)
            .count();
        let worst_ms = worst.map_or(-1.0, |d| ms(d.as_nanos() as u64));
        rep.fig(&format!("{target}_recover_max_ms"), worst_ms);
        rep.fig(&format!("{target}_frames_verified_during"), total.frames_ok);
        rep.fig(&format!("{target}_frames_damaged_during"), total.frames_bad);
        rep.fig(&format!("{target}_records_after"), total.after_ok);
        all_ok &= rep.check(
            &format!(
                "{target}: records flow again with no restart and no reset by the application"
            ),
            failed_rounds == 0 && exited == 0,
            format!(
                "{} rounds; longest from scribbler stopped to a new record delivered: {} ms; \
                 afterwards {} records exactly once, {} twice, {} missing or damaged; \
                 {exited} producers exited",
                a.rounds,
                if worst_ms < 0.0 {
                    "never".into()
                } else {
                    format!("{worst_ms:.1}")
                },
                total.after_ok,
                total.after_dup,
                total.after_gap
            ),
        );
    }
    for k in producers.iter_mut() {
        k.kill();
    }
    let st = seg.stats();
    rep.fig("consumer_resets", consumer.resets());
    rep.fig("stats_corruption_falsifiable", st.corruption);
    rep.check(
        "consumer never crashed or hung",
        true,
        "every call returned within its watchdog (a hang ends the run)",
    );
    let _ = all_ok;
    rep.finish(a.json)
}
