//! Every snapshot's field list: its fields named, with their kind, unit and
//! meaning, in a fixed order. Every report is derived from these lists: JSON
//! (`shmring stat`, `top`, `tap`, `record`), Prometheus (`shmring exporter`),
//! Python dicts, Node.js objects, and the C structs that mirror them (checked
//! against them by `crates/shmring-ffi/tests/header.rs`).

use crate::handoff::ListenerStats;
use crate::stats::Stats;
use crate::tap::TapStats;
use crate::tether::TetherInfo;

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

/// One field of a snapshot, with its name and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's name in its snapshot, e.g. `records_committed`.
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
}

/// A snapshot whose every field is listed: [`Stats`] (a ring's counters),
/// [`TetherInfo`] (one tethered consumer), [`TapStats`] (a tap's own counters),
/// [`ListenerStats`] (a hand-off listener's).
///
/// ```
/// use shmring::{Address, Config, FieldKind, Snapshot};
/// let seg = Address::memfd("fields", Config::with_capacity(1 << 20)).open().unwrap();
/// let s = seg.stats();
/// let cap = s.fields().find(|f| f.name == "capacity").unwrap();
/// assert_eq!((cap.kind, cap.value), (FieldKind::Gauge, 1 << 20));
/// ```
pub trait Snapshot {
    /// Every field of the snapshot, in a fixed order, with its kind and meaning.
    fn fields(&self) -> impl Iterator<Item = Field>;
}

/// A snapshot's value as a field's value.
trait Value {
    fn value(self) -> u64;
}

impl Value for u64 {
    fn value(self) -> u64 {
        self
    }
}

impl Value for u32 {
    fn value(self) -> u64 {
        self.into()
    }
}

impl Value for bool {
    fn value(self) -> u64 {
        self.into()
    }
}

/// The [`Field`] of `snapshot.name`: named after the struct field it reads.
macro_rules! field {
    ($s:ident . $f:ident, $kind:ident, $help:literal) => {
        field!($s.$f, $kind, $help, "")
    };
    ($s:ident . $f:ident, $kind:ident, $help:literal, $unit:expr) => {
        Field {
            name: stringify!($f),
            kind: FieldKind::$kind,
            help: $help,
            value: Value::value($s.$f),
            unit: $unit,
        }
    };
}

impl Snapshot for Stats {
    fn fields(&self) -> impl Iterator<Item = Field> {
        [
            field!(
                self.capacity,
                Gauge,
                "Data ring size in bytes.",
                Field::BYTES
            ),
            field!(
                self.records_committed,
                Counter,
                "Records producers committed."
            ),
            field!(
                self.bytes_committed,
                Counter,
                "Payload bytes producers committed.",
                Field::BYTES
            ),
            field!(
                self.records_aborted,
                Counter,
                "Reservations dropped without commit."
            ),
            field!(
                self.drops_full,
                Counter,
                "Records producers could not write because the ring was full."
            ),
            field!(
                self.producer_waits,
                Counter,
                "Times producers slept waiting for space."
            ),
            field!(
                self.producer_wakes,
                Counter,
                "Wake-ups producers sent to the consumer."
            ),
            field!(
                self.records_consumed,
                Counter,
                "Records handed out to the consumer."
            ),
            field!(
                self.bytes_consumed,
                Counter,
                "Payload bytes handed out to the consumer.",
                Field::BYTES
            ),
            field!(
                self.abandoned,
                Counter,
                "Claims of dead producers the consumer skipped."
            ),
            field!(
                self.skipped_aborted,
                Counter,
                "Aborted claims the consumer skipped."
            ),
            field!(
                self.corruption,
                Counter,
                "Corruption events the consumer detected."
            ),
            field!(
                self.consumer_waits,
                Counter,
                "Times the consumer slept waiting for data."
            ),
            field!(
                self.consumer_wakes,
                Counter,
                "Wake-ups the consumer sent to producers."
            ),
            field!(
                self.peak_occupancy,
                Gauge,
                "Highest occupancy the consumer observed, in bytes.",
                Field::BYTES
            ),
            field!(
                self.occupancy,
                Gauge,
                "Bytes between the read and write cursors now.",
                Field::BYTES
            ),
            field!(
                self.records_in_flight,
                Gauge,
                "Records between the read and write cursors now."
            ),
            field!(
                self.resets,
                Counter,
                "Times the consumer reset the ring after corruption."
            ),
            field!(
                self.reaped_slots,
                Counter,
                "Producer slots of dead producers freed."
            ),
            field!(self.producers, Gauge, "Producers attached and alive."),
            field!(
                self.consumer_attached,
                Flag,
                "A consumer is attached and alive (its lock is held)."
            ),
            field!(
                self.stalled_claims,
                Counter,
                "Claims the consumer overtook because they stayed pending past its limit."
            ),
            field!(
                self.forged_claims,
                Counter,
                "Claims found forged (naming a live producer that did not make them) and skipped."
            ),
            field!(
                self.repairs,
                Counter,
                "Shared fields a peer changed that the consumer rewrote without a reset."
            ),
            field!(
                self.oldest_pending_age_ns,
                Gauge,
                "How long the oldest pending claim has been pending (0: none).",
                Field::NANOSECONDS
            ),
            field!(
                self.oldest_pending_slot,
                Gauge,
                "Producer slot of the oldest pending claim."
            ),
            field!(
                self.oldest_pending_pid,
                Gauge,
                "Pid holding the oldest pending claim's slot (0: unknown)."
            ),
            field!(
                self.tethered_consumers,
                Gauge,
                "Tethered consumers attached and alive."
            ),
            field!(
                self.tethers_detached,
                Counter,
                "Tethered consumers expelled (dead, or stopped releasing)."
            ),
            field!(
                self.expired_claims,
                Counter,
                "Claims taken back from a live producer (past the claim timeout, or parked with the claim log full behind them)."
            ),
            field!(
                self.records_filtered,
                Counter,
                "Records the consumer's filter refused (released unread, not consumed)."
            ),
            field!(
                self.placements,
                Counter,
                "Paddings the consumer claimed so the next record goes to the ring's start."
            ),
            field!(
                self.pinned_bytes,
                Gauge,
                "Bytes producers place records around: claims a live holder may still write, frames held from them.",
                Field::BYTES
            ),
            field!(
                self.pin_paddings,
                Counter,
                "Paddings producers claimed to place a record around a pinned one."
            ),
        ]
        .into_iter()
    }
}

