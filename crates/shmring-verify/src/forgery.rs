//! `forgeries`: one deterministic forgery per class of shared state a hostile
//! producer can write (identity line, cursors, claim log, slot table, futex words,
//! consumer role, counters). Each case writes its forgery into a ring with traffic
//! in flight, then stops writing; honest producers (a new one, and one attached
//! before the attack) keep sending, with no process restarted and no reset by the
//! application: the consumer finds what it cannot reconcile by itself. Once honest
//! records flow again, every record sent from then on must be delivered exactly
//! once (records committed while the ring was broken may be lost in the reset);
//! no record is ever delivered twice. Reports, per case, whether the ring
//! recovered, the time from "forger stopped" to "honest records flow again" (max
//! over `--runs`), and how many records the broken ring lost.

use std::collections::HashSet;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shmring::layout::{
    cursor_pos, cursor_seq, pack_cursor, ClaimState, Control, LogEntry, SEQ_MASK, SLOT_ACTIVE,
};
use shmring::{Address, Config, FullPolicy, Meta};
use shmring_testkit::{Peer, Target};

use crate::common::{ms, Report, Rng};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Run only the case with this name (see --list).
    #[arg(long)]
    pub only: Option<String>,
    /// Runs of each case; the time reported is the longest.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Records each of the two honest producers sends after the forgery.
    #[arg(long, default_value_t = 200)]
    pub records: u64,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

/// Every store of a forger: SeqCst, as a peer may.
const S: Ordering = Ordering::SeqCst;

/// The write cursor.
fn write(p: &Peer) -> &AtomicU64 {
    &p.control().write.0
}

/// The ring's read cursor.
fn read(p: &Peer) -> &AtomicU64 {
    &p.control().cursors.0.read
}

/// Claim log entries.
fn n(p: &Peer) -> u64 {
    p.geometry().log_entries as u64
}

/// Writes a claim at the write cursor and moves the cursor past it, as a
/// producer would, but naming `slot` and in `state`.
fn forge_claim(p: &Peer, slot: u32, state: ClaimState, units: u64) -> u64 {
    let w = write(p).load(S);
    let (k, pos) = (cursor_seq(w), cursor_pos(w));
    let v = LogEntry {
        stamp: k,
        state,
        slot,
        units,
    }
    .pack();
    p.entry(k).store(v, S);
    write(p).store(pack_cursor(k + 1, pos + units), S);
    v
}

/// `count` random 8-byte words at random aligned places of `range`.
fn random_words(p: &Peer, rng: &mut Rng, range: std::ops::Range<usize>, count: usize) {
    for _ in 0..count {
        let off = (range.start + rng.below((range.end - range.start) as u64) as usize) & !7;
        p.at(off).store(rng.next(), S);
    }
}

/// One forgery: its name, its class, and what it writes. `victim` is the slot of
/// an honest producer attached (and idle) during the attack.
struct Case {
    name: &'static str,
    class: &'static str,
    forge: fn(&Peer, u32, &mut Rng),
}

/// A case that writes `value(peer)` into one field of the identity line.
macro_rules! identity_case {
    ($name:literal, $field:ident, $value:expr) => {
        Case {
            name: $name,
            class: "identity line",
            forge: |p, _, _| {
                let value: fn(&Peer) -> u64 = $value;
                p.identity(0).$field.store(value(p) as _, S);
            },
        }
    };
}

/// A case that forges one claim at the write cursor, naming `slot(peer, victim)`,
/// in `state`, of `units(peer)`.
macro_rules! claim_case {
    ($name:literal, $slot:expr, $state:ident, $units:expr) => {
        Case {
            name: $name,
            class: "claim log",
            forge: |p, victim, _| {
                let slot: fn(&Peer, u32) -> u32 = $slot;
                let units: fn(&Peer) -> u64 = $units;
                forge_claim(p, slot(p, victim), ClaimState::$state, units(p));
            },
        }
    };
}

