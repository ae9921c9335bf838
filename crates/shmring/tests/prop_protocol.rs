//! Model-based test of the claim log protocol: `protocol::{Shared, ConsumerCursor}`
//! driven single-threaded by random interleavings of claims from several producer
//! slots (commit, abort, or left pending and abandoned), polls, publishes and
//! out-of-order releases, checked step by step against a simple reference model.
//! Runs from cursors anywhere, including right below the 2^28 sequence wrap and the
//! 2^36 position wrap.

use std::sync::atomic::{AtomicU64, Ordering};

/// How often the runs reached each interesting outcome (checked by
/// `model_reaches_every_outcome`, so the model cannot silently stop exploring).
mod reached {
    use std::sync::atomic::{AtomicU64, Ordering};
    pub static FULL_RECORDS: AtomicU64 = AtomicU64::new(0);
    pub static FULL_BYTES: AtomicU64 = AtomicU64::new(0);
    pub static PADDED: AtomicU64 = AtomicU64::new(0);
    pub static PLACED: AtomicU64 = AtomicU64::new(0);
    pub static SATURATED: AtomicU64 = AtomicU64::new(0);
    pub static ABANDONED: AtomicU64 = AtomicU64::new(0);
    pub static ZOMBIE_LOST: AtomicU64 = AtomicU64::new(0);
    pub static ABANDON_LOST: AtomicU64 = AtomicU64::new(0);
    pub static SKIPPED: AtomicU64 = AtomicU64::new(0);
    pub static OUT_OF_ORDER: AtomicU64 = AtomicU64::new(0);
    pub fn hit(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

use proptest::prelude::*;
use shmring::layout::{
    claim_total, cursor_pos, cursor_seq, pack_cursor, ClaimState, LogEntry, POS_MASK, SEQ_MASK,
};
use shmring::protocol::{Claim, ClaimError, ConsumerCursor, NotHeld, Poll, Shared};

const CAP: u64 = 64;
const N: u64 = 8;
const SLOTS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    /// Slot `s` claims `units` (header included) if it holds no claim.
    Claim { s: usize, units: u64 },
    /// Slot `s` commits its claim.
    Commit { s: usize },
    /// Slot `s` aborts its claim.
    Abort { s: usize },
    /// Slot `s` dies holding its claim; the consumer will abandon it.
    Die { s: usize },
    /// The consumer looks at the next claim once (abandoning a dead owner's).
    Poll,
    /// The consumer sees a live claim pending, then its holder commits before the
    /// consumer's abandon: the abandon must lose.
    PollCommitRace,
    /// The consumer releases the `i`-th held record (any order).
    Release { i: usize },
    /// The consumer releases something it does not hold.
    BadRelease { i: usize },
    /// The consumer publishes its read cursor.
    Publish,
    /// The consumer, having released everything and published, pads the ring to
    /// its end so the next record goes to its start (`Shared::pad_to_start`), and
    /// steps over the padding.
    Place,
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SLOTS;
    let units = prop_oneof![Just(1u64), Just(CAP / 2), 1..=CAP / 2, 1u64..=4];
    prop_oneof![
        6 => (s.clone(), units).prop_map(|(s, units)| Op::Claim { s, units }),
        4 => s.clone().prop_map(|s| Op::Commit { s }),
        1 => s.clone().prop_map(|s| Op::Abort { s }),
        1 => s.prop_map(|s| Op::Die { s }),
        6 => Just(Op::Poll),
        1 => Just(Op::PollCommitRace),
        3 => any::<usize>().prop_map(|i| Op::Release { i }),
        1 => any::<usize>().prop_map(|i| Op::BadRelease { i }),
        3 => Just(Op::Publish),
        2 => Just(Op::Place),
    ]
}

fn start_seq() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        (0u64..64).prop_map(|d| SEQ_MASK - d),
        0..=SEQ_MASK
    ]
}

