//! Counters kept in the segment, readable by any process that maps it.

use crate::layout::{cursor_pos, cursor_seq, pos_diff, seq_diff, UNIT};
use crate::segment::Segment;
use crate::slots;
use crate::sync::Ordering;

/// A snapshot of a ring's counters. Producers' counters are summed over all slots,
/// past owners included. Counters are statistics: a misbehaving peer can falsify
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
    /// Tethered consumers the consumer detached (dead, or stopped releasing).
    pub tethers_detached: u64,
    /// Claims the consumer took back because they stayed pending past its claim
    /// timeout while their producer was alive (`ConsumerOptions::claim_timeout`).
    pub expired_claims: u64,
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
            ..Default::default()
        };
        for i in 0..seg.geometry().max_producers {
            let p = &seg.slot(i).counters;
            s.records_committed = s
                .records_committed
                .wrapping_add(p.records_committed.load(Ordering::Relaxed));
            s.bytes_committed = s
                .bytes_committed
                .wrapping_add(p.bytes_committed.load(Ordering::Relaxed));
            s.records_aborted = s
                .records_aborted
                .wrapping_add(p.aborted.load(Ordering::Relaxed));
            s.drops_full = s
                .drops_full
                .wrapping_add(p.drops_full.load(Ordering::Relaxed));
            s.producer_waits = s
                .producer_waits
                .wrapping_add(p.waits.load(Ordering::Relaxed));
            s.producer_wakes = s
                .producer_wakes
                .wrapping_add(p.wakes_sent.load(Ordering::Relaxed));
        }
        let w = c.write.0.load(Ordering::Relaxed);
        let r = c.cursors.0.read.load(Ordering::Relaxed);
        s.occupancy = (pos_diff(cursor_pos(w), cursor_pos(r)) * UNIT).min(s.capacity);
        s.records_in_flight =
            seq_diff(cursor_seq(w), cursor_seq(r)).min(seg.geometry().log_entries as u64);
        s
    }
}

/// What a [`Field`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Only ever grows (while the ring lives); rates are differences of two snapshots.
    Counter,
    /// A level that goes up and down (occupancy, producers attached).
    Gauge,
    /// A yes/no state, as 0 or 1.
    Flag,
}

/// One counter or gauge of a [`Stats`] snapshot, with its name and meaning: the one
/// list every report (JSON, Prometheus, `shmring top`) is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's name in [`Stats`], e.g. `records_committed`.
    pub name: &'static str,
    /// Counter, gauge or flag.
    pub kind: FieldKind,
    /// One line saying what it counts.
    pub help: &'static str,
    /// Its value in the snapshot (a flag is 0 or 1).
    pub value: u64,
    /// The unit of `value`: [`Field::BYTES`], [`Field::NANOSECONDS`], or `""` for a
    /// count or a plain number. A field in nanoseconds has a name ending in `_ns`;
    /// a report in other units converts the value and renames it (the Prometheus
    /// exporter serves `oldest_pending_age_ns` as `shmring_oldest_pending_age_seconds`).
    pub unit: &'static str,
}

impl Field {
    /// [`Field::unit`] of a size in bytes.
    pub const BYTES: &'static str = "bytes";
    /// [`Field::unit`] of a duration in nanoseconds.
    pub const NANOSECONDS: &'static str = "ns";

    fn in_unit(self, unit: &'static str) -> Field {
        Field { unit, ..self }
    }
}

