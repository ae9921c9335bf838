//! One case: a ring in a state, one 8-byte write, the writer gone; then honest
//! producers and the consumers, driven from one thread, must move records again
//! within [`BUDGET`], and every record sent from then on must arrive exactly once,
//! intact, in each producer's order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::layout::{ClaimState, LogEntry};
use shmring::{Address, Consumer, Error, Segment};

use super::ring::{self, Honest, Ring, Seen, State, A, B, LATE, NEWCOMER, PRODUCERS};
use super::values::{apply, Ctx, Peek, Value};
use super::words::Word;

/// How long after the write honest records must flow again: the liveness budget
/// (a failure detector, not a speed requirement).
pub const BUDGET: Duration = Duration::from_secs(1);
/// Records each sending producer sends once records flow again.
pub const AFTER: u64 = 8;
/// Frames held in [`State::FramesHeld`] are released this long after the write,
/// so a reset the write causes happens while they are held.
const HOLD: Duration = Duration::from_millis(10);

/// What went wrong, as the catalogue groups it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Symptom {
    /// No record sent after the write reached the ring's consumer within the budget.
    NeverRecovers,
    /// A record sent after records flowed again never arrived.
    LosesAfterRecovery,
    /// A record arrived twice, or after a later one of its producer.
    DeliversTwice,
    /// Bytes no honest producer committed were handed out as a record, or a record
    /// sent after records flowed again arrived changed.
    DeliversGarbage,
    /// Records committed before the write never arrived, and no counter of
    /// records not delivered moved (resets, corruption, forged, aborted or
    /// abandoned claims skipped, claims taken back): a loss no user can see.
    LosesUncounted,
    /// The library panicked.
    Panics,
    /// An error that does not name the ring.
    ErrorWithoutName,
    /// Releasing a frame held across the write was refused.
    HeldFrameRefused,
    /// A frame held across the write changed under its holder after the reset
    /// (the new generation was placed over it).
    HeldFrameOverwritten,
    /// A producer attaching after the write never got a slot.
    NewcomerRefused,
    /// A new mapping of the segment could not attach (identity line not mended).
    NewAttachRefused,
    /// A producer on a new mapping attached, but its record never arrived.
    NewAttachBroken,
    /// The tethered consumer: no record within the budget, neither detached.
    TetherNeverRecovers,
    TetherLosesAfterRecovery,
    TetherDeliversTwice,
    TetherDeliversGarbage,
    /// The tethered consumer got an error other than `Detached`.
    TetherError,
    /// The state could not be set up (a harness failure, not a finding).
    Harness,
}

/// What a case did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub failure: Option<(Symptom, String)>,
    /// From the write to the first record sent after it reaching the consumer.
    pub recovered_after: Option<Duration>,
    /// Resets the ring's consumer made after the write.
    pub resets: u64,
    pub last_corruption: Option<&'static str>,
    /// Records committed before records flowed again that never arrived (allowed:
    /// a reset loses what it finds not handed out).
    pub lost_before: u64,
    /// The tethered consumer was detached (allowed: told with `Detached`).
    pub tether_detached: bool,
    /// Records committed before records flowed again that arrived with changed
    /// bytes, and held frames overwritten before any reset (allowed: honest
    /// producers wrote where the forged cursor sent them, as the writer could
    /// have itself; see the threat model).
    pub corrupted_before: u64,
    /// Distinct errors the consumers and producers returned.
    pub errors: Vec<String>,
}

type Fail = (Symptom, String);

/// `SHMRING_MATRIX_TRACE=1`: every send, delivery, error and reset of a case on
/// stderr, with the milliseconds since the write (for reading one case).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SHMRING_MATRIX_TRACE").is_some())
}

