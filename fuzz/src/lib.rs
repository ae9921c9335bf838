//! Fuzzing harness shared by the targets: a fresh small ring per input, driven by a
//! byte program that mixes consumer operations, honest producer operations and
//! arbitrary writes anywhere in the segment, among them the one-write matrix's
//! boundary values (`shmring_testkit::matrix`: 0, all ones, a cursor a ring ahead,
//! a claim log entry's next generation, each state, ...), taken relative to what
//! the word holds when it is written. The properties checked are the consumer's:
//! no panic, no access outside the segment, every call returns; and, once the
//! program's writes stop, liveness: an honest producer and the same consumer move
//! a record again, after at most one reset.
//!
//! `fuzz/boundary.dict` ([`dictionary`]) gives libFuzzer the same values as
//! tokens: `cargo +nightly fuzz run consumer_vs_segment -- -dict=boundary.dict`.

use std::mem::{offset_of, size_of};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use shmring::layout::{
    pack_cursor, ClaimState, Geometry, LogEntry, RecordHeader, Slot, POS_MASK, SEQ_MASK,
};
use shmring::{Address, Config, ConsumerOptions, FullPolicy, Meta, RawFrame, Segment};
use shmring_testkit::matrix::{self, Ctx, Peek, Value, Word};
use shmring_testkit::Peer;

/// Reads the program.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
    fn u64(&mut self) -> Option<u64> {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte()?;
        }
        Some(u64::from_le_bytes(b))
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// The ring every input runs on.
fn config() -> Config {
    Config {
        capacity: 64 * 1024,
        max_record: Some(16 * 1024),
        log_entries: Some(16),
        max_producers: 4,
        ..Config::default()
    }
}

/// The matrix's words of the fuzzed ring and their boundary values; the words a
/// forgery aims at first (cursors, claim log, slot and tether state) come first.
struct Boundary {
    ctx: Ctx,
    aimed: Vec<(Word, Vec<Value>)>,
    all: Vec<(Word, Vec<Value>)>,
}

fn is_aimed(w: &Word) -> bool {
    use matrix::Role;
    w.fields.iter().any(|f| {
        matches!(
            f.role,
            Role::Cursor | Role::Entry | Role::State(_) | Role::Mask
        )
    })
}

fn boundary() -> &'static Boundary {
    static B: OnceLock<Boundary> = OnceLock::new();
    B.get_or_init(|| {
        let geo = config().geometry().expect("geometry");
        let ctx = Ctx::new(&geo, matrix::typical_units());
        let all: Vec<(Word, Vec<Value>)> = matrix::words(&geo)
            .into_iter()
            .map(|w| {
                let v = matrix::values(&w, &ctx);
                (w, v)
            })
            .collect();
        let aimed = all.iter().filter(|(w, _)| is_aimed(w)).cloned().collect();
        Boundary { ctx, aimed, all }
    })
}

/// Writes the boundary value `value` (an index into the word's values) over the
/// word `word` (even: an aimed word; odd: any word), relative to what it holds.
fn boundary_write(peer: &Peer, word: u16, value: u8) {
    let b = boundary();
    let list = if word & 1 == 0 { &b.aimed } else { &b.all };
    let (w, vals) = &list[(word >> 1) as usize % list.len()];
    let v = &vals[value as usize % vals.len()];
    let new = matrix::apply(&v.op, peer.word(w.offset), &b.ctx, peer);
    peer.at(w.offset).store(new, Ordering::SeqCst);
}

/// A libFuzzer dictionary of the same boundaries (`fuzz/boundary.dict`): the
/// absolute values and packed cursors and claim log entries of the fuzzed ring
/// as 8-byte little-endian tokens, and the boundary-write operation aimed at each
/// aimed word (its value byte left to the fuzzer).
pub fn dictionary() -> String {
    let geo: Geometry = config().geometry().expect("geometry");
    let (n, cap) = (geo.log_entries as u64, geo.cap_units());
    let mut tokens: Vec<(String, Vec<u8>)> = Vec::new();
    let mut word = |name: String, v: u64| tokens.push((name, v.to_le_bytes().to_vec()));
    for &(name, v) in matrix::ABSOLUTE {
        word(format!("abs{name}"), v);
    }
    for (sname, seq) in [("0", 0), ("N", n), ("2N", 2 * n), ("mask", SEQ_MASK)] {
        for (pname, pos) in [
            ("0", 0),
            ("cap-1", cap - 1),
            ("cap", cap),
            ("cap+1", cap + 1),
            ("2cap", 2 * cap),
            ("mask", POS_MASK),
        ] {
            word(format!("cursor({sname},{pname})"), pack_cursor(seq, pos));
        }
    }
    for stamp in [0, n, SEQ_MASK] {
        for state in [
            ClaimState::Claimed,
            ClaimState::Committed,
            ClaimState::Aborted,
        ] {
            for units in [1, cap, cap + 1] {
                let e = LogEntry {
                    stamp,
                    state,
                    slot: 0,
                    units,
                };
                word(format!("entry({stamp},{state:?},{units})"), e.pack());
            }
        }
    }
    for (i, (w, _)) in boundary().aimed.iter().enumerate() {
        let sel = (i as u16) << 1;
        let mut t = vec![BOUNDARY_OP];
        t.extend_from_slice(&sel.to_le_bytes());
        tokens.push((format!("boundary {}", w.name), t));
    }
    let mut out = String::from(
        "# Boundary values of the one-write matrix for the fuzzed ring (generated by\n\
         # shmring_fuzz::dictionary; crates/shmring/tests/fuzz_regressions.rs checks it).\n",
    );
    for (name, bytes) in tokens {
        let esc: String = bytes.iter().map(|b| format!("\\x{b:02x}")).collect();
        out += &format!("# {name}\n\"{esc}\"\n");
    }
    out
}