impl Stats {
    /// Every field of the snapshot, in a fixed order, with its kind and meaning.
    ///
    /// ```
    /// use shmring::{Config, FieldKind, Segment};
    /// let seg = Segment::create_memfd("fields", &Config::with_capacity(1 << 20)).unwrap();
    /// let s = seg.stats();
    /// let cap = s.fields().find(|f| f.name == "capacity").unwrap();
    /// assert_eq!((cap.kind, cap.value), (FieldKind::Gauge, 1 << 20));
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = Field> {
        use FieldKind::{Counter, Flag, Gauge};
        let f = |name, kind, help, value| Field {
            name,
            kind,
            help,
            value,
            unit: "",
        };
        let bytes = Field::BYTES;
        [
            f("capacity", Gauge, "Data ring size in bytes.", self.capacity).in_unit(bytes),
            f(
                "records_committed",
                Counter,
                "Records producers committed.",
                self.records_committed,
            ),
            f(
                "bytes_committed",
                Counter,
                "Payload bytes producers committed.",
                self.bytes_committed,
            )
            .in_unit(bytes),
            f(
                "records_aborted",
                Counter,
                "Reservations dropped without commit.",
                self.records_aborted,
            ),
            f(
                "drops_full",
                Counter,
                "Records producers could not write because the ring was full.",
                self.drops_full,
            ),
            f(
                "producer_waits",
                Counter,
                "Times producers slept waiting for space.",
                self.producer_waits,
            ),
            f(
                "producer_wakes",
                Counter,
                "Wake-ups producers sent to the consumer.",
                self.producer_wakes,
            ),
            f(
                "records_consumed",
                Counter,
                "Records handed out to the consumer.",
                self.records_consumed,
            ),
            f(
                "bytes_consumed",
                Counter,
                "Payload bytes handed out to the consumer.",
                self.bytes_consumed,
            )
            .in_unit(bytes),
            f(
                "abandoned",
                Counter,
                "Claims of dead producers the consumer skipped.",
                self.abandoned,
            ),
            f(
                "skipped_aborted",
                Counter,
                "Aborted claims the consumer skipped.",
                self.skipped_aborted,
            ),
            f(
                "corruption",
                Counter,
                "Corruption events the consumer detected.",
                self.corruption,
            ),
            f(
                "consumer_waits",
                Counter,
                "Times the consumer slept waiting for data.",
                self.consumer_waits,
            ),
            f(
                "consumer_wakes",
                Counter,
                "Wake-ups the consumer sent to producers.",
                self.consumer_wakes,
            ),
            f(
                "peak_occupancy",
                Gauge,
                "Highest occupancy the consumer observed, in bytes.",
                self.peak_occupancy,
            )
            .in_unit(bytes),
            f(
                "occupancy",
                Gauge,
                "Bytes between the read and write cursors now.",
                self.occupancy,
            )
            .in_unit(bytes),
            f(
                "records_in_flight",
                Gauge,
                "Records between the read and write cursors now.",
                self.records_in_flight,
            ),
            f(
                "resets",
                Counter,
                "Times the consumer reset the ring after corruption.",
                self.resets,
            ),
            f(
                "reaped_slots",
                Counter,
                "Producer slots of dead producers freed.",
                self.reaped_slots,
            ),
            f(
                "producers",
                Gauge,
                "Producers attached and alive.",
                self.producers as u64,
            ),
            f(
                "consumer_attached",
                Flag,
                "A consumer is attached and alive (its lock is held).",
                self.consumer_attached as u64,
            ),
            f(
                "stalled_claims",
                Counter,
                "Claims the consumer overtook because they stayed pending past its limit.",
                self.stalled_claims,
            ),
            f(
                "forged_claims",
                Counter,
                "Claims found forged (naming a live producer that did not make them) and skipped.",
                self.forged_claims,
            ),
            f(
                "repairs",
                Counter,
                "Shared fields a peer changed that the consumer rewrote without a reset.",
                self.repairs,
            ),
            f(
                "oldest_pending_age_ns",
                Gauge,
                "How long the oldest pending claim has been pending (0: none).",
                self.oldest_pending_age_ns,
            )
            .in_unit(Field::NANOSECONDS),
            f(
                "oldest_pending_slot",
                Gauge,
                "Producer slot of the oldest pending claim.",
                self.oldest_pending_slot as u64,
            ),
            f(
                "oldest_pending_pid",
                Gauge,
                "Pid holding the oldest pending claim's slot (0: unknown).",
                self.oldest_pending_pid as u64,
            ),
            f(
                "tethered_consumers",
                Gauge,
                "Tethered consumers attached and alive.",
                self.tethered_consumers as u64,
            ),
            f(
                "tethers_detached",
                Counter,
                "Tethered consumers detached (dead, or stopped releasing).",
                self.tethers_detached,
            ),
            f(
                "expired_claims",
                Counter,
                "Claims taken back because they stayed pending past the consumer's claim timeout.",
                self.expired_claims,
            ),
        ]
        .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_every_counter_once_with_its_value() {
        let s = Stats {
            capacity: 21,
            records_committed: 2,
            bytes_committed: 3,
            records_aborted: 4,
            drops_full: 5,
            producer_waits: 6,
            producer_wakes: 7,
            records_consumed: 8,
            bytes_consumed: 9,
            abandoned: 10,
            skipped_aborted: 11,
            corruption: 12,
            consumer_waits: 13,
            consumer_wakes: 14,
            peak_occupancy: 15,
            occupancy: 16,
            records_in_flight: 17,
            resets: 18,
            reaped_slots: 19,
            producers: 20,
            consumer_attached: true,
            stalled_claims: 22,
            forged_claims: 23,
            repairs: 24,
            oldest_pending_age_ns: 25,
            oldest_pending_slot: 26,
            oldest_pending_pid: 27,
            tethered_consumers: 28,
            tethers_detached: 29,
            expired_claims: 30,
        };
        let got: Vec<(&str, u64)> = s.fields().map(|f| (f.name, f.value)).collect();
        // Every field of the struct appears, each with its own value (1..=30 above),
        // so a field added to Stats but not to fields() fails here.
        let mut values: Vec<u64> = got.iter().map(|g| g.1).collect();
        values.sort_unstable();
        assert_eq!(values, (1..=30).collect::<Vec<_>>());
        assert_eq!(
            format!("{s:?}").matches(": ").count(),
            got.len(),
            "Stats has fields that fields() does not list"
        );
        let mut names: Vec<&str> = got.iter().map(|g| g.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), got.len());
        for (name, _) in &got {
            assert!(format!("{s:?}").contains(&format!("{name}: ")), "{name}");
        }
    }

    #[test]
    fn fields_carry_their_units() {
        let unit = |name: &str| {
            Stats::default()
                .fields()
                .find(|f| f.name == name)
                .unwrap()
                .unit
        };
        assert_eq!(unit("oldest_pending_age_ns"), Field::NANOSECONDS);
        assert_eq!(unit("occupancy"), Field::BYTES);
        assert_eq!(unit("bytes_committed"), Field::BYTES);
        assert_eq!(unit("records_committed"), "");
        for f in Stats::default().fields() {
            assert_eq!(
                f.unit == Field::NANOSECONDS,
                f.name.ends_with("_ns"),
                "{}: a duration in ns, and only that, is named *_ns",
                f.name
            );
            if f.kind == FieldKind::Flag {
                assert_eq!(f.unit, "", "{}", f.name);
            }
        }
    }
}
