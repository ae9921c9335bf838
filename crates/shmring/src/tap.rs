//! Taps: read-only observers that read records as they go by, never slowing
//! producers or consumers (they write nothing: their mapping is `PROT_READ`).
//!
//! A tap keeps its own cursor, walking the claim log from the write cursor it
//! found at attach. Nothing protects the bytes it reads, so it reads like a seqlock
//! reader: it loads the claim's log entry, reads the record, then (after an
//! Acquire fence) loads the entry and the write cursor again. The record was intact
//! if the entry still holds the same claim and the write cursor has not gone a
//! whole ring past the claim's first byte (no producer can have claimed any of its
//! bytes again; producers write a record only after moving the write cursor past
//! it, and fence before writing). Otherwise it is counted lost, never delivered. A
//! tap that finds itself lapped (the write cursor a ring or a claim log ahead)
//! skips to the newest record and counts what it skipped.
//!
//! ```
//! # use shmring::{Address, Config, Meta, ReadOnlySegment, Tap, TapOptions};
//! # use std::time::Duration;
//! let seg = Address::memfd("doc-tap", Config::with_capacity(1 << 20)).open().unwrap();
//! let consumer = seg.consumer().unwrap();
//! let ro = ReadOnlySegment::of(&seg).unwrap();
//! let mut tap = Tap::new(ro, TapOptions::default());
//! let mut producer = seg.producer().unwrap();
//! producer.send(b"frame", Meta::new(0, 1)).unwrap();
//! let mut copy = Vec::new();
//! let got = tap.next_into(&mut copy, Some(Duration::from_secs(1))).unwrap().unwrap();
//! assert_eq!((copy.as_slice(), got.meta.stream), (&b"frame"[..], 0));
//! assert_eq!(consumer.try_next().unwrap().unwrap().payload(), b"frame");
//! ```

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::filter::Filter;
use crate::layout::{
    claim_geometry, cursor_pos, cursor_seq, pos_diff, seq_diff, ClaimState, LogEntry, RecordHeader,
    POS_MASK, SEQ_MASK, UNIT,
};
use crate::producer::Meta;
use crate::segment::ReadOnlySegment;
use crate::sync::{fence, Ordering};

/// What a tap takes and how it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapOptions {
    /// Deliver every n-th record that `filter` takes (1: all). The others cost a
    /// look at their 64-byte header.
    pub every: u32,
    /// Which records to take, by kind and stream (the default: all; the same
    /// rule as a consumer's, [`crate::ConsumerOptions::filter`]).
    pub filter: Filter,
    /// How long an idle tap sleeps between looks: it cannot ask producers for a
    /// wake-up (that would be a write), so it polls.
    pub poll_interval: Duration,
    /// Step over a claim still pending after this long (counted lost), as the
    /// ring's consumer may overtake it.
    pub skip_pending_after: Duration,
}

impl Default for TapOptions {
    fn default() -> Self {
        TapOptions {
            every: 1,
            filter: Filter::ANY,
            poll_interval: Duration::from_millis(1),
            skip_pending_after: Duration::from_millis(200),
        }
    }
}

/// A record a tap delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapFrame {
    /// Its claim sequence number (low 28 bits).
    pub seq: u64,
    pub meta: Meta,
    /// Payload length in bytes.
    pub len: usize,
}

/// What a tap has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Records delivered intact.
    pub delivered: u64,
    /// Records lost: overwritten while read (torn, never delivered), skipped when
    /// the tap fell a ring behind, or stepped over while pending.
    pub lost: u64,
    /// Of `lost`, records found overwritten after they were read.
    pub torn: u64,
    /// Records not taken because of `every` or the filter.
    pub filtered: u64,
    /// Times the tap jumped to the newest record (lapped, or the ring was reset).
    pub skips: u64,
    /// Records between the tap and the write cursor when the snapshot was taken
    /// ([`Tap::lag`]).
    pub lag: u64,
}

/// A read-only tap on a ring (how it reads and what it counts: DESIGN.md §10).
pub struct Tap {
    ro: ReadOnlySegment,
    opts: TapOptions,
    /// The next claim to look at (masked) and its first unit.
    seq: u64,
    pos: u64,
    stats: TapStats,
    /// Matching records seen (for `every`).
    matched: u64,
    /// The claim found pending at `seq`, and since when.
    pending: Option<(u64, Instant)>,
    /// The ring's reset count when the tap last jumped (or started).
    resets_seen: u64,
    /// The consumer's placement paddings when the tap last jumped (or started),
    /// plus the ones it stepped over since: a jump counts the claims it skips
    /// less the paddings among them as lost (paddings are no records).
    placements_seen: u64,
    /// When the tap last checked that the file is still as long as the ring.
    last_size_check: Instant,
}

