//! Counters kept in the segment, readable by any process that maps it.

use crate::layout::{cursor_pos, cursor_seq, pos_diff, seq_diff, UNIT};
use crate::segment::{ReadOnlySegment, Segment};
use crate::slots;
use crate::sync::Ordering;

/// A snapshot of a ring's counters. Producers' counters are summed over all slots,
/// past holders included. Counters are statistics: a misbehaving peer can falsify
/// them, and nothing in shmring relies on them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub capacity: u64,
    pub records_committed: u64,
    pub bytes_committed: u64,
    /// Reservations dropped without commit.
    pub records_aborted: u64,
    /// Records producers could not write because the ring was full.
    pub drops_full: u64,
    /// Times producers slept waiting for space.
    pub producer_waits: u64,
    /// Wake-ups producers sent to the consumer.
    pub producer_wakes: u64,
    /// Records handed out to the consumer.
    pub records_consumed: u64,
    pub bytes_consumed: u64,
    /// Claims of dead producers the consumer skipped.
    pub abandoned: u64,
    /// Aborted claims the consumer skipped.
    pub skipped_aborted: u64,
    /// Corruption events the consumer detected.
    pub corruption: u64,
    /// Times the consumer slept waiting for data.
    pub consumer_waits: u64,
    /// Wake-ups the consumer sent to producers.
    pub consumer_wakes: u64,
    /// Highest occupancy the consumer observed, in bytes.
    pub peak_occupancy: u64,
    /// Bytes between the read and write cursors now.
    pub occupancy: u64,
    /// Records between the read and write cursors now.
    pub records_in_flight: u64,
    pub resets: u64,
    pub reaped_slots: u64,
    /// Producers attached and alive (by their record locks; a read-only view of
    /// a memfd ring, which has no lock file, counts the slots the ring reports in
    /// use).
    pub producers: u32,
    /// A consumer is attached and alive (its lock is held).
    pub consumer_attached: bool,
    /// Claims the consumer overtook because they stayed pending past its limit.
    pub stalled_claims: u64,
    /// Claims the consumer found forged (naming a live producer that did not make
    /// them) and skipped; also counted in `corruption`.
    pub forged_claims: u64,
    /// Shared fields a peer changed that the consumer rewrote without a reset
    /// (identity line, its published cursors, its role); also counted in
    /// `corruption`.
    pub repairs: u64,
    /// How long the oldest claim still pending (reserved, not yet committed or
    /// aborted) has been pending, in nanoseconds, as the consumer last saw it; 0
    /// when none is.
    pub oldest_pending_age_ns: u64,
    /// That claim's producer slot (meaningful when the age is not 0).
    pub oldest_pending_slot: u32,
    /// The pid holding that slot, as the kernel told the consumer (0: unknown,
    /// e.g. a producer in another pid namespace).
    pub oldest_pending_pid: u32,
    /// Tethered consumers attached and alive (see `Consumer::tethered`).
    pub tethered_consumers: u32,
    /// Tethered consumers the consumer expelled (dead, or stopped releasing). Named
    /// before the glossary had *expel*; the name stays for the C struct, the JSON and
    /// the metric.
    pub tethers_detached: u64,
    /// Claims the consumer took back while their producer was alive: pending past
    /// its claim timeout (`ConsumerOptions::claim_timeout`), or parked while the
    /// claim log filled up behind them. Their producers' commits fail
    /// (`Error::Abandoned`).
    pub expired_claims: u64,
    /// Records the ring's consumer's filter refused: released unread, not in
    /// `records_consumed` (`ConsumerOptions::filter`).
    pub records_filtered: u64,
    /// Paddings the ring's consumer claimed to place the next record at the ring's
    /// start (see `protocol::place_window`): claims that hold no record, not in
    /// any other counter.
    pub placements: u64,
    /// Bytes of the data ring pinned now: records producers place around because
    /// a process may still write them (a claim the consumer stopped waiting for in
    /// claim order, whose holder has not settled it) or the consumer still holds
    /// them (a frame handed out from such a claim). See `layout::Pins`.
    pub pinned_bytes: u64,
    /// Paddings producers claimed to place a record around a pinned one: claims
    /// that hold no record, not in any other counter.
    pub pin_paddings: u64,
}

