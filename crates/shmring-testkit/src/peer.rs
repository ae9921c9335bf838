//! A hostile peer: a process that maps a ring writable, as every producer does, and
//! writes whatever it likes. Every suite that scribbles, forges or damages a ring
//! writes through this one helper, by field through the layout's own types
//! ([`shmring::layout::Control`], [`Slot`], the claim log, [`RecordHeader`]), or at
//! the offset of a word the layout names (`matrix::words`); no suite writes an
//! offset by hand.

use std::mem::{offset_of, size_of};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use shmring::layout::{Control, Geometry, Identity, Line, RecordHeader, Slot, UNIT};
use shmring::Segment;

use crate::Rng;

/// A part of a segment a scribbler writes (`shmring-verify scribble --targets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Line 0 of the control block: the identity line.
    Identity,
    /// The write cursor and the consumer's cursors (lines 1 and 2).
    Cursors,
    /// The control block after the identity line (cursors, futexes, the consumer's
    /// role and counters, tethers, the identity copies).
    Control,
    /// The slot table.
    Slots,
    /// The claim log.
    Log,
    /// The data ring.
    Data,
}

impl Target {
    /// By the names of `shmring-verify scribble --targets`.
    pub fn named(name: &str) -> Option<Target> {
        Some(match name {
            "identity" => Target::Identity,
            "cursors" => Target::Cursors,
            "control" => Target::Control,
            "slots" => Target::Slots,
            "log" => Target::Log,
            "data" => Target::Data,
            _ => return None,
        })
    }
}

/// A writable view of a ring's mapping, as any process that maps it has. It keeps
/// the segment (hence the mapping) alive.
#[derive(Clone)]
pub struct Peer {
    seg: Arc<Segment>,
    base: usize,
    len: usize,
    geo: Geometry,
}

impl Peer {
    pub fn new(seg: &Arc<Segment>) -> Peer {
        let (base, len) = seg.mapping();
        Peer {
            seg: seg.clone(),
            base: base as usize,
            len,
            geo: *seg.geometry(),
        }
    }