impl Snapshot for TetherInfo {
    fn fields(&self) -> impl Iterator<Item = Field> {
        [
            field!(self.line, Gauge, "The tethered consumer's line (0 to 7)."),
            field!(
                self.requested,
                Flag,
                "It asked to attach and the ring's consumer has not adopted it yet."
            ),
            field!(self.pid, Gauge, "The pid holding the line (0: unknown)."),
            field!(self.records_consumed, Counter, "Records it was handed."),
            field!(
                self.bytes_consumed,
                Counter,
                "Payload bytes it was handed.",
                Field::BYTES
            ),
            field!(
                self.lost,
                Counter,
                "Records it lost when the ring was reset under it."
            ),
            field!(
                self.lag_records,
                Gauge,
                "Records between its read cursor and the write cursor."
            ),
            field!(
                self.lag_bytes,
                Gauge,
                "Bytes between its read cursor and the write cursor.",
                Field::BYTES
            ),
            field!(
                self.records_filtered,
                Counter,
                "Records its filter refused (released unread, not consumed)."
            ),
        ]
        .into_iter()
    }
}

impl Snapshot for TapStats {
    fn fields(&self) -> impl Iterator<Item = Field> {
        [
            field!(self.delivered, Counter, "Records delivered intact."),
            field!(
                self.lost,
                Counter,
                "Records lost: overwritten while read, skipped when the tap fell a ring behind, or stepped over while pending."
            ),
            field!(self.torn, Counter, "Of the records lost, those found overwritten after they were read."),
            field!(self.filtered, Counter, "Records not taken because of every or the filter (kind, stream)."),
            field!(self.skips, Counter, "Times the tap jumped to the newest record."),
            field!(self.lag, Gauge, "Records between the tap and the write cursor."),
        ]
        .into_iter()
    }
}

