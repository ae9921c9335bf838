//! `consumer-crash`: SIGKILL the consumer process, again and again, while producer
//! processes write with `FullPolicy::Block(t)`. Producers must never block past
//! their timeout and must report the missing consumer (`Error::NoConsumer`); each
//! new consumer process takes over at the published read cursor. Every committed
//! record arrives at least once; only records the dead consumer still held (at most
//! `--hold`) arrive twice.

use crate::child::{spawn_producers, RingFds};
use std::io::{BufRead, BufReader};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use shmring::{Address, Config};

use crate::common::{drained, ms, state, verify_record, ChildGuard, Flags, Report, Rng, Watchdog};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Consumer processes to kill.
    #[arg(long, default_value_t = 10)]
    pub cycles: u32,
    /// Producer processes running at once (1..=64).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Ring capacity in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub capacity: u64,
    /// Frames a consumer holds before releasing them (shuffled).
    #[arg(long, default_value_t = 8)]
    pub hold: usize,
    /// Producers' full-ring policy: Block(this many ms).
    #[arg(long, default_value_t = 100)]
    pub block_ms: u64,
    /// Each consumer runs a random time up to this long before it is killed (ms).
    #[arg(long, default_value_t = 400)]
    pub max_run_ms: u64,
    /// Time without a consumer after each kill (ms).
    #[arg(long, default_value_t = 400)]
    pub gap_ms: u64,
    /// A reserve call may exceed the producers' timeout by this much (ms) before it
    /// counts as blocking past it (producers wake every 50 ms; a loaded machine
    /// adds scheduling delay).
    #[arg(long, default_value_t = 250)]
    pub block_slack_ms: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

/// Records one consumer delivered, in delivery order: (instance, sequence).
type Deliveries = Vec<(u32, u64)>;

