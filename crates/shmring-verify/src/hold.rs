//! `hold`: bounds per ring while claims are held. A meeting's traffic (1080p I420
//! video at 30 fps and 4 KiB audio packets every 10 ms: 130 records/s, 93 MB/s)
//! goes through a ring with the library's default options while `--held` other
//! producers (one slot each) reserve and never commit; with `--retake`, each takes
//! a new claim the moment its claim is taken back (a live peer that keeps the
//! consumer waiting). Reports the honest records per second against the rate
//! offered, the longest time between two deliveries, and the longest time a
//! committed record waited for the consumer; checks every record delivered once,
//! intact, in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::layout::{ClaimState, LogEntry};
use shmring::{Address, Config, Consumer, ConsumerOptions, FullPolicy, Meta, Segment};

use crate::common::{fill_body, ms, seal_record, verify_record, Report};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Producers that hold a claim each (1..=62).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=62))]
    pub held: u32,
    /// Each holder takes a new claim as soon as its claim is taken back.
    #[arg(long)]
    pub retake: bool,
    /// Strict claim order (no overtaking), as `ConsumerOptions::overtake_after: None`.
    #[arg(long)]
    pub strict: bool,
    /// Bytes each holder reserves.
    #[arg(long, default_value_t = 4096)]
    pub held_size: usize,
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

const VIDEO: usize = 1920 * 1080 * 3 / 2;
const AUDIO: usize = 4096;

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("hold");
    let cfg = Config {
        max_producers: 64,
        ..Config::default()
    };
    let seg = match Address::memfd("verify-hold", cfg).open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hold: {e}");
            return 2;
        }
    };
    let opts = ConsumerOptions {
        overtake_after: if a.strict {
            None
        } else {
            ConsumerOptions::default().overtake_after
        },
        ..Default::default()
    };
    let consumer = match Consumer::with_options(seg.clone(), opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hold: consumer: {e}");
            return 2;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let retakes = Arc::new(AtomicU64::new(0));
    let holders: Vec<_> = (0..a.held)
        .map(|_| {
            let (seg, stop, retakes) = (seg.clone(), stop.clone(), retakes.clone());
            let (size, retake) = (a.held_size, a.retake);
            std::thread::spawn(move || hold(&seg, size, retake, &stop, &retakes))
        })
        .collect();
    // Let the holders claim first.
    std::thread::sleep(Duration::from_millis(50));
    let honest = {
        let (seg, stop) = (seg.clone(), stop.clone());
        std::thread::spawn(move || meeting(&seg, &stop))
    };
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    let mut next = [0u64; 2];
    let (mut got, mut bad) = (0u64, 0u64);
    let mut last = Instant::now();
    let (mut longest_gap, mut longest_wait) = (Duration::ZERO, 0u64);
    while Instant::now() < end {
        match consumer.next_timeout(Some(Duration::from_millis(20))) {
            Ok(Some(f)) => {
                let now = Instant::now();
                longest_gap = longest_gap.max(now - last);
                last = now;
                longest_wait = longest_wait.max(shmring::now_ns() - f.meta().timestamp_ns);
                match verify_record(f.payload()) {
                    Ok((inst, seq)) if (inst as usize) < 2 && seq == next[inst as usize] => {
                        next[inst as usize] += 1;
                        got += 1;
                    }
                    _ => bad += 1,
                }
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("hold: consumer: {e}");
                return 3;
            }
        }
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let offered = honest.join().unwrap_or(0);
    for h in holders {
        let _ = h.join();
    }
    let st = seg.stats();
    let rate = got as f64 / elapsed.as_secs_f64();
    let offered_rate = offered as f64 / elapsed.as_secs_f64();
    rep.fig("held_claims", a.held as u64);
    rep.fig("retake", a.retake);
    rep.fig("strict_order", a.strict);
    rep.fig("seconds", elapsed.as_secs_f64());
    rep.fig("honest_records_per_s", (rate * 10.0).round() / 10.0);
    rep.fig(
        "offered_records_per_s",
        (offered_rate * 10.0).round() / 10.0,
    );
    rep.fig(
        "share_of_offered",
        (rate / offered_rate.max(1e-9) * 1000.0).round() / 1000.0,
    );
    rep.fig("longest_gap_ms", ms(longest_gap.as_nanos() as u64));
    rep.fig("longest_wait_ms", ms(longest_wait));
    rep.fig("retakes", retakes.load(Ordering::Relaxed));
    rep.fig("expired_claims", st.expired_claims);
    rep.fig("stalled_claims", st.stalled_claims);
    rep.fig("pinned_bytes_at_end", st.pinned_bytes);
    rep.fig("drops_full", st.drops_full);
    rep.check(
        "every honest record delivered once, intact, in order",
        bad == 0,
        format!("{got} delivered, {bad} out of place or damaged"),
    );
    rep.finish(a.json)
}

/// A holder: reserves and never commits; with `retake`, reserves again as soon
/// as the consumer has taken its claim back (its log entry reads abandoned).
fn hold(seg: &Arc<Segment>, size: usize, retake: bool, stop: &AtomicBool, retakes: &AtomicU64) {
    let Ok(mut p) = seg.producer() else { return };
    let peer = shmring_testkit::Peer::new(seg);
    while !stop.load(Ordering::Relaxed) {
        let Ok(r) = p.reserve_raw(size, FullPolicy::Block(Duration::from_millis(100))) else {
            continue;
        };
        loop {
            std::thread::sleep(Duration::from_millis(1));
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let e = LogEntry::unpack(peer.entry(r.seq).load(Ordering::Acquire));
            if retake && e.state == ClaimState::Abandoned {
                p.abort_raw();
                retakes.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
}

/// The meeting's traffic, paced: video (instance 0) at 30 fps, audio (instance
/// 1) every 10 ms. Returns the records it offered (committed or dropped).
fn meeting(seg: &Arc<Segment>, stop: &AtomicBool) -> u64 {
    let Ok(mut p) = seg.producer() else { return 0 };
    p.set_policy(FullPolicy::Block(Duration::from_secs(1)));
    let start = Instant::now();
    let (mut seq, mut offered) = ([0u64; 2], 0u64);
    let (mut next_video, mut next_audio) = (start, start);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let (inst, len) = if next_video <= next_audio {
            (0u32, VIDEO)
        } else {
            (1u32, AUDIO)
        };
        let due = if inst == 0 { next_video } else { next_audio };
        if due > now {
            std::thread::sleep((due - now).min(Duration::from_millis(5)));
            continue;
        }
        if inst == 0 {
            next_video += Duration::from_micros(33_333);
        } else {
            next_audio += Duration::from_millis(10);
        }
        offered += 1;
        if let Ok(mut r) = p.reserve(len) {
            let i = inst as usize;
            let buf = r.payload();
            fill_body(buf, inst, seq[i], 1 << 20, || {});
            seal_record(buf, inst, seq[i]);
            if r.commit(Meta::new(inst, 1)).is_ok() {
                seq[i] += 1;
            }
        }
    }
    offered
}