impl Snapshot for ListenerStats {
    fn fields(&self) -> impl Iterator<Item = Field> {
        [
            field!(self.producers, Counter, "Producers handed the ring."),
            field!(
                self.observers,
                Counter,
                "Observers handed a read-only descriptor."
            ),
            Field {
                name: "refused",
                kind: FieldKind::Counter,
                help: "Peers refused, every rule together.",
                value: self.refused(),
                unit: "",
            },
            field!(
                self.refused_credentials,
                Counter,
                "Refused: uid or gid not on the role's allow-list (rule peer-credentials)."
            ),
            field!(
                self.refused_version,
                Counter,
                "Refused: another protocol version (protocol-version)."
            ),
            field!(
                self.refused_role,
                Counter,
                "Refused: an unknown role, or a role nobody may take (role)."
            ),
            field!(
                self.refused_malformed,
                Counter,
                "Refused: not a hello, or closed before a whole hello (malformed-hello)."
            ),
            field!(
                self.timed_out,
                Counter,
                "Refused: no hello within the timeout (hello-timeout)."
            ),
            field!(
                self.refused_busy,
                Counter,
                "Refused at once: too many connections pending (too-many-pending)."
            ),
            field!(
                self.failed,
                Counter,
                "Answers that could not be sent, accepts that failed."
            ),
            field!(
                self.pending,
                Gauge,
                "Connections accepted and not answered yet."
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
            records_filtered: 31,
            placements: 32,
            pinned_bytes: 33,
            pin_paddings: 34,
        };
        let got: Vec<(&str, u64)> = s.fields().map(|f| (f.name, f.value)).collect();
        // Every field of the struct appears, each with its own value (1..=34 above),
        // so a field added to Stats but not to fields() fails here.
        let mut values: Vec<u64> = got.iter().map(|g| g.1).collect();
        values.sort_unstable();
        assert_eq!(values, (1..=34).collect::<Vec<_>>());
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

    /// The names of a struct's fields, from its `Debug` output (values are numbers
    /// and booleans here).
    fn struct_fields(dbg: &str) -> Vec<String> {
        let inner = &dbg[dbg.find('{').expect("a struct") + 1..dbg.rfind('}').expect("its end")];
        inner
            .split(',')
            .filter_map(|kv| kv.split_once(':'))
            .map(|(k, _)| k.trim().to_string())
            .collect()
    }

    /// Every field of the struct is listed once, in the struct's order; the list
    /// adds only `derived` fields.
    fn lists_every_field(snapshot: &(impl Snapshot + std::fmt::Debug), derived: &[&str]) {
        let listed: Vec<&str> = snapshot.fields().map(|f| f.name).collect();
        let own: Vec<&str> = listed
            .iter()
            .copied()
            .filter(|n| !derived.contains(n))
            .collect();
        assert_eq!(own, struct_fields(&format!("{snapshot:?}")), "{snapshot:?}");
        let mut unique = listed.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), listed.len(), "a name listed twice");
        for f in snapshot.fields() {
            assert_eq!(
                f.unit == Field::NANOSECONDS,
                f.name.ends_with("_ns"),
                "{}: a duration in ns, and only that, is named *_ns",
                f.name
            );
            assert!(f.help.ends_with('.'), "{}: help is a sentence", f.name);
            if f.kind == FieldKind::Flag {
                assert_eq!(f.unit, "", "{}", f.name);
            }
        }
    }

    #[test]
    fn every_snapshot_lists_every_field_with_its_value() {
        lists_every_field(&Stats::default(), &[]);
        let t = TetherInfo {
            line: 1,
            requested: true,
            pid: 3,
            records_consumed: 4,
            bytes_consumed: 5,
            lost: 6,
            lag_records: 7,
            lag_bytes: 8,
            records_filtered: 9,
        };
        lists_every_field(&t, &[]);
        let values: Vec<u64> = t.fields().map(|f| f.value).collect();
        assert_eq!(values, [1, 1, 3, 4, 5, 6, 7, 8, 9], "a flag is 1");
        let tap = TapStats {
            delivered: 1,
            lost: 2,
            torn: 3,
            filtered: 4,
            skips: 5,
            lag: 6,
        };
        lists_every_field(&tap, &[]);
        let values: Vec<u64> = tap.fields().map(|f| f.value).collect();
        assert_eq!(values, (1..=6).collect::<Vec<_>>());
        let l = ListenerStats {
            producers: 1,
            observers: 2,
            refused_credentials: 3,
            refused_version: 4,
            refused_role: 5,
            refused_malformed: 6,
            timed_out: 7,
            refused_busy: 8,
            failed: 9,
            pending: 10,
        };
        lists_every_field(&l, &["refused"]);
        let refused = l.fields().find(|f| f.name == "refused").expect("listed");
        assert_eq!(refused.value, l.refused());
        assert_eq!(refused.value, 3 + 4 + 5 + 6 + 7 + 8);
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