/// How often a tap checks that a named ring's file was not truncated (as a
/// consumer does at its liveness interval).
const SIZE_CHECK_EVERY: Duration = Duration::from_millis(50);

enum Look {
    Taken(TapFrame),
    Again,
    Wait,
}

impl Tap {
    /// A tap starting at the newest record (the write cursor now).
    pub fn new(ro: ReadOnlySegment, opts: TapOptions) -> Tap {
        let w = ro.segment().shared().write.load(Ordering::Acquire);
        Tap {
            ro,
            opts: TapOptions {
                every: opts.every.max(1),
                ..opts
            },
            seq: cursor_seq(w),
            pos: cursor_pos(w),
            stats: TapStats::default(),
            matched: 0,
            pending: None,
            resets_seen: 0,
            placements_seen: 0,
            last_size_check: Instant::now(),
        }
        .started()
    }

    fn started(mut self) -> Self {
        self.resets_seen = self.resets();
        self.placements_seen = self.placements();
        self
    }

    /// The ring consumer's counters (statistics: the tap reads two of them only
    /// to tell claim numbers that are no records from records gone by).
    fn consumer_counters(&self) -> &crate::layout::ConsumerCounters {
        &self.ro.segment().control().counters.0
    }

    /// The ring consumer's reset count (a reset's jump of claim numbers).
    fn resets(&self) -> u64 {
        // Relaxed: a counter.
        self.consumer_counters().resets.load(Ordering::Relaxed)
    }

    /// Paddings the ring's consumer claimed to place records.
    fn placements(&self) -> u64 {
        // Relaxed: a counter.
        self.consumer_counters().placements.load(Ordering::Relaxed)
    }

    /// Its counters, and its lag now.
    pub fn stats(&self) -> TapStats {
        TapStats {
            lag: self.lag(),
            ..self.stats
        }
    }

    /// Records between this tap and the write cursor now.
    pub fn lag(&self) -> u64 {
        let w = self.ro.segment().shared().write.load(Ordering::Relaxed);
        seq_diff(cursor_seq(w), self.seq)
    }

    /// The read-only ring.
    pub fn segment(&self) -> &ReadOnlySegment {
        &self.ro
    }

    /// The next record taken, copied into `buf` (resized to the payload; its
    /// capacity is kept, so a reused buffer allocates only to grow), waiting up to
    /// `timeout` (`None`: forever). `Ok(None)` on timeout. Never delivers a record
    /// that was overwritten while it was copied.
    pub fn next_into(
        &mut self,
        buf: &mut Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Option<TapFrame>> {
        self.next_with(timeout, |payload, _| {
            buf.clear();
            buf.extend_from_slice(payload);
        })
        .map(|r| r.map(|(f, ())| f))
    }

    /// Zero copy: runs `f` on each chosen record's payload in place and returns the
    /// first result whose record was still intact after `f` returned (waiting up to
    /// `timeout`). `f` may see bytes being overwritten (then its result is
    /// discarded, the record counted lost, and `f` runs on the next one), so it must
    /// only compute from them: no side effect that cannot be thrown away.
    pub fn next_with<R>(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&[u8], &Meta) -> R,
    ) -> Result<Option<(TapFrame, R)>> {
        let start = Instant::now();
        let mut out = None;
        loop {
            if self.last_size_check.elapsed() >= SIZE_CHECK_EVERY {
                self.last_size_check = Instant::now();
                self.ro.segment().check_size()?;
            } else if self.ro.segment().truncated() {
                return Err(self.ro.segment().truncated_error());
            }
            match self.look(&mut |p: &[u8], m: &Meta| out = Some(f(p, m))) {
                Look::Taken(frame) => {
                    return Ok(Some((frame, out.take().expect("taken records ran f"))));
                }
                Look::Again => continue,
                Look::Wait => {
                    let left = match timeout {
                        Some(t) => match t.checked_sub(start.elapsed()) {
                            Some(l) if !l.is_zero() => l,
                            _ => return Ok(None),
                        },
                        None => self.opts.poll_interval,
                    };
                    std::thread::sleep(left.min(self.opts.poll_interval));
                }
            }
        }
    }