fn start_pos() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        (0u64..256).prop_map(|d| POS_MASK - d),
        0..=POS_MASK
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    No,
    Held,
    Released,
}

#[derive(Debug)]
struct MClaim {
    slot: usize,
    claim: Claim,
    state: ClaimState,
    dead: bool,
    seen: Seen,
}

struct Ring {
    write: AtomicU64,
    read: AtomicU64,
    log: Vec<AtomicU64>,
    /// Each slot's `open_claim` word.
    open: Vec<AtomicU64>,
    /// Each unit of the data ring holds the tag of the record written there.
    data: Vec<u64>,
    /// The pin table (see `layout::Pins`).
    pinned: std::sync::atomic::AtomicU32,
    pins: Vec<AtomicU64>,
}

struct Model {
    seq0: u64,
    pos0: u64,
    /// Every claim ever granted, by `seq - seq0`.
    claims: Vec<MClaim>,
    /// Position of the next claim, relative to pos0.
    wpos: u64,
    /// Consumer: next claim to look at, first claim not passed by the local and by
    /// the published read cursor.
    peek: usize,
    read: usize,
    published: usize,
    published_pos: u64,
    slot_claim: [Option<usize>; SLOTS],
    /// Owner (claim index) of each ring unit that a producer may not reuse yet.
    occupied: Vec<Option<usize>>,
    /// Claims in the order the consumer received them as records.
    delivered: Vec<usize>,
    held: Vec<usize>,
}