thread_local! {
    static T0: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

macro_rules! trace {
    ($($arg:tt)*) => {
        if tracing() {
            let ms = T0.with(|t| t.get()).map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
            eprintln!("[{ms:8.3} ms] {}", format!($($arg)*));
        }
    };
}

/// Per-producer order and exactly-once for one consumer.
struct Track {
    /// Next index expected from each producer.
    next: [u64; PRODUCERS],
    /// Records sent before the write (may be lost to a reset the write causes).
    at_write: [u64; PRODUCERS],
    /// Sent counts when the first record sent after the write arrived: from
    /// these indexes on, every record must arrive.
    cut: Option<[u64; PRODUCERS]>,
    recovered: Option<Instant>,
    lost: u64,
    corrupted: u64,
    twice: Symptom,
    loses: Symptom,
    garbage: Symptom,
}

impl Track {
    fn new(next: [u64; PRODUCERS], at_write: [u64; PRODUCERS], tether: bool) -> Track {
        Track {
            next,
            at_write,
            cut: None,
            recovered: None,
            lost: 0,
            corrupted: 0,
            garbage: if tether {
                Symptom::TetherDeliversGarbage
            } else {
                Symptom::DeliversGarbage
            },
            twice: if tether {
                Symptom::TetherDeliversTwice
            } else {
                Symptom::DeliversTwice
            },
            loses: if tether {
                Symptom::TetherLosesAfterRecovery
            } else {
                Symptom::LosesAfterRecovery
            },
        }
    }

    /// Record `i` of producer `id` arrived (`intact` or with changed bytes).
    fn on_record(
        &mut self,
        id: u32,
        i: u64,
        intact: bool,
        sent: &[u64; PRODUCERS],
    ) -> Result<(), Fail> {
        let p = id as usize;
        trace!(
            "{} got {id}/{i}{}",
            if self.twice == Symptom::DeliversTwice {
                "owner"
            } else {
                "tether"
            },
            if intact { "" } else { " (changed)" }
        );
        if !intact {
            match self.cut {
                Some(cut) if i >= cut[p] => {
                    return Err((
                        self.garbage,
                        format!(
                            "record {id}/{i}, sent after records flowed again, arrived changed"
                        ),
                    ))
                }
                _ => self.corrupted += 1,
            }
        }
        if i < self.next[p] {
            return Err((
                self.twice,
                format!(
                    "record {id}/{i} arrived again (next expected {id}/{})",
                    self.next[p]
                ),
            ));
        }
        if i >= sent[p] {
            return Err((
                self.twice,
                format!("record {id}/{i} arrived before it was committed"),
            ));
        }
        for j in self.next[p]..i {
            match self.cut {
                Some(cut) if j >= cut[p] => {
                    return Err((
                        self.loses,
                        format!("record {id}/{j} skipped: {id}/{i} arrived instead"),
                    ))
                }
                _ => self.lost += 1,
            }
        }
        self.next[p] = i + 1;
        if intact && self.cut.is_none() && i >= self.at_write[p] {
            self.cut = Some(*sent);
            self.recovered = Some(Instant::now());
        }
        Ok(())
    }

    /// Has every record from the cut on arrived, and have the senders sent enough?
    fn done(&self, sent: &[u64; PRODUCERS], senders: &[u32]) -> bool {
        let Some(cut) = self.cut else { return false };
        senders.iter().all(|&id| {
            let p = id as usize;
            sent[p] >= cut[p] + AFTER && self.next[p] == sent[p]
        })
    }

    fn missing(&self, sent: &[u64; PRODUCERS]) -> String {
        (0..PRODUCERS)
            .filter(|&p| self.next[p] != sent[p])
            .map(|p| format!("producer {p}: sent {}, got up to {}", sent[p], self.next[p]))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// One case of the matrix.
pub struct Case<'a> {
    pub state: State,
    pub word: &'a Word,
    pub value: &'a Value,
    pub ctx: &'a Ctx,
}

impl Case<'_> {
    /// `state/word/value`, e.g. `empty/write/pos+cap`.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}",
            self.state.name(),
            self.word.name,
            self.value.name
        )
    }

    /// Runs the case. Never panics: a panic inside the library is an outcome.
    pub fn run(&self) -> Outcome {
        let mut out = Outcome::default();
        let mut ring = match catch_unwind(AssertUnwindSafe(|| Ring::new(self.state))) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                out.failure = Some((Symptom::Harness, format!("setting up: {e}")));
                return out;
            }
            Err(p) => {
                out.failure = Some((Symptom::Harness, format!("setting up: {}", panic_text(&p))));
                return out;
            }
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            let m = crate::Peer::new(&ring.seg);
            let before = m.word(self.word.offset);
            let v = apply(&self.value.op, before, self.ctx, &m);
            let resets = ring.owner.resets();
            // The one write; the writer is gone from here on.
            match ring.writer.take() {
                Some(w) => {
                    if let Err(e) = w.write(self.word.offset, v) {
                        return Err((Symptom::Harness, e.to_string()));
                    }
                }
                None => m.at(self.word.offset).store(v, Ordering::SeqCst),
            }
            // A claim log entry whose state alone turns abandoned reads exactly
            // as a padding (DESIGN §7: what a peer that writes the log can do):
            // the record it held is lost, and nothing can count it.
            let as_padding = self.word.name.starts_with("log[") && {
                let (was, now) = (LogEntry::unpack(before), LogEntry::unpack(v));
                now.state == ClaimState::Abandoned
                    && was.state != ClaimState::Abandoned
                    && now.stamp == was.stamp
            };
            let r = drive(&mut ring, &mut out, as_padding);
            out.resets = ring.owner.resets() - resets;
            out.last_corruption = ring.owner.health().last_corruption;
            r
        }));
        match r {
            Ok(Ok(())) => {}
            Ok(Err(f)) => out.failure = Some(f),
            Err(p) => out.failure = Some((Symptom::Panics, panic_text(&p))),
        }
        // Dropping the ring may panic too (a consumer's or producer's Drop).
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(ring))) {
            out.failure
                .get_or_insert((Symptom::Panics, format!("on drop: {}", panic_text(&p))));
        }
        out
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Records an error: it must name the ring.
fn error(seg: &Segment, out: &mut Outcome, e: &Error, sym: Symptom) -> Result<(), Fail> {
    let msg = e.to_string();
    trace!("error: {msg}");
    if !msg.contains(seg.name()) {
        return Err((sym, format!("error does not name the ring: {msg}")));
    }
    if out.errors.len() < 8 && !out.errors.contains(&msg) {
        out.errors.push(msg);
    }
    Ok(())
}

