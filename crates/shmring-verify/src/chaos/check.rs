//! The checker: what a chaos run's logs must show, whatever the faults were.
//!
//! Invariants a user relies on, each checked over every event:
//! - **no torn record**: every record a reader received as valid checks (its
//!   checksum over its whole payload, the stream its header names);
//! - **no duplicate** and **per-producer order**: each reader gets each
//!   producer stream's records in the order they were committed, each once (a
//!   tethered reader once per epoch: after it is expelled and attaches again, it
//!   starts over from the ring's consumer's read cursor);
//! - **every gap explained**: a record whose commit returned Ok reaches the
//!   ring's consumer; a record whose commit failed (taken back: `Abandoned`) or
//!   that was never claimed (`Dropped`) reaches nobody; a record never logged
//!   reaches a reader only if its producer was killed right after committing it
//!   (the one record after its last logged one); a tethered reader misses
//!   records only across an expulsion, a tap no more than it counted lost;
//! - **bounded wait**: no record committed by a producer waits longer than the
//!   bound before the ring's consumer gets it;
//! - **counters that add up**: the ring's counters against the logs.

use std::collections::{BTreeMap, HashMap};

use super::log::{Event, Kind};

/// One producer process incarnation and what it logged.
#[derive(Debug, Clone, Default)]
pub struct Incarnation {
    pub instance: u32,
    /// SIGKILLed (its last record may be committed and not logged).
    pub killed: bool,
    pub events: Vec<Event>,
}

/// Everything a run left behind.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub producers: Vec<Incarnation>,
    /// Threads per producer process.
    pub threads: u32,
    pub owner: Vec<Event>,
    pub tether: Vec<Event>,
    pub tap: Vec<Event>,
    /// The ring's counters once everything stopped and drained.
    pub stats: shmring::Stats,
    /// The longest a committed record may wait for the ring's consumer, in ns.
    pub wait_bound_ns: u64,
}

/// The checks and the figures.
#[derive(Debug, Default)]
pub struct Verdict {
    pub checks: Vec<(&'static str, bool, String)>,
    pub figures: Vec<(&'static str, u64)>,
}

impl Verdict {
    #[cfg(test)]
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.1)
    }

    fn check(&mut self, name: &'static str, ok: bool, detail: String) {
        self.checks.push((name, ok, detail));
    }

    fn fig(&mut self, name: &'static str, v: u64) {
        self.figures.push((name, v));
    }

    #[cfg(test)]
    pub fn figure(&self, name: &str) -> Option<u64> {
        self.figures.iter().find(|f| f.0 == name).map(|f| f.1)
    }

    #[cfg(test)]
    pub fn failed(&self) -> Vec<&'static str> {
        self.checks.iter().filter(|c| !c.1).map(|c| c.0).collect()
    }
}

/// The stream id of thread `thread` of producer instance `instance`.
pub fn stream_id(instance: u32, thread: u32) -> u32 {
    instance << 4 | thread
}

/// What the producers said about each record.
struct Produced {
    /// Per stream: record number -> what its producer logged.
    told: HashMap<u32, BTreeMap<u64, Kind>>,
    /// Per stream: the last record number it logged, and whether its process
    /// was killed.
    last: HashMap<u32, (Option<u64>, bool)>,
    committed: u64,
    abandoned: u64,
    dropped: u64,
    failed: u64,
    /// Longest a `reserve` waited before a commit (ns).
    longest_reserve: u64,
}

impl Produced {
    fn new(run: &Run) -> Produced {
        let mut p = Produced {
            told: HashMap::new(),
            last: HashMap::new(),
            committed: 0,
            abandoned: 0,
            dropped: 0,
            failed: 0,
            longest_reserve: 0,
        };
        for inc in &run.producers {
            for t in 0..run.threads.max(1) {
                p.last
                    .entry(stream_id(inc.instance, t))
                    .or_insert((None, inc.killed));
            }
            for e in &inc.events {
                p.told.entry(e.stream).or_default().insert(e.seq, e.kind);
                let last = p.last.entry(e.stream).or_insert((None, inc.killed));
                last.0 = Some(last.0.map_or(e.seq, |l: u64| l.max(e.seq)));
                match e.kind {
                    Kind::Committed => {
                        p.committed += 1;
                        p.longest_reserve = p.longest_reserve.max(e.b);
                    }
                    Kind::Abandoned => p.abandoned += 1,
                    Kind::Dropped => p.dropped += 1,
                    _ => p.failed += 1,
                }
            }
        }
        p
    }