impl Stats {
    pub(crate) fn read(seg: &Segment) -> Stats {
        let c = seg.control();
        let cc = &c.counters.0;
        let h = &c.health.0;
        let mut s = Stats {
            capacity: seg.geometry().capacity,
            records_consumed: cc.records_consumed.load(Ordering::Relaxed),
            bytes_consumed: cc.bytes_consumed.load(Ordering::Relaxed),
            abandoned: cc.abandoned.load(Ordering::Relaxed),
            skipped_aborted: cc.skipped_aborted.load(Ordering::Relaxed),
            corruption: cc.corruption.load(Ordering::Relaxed),
            consumer_waits: cc.waits.load(Ordering::Relaxed),
            consumer_wakes: cc.wakes_sent.load(Ordering::Relaxed),
            peak_occupancy: cc.peak_occupancy.load(Ordering::Relaxed),
            resets: cc.resets.load(Ordering::Relaxed),
            reaped_slots: cc.reaped_slots.load(Ordering::Relaxed),
            producers: slots::live_count(seg),
            consumer_attached: slots::consumer_alive(seg),
            stalled_claims: h.stalled_claims.load(Ordering::Relaxed),
            forged_claims: h.forged_claims.load(Ordering::Relaxed),
            repairs: h.repairs.load(Ordering::Relaxed),
            oldest_pending_age_ns: match h.oldest_pending_since_ns.load(Ordering::Relaxed) {
                0 => 0,
                since => crate::sys::now_ns().saturating_sub(since).max(1),
            },
            oldest_pending_slot: h.oldest_pending_slot.load(Ordering::Relaxed),
            oldest_pending_pid: h.oldest_pending_pid.load(Ordering::Relaxed),
            tethered_consumers: crate::tether::infos(seg).len() as u32,
            tethers_detached: c.tethers.0.detached.load(Ordering::Relaxed),
            expired_claims: h.expired_claims.load(Ordering::Relaxed),
            records_filtered: cc.filtered.load(Ordering::Relaxed),
            placements: cc.placements.load(Ordering::Relaxed),
            pinned_bytes: pinned_units(seg) * UNIT,
            ..Default::default()
        };
        for i in 0..seg.geometry().max_producers {
            let p = &seg.slot(i).counters;
            // Relaxed: counters, summed for a snapshot; each producer's own are exact.
            for (sum, n) in [
                (&mut s.records_committed, &p.records_committed),
                (&mut s.bytes_committed, &p.bytes_committed),
                (&mut s.records_aborted, &p.aborted),
                (&mut s.drops_full, &p.drops_full),
                (&mut s.producer_waits, &p.waits),
                (&mut s.producer_wakes, &p.wakes_sent),
                (&mut s.pin_paddings, &p.paddings),
            ] {
                *sum = sum.wrapping_add(n.load(Ordering::Relaxed));
            }
        }
        let w = c.write.0.load(Ordering::Relaxed);
        let r = c.cursors.0.read.load(Ordering::Relaxed);
        s.occupancy = (pos_diff(cursor_pos(w), cursor_pos(r)) * UNIT).min(s.capacity);
        s.records_in_flight =
            seq_diff(cursor_seq(w), cursor_seq(r)).min(seg.geometry().log_entries as u64);
        s
    }
}

/// Units pinned in the ring's pin table (entries that cannot be pins are not
/// counted).
fn pinned_units(seg: &Segment) -> u64 {
    let c = seg.control();
    let cap = seg.geometry().cap_units();
    let hi = (c.cursors.0.pinned.load(Ordering::Relaxed) as usize).min(c.pins.0.extent.len());
    c.pins.0.extent[..hi]
        .iter()
        .filter_map(|e| crate::protocol::unpack_pin(e.load(Ordering::Relaxed), cap))
        .map(|(_, units)| units)
        .sum::<u64>()
        .min(cap)
}

impl Segment {
    /// A snapshot of the counters in the segment.
    pub fn stats(&self) -> Stats {
        Stats::read(self)
    }
}

impl ReadOnlySegment {
    /// A snapshot of the ring's counters.
    pub fn stats(&self) -> Stats {
        self.segment().stats()
    }
}