/// Takes every frame `c` has ready (waiting up to `wait` for the first).
fn drain(
    seg: &Segment,
    c: &Consumer,
    wait: Duration,
    track: &mut Track,
    sent: &[u64; PRODUCERS],
    out: &mut Outcome,
    tether: bool,
) -> Result<(), Fail> {
    let mut wait = Some(wait);
    for _ in 0..64 {
        let r = c.next_timeout(wait.take().or(Some(Duration::ZERO)));
        match r {
            Ok(Some(f)) => match ring::identify(f.payload(), f.meta()) {
                Seen::Intact(id, i) => track.on_record(id, i, true, sent)?,
                Seen::Corrupted(id, i) => track.on_record(id, i, false, sent)?,
                Seen::Garbage => {
                    return Err((
                        track.garbage,
                        format!(
                            "frame seq {} of {} bytes, stream {} kind {}, is no honest record",
                            f.seq(),
                            f.len(),
                            f.stream(),
                            f.kind()
                        ),
                    ))
                }
            },
            Ok(None) => return Ok(()),
            Err(Error::Detached { .. }) if tether => {
                out.tether_detached = true;
                return Ok(());
            }
            Err(e) => {
                let sym = if tether {
                    Symptom::TetherError
                } else {
                    Symptom::ErrorWithoutName
                };
                error(seg, out, &e, Symptom::ErrorWithoutName)?;
                if tether {
                    return Err((sym, e.to_string()));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

fn drive(ring: &mut Ring, out: &mut Outcome, as_padding: bool) -> Result<(), Fail> {
    let t0 = Instant::now();
    T0.with(|t| t.set(Some(t0)));
    trace!("written; {}", ring_state(ring));
    let mut resets_seen = ring.owner.resets();
    let seg = ring.seg.clone();
    let mut sent = [0u64; PRODUCERS];
    for h in &ring.producers {
        sent[h.id as usize] = h.sent;
    }
    // B's open reservation was claimed before the write: its record does not
    // show that records flow again.
    let mut at_write = sent;
    if let Some(i) = ring.pending {
        at_write[B as usize] = i + 1;
    }
    let resets_at_write = ring.owner.resets();
    let counts_at_write = seg.stats();
    let mut own = Track::new(ring.delivered, at_write, false);
    // The tethered consumer's start is not tracked: it reads from where it was
    // adopted, and what it skips is not judged.
    let mut teth = ring
        .tether
        .as_ref()
        .map(|_| Track::new([0; PRODUCERS], at_write, true));
    let senders = [A, B, NEWCOMER];
    let mut newcomer: Option<Honest> = None;
    loop {
        let now = Instant::now();
        // B commits the reservation it held, as an honest producer would.
        if let Some(i) = ring.pending.take() {
            let b = &mut ring.producers[B as usize];
            let p = ring::payload(B, i);
            match b.p.commit_raw(p.len(), ring::meta(B, i, &p)) {
                Ok(()) => b.sent += 1,
                Err(e) => error(&seg, out, &e, Symptom::ErrorWithoutName)?,
            }
        }
        if now >= t0 + HOLD {
            for f in ring.held.drain(..) {
                if let Err(e) = ring.owner.release_raw(f.seq) {
                    return Err((Symptom::HeldFrameRefused, e.to_string()));
                }
            }
        }
        if newcomer.is_none() {
            match Honest::new(&seg, NEWCOMER) {
                Ok(h) => newcomer = Some(h),
                Err(e) => {
                    error(&seg, out, &e, Symptom::ErrorWithoutName)?;
                    if now >= t0 + BUDGET {
                        return Err((Symptom::NewcomerRefused, e.to_string()));
                    }
                }
            }
        }
        // How far to send: on while a consumer waits for its first record after
        // the write, then AFTER more past the latest cut.
        let flowing = own.cut.is_some()
            && teth
                .as_ref()
                .is_none_or(|t| t.cut.is_some() || out.tether_detached);
        let target = |id: u32, own: &Track, teth: &Option<Track>| -> u64 {
            if !flowing {
                return u64::MAX;
            }
            let p = id as usize;
            let mut t = own.cut.map_or(0, |c| c[p]) + AFTER;
            if let Some(c) = teth.as_ref().and_then(|t| t.cut) {
                t = t.max(c[p] + AFTER);
            }
            t
        };
        for h in ring.producers[..2].iter_mut().chain(newcomer.as_mut()) {
            if h.sent < target(h.id, &own, &teth) {
                match h.send() {
                    Ok(()) => trace!("sent {}/{}", h.id, h.sent - 1),
                    Err(e) => error(&seg, out, &e, Symptom::ErrorWithoutName)?,
                }
                sent[h.id as usize] = h.sent;
            }
        }
        // Frames still held must be as they were. Producers that claimed where a
        // forged cursor sent them may have written over them before the consumer
        // found out (as the writer could have itself); after its reset, nothing may.
        let mut overwritten = false;
        for f in &ring.held {
            // SAFETY: a frame the consumer handed out and we have not released:
            // its bytes lie inside the ring.
            let bytes = unsafe { std::slice::from_raw_parts(f.ptr, f.len) };
            overwritten |= !matches!(ring::identify(bytes, f.meta), Seen::Intact(..));
        }
        if overwritten {
            if ring.owner.resets() > resets_at_write {
                return Err((
                    Symptom::HeldFrameOverwritten,
                    format!(
                        "a frame held across the reset changed; {}",
                        ring_state(ring)
                    ),
                ));
            }
            out.corrupted_before += 1;
            // Released now: what they hold is known lost.
            for f in ring.held.drain(..) {
                if let Err(e) = ring.owner.release_raw(f.seq) {
                    return Err((Symptom::HeldFrameRefused, e.to_string()));
                }
            }
        }
        drain(
            &seg,
            &ring.owner,
            Duration::from_millis(1),
            &mut own,
            &sent,
            out,
            false,
        )?;
        if let Some(t) = ring.tether.as_ref() {
            if !out.tether_detached {
                let tr = teth.as_mut().expect("a track for the tethered consumer");
                drain(&seg, t, Duration::ZERO, tr, &sent, out, true)?;
            }
        }
        if tracing() && ring.owner.resets() != resets_seen {
            resets_seen = ring.owner.resets();
            trace!(
                "owner reset ({:?}); {}",
                ring.owner.health().last_corruption,
                ring_state(ring)
            );
        }
        let now = Instant::now();
        if out.recovered_after.is_none() {
            if let Some(at) = own.recovered {
                out.recovered_after = Some(at - t0);
            }
        }
        match own.recovered {
            None if now >= t0 + BUDGET => {
                out.lost_before = own.lost;
                return Err((
                    Symptom::NeverRecovers,
                    format!(
                        "no record sent after the write arrived; {}",
                        ring_state(ring)
                    ),
                ));
            }
            Some(at) if now >= at + BUDGET && !own.done(&sent, &senders) => {
                return Err((
                    Symptom::LosesAfterRecovery,
                    format!("{}; {}", own.missing(&sent), ring_state(ring)),
                ))
            }
            _ => {}
        }
        let mut tether_done = true;
        if let Some(tr) = teth.as_ref() {
            if !out.tether_detached {
                tether_done = tr.done(&sent, &senders);
                match tr.recovered {
                    None if now >= t0 + BUDGET => {
                        return Err((
                            Symptom::TetherNeverRecovers,
                            format!(
                                "no record sent after the write arrived; {}",
                                ring_state(ring)
                            ),
                        ))
                    }
                    Some(at) if now >= at + BUDGET && !tether_done => {
                        return Err((
                            Symptom::TetherLosesAfterRecovery,
                            format!("{}; {}", tr.missing(&sent), ring_state(ring)),
                        ))
                    }
                    _ => {}
                }
            }
        }
        if newcomer.is_some() && own.done(&sent, &senders) && tether_done {
            break;
        }
    }
    out.lost_before = own.lost;
    out.corrupted_before += own.corrupted + teth.as_ref().map_or(0, |t| t.corrupted);
    if own.lost > 0
        && !as_padding
        && ring.owner.resets() == resets_at_write
        && !counted(&counts_at_write, &seg.stats())
    {
        return Err((
            Symptom::LosesUncounted,
            format!(
                "{} records committed before the write never arrived, and no counter of a record not delivered moved; {}",
                own.lost,
                ring_state(ring)
            ),
        ));
    }
    late_attach(ring, &mut own, teth.as_mut(), &mut sent, out)
}

/// Did a counter of records not delivered move from `before` to `after`: a reset
/// (in `resets`), corruption found, a forged claim, an aborted or abandoned claim
/// skipped, a claim taken back?
fn counted(before: &shmring::Stats, after: &shmring::Stats) -> bool {
    let moved = |f: fn(&shmring::Stats) -> u64| f(after) != f(before);
    moved(|s| s.resets)
        || moved(|s| s.corruption)
        || moved(|s| s.forged_claims)
        || moved(|s| s.skipped_aborted)
        || moved(|s| s.abandoned)
        || moved(|s| s.expired_claims)
}

/// A producer on a new mapping of the segment (as a new process would attach)
/// sends one record; both consumers must get it.
fn late_attach(
    ring: &mut Ring,
    own: &mut Track,
    mut teth: Option<&mut Track>,
    sent: &mut [u64; PRODUCERS],
    out: &mut Outcome,
) -> Result<(), Fail> {
    let seg = ring.seg.clone();
    // The filler of a full ring detaches: every slot would be taken otherwise.
    ring.producers.truncate(2);
    let t0 = Instant::now();
    let mut late: Option<Honest> = None;
    let mut last = String::new();
    loop {
        if late.is_none() {
            let attached = seg
                .descriptors()
                .iter()
                .map(|f| f.try_clone_to_owned())
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| Error::Config(e.to_string()))
                .and_then(|fds| Address::Descriptors(fds).open())
                .and_then(|s: Arc<Segment>| Honest::new(&s, LATE));
            match attached {
                Ok(h) => late = Some(h),
                Err(e) => last = e.to_string(),
            }
        }
        if let Some(h) = late.as_mut() {
            if h.sent == 0 {
                match h.send() {
                    Ok(()) => sent[LATE as usize] = 1,
                    // Its errors name the segment as its own mapping knows it.
                    Err(e) => error(h.p.segment(), out, &e, Symptom::ErrorWithoutName)?,
                }
            }
        }
        drain(
            &seg,
            &ring.owner,
            Duration::from_millis(1),
            own,
            sent,
            out,
            false,
        )?;
        if let (Some(t), Some(tr)) = (ring.tether.as_ref(), teth.as_deref_mut()) {
            if !out.tether_detached {
                drain(&seg, t, Duration::ZERO, tr, sent, out, true)?;
            }
        }
        let got = |tr: &Track| tr.next[LATE as usize] == 1;
        if got(own) && (out.tether_detached || teth.as_deref().is_none_or(got)) {
            return Ok(());
        }
        if t0.elapsed() >= BUDGET {
            return Err(match late {
                None => (Symptom::NewAttachRefused, last),
                Some(_) => (
                    Symptom::NewAttachBroken,
                    format!(
                        "the record of a producer on a new mapping did not arrive ({}); {}",
                        out.errors.last().map_or("no error", |e| e.as_str()),
                        ring_state(ring)
                    ),
                ),
            });
        }
    }
}

/// The shared cursors and the consumer's view, for failure reports.
fn ring_state(ring: &Ring) -> String {
    let m = crate::Peer::new(&ring.seg);
    let ctx = Ctx::new(ring.seg.geometry(), ring::typical_units());
    let cur = |off| {
        let c = m.word(off);
        format!(
            "{}:{}",
            shmring::layout::cursor_seq(c),
            shmring::layout::cursor_pos(c)
        )
    };
    let s = ring.seg.stats();
    format!(
        "write {} read {} peek {}; resets {}, corruption {}, in flight {}, occupancy {}, last corruption {:?}",
        cur(ctx.write_offset),
        cur(ctx.read_offset),
        cur(ctx.peek_offset),
        s.resets,
        s.corruption,
        s.records_in_flight,
        s.occupancy,
        ring.owner.health().last_corruption
    )
}