    /// The segment written.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Its geometry (as validated when the segment was mapped).
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The first byte of the mapping, as an address.
    pub fn base(&self) -> usize {
        self.base
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is the mapping empty (never: a segment is at least a control block)?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The control block, field by field.
    pub fn control(&self) -> &Control {
        assert!(size_of::<Control>() <= self.len);
        // SAFETY: the control block starts the mapping (page-aligned, so aligned for
        // `Control`), lies inside it, and is made of atomics (any bytes are valid);
        // the mapping lives as long as `self.seg`. Every side accesses it atomically.
        unsafe { &*(self.base as *const Control) }
    }

    /// The identity line (`copy` 0) or one of its two copies (1, 2).
    pub fn identity(&self, copy: usize) -> &Identity {
        let c = self.control();
        match copy {
            0 => &c.identity.0,
            n => &c.identity_copies[n - 1].0,
        }
    }

    /// Producer slot `i`, field by field.
    pub fn slot(&self, i: u32) -> &Slot {
        assert!(
            i < self.geo.max_producers,
            "slot {i} of {}",
            self.geo.max_producers
        );
        let off = self.geo.slots_offset as usize + i as usize * size_of::<Slot>();
        assert!(off + size_of::<Slot>() <= self.len);
        // SAFETY: inside the slot table (checked), aligned (the table starts on a
        // cache line; slots are 128 bytes), made of atomics; see `control`.
        unsafe { &*((self.base + off) as *const Slot) }
    }

    /// Every counter of producer slot `i` (what `Stats` sums over the slots).
    pub fn producer_counters(&self, i: u32) -> [&AtomicU64; 7] {
        let c = &self.slot(i).counters;
        [
            &c.records_committed,
            &c.bytes_committed,
            &c.aborted,
            &c.drops_full,
            &c.waits,
            &c.wakes_sent,
            &c.paddings,
        ]
    }

    /// The claim log entry of claim `seq` (`seq mod log_entries`).
    pub fn entry(&self, seq: u64) -> &AtomicU64 {
        let i = seq & (self.geo.log_entries as u64 - 1);
        self.at(self.geo.log_offset as usize + 8 * i as usize)
    }

    /// The 8-byte word at byte offset `off` (8-aligned, inside the mapping): for
    /// the words `matrix::words` names by their layout field.
    pub fn at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off % 8 == 0 && off + 8 <= self.len,
            "word {off:#x} outside the segment"
        );
        // SAFETY: 8-aligned and inside the mapping, which `self.seg` keeps alive;
        // every side accesses shared words atomically or volatilely.
        unsafe { &*((self.base + off) as *const AtomicU64) }
    }

    /// Stores `v` into a 32-bit field of the layout, as a peer may (SeqCst).
    pub fn put32(field: &AtomicU32, v: u32) {
        field.store(v, Ordering::SeqCst);
    }

    /// Where the data ring's unit `unit` starts (a byte offset).
    pub fn unit_offset(&self, unit: u64) -> usize {
        (self.geo.data_offset + (unit % self.geo.cap_units()) * UNIT) as usize
    }

    /// Writes `h` as the record header at unit `unit` of the data ring.
    pub fn put_header(&self, unit: u64, h: &RecordHeader) {
        let off = self.unit_offset(unit);
        assert!(off + size_of::<RecordHeader>() <= self.len);
        // SAFETY: inside the data ring (checked), 64-byte aligned; a volatile write
        // of plain integers, racing with readers who treat the bytes as untrusted.
        unsafe { std::ptr::write_volatile((self.base + off) as *mut RecordHeader, *h) };
    }

    /// Writes `bytes` at byte offset `off` (volatile, byte by byte).
    pub fn put_bytes(&self, off: usize, bytes: &[u8]) {
        assert!(
            off + bytes.len() <= self.len,
            "{off:#x}+{} outside",
            bytes.len()
        );
        for (i, &b) in bytes.iter().enumerate() {
            // SAFETY: inside the mapping (checked above); racing on purpose.
            unsafe { std::ptr::write_volatile((self.base + off + i) as *mut u8, b) };
        }
    }

    /// The byte range of a target.
    pub fn target(&self, r: Target) -> Range<usize> {
        let g = &self.geo;
        let line0 = offset_of!(Control, identity);
        let after_identity = line0 + size_of::<Line<Identity>>();
        match r {
            Target::Identity => line0..after_identity,
            Target::Cursors => offset_of!(Control, write)..offset_of!(Control, data),
            Target::Control => after_identity..size_of::<Control>(),
            Target::Slots => g.slots_offset as usize..g.log_offset as usize,
            Target::Log => {
                g.log_offset as usize..g.log_offset as usize + 8 * g.log_entries as usize
            }
            Target::Data => g.data_offset as usize..(g.total_size as usize).min(self.len),
        }
    }

    /// Writes 1 to `max_len` random bytes at a random place of `range`.
    pub fn scribble(&self, rng: &mut Rng, range: Range<usize>, max_len: u64) {
        let len = 1 + rng.below(max_len) as usize;
        let off = range.start + rng.below((range.end - range.start) as u64) as usize;
        let len = len.min(range.end - off);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        self.put_bytes(off, &bytes);
    }
}

impl crate::matrix::Peek for Peer {
    fn word(&self, off: usize) -> u64 {
        self.at(off).load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::layout::{cursor_seq, ClaimState, LogEntry, MAGIC};
    use shmring::{Address, Config, Meta};

    #[test]
    fn fields_are_where_the_core_reads_them() {
        let seg = Address::memfd("peer", Config::with_capacity(1 << 16))
            .open()
            .unwrap();
        let peer = Peer::new(&seg);
        for copy in 0..3 {
            assert_eq!(peer.identity(copy).magic.load(Ordering::Relaxed), MAGIC);
        }
        let consumer = seg.consumer().unwrap();
        let mut p = seg.producer().unwrap();
        let slot = p.slot();
        p.send(b"x", Meta::new(3, 0)).unwrap();
        let w = peer.control().write.0.load(Ordering::Relaxed);
        assert_eq!(cursor_seq(w), 1);
        let e = LogEntry::unpack(peer.entry(0).load(Ordering::Relaxed));
        assert_eq!((e.state, e.slot), (ClaimState::Committed, slot));
        assert_eq!(
            peer.slot(slot)
                .counters
                .records_committed
                .load(Ordering::Relaxed),
            1
        );
        assert_eq!(seg.stats().records_committed, 1);
        // A header written by the peer where the next record would go.
        peer.put_header(
            2,
            &RecordHeader {
                len: 5,
                ..Default::default()
            },
        );
        assert_eq!(peer.at(peer.unit_offset(2)).load(Ordering::Relaxed), 5);
        assert_eq!(consumer.try_next().unwrap().unwrap().stream(), 3);
        let r = peer.target(Target::Cursors);
        assert_eq!(
            (r.start, r.end),
            (
                offset_of!(Control, write),
                offset_of!(Control, cursors) + 64
            )
        );
    }
}
