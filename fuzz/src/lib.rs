//! Fuzzing harness shared by the targets: a fresh small ring per input, driven by a
//! byte program that mixes consumer operations, honest producer operations and
//! arbitrary writes anywhere in the segment. The properties checked are the
//! consumer's: no panic, no access outside the segment, every call returns; and,
//! once the program's writes stop, liveness: an honest producer and the same
//! consumer move a record again, after at most one reset.

use std::sync::Arc;
use std::time::Duration;

use shmring::{Config, ConsumerOptions, FullPolicy, Meta, RawFrame, Segment};

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

thread_local! {
    /// One ring per thread and a copy of its pristine bytes: every input starts
    /// from exactly the same segment contents, without creating a new one.
    static RING: (Arc<Segment>, Vec<u8>) = {
        let cfg = Config {
            capacity: 64 * 1024,
            max_record: Some(16 * 1024),
            log_entries: Some(16),
            max_producers: 4,
            ..Config::default()
        };
        let seg = Segment::create_memfd("fuzz", &cfg).expect("create");
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
                // SAFETY: off + n <= len: inside our own mapping. Shared memory that
                // the consumer treats as untrusted; writing it is the point.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), (base as *mut u8).add(off), n)
                };
            }
            // A 64-bit value into a structure the protocol reads.
            1 => {
                let Some(which) = input.byte() else { break };
                let Some(v) = input.u64() else { break };
                let at = match which % 6 {
                    0 => 64,                                                         // write cursor
                    1 => 128,                                                        // read cursor
                    2 => g.log_offset as usize + 8 * (which as usize / 6 % 16),      // a log entry
                    3 => g.slots_offset as usize + 128 * (which as usize / 6 % 4),   // slot state
                    4 => g.data_offset as usize + 64 * (which as usize % 1024), // a record header
                    _ => g.data_offset as usize + 64 * (which as usize % 1024) + 32, // its seq
                };
                // SAFETY: `at` + 8 lies inside the mapping (computed from the geometry),
                // 8-byte aligned.
                unsafe { std::ptr::write_volatile((base as *mut u8).add(at) as *mut u64, v) };
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