    /// Jumps to the newest record at the write cursor `w`: the last claim before
    /// it, when its entry shows one (else `w` itself), counting the claims skipped
    /// as lost. Never backwards: a write cursor behind the tap (a claimer that has
    /// not moved it past the claim the tap stepped over, or a value a peer wrote)
    /// is waited for, unless the ring was reset since (a reset starts a new
    /// generation of claim numbers). So no record is delivered twice, and only
    /// claims the tap really jumped over are counted.
    fn skip_to(&mut self, w: u64) -> Look {
        let (mut seq, mut pos) = (cursor_seq(w), cursor_pos(w));
        let resets = self.resets();
        let reset = resets != self.resets_seen;
        let ahead = seq_diff(seq, self.seq);
        if ahead > SEQ_MASK / 2 && !reset {
            return Look::Wait;
        }
        let sh = self.ro.segment().shared();
        // Back to the newest claim, and past a placement's padding after it (the
        // consumer pads an empty ring after a large record) to that record.
        let mut paddings_after = 0;
        for _ in 0..2 {
            if seq_diff(seq, self.seq) == 0 || seq_diff(seq, self.seq) > SEQ_MASK / 2 {
                break;
            }
            let prev = seq.wrapping_sub(1) & SEQ_MASK;
            // Acquire: as any entry load (the claim's units are the ones it was
            // made with).
            let e = LogEntry::unpack(sh.entry(prev).load(Ordering::Acquire));
            if e.stamp != prev || e.units == 0 || e.units > sh.cap_units {
                break;
            }
            seq = prev;
            pos = pos.wrapping_sub(e.units) & POS_MASK;
            if !is_padding(&e, pos, sh.cap_units) {
                break;
            }
            paddings_after += 1;
        }
        // After a reset the new generation's claim numbers start far ahead: those
        // were never used, so a jump across a reset counts nothing (the consumer
        // counts what the reset dropped). Paddings claimed since the last jump
        // are no records; those after where the tap lands are counted when it
        // steps over them (one claimed during the jump is counted here and again
        // there: the next jump counts it back).
        let placements = self.placements().wrapping_sub(paddings_after);
        let gone = seq_diff(seq, self.seq);
        // The paddings the tap stepped over and took for placements can outnumber
        // the consumer's (a producer's padding around a pin, or a dead producer's
        // claim, that ends at the ring's end looks the same): then none of the
        // claims jumped over is taken for one.
        let made = placements.wrapping_sub(self.placements_seen);
        let paddings = if made > u64::MAX / 2 {
            0
        } else {
            made.min(gone)
        };
        if !reset {
            self.stats.lost += gone - paddings;
        }
        self.placements_seen = placements;
        self.resets_seen = resets;
        self.stats.skips += 1;
        self.seq = seq;
        self.pos = pos;
        self.pending = None;
        Look::Again
    }

    fn step(&mut self, units: u64) {
        self.seq = (self.seq + 1) & SEQ_MASK;
        self.pos = (self.pos + units) & POS_MASK;
        self.pending = None;
    }

    /// Is the tap behind by more than the ring holds (claims or bytes) at `w`?
    /// (A write cursor behind the tap is not lapping it: see [`Tap::skip_to`].)
    fn lapped(&self, w: u64) -> bool {
        let n = self.ro.geometry().log_entries as u64;
        let sh = self.ro.segment().shared();
        let ahead = seq_diff(cursor_seq(w), self.seq);
        ahead <= SEQ_MASK / 2 && (ahead > n || pos_diff(cursor_pos(w), self.pos) > sh.cap_units)
    }