impl Ring {
    fn new(seq0: u64, pos0: u64) -> Ring {
        let c = pack_cursor(seq0, pos0);
        let mut log: Vec<AtomicU64> = (0..N).map(|_| AtomicU64::new(0)).collect();
        for k in seq0..seq0 + N {
            let k = k & SEQ_MASK;
            log[(k % N) as usize] = AtomicU64::new(LogEntry::initial(k, N));
        }
        Ring {
            write: AtomicU64::new(c),
            read: AtomicU64::new(c),
            log,
            open: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            data: vec![0; CAP as usize],
            pinned: std::sync::atomic::AtomicU32::new(0),
            pins: (0..shmring::layout::MAX_PINS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
    fn shared(&self) -> Shared<'_> {
        Shared {
            write: &self.write,
            read: &self.read,
            log: &self.log,
            cap_units: CAP,
            pins: shmring::protocol::PinTable {
                in_use: &self.pinned,
                extent: &self.pins,
            },
        }
    }
}

impl Model {
    fn new(seq0: u64, pos0: u64) -> Model {
        Model {
            seq0,
            pos0,
            claims: Vec::new(),
            wpos: 0,
            peek: 0,
            read: 0,
            published: 0,
            published_pos: 0,
            slot_claim: [None; SLOTS],
            occupied: vec![None; CAP as usize],
            delivered: Vec::new(),
            held: Vec::new(),
        }
    }
    fn seq(&self, i: usize) -> u64 {
        (self.seq0 + i as u64) & SEQ_MASK
    }
    fn abs_pos(&self, rel: u64) -> u64 {
        (self.pos0 + rel) & POS_MASK
    }
    fn claim_pos_rel(&self, i: usize) -> u64 {
        (self.claims[i].claim.pos.wrapping_sub(self.pos0)) & POS_MASK
    }
    fn units_of(&self, i: usize) -> impl Iterator<Item = usize> {
        let c = self.claims[i].claim;
        (0..c.total).map(move |u| ((c.pos + u) % CAP) as usize)
    }
    /// Marks claim `i`'s units taken: never two live claims on the same unit.
    fn occupy(&mut self, i: usize) {
        let units: Vec<usize> = self.units_of(i).collect();
        for u in units {
            assert_eq!(
                self.occupied[u], None,
                "claim {i} overlaps claim {:?}",
                self.occupied[u]
            );
            self.occupied[u] = Some(i);
        }
    }
    /// Local read cursor passes claims that are released or skipped.
    fn advance_read(&mut self) {
        while self.read < self.peek {
            let c = &self.claims[self.read];
            let done = match c.state {
                ClaimState::Committed => c.seen == Seen::Released,
                _ => true,
            };
            if !done {
                break;
            }
            self.read += 1;
        }
    }
}

fn check_consumer(m: &Model, cur: &ConsumerCursor) {
    assert_eq!(cur.peek_seq, m.seq0 + m.peek as u64, "peek seq");
    assert_eq!(cur.read_seq, m.seq0 + m.read as u64, "read seq");
    assert_eq!(cur.outstanding(), (m.peek - m.read) as u64);
    let held: u64 = (m.read..m.peek).map(|i| m.claims[i].claim.total).sum();
    assert_eq!(cur.held_units(), held, "held units");
    assert_eq!(cur.peek_pos & POS_MASK, m.abs_pos(m.wpos_at(m.peek)));
}

impl Model {
    /// Position (relative) of claim `i`, or of the next claim when `i == len`.
    fn wpos_at(&self, i: usize) -> u64 {
        if i == self.claims.len() {
            self.wpos
        } else {
            self.claim_pos_rel(i)
        }
    }
}

fn poll(m: &mut Model, ring: &mut Ring, cur: &mut ConsumerCursor) {
    let sh_ring = &*ring;
    let sh = sh_ring.shared();
    let got = cur.poll(&sh);
    if m.peek - m.read >= N as usize {
        reached::hit(&reached::SATURATED);
        assert_eq!(got, Poll::Saturated);
        return;
    }
    if m.peek == m.claims.len() {
        assert_eq!(got, Poll::Empty);
        return;
    }
    let i = m.peek;
    let c = &m.claims[i];
    match (c.state, got) {
        (ClaimState::Claimed, Poll::Pending { slot, value }) => {
            assert_eq!(slot as usize, c.slot);
            assert_eq!(value, c.claim.claimed);
            if c.dead {
                assert!(cur.abandon(&sh, value), "abandoning a dead owner's claim");
                reached::hit(&reached::ABANDONED);
                m.claims[i].state = ClaimState::Abandoned;
            }
        }
        (
            ClaimState::Committed,
            Poll::Record {
                seq,
                rec_off,
                rec_units,
            },
        ) => {
            assert_eq!(seq, m.seq0 + i as u64);
            assert_eq!((rec_off, rec_units), (c.claim.rec_off, c.claim.rec_units));
            // The record's bytes are still the ones its producer wrote.
            for u in rec_off..rec_off + rec_units {
                assert_eq!(
                    ring.data[u as usize],
                    i as u64 + 1,
                    "record {i} overwritten"
                );
            }
            m.claims[i].seen = Seen::Held;
            m.held.push(i);
            m.delivered.push(i);
            m.peek += 1;
        }
        (st @ (ClaimState::Aborted | ClaimState::Abandoned), Poll::Skipped { state }) => {
            assert_eq!(state, st);
            reached::hit(&reached::SKIPPED);
            m.peek += 1;
            m.advance_read();
        }
        (st, got) => panic!("claim {i} in state {st:?}: consumer got {got:?}"),
    }
}

fn publish(m: &mut Model, ring: &Ring, cur: &ConsumerCursor) {
    cur.publish(&ring.shared());
    for i in m.published..m.read {
        let units: Vec<usize> = m.units_of(i).collect();
        for u in units {
            assert_eq!(m.occupied[u], Some(i));
            m.occupied[u] = None;
        }
    }
    m.published = m.read;
    m.published_pos = m.wpos_at(m.read);
    let r = ring.read.load(Ordering::Relaxed);
    assert_eq!(cursor_seq(r), m.seq(m.read));
    assert_eq!(cursor_pos(r), m.abs_pos(m.published_pos));
}

fn claim(m: &mut Model, ring: &Ring, s: usize, units: u64) {
    let sh = ring.shared();
    let got = sh.try_claim(units, s as u32, &ring.open[s]);
    // What the model expects, from the published read cursor only.
    let in_flight = m.claims.len() - m.published;
    let used = m.wpos - m.published_pos;
    let abs = m.abs_pos(m.wpos);
    let total = claim_total(abs, units, CAP);
    if in_flight as u64 == N {
        reached::hit(&reached::FULL_RECORDS);
        assert_eq!(got, Err(ClaimError::FullRecords));
        return;
    }
    if used + total > CAP {
        reached::hit(&reached::FULL_BYTES);
        assert_eq!(got, Err(ClaimError::FullBytes), "used {used} total {total}");
        return;
    }
    let c = got.unwrap_or_else(|e| panic!("claim of {units} units with {used} used: {e:?}"));
    let i = m.claims.len();
    assert_eq!(c.seq, m.seq(i));
    assert_eq!(c.pos, abs);
    assert_eq!(c.total, total);
    if total > units {
        reached::hit(&reached::PADDED);
    }
    assert_eq!(c.rec_units, units);
    assert!(c.rec_off + c.rec_units <= CAP);
    m.claims.push(MClaim {
        slot: s,
        claim: c,
        state: ClaimState::Claimed,
        dead: false,
        seen: Seen::No,
    });
    m.wpos += total;
    m.slot_claim[s] = Some(i);
    m.occupy(i);
    let w = ring.write.load(Ordering::Relaxed);
    assert_eq!(w, pack_cursor(m.seq(i + 1), m.abs_pos(m.wpos)));
}

fn place(m: &mut Model, ring: &mut Ring, cur: &mut ConsumerCursor) {
    // As the consumer does it: only with nothing outstanding and its read cursor
    // published.
    if m.read != m.peek || m.published != m.read {
        return;
    }
    let got = ring.shared().pad_to_start(cur.peek_seq, cur.peek_pos);
    let abs = m.abs_pos(m.wpos);
    let off = abs % CAP;
    // The ring is empty when the consumer has seen every claim.
    if m.peek != m.claims.len() || off == 0 {
        assert_eq!(got, None);
        return;
    }
    let pad = CAP - off;
    assert_eq!(got, Some(pad));
    reached::hit(&reached::PLACED);
    let i = m.claims.len();
    let claimed = LogEntry {
        stamp: m.seq(i),
        state: ClaimState::Abandoned,
        slot: 0,
        units: pad,
    }
    .pack();
    m.claims.push(MClaim {
        slot: usize::MAX,
        claim: Claim {
            seq: m.seq(i),
            pos: abs,
            total: pad,
            paddings: 0,
            rec_off: off,
            rec_units: pad,
            claimed,
        },
        state: ClaimState::Abandoned,
        dead: false,
        seen: Seen::No,
    });
    m.occupy(i);
    m.wpos += pad;
    let w = ring.write.load(Ordering::Relaxed);
    assert_eq!(w, pack_cursor(m.seq(i + 1), m.abs_pos(m.wpos)));
    // The consumer steps over it and publishes: the ring is empty again, its
    // next record at the ring's start.
    poll(m, ring, cur);
    publish(m, ring, cur);
    assert_eq!(m.abs_pos(m.wpos) % CAP, 0);
}

fn finish(m: &mut Model, ring: &mut Ring, s: usize, state: ClaimState) {
    let Some(i) = m.slot_claim[s] else { return };
    let c = m.claims[i].claim;
    // A zombie whose claim was abandoned would scribble on space that may be
    // reused already (a hazard the protocol cannot prevent, only bound): the model
    // checks the protocol, so it writes only what an honest producer would.
    let abandoned = m.claims[i].state == ClaimState::Abandoned;
    if state == ClaimState::Committed && !abandoned {
        for u in c.rec_off..c.rec_off + c.rec_units {
            ring.data[u as usize] = i as u64 + 1;
        }
    }
    let ok = ring.shared().settle(&c, state, &ring.open[s]);
    if m.claims[i].dead {
        // A zombie finishing a claim: it wins unless the consumer abandoned it.
        assert_eq!(ok, !abandoned, "zombie finish of claim {i}");
        if abandoned {
            reached::hit(&reached::ZOMBIE_LOST);
        }
        if ok {
            m.claims[i].state = state;
        }
    } else {
        assert!(ok, "finish of live claim {i}");
        m.claims[i].state = state;
    }
    m.slot_claim[s] = None;
}

fn run(seq0: u64, pos0: u64, ops: &[Op]) {
    let mut ring = Ring::new(seq0, pos0);
    let mut cur = ConsumerCursor::new(N as usize, ring.read.load(Ordering::Relaxed));
    let mut m = Model::new(seq0, pos0);
    for op in ops {
        match *op {
            Op::Claim { s, units } => {
                if m.slot_claim[s].is_none() {
                    claim(&mut m, &ring, s, units);
                }
            }
            Op::Commit { s } => finish(&mut m, &mut ring, s, ClaimState::Committed),
            Op::Abort { s } => finish(&mut m, &mut ring, s, ClaimState::Aborted),
            Op::Die { s } => {
                if let Some(i) = m.slot_claim[s] {
                    if !m.claims[i].dead {
                        m.claims[i].dead = true;
                    } else {
                        // Dead twice: the zombie tries to commit after all.
                        finish(&mut m, &mut ring, s, ClaimState::Committed);
                    }
                }
            }
            Op::Poll => {
                poll(&mut m, &mut ring, &mut cur);
                if m.read > m.published {
                    // The consumer publishes after it skips (like `Consumer`).
                    publish(&mut m, &ring, &cur);
                }
            }
            Op::PollCommitRace => {
                let i = m.peek;
                if m.peek - m.read < N as usize
                    && i < m.claims.len()
                    && m.claims[i].state == ClaimState::Claimed
                    && !m.claims[i].dead
                {
                    let sh = ring.shared();
                    let Poll::Pending { value, .. } = cur.poll(&sh) else {
                        panic!("claim {i} should be pending")
                    };
                    let s = m.claims[i].slot;
                    finish(&mut m, &mut ring, s, ClaimState::Committed);
                    assert!(!cur.abandon(&ring.shared(), value), "abandon beat a commit");
                    reached::hit(&reached::ABANDON_LOST);
                    poll(&mut m, &mut ring, &mut cur);
                }
            }
            Op::Release { i } => {
                if !m.held.is_empty() {
                    let c = m.held.swap_remove(i % m.held.len());
                    let moved = cur.release(m.seq0 + c as u64).expect("held record");
                    m.claims[c].seen = Seen::Released;
                    let before = m.read;
                    m.advance_read();
                    assert_eq!(moved, m.read != before);
                    if !moved {
                        reached::hit(&reached::OUT_OF_ORDER);
                    }
                }
            }
            Op::BadRelease { i } => {
                // Released already, never handed out, or not yet claimed.
                let candidates: Vec<u64> = (0..m.claims.len() + 2)
                    .filter(|&c| c >= m.claims.len() || m.claims[c].seen != Seen::Held)
                    .map(|c| m.seq0 + c as u64)
                    .collect();
                let seq = candidates[i % candidates.len()];
                assert_eq!(cur.release(seq), Err(NotHeld), "release of {seq}");
                assert!(!cur.is_held(seq));
            }
            Op::Publish => publish(&mut m, &ring, &cur),
            Op::Place => place(&mut m, &mut ring, &mut cur),
        }
        check_consumer(&m, &cur);
        for &h in &m.held {
            assert!(cur.is_held(m.seq0 + h as u64));
        }
    }
    // Drain: every live producer finishes (commit), dead ones are abandoned, the
    // consumer reads and releases everything.
    for s in 0..SLOTS {
        if let Some(i) = m.slot_claim[s] {
            if !m.claims[i].dead {
                finish(&mut m, &mut ring, s, ClaimState::Committed);
            }
        }
    }
    for _ in 0..4 * m.claims.len() + 4 {
        for h in std::mem::take(&mut m.held) {
            cur.release(m.seq0 + h as u64).expect("held record");
            m.claims[h].seen = Seen::Released;
        }
        m.advance_read();
        poll(&mut m, &mut ring, &mut cur);
        publish(&mut m, &ring, &cur);
        if m.peek == m.claims.len() && m.held.is_empty() {
            break;
        }
    }
    for h in std::mem::take(&mut m.held) {
        cur.release(m.seq0 + h as u64).expect("held record");
        m.claims[h].seen = Seen::Released;
    }
    m.advance_read();
    publish(&mut m, &ring, &cur);
    assert_eq!(m.peek, m.claims.len(), "consumer passed every claim");
    assert_eq!(m.read, m.claims.len());
    assert_eq!(cur.outstanding(), 0);
    assert_eq!(cur.held_units(), 0);
    // Every committed record delivered exactly once, in claim order.
    let committed: Vec<usize> = (0..m.claims.len())
        .filter(|&i| m.claims[i].state == ClaimState::Committed)
        .collect();
    assert_eq!(m.delivered, committed);
    assert!(m.occupied.iter().all(Option::is_none));
    // The empty ring has all its space back: a largest record fits wherever the
    // write position is.
    for s in 0..SLOTS {
        m.slot_claim[s] = None;
    }
    claim(&mut m, &ring, 0, CAP / 2);
    assert!(
        m.slot_claim[0].is_some(),
        "largest record fits an empty ring"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 600 } else { 4000 }))]

    #[test]
    fn protocol_matches_model(seq0 in start_seq(), pos0 in start_pos(), ops in prop::collection::vec(op(), 1..300)) {
        run(seq0, pos0, &ops);
    }
}