    /// May a reader have received record `seq` of `stream`? `Ok(true)`: its
    /// commit was logged; `Ok(false)`: the one record a killed producer may have
    /// committed without logging it; `Err`: it must not have reached anyone.
    fn may_deliver(&self, stream: u32, seq: u64) -> Result<bool, String> {
        match self.told.get(&stream).and_then(|t| t.get(&seq)) {
            Some(Kind::Committed) => Ok(true),
            Some(k) => Err(format!("stream {stream:#x} record {seq} delivered, but its producer logged {k:?}")),
            None => match self.last.get(&stream) {
                Some(&(last, true)) if last.map_or(0, |l| l + 1) == seq => Ok(false),
                _ => Err(format!("stream {stream:#x} record {seq} delivered, but its producer never committed it")),
            },
        }
    }

    fn committed_seqs(&self, stream: u32) -> impl Iterator<Item = u64> + '_ {
        self.told
            .get(&stream)
            .into_iter()
            .flat_map(|t| t.iter().filter(|e| *e.1 == Kind::Committed).map(|e| *e.0))
    }
}

/// One reader's deliveries, split into epochs at each `Attached`.
struct Reader {
    epochs: Vec<Vec<Event>>,
    /// Records received torn.
    torn: u64,
    /// Records received intact that changed while held (checked again at release).
    changed: u64,
    tap_lost: u64,
}

impl Reader {
    fn new(events: &[Event]) -> Reader {
        let mut r = Reader {
            epochs: vec![Vec::new()],
            torn: 0,
            changed: 0,
            tap_lost: 0,
        };
        for e in events {
            match e.kind {
                Kind::Attached if !r.epochs.last().is_some_and(|x| x.is_empty()) => {
                    r.epochs.push(Vec::new())
                }
                Kind::Delivered => r.epochs.last_mut().expect("an epoch").push(*e),
                Kind::Torn if e.b == 1 => r.changed += 1,
                Kind::Torn => r.torn += 1,
                // Its `lost` (torn ones included).
                Kind::TapCounts => r.tap_lost = e.a,
                _ => {}
            }
        }
        r
    }

    fn delivered(&self) -> u64 {
        self.epochs.iter().map(|e| e.len() as u64).sum()
    }
}

/// Order, duplicates and provenance within one epoch of one reader. Returns the
/// problems, and per stream the record numbers delivered.
fn check_epoch(
    who: &str,
    epoch: &[Event],
    produced: &Produced,
    problems: &mut Vec<String>,
) -> HashMap<u32, Vec<u64>> {
    let mut by_stream: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in epoch {
        let seen = by_stream.entry(e.stream).or_default();
        if let Some(&prev) = seen.last() {
            if e.seq == prev || seen.contains(&e.seq) {
                problems.push(format!(
                    "{who}: stream {:#x} record {} twice",
                    e.stream, e.seq
                ));
                continue;
            }
            if e.seq < prev {
                problems.push(format!(
                    "{who}: stream {:#x} record {} after record {prev}",
                    e.stream, e.seq
                ));
            }
        }
        seen.push(e.seq);
        if let Err(why) = produced.may_deliver(e.stream, e.seq) {
            problems.push(format!("{who}: {why}"));
        }
    }
    by_stream
}