    /// Looks at the claim at the tap's cursor once.
    fn look(&mut self, take: &mut dyn FnMut(&[u8], &Meta)) -> Look {
        let seg = self.ro.segment();
        let sh = seg.shared();
        let cap = sh.cap_units;
        // Acquire: pairs with the producer's committing CAS (the record is written).
        let v = sh.entry(self.seq).load(Ordering::Acquire);
        let e = LogEntry::unpack(v);
        if e.stamp != self.seq {
            // Not claimed yet, or we were lapped (or the ring was reset).
            let w = sh.write.load(Ordering::Acquire);
            if self.lapped(w)
                || cursor_seq(w) == self.seq && cursor_pos(w) != self.pos
                || self.resets() != self.resets_seen
            {
                return self.skip_to(w);
            }
            return Look::Wait;
        }
        if e.units == 0 || e.units > cap {
            let w = sh.write.load(Ordering::Acquire);
            return self.skip_to(w);
        }
        match e.state {
            ClaimState::Claimed => {
                let now = Instant::now();
                match self.pending {
                    Some((s, since)) if s == self.seq => {
                        if now.duration_since(since) >= self.opts.skip_pending_after {
                            self.stats.lost += 1;
                            self.step(e.units);
                            return Look::Again;
                        }
                    }
                    _ => self.pending = Some((self.seq, now)),
                }
                let w = sh.write.load(Ordering::Acquire);
                if self.lapped(w) {
                    return self.skip_to(w);
                }
                Look::Wait
            }
            ClaimState::Aborted | ClaimState::Abandoned => {
                // A placement's padding ends at the ring's end (a dead producer's
                // abandoned claim that ends there too is taken for one, and so
                // counted lost at the next jump).
                if is_padding(&e, self.pos, cap) {
                    self.placements_seen = self.placements_seen.wrapping_add(1);
                }
                self.step(e.units);
                Look::Again
            }
            ClaimState::Committed => self.read_committed(v, e.units, take),
        }
    }

    fn read_committed(&mut self, v: u64, units: u64, take: &mut dyn FnMut(&[u8], &Meta)) -> Look {
        let seg = self.ro.segment();
        let sh = seg.shared();
        let cap = sh.cap_units;
        let Some((rec_off, rec_units)) = claim_geometry(self.pos, units, cap) else {
            self.step(units);
            return Look::Again;
        };
        // Still in the ring before we start?
        let w = sh.write.load(Ordering::Acquire);
        if self.lapped(w) {
            return self.skip_to(w);
        }
        // SAFETY: rec_off + rec_units <= cap_units (claim_geometry), so the header
        // lies inside the data ring of the mapping. It may be changing under us: one
        // volatile read into a local, judged by the re-check below.
        let h: RecordHeader = unsafe {
            std::ptr::read_volatile(seg.data().add((rec_off * UNIT) as usize) as *const RecordHeader)
        };
        let room = (rec_units - 1) * UNIT;
        let meta = Meta {
            stream: h.stream,
            kind: h.kind,
            timestamp_ns: h.timestamp_ns,
            flags: h.flags,
        };
        let sane = h.len <= room && h.seq == crate::layout::header_seq(self.seq);
        let wanted = self.opts.filter.takes(&meta);
        let seq = self.seq;
        let mut chosen = false;
        if sane && wanted {
            self.matched += 1;
            chosen = (self.matched - 1) % self.opts.every as u64 == 0;
        }
        if !chosen {
            if sane {
                self.stats.filtered += 1;
            } else {
                self.stats.lost += 1;
            }
            self.step(units);
            return Look::Again;
        }
        // SAFETY: the payload follows the header inside the record (len <= room),
        // inside the mapping, which outlives this call. Its bytes may be overwritten
        // by a producer while `take` reads them: the re-check below discards the
        // result then.
        let payload = unsafe {
            std::slice::from_raw_parts(
                seg.data().add(((rec_off + 1) * UNIT) as usize),
                h.len as usize,
            )
        };
        take(payload, &meta);
        // Acquire: the reads above happen before the loads below, so if they saw a
        // producer's bytes, these see the claim that let it write them (the
        // producer fences after claiming, before writing).
        fence(Ordering::Acquire);
        let intact = sh.entry(seq).load(Ordering::Relaxed) == v
            && pos_diff(cursor_pos(sh.write.load(Ordering::Relaxed)), self.pos) <= cap;
        self.step(units);
        if !intact {
            self.stats.lost += 1;
            self.stats.torn += 1;
            return Look::Again;
        }
        self.stats.delivered += 1;
        Look::Taken(TapFrame {
            seq,
            meta,
            len: h.len as usize,
        })
    }
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("segment", &self.ro.name())
            .field("seq", &self.seq)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Does the claim `e` at position `pos` look like a placement's padding (see
/// `Shared::pad_to_start`): abandoned, ending at the ring's end? (A dead
/// producer's claim taken back that ends there too looks the same.)
fn is_padding(e: &LogEntry, pos: u64, cap_units: u64) -> bool {
    e.state == ClaimState::Abandoned && (pos & (cap_units - 1)) + e.units == cap_units
}
