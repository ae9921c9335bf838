//! Enumerating and running cases: the whole matrix or a part of it, with a
//! watchdog that turns a hung consumer into a failure naming the case.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use shmring::layout::Geometry;

use super::case::{Case, Symptom};
use super::ring::{self, State};
use super::values::{values, Ctx, Value};
use super::words::{words, Word};

/// The words, their values and the geometry every case uses.
pub struct Matrix {
    pub geo: Geometry,
    pub ctx: Ctx,
    pub words: Vec<Word>,
    pub values: Vec<Vec<Value>>,
}

impl Default for Matrix {
    fn default() -> Self {
        Self::new()
    }
}

impl Matrix {
    /// The matrix of the 64 KiB ring of every state but [`State::Placed`].
    pub fn new() -> Matrix {
        Matrix::of(&ring::config())
    }

    /// The matrix of `state`'s ring: its words and their values.
    pub fn for_state(state: State) -> Matrix {
        Matrix::of(&state.config())
    }

    fn of(config: &shmring::Config) -> Matrix {
        let geo = config.geometry().expect("the matrix ring's geometry");
        let ctx = Ctx::new(&geo, ring::typical_units());
        let words = words(&geo);
        let values = words.iter().map(|w| values(w, &ctx)).collect();
        Matrix {
            geo,
            ctx,
            words,
            values,
        }
    }

    /// Values relative to the ring's size are this matrix's: a state whose ring
    /// has another size takes [`Matrix::for_state`].
    fn check_ring(&self, state: State) {
        let capacity = state.config().capacity;
        assert_eq!(
            capacity,
            self.geo.capacity,
            "state {} runs on a ring of {capacity} bytes: take Matrix::for_state",
            state.name()
        );
    }

    /// Cases in `states` over the words `pick` accepts.
    pub fn size(&self, states: &[State], pick: impl Fn(&Word) -> bool) -> usize {
        let per: usize = self
            .words
            .iter()
            .zip(&self.values)
            .filter(|(w, _)| pick(w))
            .map(|(_, v)| v.len())
            .sum();
        per * states.len()
    }

    /// Every case in `states` over the words `pick` accepts, state by state.
    pub fn cases<'a>(&'a self, states: &[State], pick: impl Fn(&Word) -> bool) -> Vec<Case<'a>> {
        let mut out = Vec::new();
        for &state in states {
            self.check_ring(state);
            for (word, vals) in self.words.iter().zip(&self.values) {
                if !pick(word) {
                    continue;
                }
                for value in vals {
                    out.push(Case {
                        state,
                        word,
                        value,
                        ctx: &self.ctx,
                    });
                }
            }
        }
        out
    }

    /// The case with this id (`state/word/value`).
    pub fn case(&self, id: &str) -> Option<Case<'_>> {
        let (state, rest) = id.split_once('/')?;
        let state = State::from_name(state)?;
        self.check_ring(state);
        let (wi, word) = self
            .words
            .iter()
            .enumerate()
            .find(|(_, w)| rest.starts_with(&format!("{}/", w.name)))?;
        let vname = &rest[word.name.len() + 1..];
        let value = self.values[wi].iter().find(|v| v.name == vname)?;
        Some(Case {
            state,
            word,
            value,
            ctx: &self.ctx,
        })
    }
}