fn summary(problems: &[String]) -> String {
    match problems.len() {
        0 => "none".into(),
        n => format!(
            "{n}: {}",
            problems
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// Checks a run; see the module doc.
pub fn check(run: &Run) -> Verdict {
    let mut v = Verdict::default();
    let produced = Produced::new(run);
    let killed = run.producers.iter().filter(|p| p.killed).count() as u64;
    let killed_threads = killed * run.threads.max(1) as u64;

    // The ring's consumer: everything committed, once, in order, intact, in time.
    let owner = Reader::new(&run.owner);
    let mut problems = Vec::new();
    let mut delivered: HashMap<u32, Vec<u64>> = HashMap::new();
    for epoch in &owner.epochs {
        for (s, seqs) in check_epoch("consumer", epoch, &produced, &mut problems) {
            delivered.entry(s).or_default().extend(seqs);
        }
    }
    v.check(
        "consumer: order, no duplicate, only what was committed",
        problems.is_empty(),
        summary(&problems),
    );
    let mut lost = Vec::new();
    for &stream in produced.told.keys() {
        let got: std::collections::HashSet<u64> = delivered
            .get(&stream)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for seq in produced.committed_seqs(stream) {
            if !got.contains(&seq) {
                lost.push(format!("stream {stream:#x} record {seq}"));
            }
        }
    }
    v.check(
        "consumer: every committed record delivered",
        lost.is_empty(),
        summary(&lost),
    );
    v.check(
        "consumer: no torn record",
        owner.torn + owner.changed == 0,
        format!("{} torn, {} changed while held", owner.torn, owner.changed),
    );
    let mut waits: Vec<u64> = owner
        .epochs
        .iter()
        .flatten()
        .filter(|e| matches!(produced.may_deliver(e.stream, e.seq), Ok(true)))
        .map(|e| e.a.saturating_sub(e.b))
        .collect();
    waits.sort_unstable();
    let longest = waits.last().copied().unwrap_or(0);
    v.check(
        "consumer: no committed record waited past the bound",
        longest <= run.wait_bound_ns,
        format!(
            "longest {:.1} ms, bound {:.1} ms ({} over)",
            longest as f64 / 1e6,
            run.wait_bound_ns as f64 / 1e6,
            waits.iter().filter(|&&w| w > run.wait_bound_ns).count()
        ),
    );

    // The tethered consumer: within each epoch, everything between its first and
    // last record of a stream, in order, once, intact.
    let tether = Reader::new(&run.tether);
    let mut problems = Vec::new();
    let mut gaps = Vec::new();
    for epoch in &tether.epochs {
        let got = check_epoch("tethered consumer", epoch, &produced, &mut problems);
        for (stream, seqs) in got {
            let (lo, hi) = (seqs.iter().min().copied(), seqs.iter().max().copied());
            let (Some(lo), Some(hi)) = (lo, hi) else {
                continue;
            };
            for seq in produced.committed_seqs(stream) {
                if seq > lo && seq < hi && !seqs.contains(&seq) {
                    gaps.push(format!("stream {stream:#x} record {seq}"));
                }
            }
        }
    }
    if !run.tether.is_empty() {
        v.check(
            "tethered consumer: order, no duplicate in an epoch, only what was committed",
            problems.is_empty(),
            summary(&problems),
        );
        v.check(
            "tethered consumer: nothing missed within an epoch",
            gaps.is_empty(),
            summary(&gaps),
        );
        v.check(
            "tethered consumer: no torn record",
            tether.torn + tether.changed == 0,
            format!(
                "{} torn, {} changed while held",
                tether.torn, tether.changed
            ),
        );
    }

    // The tap: intact, in order, once; what it missed no more than it counted.
    let tap = Reader::new(&run.tap);
    let mut problems = Vec::new();
    let mut missed = 0u64;
    for epoch in &tap.epochs {
        let got = check_epoch("tap", epoch, &produced, &mut problems);
        for (stream, seqs) in got {
            let (lo, hi) = (seqs.iter().min().copied(), seqs.iter().max().copied());
            let (Some(lo), Some(hi)) = (lo, hi) else {
                continue;
            };
            missed += produced
                .committed_seqs(stream)
                .filter(|&s| s > lo && s < hi && !seqs.contains(&s))
                .count() as u64;
        }
    }
    if !run.tap.is_empty() {
        v.check(
            "tap: order, no duplicate, only what was committed",
            problems.is_empty(),
            summary(&problems),
        );
        v.check(
            "tap: no torn record delivered",
            tap.torn == 0,
            format!("{} torn", tap.torn),
        );
        v.check(
            "tap: what it missed is within what it counted lost",
            missed <= tap.tap_lost,
            format!("missed {missed}, counted lost {}", tap.tap_lost),
        );
    }

    // Counters.
    let s = &run.stats;
    v.check(
        "counters: records consumed = records the consumer logged",
        s.records_consumed == owner.delivered() + owner.torn,
        format!(
            "records_consumed {}, logged {}",
            s.records_consumed,
            owner.delivered() + owner.torn
        ),
    );
    v.check(
        "counters: committed within the logged commits and the kills",
        s.records_committed >= produced.committed
            && s.records_committed <= produced.committed + killed_threads,
        format!(
            "records_committed {}, logged {}, killed threads {killed_threads}",
            s.records_committed, produced.committed
        ),
    );
    v.check(
        "counters: each claim taken back is a commit that failed, or a killed holder's",
        s.expired_claims >= produced.abandoned
            && s.expired_claims <= produced.abandoned + killed_threads,
        format!(
            "expired_claims {}, commits that failed {}, killed threads {killed_threads}",
            s.expired_claims, produced.abandoned
        ),
    );
    v.check(
        "counters: dead producers' claims at most one per killed thread",
        s.abandoned <= killed_threads,
        format!("abandoned {}, killed threads {killed_threads}", s.abandoned),
    );
    v.check(
        "counters: no corruption, reset or forged claim among honest producers",
        s.corruption == 0 && s.resets == 0 && s.forged_claims == 0,
        format!(
            "corruption {}, resets {}, forged {}",
            s.corruption, s.resets, s.forged_claims
        ),
    );
    v.check(
        "counters: no pin left once every producer settled or died",
        s.pinned_bytes == 0,
        format!("pinned_bytes {}", s.pinned_bytes),
    );
    v.check(
        "producers: no error but a full ring or a claim taken back",
        produced.failed == 0,
        format!("{} other errors", produced.failed),
    );

    v.fig("records_committed", produced.committed);
    v.fig("records_delivered", owner.delivered());
    v.fig("commits_abandoned", produced.abandoned);
    v.fig("reserves_dropped", produced.dropped);
    v.fig(
        "torn",
        owner.torn + owner.changed + tether.torn + tether.changed + tap.torn,
    );
    v.fig("lost", lost.len() as u64);
    v.fig("longest_wait_ns", longest);
    v.fig(
        "p99_wait_ns",
        waits
            .get(waits.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or(0),
    );
    v.fig("longest_reserve_ns", produced.longest_reserve);
    v.fig("tether_records", tether.delivered());
    v.fig("tether_epochs", tether.epochs.len() as u64);
    v.fig("tap_records", tap.delivered());
    v.fig("tap_lost", tap.tap_lost);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ev(kind: Kind, stream: u32, seq: u64, a: u64, b: u64) -> Event {
        Event::new(kind, stream, seq, a, b)
    }

    /// Two producer streams, 10 records each, all delivered to all readers; the
    /// counters agree.
    fn clean() -> Run {
        let mut run = Run {
            threads: 1,
            wait_bound_ns: 600 * MS,
            ..Default::default()
        };
        for inst in 0..2u32 {
            let s = stream_id(inst, 0);
            let events = (0..10)
                .map(|i| ev(Kind::Committed, s, i, i * MS, 0))
                .collect();
            run.producers.push(Incarnation {
                instance: inst,
                killed: false,
                events,
            });
        }
        for r in [&mut run.owner, &mut run.tether, &mut run.tap] {
            r.push(ev(Kind::Attached, 0, 0, 0, 0));
            for i in 0..10 {
                for inst in 0..2 {
                    r.push(ev(
                        Kind::Delivered,
                        stream_id(inst, 0),
                        i,
                        i * MS + MS,
                        i * MS,
                    ));
                }
            }
        }
        run.tap.push(ev(Kind::TapCounts, 0, 0, 0, 0));
        run.stats.records_consumed = 20;
        run.stats.records_committed = 20;
        run
    }

    fn failed(run: &Run) -> Vec<&'static str> {
        check(run).failed()
    }

    #[test]
    fn a_clean_run_passes() {
        let v = check(&clean());
        assert!(v.ok(), "{:?}", v.checks);
        assert_eq!(v.figure("records_delivered"), Some(20));
        assert_eq!(v.figure("longest_wait_ns"), Some(MS));
    }

    #[test]
    fn a_torn_record_fails() {
        let mut run = clean();
        run.owner.push(ev(Kind::Torn, 0, 0, 0, 0));
        run.stats.records_consumed += 1;
        assert_eq!(failed(&run), ["consumer: no torn record"]);
    }

    #[test]
    fn a_record_that_changed_while_held_fails() {
        let mut run = clean();
        run.tether.push(ev(Kind::Torn, stream_id(0, 0), 0, 0, 1));
        assert_eq!(failed(&run), ["tethered consumer: no torn record"]);
    }

    #[test]
    fn a_duplicate_or_a_step_back_fails() {
        let mut run = clean();
        run.owner
            .push(ev(Kind::Delivered, stream_id(0, 0), 3, 0, 0));
        run.stats.records_consumed += 1;
        assert!(failed(&run).contains(&"consumer: order, no duplicate, only what was committed"));
        let mut run = clean();
        run.owner.swap(1, 3);
        assert_eq!(
            failed(&run),
            ["consumer: order, no duplicate, only what was committed"]
        );
    }

    #[test]
    fn a_committed_record_not_delivered_is_lost() {
        let mut run = clean();
        run.owner
            .retain(|e| !(e.stream == stream_id(1, 0) && e.seq == 9));
        run.stats.records_consumed -= 1;
        assert_eq!(failed(&run), ["consumer: every committed record delivered"]);
    }

    #[test]
    fn a_record_whose_commit_failed_must_not_arrive() {
        let mut run = clean();
        let s = stream_id(0, 0);
        run.producers[0].events[4] = ev(Kind::Abandoned, s, 4, 0, 0);
        run.stats.records_committed -= 1;
        run.stats.expired_claims = 1;
        let f = failed(&run);
        assert!(
            f.contains(&"consumer: order, no duplicate, only what was committed"),
            "{f:?}"
        );
    }

    #[test]
    fn an_unlogged_record_is_allowed_only_after_a_kill() {
        let mut run = clean();
        let s = stream_id(0, 0);
        run.owner.push(ev(Kind::Delivered, s, 10, 11 * MS, 10 * MS));
        run.stats.records_consumed += 1;
        run.stats.records_committed += 1;
        assert!(!check(&run).ok());
        run.producers[0].killed = true;
        let v = check(&run);
        assert!(v.ok(), "{:?}", v.checks);
        // Only the one record after its last logged one.
        run.owner.push(ev(Kind::Delivered, s, 11, 12 * MS, 11 * MS));
        run.stats.records_consumed += 1;
        assert!(!check(&run).ok());
    }

    #[test]
    fn a_wait_past_the_bound_fails() {
        let mut run = clean();
        let last = run.owner.len() - 1;
        run.owner[last].a += 2000 * MS;
        assert_eq!(
            failed(&run),
            ["consumer: no committed record waited past the bound"]
        );
    }

    #[test]
    fn a_tethered_reader_may_miss_records_only_across_an_expulsion() {
        let mut run = clean();
        let s = stream_id(0, 0);
        run.tether.retain(|e| !(e.stream == s && e.seq == 5));
        assert_eq!(
            failed(&run),
            ["tethered consumer: nothing missed within an epoch"]
        );
        // Expelled after record 4, attached again at record 6: fine.
        let mut run = clean();
        let at = run
            .tether
            .iter()
            .position(|e| e.stream == s && e.seq == 5)
            .unwrap();
        run.tether.remove(at);
        run.tether.insert(at, ev(Kind::Attached, 0, 0, 0, 0));
        run.tether.insert(at, ev(Kind::Expelled, 0, 0, 0, 0));
        let v = check(&run);
        assert!(v.ok(), "{:?}", v.checks);
        assert_eq!(v.figure("tether_epochs"), Some(2));
    }

    #[test]
    fn a_tap_misses_no_more_than_it_counted() {
        let mut run = clean();
        run.tap
            .retain(|e| !(e.kind == Kind::Delivered && e.seq == 5));
        assert_eq!(
            failed(&run),
            ["tap: what it missed is within what it counted lost"]
        );
        let n = run.tap.len() - 1;
        run.tap[n] = ev(Kind::TapCounts, 0, 0, 2, 0);
        assert!(check(&run).ok());
    }

    #[test]
    fn counters_that_do_not_add_up_fail() {
        let mut run = clean();
        run.stats.records_consumed = 19;
        assert_eq!(
            failed(&run),
            ["counters: records consumed = records the consumer logged"]
        );
        let mut run = clean();
        run.stats.expired_claims = 1;
        assert_eq!(
            failed(&run),
            ["counters: each claim taken back is a commit that failed, or a killed holder's"]
        );
        let mut run = clean();
        run.stats.pinned_bytes = 64;
        assert_eq!(
            failed(&run),
            ["counters: no pin left once every producer settled or died"]
        );
        let mut run = clean();
        run.stats.resets = 1;
        assert_eq!(
            failed(&run),
            ["counters: no corruption, reset or forged claim among honest producers"]
        );
    }
}