fn cases() -> Vec<Case> {
    vec![
        identity_case!("identity_magic", magic, |_| u64::from_le_bytes(
            *b"SHMRING0"
        )),
        identity_case!("identity_version", version, |_| 99),
        identity_case!("identity_control_size", control_size, |_| 8192),
        identity_case!("identity_capacity", capacity, |p| p.geometry().capacity * 2),
        identity_case!("identity_max_record", max_record, |p| p.geometry().capacity),
        identity_case!("identity_log_entries", log_entries, |_| 3),
        identity_case!("identity_max_producers", max_producers, |_| 0),
        identity_case!("identity_flags", flags, |_| 0xff),
        identity_case!("identity_data_offset", data_offset, |_| u64::MAX),
        identity_case!("identity_total_size", total_size, |_| 4096),
        Case {
            name: "write_cursor_max",
            class: "write cursor",
            forge: |p, _, _| write(p).store(u64::MAX, S),
        },
        Case {
            name: "write_cursor_beyond_capacity",
            class: "write cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                let units = p.geometry().cap_units() + 64;
                write(p).store(pack_cursor(cursor_seq(w), cursor_pos(w) + units), S);
            },
        },
        Case {
            name: "write_cursor_seq_plus_2n",
            class: "write cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                write(p).store(pack_cursor(cursor_seq(w) + 2 * n(p), cursor_pos(w)), S);
            },
        },
        Case {
            name: "write_cursor_seq_minus_2n",
            class: "write cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                write(p).store(
                    pack_cursor(cursor_seq(w).wrapping_sub(2 * n(p)), cursor_pos(w)),
                    S,
                );
            },
        },
        Case {
            name: "write_cursor_seq_plus_5",
            class: "write cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                write(p).store(pack_cursor(cursor_seq(w) + 5, cursor_pos(w)), S);
            },
        },
        Case {
            name: "write_cursor_position_shifted",
            class: "write cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                write(p).store(pack_cursor(cursor_seq(w), cursor_pos(w) + 7), S);
            },
        },
        Case {
            name: "read_cursor_random",
            class: "read cursor",
            forge: |p, _, rng| read(p).store(rng.next(), S),
        },
        Case {
            name: "read_cursor_ahead",
            class: "read cursor",
            forge: |p, _, _| {
                let w = write(p).load(S);
                read(p).store(pack_cursor(cursor_seq(w) + 3, cursor_pos(w) + 1000), S);
            },
        },
        Case {
            name: "log_entry_future",
            class: "claim log",
            forge: |p, _, _| {
                let k = cursor_seq(write(p).load(S));
                let v = LogEntry {
                    stamp: (k + n(p)) & SEQ_MASK,
                    state: ClaimState::Committed,
                    slot: 0,
                    units: 2,
                };
                p.entry(k).store(v.pack(), S);
            },
        },
        Case {
            name: "log_entry_stale",
            class: "claim log",
            forge: |p, _, _| {
                let k = cursor_seq(write(p).load(S));
                let v = LogEntry::initial(k.wrapping_sub(n(p)) & SEQ_MASK, n(p));
                p.entry(k).store(v, S);
            },
        },
        Case {
            name: "log_entry_every_one_random",
            class: "claim log",
            forge: |p, _, rng| {
                for k in 0..n(p) {
                    p.entry(k).store(rng.next(), S);
                }
            },
        },
        claim_case!(
            "claim_naming_a_free_slot",
            |p, _| p.geometry().max_producers - 1,
            Claimed,
            |_| 4
        ),
        claim_case!("claim_naming_a_missing_slot", |_, _| 255, Claimed, |_| 4),
        claim_case!(
            "claim_naming_a_live_producer",
            |_, victim| victim,
            Claimed,
            |_| 4
        ),
        Case {
            name: "claim_and_open_word_of_a_live_producer",
            class: "claim log",
            forge: |p, victim, _| {
                // The forger also writes the victim's open-claim word: believed until
                // the victim's next claim overwrites it.
                let v = forge_claim(p, victim, ClaimState::Claimed, 4);
                p.slot(victim).open_claim.store(v, S);
            },
        },
        claim_case!("claim_units_zero", |_, _| 0, Committed, |_| 0),
        claim_case!("claim_units_beyond_capacity", |_, _| 0, Committed, |p| {
            p.geometry().cap_units() + 1
        }),
        Case {
            name: "slots_all_active",
            class: "slot table",
            forge: |p, _, _| {
                for i in 0..p.geometry().max_producers {
                    p.slot(i).state.store(SLOT_ACTIVE, S);
                }
            },
        },
        Case {
            name: "slots_random",
            class: "slot table",
            forge: |p, _, rng| {
                random_words(p, rng, p.target(Target::Slots), 64);
            },
        },
        Case {
            name: "slots_open_claim_copies",
            class: "slot table",
            forge: |p, _, _| {
                // Every slot claims to hold the claim at the consumer's peek cursor.
                let k = cursor_seq(read(p).load(S));
                let v = p.entry(k).load(S);
                for i in 0..p.geometry().max_producers {
                    p.slot(i).open_claim.store(v, S);
                    p.slot(i).space_waiting.store(1, S);
                }
            },
        },
        Case {
            name: "futex_words_and_waiting_counts",
            class: "futex words",
            forge: |p, _, rng| {
                let (data, space) = (&p.control().data.0, &p.control().space.0);
                let r = rng.next();
                data.seq.store(r as u32, S);
                data.waiting.store((r >> 32) as u32, S);
                for f in [&space.seq, &space.waiting, &space.need] {
                    f.store(u32::MAX, S);
                }
            },
        },
        Case {
            name: "consumer_role",
            class: "consumer role",
            forge: |p, _, _| p.control().consumer.0.state.store(0, S),
        },
        Case {
            name: "counters",
            class: "counters",
            forge: |p, _, _| {
                // Everything from the consumer's counters to the end of the control
                // block, every word.
                let from = offset_of!(Control, counters);
                for off in (from..std::mem::size_of::<Control>()).step_by(8) {
                    p.at(off).store(u64::MAX, S);
                }
                for i in 0..p.geometry().max_producers {
                    let reserved = &p.slot(i).counters._reserved;
                    for f in p.producer_counters(i).into_iter().chain([reserved]) {
                        f.store(u64::MAX, S);
                    }
                }
            },
        },
        Case {
            name: "control_block_random",
            class: "control block",
            forge: |p, _, rng| {
                random_words(p, rng, p.target(Target::Control), 24);
            },
        },
    ]
}