/// The operation byte of a boundary write (op 1 with bit 3 set).
const BOUNDARY_OP: u8 = 9;

thread_local! {
    /// One ring per thread and a copy of its pristine bytes: every input starts
    /// from exactly the same segment contents, without creating a new one.
    static RING: (Arc<Segment>, Vec<u8>) = {
        let seg = Address::memfd("fuzz", config()).open().expect("create");
        let (base, len) = seg.mapping();
        // SAFETY: the mapping is ours, `len` bytes long, and nobody writes it now.
        let pristine = unsafe { std::slice::from_raw_parts(base, len) }.to_vec();
        (seg, pristine)
    };
}

/// Runs one program. `with_producer`: also interleave honest producer operations.
pub fn run(data: &[u8], with_producer: bool) {
    RING.with(|(seg, pristine)| {
        let (base, len) = seg.mapping();
        // SAFETY: no consumer or producer is attached between runs; restoring the
        // whole mapping from its pristine copy makes each run independent.
        unsafe { std::ptr::copy_nonoverlapping(pristine.as_ptr(), base as *mut u8, len) };
        run_on(seg, data, with_producer);
    });
}

fn run_on(seg: &Arc<Segment>, data: &[u8], with_producer: bool) {
    let mut consumer = shmring::Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            liveness_interval: Duration::ZERO,
            spin: 0,
            // With producers, pending claims are overtaken at once, so parked
            // claims meet the scribbles too.
            overtake_after: with_producer.then_some(Duration::ZERO),
            ..Default::default()
        },
    )
    .expect("consumer");
    let mut producer = if with_producer {
        let mut p = seg.producer().expect("producer");
        p.set_policy(FullPolicy::Fail);
        Some(p)
    } else {
        None
    };
    let peer = Peer::new(seg);
    let (base, len) = seg.mapping();
    let g = *seg.geometry();
    let data_start = base as usize + g.data_offset as usize;
    let map_end = base as usize + len;
    let mut held: Vec<RawFrame> = Vec::new();
    let mut input = Input(data);
    let mut steps = 0;
    while let Some(op) = input.byte() {
        steps += 1;
        if steps > 256 {
            break;
        }
        match op % 8 {
            // Arbitrary bytes at an arbitrary offset of the segment.
            0 => {
                let Some(off) = input.u16() else { break };
                let n = input.byte().unwrap_or(0) as usize % 64;
                let bytes = input.bytes(n).to_vec();
                let off = (off as usize * 7) % len;
                let n = bytes.len().min(len - off);
                peer.put_bytes(off, &bytes[..n]);
            }
            // A boundary value of the one-write matrix, relative to the word's value.
            1 if op & 8 != 0 => {
                let Some(word) = input.u16() else { break };
                let Some(value) = input.byte() else { break };
                boundary_write(&peer, word, value);
            }
            // A 64-bit value into a structure the protocol reads.
            1 => {
                let Some(which) = input.byte() else { break };
                let Some(v) = input.u64() else { break };
                let word = match which % 6 {
                    0 => &peer.control().write.0,
                    1 => &peer.control().cursors.0.read,
                    2 => peer.entry(which as u64 / 6 % 16),
                    // A slot's state word (and its padding).
                    3 => peer
                        .at(g.slots_offset as usize + size_of::<Slot>() * (which as usize / 6 % 4)),
                    // A record header's first word, or its seq.
                    4 => peer.at(peer.unit_offset(which as u64 % 1024)),
                    _ => peer
                        .at(peer.unit_offset(which as u64 % 1024) + offset_of!(RecordHeader, seq)),
                };
                word.store(v, Ordering::SeqCst);
            }
            2 | 3 => match consumer.next_raw(Some(Duration::ZERO)) {
                Ok(Some(f)) => {
                    let (p, l) = (f.ptr as usize, f.len);
                    assert!(
                        p >= data_start && p + l <= map_end,
                        "frame outside the data ring"
                    );
                    // SAFETY: just checked to lie inside the mapping.
                    let s = unsafe { std::slice::from_raw_parts(f.ptr, l) };
                    std::hint::black_box(s.iter().fold(0u8, |a, &b| a ^ b));
                    held.push(f);
                }
                Ok(None) => {}
                Err(e) => {
                    let _ = e.to_string();
                }
            },
            4 => {
                if !held.is_empty() {
                    let i = input.byte().unwrap_or(0) as usize % held.len();
                    let f = held.swap_remove(i);
                    consumer.release_raw(f.seq).expect("release a held frame");
                    // Releasing again must be refused, not crash.
                    assert!(consumer.release_raw(f.seq).is_err());
                }
            }
            5 => {
                // Frames held across a reset stay valid (and are released later);
                // a reset is refused while frames from before the last one are out.
                let _ = consumer.reset();
                if with_producer && producer.is_none() {
                    producer = seg.producer().ok().map(|mut p| {
                        p.set_policy(FullPolicy::Fail);
                        p
                    });
                }
            }
            _ => {
                if let Some(p) = producer.as_mut() {
                    let n = input.u16().unwrap_or(0) as usize % (20 * 1024);
                    let commit = input.byte().unwrap_or(0) & 1 == 0;
                    let corrupt = match p.try_reserve(n) {
                        Ok(mut r) => {
                            r.payload().fill(0xa5);
                            if commit {
                                let _ = r.commit(Meta::new(1, 2));
                            }
                            false
                        }
                        Err(e) => matches!(e, shmring::Error::Corrupt { .. }),
                    };
                    if corrupt {
                        // A producer that finds the ring corrupt stops (until a reset).
                        producer = None;
                    }
                } else if with_producer {
                    let _ = input.u16();
                } else {
                    // Any number: refused unless it names a frame we hold, which it
                    // then releases (so forget it).
                    let seq = input.u64().unwrap_or(0);
                    let was_held = held.iter().position(|f| f.seq == seq);
                    match (consumer.release_raw(seq), was_held) {
                        (Ok(()), Some(i)) => {
                            held.swap_remove(i);
                        }
                        (Err(_), None) => {}
                        (r, h) => panic!("release_raw({seq}) = {r:?} but held = {h:?}"),
                    }
                }
            }
        }
    }
    for f in held.drain(..) {
        consumer.release_raw(f.seq).expect("release a held frame");
    }
    drop(producer);
    assert_live(seg, &consumer);
    drop(consumer);
}