/// Fills and drains the ring many times across both wraps, deterministically.
#[test]
fn long_run_across_both_wraps() {
    let mut ops = Vec::new();
    for r in 0..2000usize {
        let s = r % SLOTS;
        ops.push(Op::Claim {
            s,
            units: 1 + (r as u64 * 7) % (CAP / 2),
        });
        ops.push(match r % 5 {
            0 => Op::Abort { s },
            _ => Op::Commit { s },
        });
        ops.push(Op::Poll);
        ops.push(Op::Release { i: r });
        ops.push(Op::Publish);
    }
    run(SEQ_MASK - 3, POS_MASK - 17, &ops);
    run(SEQ_MASK, POS_MASK, &ops);
}

#[test]
fn model_reaches_every_outcome() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config::with_cases(if cfg!(debug_assertions) {
        200
    } else {
        500
    }));
    runner
        .run(
            &(
                start_seq(),
                start_pos(),
                prop::collection::vec(op(), 1..300),
            ),
            |(seq0, pos0, ops)| {
                run(seq0, pos0, &ops);
                Ok(())
            },
        )
        .unwrap();
    use reached::*;
    for (name, c) in [
        ("ring full (records)", &FULL_RECORDS),
        ("ring full (bytes)", &FULL_BYTES),
        ("padded claim at the ring end", &PADDED),
        ("consumer padded an empty ring to its start", &PLACED),
        ("consumer saturated", &SATURATED),
        ("dead producer's claim abandoned", &ABANDONED),
        ("zombie commit after abandon", &ZOMBIE_LOST),
        ("abandon losing to a commit", &ABANDON_LOST),
        ("aborted/abandoned claim skipped", &SKIPPED),
        ("out-of-order release", &OUT_OF_ORDER),
    ] {
        assert!(c.load(Ordering::Relaxed) > 0, "never reached: {name}");
    }
}