/// What one run of a case saw.
struct Outcome {
    recovered: bool,
    /// Forger stopped → a record of every honest producer delivered.
    recover: Option<Duration>,
    resets: u64,
    /// Records committed while the ring was broken and lost to its reset.
    lost_before: u64,
    detail: String,
}

const STREAM: u32 = 7;

fn run_case(case: &Case, records: u64, seed: u64) -> Outcome {
    let cfg = Config {
        capacity: 1 << 20,
        max_record: Some(64 << 10),
        log_entries: Some(64),
        max_producers: 8,
        ..Config::default()
    };
    let seg = match Address::memfd("verify-forgery", cfg).open() {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                recovered: false,
                recover: None,
                resets: 0,
                lost_before: 0,
                detail: format!("create: {e}"),
            }
        }
    };
    let peer = Peer::new(&seg);
    let consumer = Arc::new(Mutex::new(seg.consumer().expect("consumer")));
    // Traffic before the attack: some records delivered, some in flight.
    let mut warm = seg.producer().expect("producer");
    for i in 0..20u64 {
        warm.send(&i.to_le_bytes(), Meta::new(1, 0))
            .expect("warm-up");
    }
    {
        let c = consumer.lock().unwrap();
        for _ in 0..10 {
            drop(c.try_next());
        }
    }
    // The victim: an honest producer attached during the attack, idle.
    let mut victim = seg.producer().expect("victim producer");
    victim.set_policy(FullPolicy::Block(Duration::from_secs(2)));
    let mut rng = Rng(seed);
    (case.forge)(&peer, victim.slot(), &mut rng);
    let stopped = Instant::now();

    // The consumer runs as a recorder would: next with a timeout, nothing else.
    // `flowing` is raised at the first honest record it gets after the attack;
    // producers tag what they send after that.
    let flowing = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU64::new(0));
    let reader = {
        let consumer = consumer.clone();
        let flowing = flowing.clone();
        let finished = finished.clone();
        std::thread::spawn(move || {
            let c = consumer.lock().unwrap();
            let mut seen: HashSet<(u64, u64)> = HashSet::new();
            // When each honest producer's first record arrived after the attack.
            let (mut dups, mut first, mut errors) = (0u64, [None; 2], Vec::new());
            let guard = Instant::now() + Duration::from_secs(20);
            let mut quiet_after_finish = 0;
            while Instant::now() < guard && quiet_after_finish < 5 {
                match c.next_timeout(Some(Duration::from_millis(20))) {
                    Ok(Some(f)) if f.stream() == STREAM && f.len() == 24 => {
                        let b = f.payload();
                        let who = u64::from_le_bytes(b[..8].try_into().unwrap());
                        let i = u64::from_le_bytes(b[8..16].try_into().unwrap());
                        if let Some(t) = first.get_mut((who as usize).wrapping_sub(1)) {
                            t.get_or_insert_with(|| stopped.elapsed());
                        }
                        flowing.store(true, Ordering::Release);
                        if !seen.insert((who, i)) {
                            dups += 1;
                        }
                    }
                    Ok(None) if finished.load(Ordering::Acquire) == 2 => quiet_after_finish += 1,
                    Ok(_) => {}
                    Err(e) => {
                        if errors.len() < 4 {
                            errors.push(e.to_string());
                        }
                    }
                }
            }
            (seen, dups, first, errors, c.resets())
        })
    };
    // Honest producers: the victim, and one attaching after the attack (a new
    // attach validates the identity line). Each retries a record until it is in.
    let fds: Vec<std::os::fd::OwnedFd> = seg
        .descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().expect("dup"))
        .collect();
    let (late_flowing, late_finished) = (flowing.clone(), finished.clone());
    let late = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let seg2 = loop {
            let copies = fds.iter().map(|f| f.try_clone().expect("dup")).collect();
            match Address::Descriptors(copies).open() {
                Ok(s) => break Some(s),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        let Some(seg2) = seg2 else {
            late_finished.fetch_add(1, Ordering::Release);
            return Err("a new producer could not attach".to_string());
        };
        let mut p = loop {
            match seg2.producer() {
                Ok(p) => break p,
                Err(e) if Instant::now() >= deadline => {
                    late_finished.fetch_add(1, Ordering::Release);
                    return Err(format!("attach: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        p.set_policy(FullPolicy::Block(Duration::from_secs(2)));
        let r = send_all(&mut p, 2, records, deadline, &late_flowing);
        late_finished.fetch_add(1, Ordering::Release);
        r
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let victim_result = send_all(&mut victim, 1, records, deadline, &flowing);
    finished.fetch_add(1, Ordering::Release);
    let late_result = late.join().unwrap_or_else(|_| Err("panicked".into()));
    let (seen, dups, first, errors, resets) = reader.join().expect("reader");
    drop(warm);
    drop(victim);
    let mut detail = String::new();
    let (mut lost_after, mut lost_before) = (0u64, 0u64);
    for (who, r) in [(1u64, victim_result), (2, late_result)] {
        match r {
            Ok(sent) => {
                for (i, &after) in sent.iter().enumerate() {
                    if !seen.contains(&(who, i as u64)) {
                        if after {
                            lost_after += 1;
                        } else {
                            lost_before += 1;
                        }
                    }
                }
            }
            Err(e) => detail.push_str(&format!("producer {who}: {e}; ")),
        }
    }
    // Records flow again once every honest producer's records do.
    let first = first[0].zip(first[1]).map(|(a, b)| a.max(b));
    let recovered = detail.is_empty() && lost_after == 0 && dups == 0 && first.is_some();
    detail.push_str(&format!(
        "{} delivered, {dups} twice, {lost_after} lost after records flowed again, \
         {lost_before} lost while the ring was broken",
        seen.len()
    ));
    if !errors.is_empty() {
        detail.push_str(&format!("; consumer: {}", errors.join(" | ")));
    }
    Outcome {
        recovered,
        recover: first,
        resets,
        lost_before,
        detail,
    }
}

/// Sends records tagged `who` and numbered, retrying each until it is committed,
/// until `records` of them were sent after `flowing` was raised. Returns, for each
/// record, whether it was sent after that.
fn send_all(
    p: &mut shmring::Producer,
    who: u64,
    records: u64,
    deadline: Instant,
    flowing: &AtomicBool,
) -> Result<Vec<bool>, String> {
    let mut buf = [0u8; 24];
    buf[..8].copy_from_slice(&who.to_le_bytes());
    let mut sent = Vec::new();
    let mut after = 0;
    while after < records {
        let i = sent.len() as u64;
        let late = flowing.load(Ordering::Acquire);
        buf[8..16].copy_from_slice(&i.to_le_bytes());
        buf[16..].copy_from_slice(&u64::from(late).to_le_bytes());
        loop {
            match p.send(&buf, Meta::new(STREAM, 0)) {
                Ok(()) => {
                    sent.push(late);
                    after += u64::from(late);
                    break;
                }
                Err(e) if Instant::now() >= deadline => return Err(format!("record {i}: {e}")),
                // Abandoned (the claim was taken by a reset), corrupt (the consumer
                // has not reset yet), full or timed out: the record is not in; retry.
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }
    Ok(sent)
}

pub fn run(a: Args) -> i32 {
    let all = cases();
    if a.list {
        for c in &all {
            println!("{}\t{}", c.name, c.class);
        }
        return 0;
    }
    let chosen: Vec<&Case> = all
        .iter()
        .filter(|c| a.only.as_deref().is_none_or(|n| n == c.name))
        .collect();
    if chosen.is_empty() {
        eprintln!(
            "forgeries: no case named {:?} (see --list)",
            a.only.unwrap_or_default()
        );
        return 2;
    }
    let mut rep = Report::new("forgeries");
    println!(
        "{:<40} {:<14} {:>9} {:>14} {:>7} {:>6}",
        "case", "class", "recovered", "max ms to flow", "resets", "lost"
    );
    for c in chosen {
        let mut worst: Option<Duration> = None;
        let (mut ok, mut resets, mut lost, mut detail) = (true, 0, 0, String::new());
        for run in 0..a.runs.max(1) {
            let o = run_case(c, a.records, 0x5eed_f000 + run as u64);
            ok &= o.recovered;
            resets = resets.max(o.resets);
            lost = lost.max(o.lost_before);
            worst = worst.max(o.recover);
            if !o.recovered {
                detail = o.detail;
            }
        }
        let t = worst.map_or("-".into(), |d| format!("{:.1}", ms(d.as_nanos() as u64)));
        println!(
            "{:<40} {:<14} {:>9} {:>14} {:>7} {:>6}",
            c.name,
            c.class,
            if ok { "yes" } else { "NO" },
            t,
            resets,
            lost
        );
        rep.fig(
            &format!("{}_max_ms", c.name),
            worst.map_or(-1.0, |d| ms(d.as_nanos() as u64)),
        );
        rep.check(
            &format!("{} recovered", c.name),
            ok,
            if ok {
                format!(
                    "every honest record delivered exactly once in {} runs",
                    a.runs
                )
            } else {
                detail
            },
        );
    }
    rep.finish(a.json)
}