/// Whatever the program wrote, now that it has stopped, an honest producer and the
/// same consumer must move a record, after at most one reset.
fn assert_live(seg: &Arc<Segment>, consumer: &shmring::Consumer) {
    let resets = consumer.resets();
    let mut producer = seg
        .producer()
        .expect("an honest producer attaches after any scribble");
    producer.set_policy(FullPolicy::Fail);
    let marker = b"honest record after the storm";
    // The consumer's periodic look (due at once: liveness_interval is zero) mends
    // what a peer changed and resets a contradictory ring.
    let _ = consumer.audit();
    let mut delivered = false;
    // A reset may swallow the first marker (committed records not yet handed out
    // are lost in a reset): then the producer sends it again, once.
    for _attempt in 0..2 {
        let before = consumer.resets();
        let mut sent = false;
        // Bounded: the ring holds at most 16 records, each poll resolves one claim
        // or finds a pending one's owner dead or its claim forged.
        for _ in 0..256 {
            if !sent {
                sent = producer.send(marker, Meta::new(9, 9)).is_ok();
            }
            if let Ok(Some(f)) = consumer.next_raw(Some(Duration::ZERO)) {
                // SAFETY: a frame the consumer handed out lies inside the ring.
                let bytes = unsafe { std::slice::from_raw_parts(f.ptr, f.len) };
                delivered |= sent && f.meta.stream == 9 && bytes == marker;
                consumer.release_raw(f.seq).expect("release");
            }
            if delivered || consumer.resets() != before {
                break;
            }
        }
        if delivered {
            break;
        }
    }
    assert!(
        delivered,
        "no honest record got through after the program stopped: {:?}",
        seg.stats()
    );
    assert!(
        consumer.resets() <= resets + 1,
        "more than one reset to recover: {} -> {}",
        resets,
        consumer.resets()
    );
}