/// The part of the matrix `make test` runs: the cursors, the claim log entries
/// the states' cursors stand on, the producer slots' state and open-claim words,
/// the tether mask and a tether line, the futex words, the consumer role and two
/// identity words, each with all its values.
pub fn representative(w: &Word) -> bool {
    const NAMED: &[&str] = &[
        "write",
        "cursors.read",
        "cursors.peek",
        "cursors.owner_read",
        "cursors.pinned",
        "pins.extent[0]",
        "pins.claim[0]",
        "log[0]",
        "log[1]",
        "log[5]",
        "log[15]",
        "slot[0].state",
        "slot[0].open_claim",
        "slot[1].open_claim",
        "slot[0].space_waiting",
        "tethers.mask",
        "tether[0].state",
        "tether[0].read",
        "data.seq|waiting",
        "space.seq|waiting",
        "space.need",
        "consumer.state",
        "identity.magic",
        "identity.capacity",
    ];
    NAMED.contains(&w.name.as_str())
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    pub cases: usize,
    pub elapsed: Duration,
    /// (case id, symptom, detail), in case order.
    pub failures: Vec<(String, Symptom, String)>,
    /// Cases that recovered, and the longest time to recover.
    pub recovered: usize,
    pub slowest: Option<(Duration, String)>,
    /// Cases in which the write made the consumer reset.
    pub with_reset: usize,
}

impl Report {
    /// Failures counted by symptom.
    pub fn by_symptom(&self) -> BTreeMap<Symptom, usize> {
        let mut m = BTreeMap::new();
        for (_, s, _) in &self.failures {
            *m.entry(*s).or_insert(0) += 1;
        }
        m
    }

    /// One line per failure, then the counts.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (id, sym, detail) in &self.failures {
            s += &format!("FAIL {id}: {sym:?}: {detail}\n");
        }
        s += &format!(
            "{} cases in {:.1} s: {} failed {:?}; {} reset the ring; slowest recovery {:?}\n",
            self.cases,
            self.elapsed.as_secs_f64(),
            self.failures.len(),
            self.by_symptom(),
            self.with_reset,
            self.slowest
        );
        s
    }
}

/// Cases running now, for the watchdog: (id, started).
static RUNNING: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// A case still running after this long hangs (every wait in a case is bounded
/// by a few budgets): the watchdog names it and aborts the process.
const HANG: Duration = Duration::from_secs(60);

fn watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((id, t)) = running.iter().find(|(_, t)| t.elapsed() > HANG) {
                eprintln!(
                    "matrix case {id} hung for {:?}: the consumer never returned",
                    t.elapsed()
                );
                std::process::abort();
            }
        });
    });
}

/// Runs `cases` in order, one at a time. With `SHMRING_MATRIX_OUT` set, every
/// outcome is appended to that file as a tab-separated line (id, verdict,
/// milliseconds to recover, resets, last corruption, detail).
pub fn run(cases: &[Case<'_>]) -> Report {
    watchdog();
    let out = std::env::var_os("SHMRING_MATRIX_OUT").and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let out = Mutex::new(out);
    let t = Instant::now();
    let mut report = Report::default();
    for case in cases {
        let id = case.id();
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id.clone(), Instant::now()));
        let o = case.run();
        {
            let mut r = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = r.iter().position(|(n, _)| *n == id) {
                r.swap_remove(i);
            }
        }
        report.cases += 1;
        if o.resets > 0 {
            report.with_reset += 1;
        }
        if let Some(d) = o.recovered_after {
            report.recovered += 1;
            if report.slowest.as_ref().is_none_or(|(s, _)| d > *s) {
                report.slowest = Some((d, id.clone()));
            }
        }
        if let Some(f) = out.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let verdict = o
                .failure
                .as_ref()
                .map_or("ok".to_string(), |(s, _)| format!("{s:?}"));
            // One write per line (O_APPEND), so parallel tests do not interleave.
            let line = format!(
                "{id}\t{verdict}\t{}\t{}\t{}\t{}\n",
                o.recovered_after.map_or(String::from("-"), |d| format!(
                    "{:.1}",
                    d.as_secs_f64() * 1e3
                )),
                o.resets,
                o.last_corruption.unwrap_or("-"),
                o.failure
                    .as_ref()
                    .map_or(o.errors.join(" | "), |(_, d)| d.clone())
                    .replace(['\n', '\t'], " ")
            );
            let _ = f.write_all(line.as_bytes());
        }
        if let Some((s, d)) = o.failure {
            report.failures.push((id, s, d));
        }
    }
    report.elapsed = t.elapsed();
    report
}