fn run_consumer_child(
    fd: &RingFds,
    hold: usize,
) -> std::io::Result<(
    ChildGuard,
    mpsc::Receiver<()>,
    std::thread::JoinHandle<Deliveries>,
)> {
    let args = vec![
        "child-consumer".to_string(),
        format!("--fd={fd}"),
        format!("--hold={hold}"),
    ];
    let mut kid = ChildGuard::spawn_self(&args, &fd.0, true)?;
    let out = kid.take_stdout().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if line == "READY" {
                let _ = tx.send(());
            } else if let Some(rest) = line.strip_prefix("G ") {
                let mut it = rest.split(' ');
                if let (Some(Ok(i)), Some(Ok(s))) =
                    (it.next().map(str::parse), it.next().map(str::parse))
                {
                    got.push((i, s));
                }
            }
        }
        got
    });
    Ok((kid, rx, reader))
}

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("consumer-crash");
    let seg =
        match Address::memfd("verify-consumer-crash", Config::with_capacity(a.capacity)).open() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("consumer-crash: create segment: {e}");
                return 2;
            }
        };
    let flags = match Flags::create(a.producers as usize) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("consumer-crash: flag table: {e}");
            return 2;
        }
    };
    let fd = RingFds::of(&seg);
    let mut lists: Vec<Deliveries> = Vec::new();
    let mut rng = Rng::seeded();

    // The first consumer attaches before the producers start.
    let spawn_consumer = || -> Result<_, String> {
        let (kid, ready, reader) =
            run_consumer_child(&fd, a.hold).map_err(|e| format!("spawn consumer: {e}"))?;
        ready
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| "consumer process did not attach".to_string())?;
        Ok((kid, reader))
    };
    let mut current = match spawn_consumer() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("consumer-crash: {e}");
            return 2;
        }
    };
    let extra: Vec<String> = vec![
        "--min-size=256".into(),
        "--max-size=16384".into(),
        format!("--block-ms={}", a.block_ms),
    ];
    let mut producers = match spawn_producers(&fd, &flags, a.producers, &extra) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("consumer-crash: {e}");
            return 2;
        }
    };
    let started = Instant::now();
    let mut no_consumer_seen_after_kill = 0u64;
    let mut consumer_errors: Vec<String> = Vec::new();
    for cycle in 0..a.cycles {
        std::thread::sleep(Duration::from_millis(
            rng.range(a.max_run_ms / 4, a.max_run_ms),
        ));
        let (mut kid, reader) = current;
        if let Some(st) = kid.exited() {
            consumer_errors.push(format!("consumer process {cycle} exited on its own: {st}"));
        }
        let nc_before: u64 = (0..a.producers as usize)
            .map(|i| flags.line(i).no_consumer.load(Ordering::SeqCst))
            .sum();
        kid.kill();
        lists.push(reader.join().unwrap_or_default());
        // Nobody consumes for a while: the ring fills, producers time out.
        std::thread::sleep(Duration::from_millis(a.gap_ms));
        let nc_after: u64 = (0..a.producers as usize)
            .map(|i| flags.line(i).no_consumer.load(Ordering::SeqCst))
            .sum();
        if nc_after > nc_before {
            no_consumer_seen_after_kill += 1;
        }
        eprintln!(
            "consumer-crash: cycle {}/{}: killed a consumer after {} records",
            cycle + 1,
            a.cycles,
            lists.last().map_or(0, |l| l.len())
        );
        current = if cycle + 1 < a.cycles {
            match spawn_consumer() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("consumer-crash: {e}");
                    return 2;
                }
            }
        } else {
            break;
        };
    }
    // Final consumer: this process takes over, while the producers finish.
    for i in 0..a.producers as usize {
        flags.line(i).stop.store(1, Ordering::SeqCst);
    }
    let mut last = Deliveries::new();
    let mut bad = 0u64;
    match seg.consumer() {
        Ok(c) => {
            let wd = Watchdog::new("consumer-crash final consumer", Duration::from_secs(30));
            let t = Instant::now();
            loop {
                wd.arm();
                let r = c.next_timeout(Some(Duration::from_millis(100)));
                wd.disarm();
                match r {
                    Ok(Some(f)) => match verify_record(f.payload()) {
                        Ok(x) => last.push(x),
                        Err(_) => bad += 1,
                    },
                    Ok(None) => match drained(&mut producers, &seg, t) {
                        Ok(false) => {}
                        Ok(true) => break,
                        Err(e) => {
                            consumer_errors.push(format!("final {e}"));
                            break;
                        }
                    },
                    Err(e) => {
                        consumer_errors.push(e.to_string());
                        break;
                    }
                }
            }
        }
        Err(e) => consumer_errors.push(format!("take over: {e}")),
    }
    lists.push(last);
    let elapsed = started.elapsed();

    // Analysis.
    let p = a.producers as usize;
    let committed: Vec<u64> = (0..p)
        .map(|i| flags.line(i).committed.load(Ordering::SeqCst))
        .collect();
    let done = (0..p)
        .filter(|&i| flags.line(i).state.load(Ordering::SeqCst) == state::DONE)
        .count();
    let mut next = vec![0u64; p];
    let (mut gaps, mut disorder, mut unknown) = (0u64, 0u64, 0u64);
    let (mut redelivered, mut max_redelivered) = (0u64, 0u64);
    let mut total = 0u64;
    for list in &lists {
        let mut prev: Vec<Option<u64>> = vec![None; p];
        let mut again = 0u64;
        for &(i, s) in list {
            total += 1;
            let Some(pv) = prev.get_mut(i as usize) else {
                unknown += 1;
                continue;
            };
            match *pv {
                None => {
                    let n = next[i as usize];
                    if s > n {
                        gaps += s - n;
                    } else {
                        again += n - s;
                    }
                }
                Some(q) if s != q + 1 => disorder += 1,
                Some(_) => {}
            }
            *pv = Some(s);
            let n = &mut next[i as usize];
            *n = (*n).max(s + 1);
        }
        redelivered += again;
        max_redelivered = max_redelivered.max(again);
    }
    let lost: u64 = (0..p).map(|i| committed[i].saturating_sub(next[i])).sum();
    let extra: u64 = (0..p).map(|i| next[i].saturating_sub(committed[i])).sum();
    let total_committed: u64 = committed.iter().sum();
    let nc: Vec<u64> = (0..p)
        .map(|i| flags.line(i).no_consumer.load(Ordering::SeqCst))
        .collect();
    let timeouts: u64 = (0..p)
        .map(|i| flags.line(i).timeouts.load(Ordering::SeqCst))
        .sum();
    let max_block = (0..p)
        .map(|i| flags.line(i).max_block_ns.load(Ordering::SeqCst))
        .max()
        .unwrap_or(0);
    let stats = seg.stats();

    rep.fig("seconds", (elapsed.as_secs_f64() * 10.0).round() / 10.0);
    rep.fig("consumer_kills", a.cycles);
    rep.fig("consumers", lists.len());
    rep.fig("records_committed", total_committed);
    rep.fig("deliveries", total);
    rep.fig("redelivered", redelivered);
    rep.fig("max_redelivered_per_takeover", max_redelivered);
    rep.fig("hold_limit", a.hold);
    rep.fig("records_lost", lost);
    rep.fig("no_consumer_errors", nc.iter().sum::<u64>());
    rep.fig("no_consumer_per_producer", format!("{nc:?}"));
    rep.fig("timeout_errors", timeouts);
    rep.fig("kills_followed_by_no_consumer", no_consumer_seen_after_kill);
    rep.fig("producer_max_block_ms", ms(max_block));
    rep.fig("producer_block_ms", a.block_ms);
    rep.fig("stats_drops_full", stats.drops_full);

    rep.check(
        "producers never block past their timeout",
        max_block <= (a.block_ms + a.block_slack_ms) * 1_000_000,
        format!(
            "longest reserve {} ms; timeout {} ms (+{} ms slack)",
            ms(max_block),
            a.block_ms,
            a.block_slack_ms
        ),
    );
    rep.check(
        "producers report the missing consumer (NoConsumer)",
        nc.iter().sum::<u64>() > 0 && no_consumer_seen_after_kill > 0,
        format!(
            "{} NoConsumer errors; after {no_consumer_seen_after_kill} of {} kills",
            nc.iter().sum::<u64>(),
            a.cycles
        ),
    );
    rep.check(
        "every committed record received at least once",
        lost == 0 && gaps == 0 && extra == 0,
        format!("committed {total_committed}, lost {lost}, gaps {gaps}, never-committed {extra}"),
    );
    rep.check(
        "exactly once except records the dead consumer held",
        disorder == 0 && unknown == 0 && max_redelivered <= a.hold as u64 && total == total_committed + redelivered,
        format!(
            "{total} deliveries = {total_committed} + {redelivered} redelivered (at most {max_redelivered} per takeover, hold {}); {disorder} out of order",
            a.hold
        ),
    );
    rep.check(
        "records intact, consumers never fail",
        bad == 0 && consumer_errors.is_empty(),
        format!("{bad} bad records in the final consumer; errors: {consumer_errors:?} (child consumers exit non-zero on a bad record)"),
    );
    rep.check(
        "producers finish cleanly",
        done == p,
        format!("{done} of {p} producers stopped on request"),
    );
    rep.finish(a.json)
}
