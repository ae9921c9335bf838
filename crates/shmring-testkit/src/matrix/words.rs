//! Every 8-byte word a producer can write outside the data ring, named by the
//! field of [`shmring::layout`] that lives there (offsets from `offset_of!`, so
//! the list follows the layout), and what kind of value each half holds.

use std::mem::{offset_of, size_of};

use shmring::layout::{
    ClaimHealth, ConsumerCounters, ConsumerRole, Control, Cursors, Futex, Geometry, Identity, Line,
    Pins, ProducerCounters, Slot, TetherLine, Tethers, CONTROL_SIZE, MAX_PINS, MAX_TETHERS,
    SLOT_ACTIVE, SLOT_FREE, TETHER_ACTIVE, TETHER_DETACHED, TETHER_FREE, TETHER_REQUESTED,
};

/// What a field holds, which decides the values written over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The identity line's magic.
    Magic,
    /// An identity size or offset (u64 or u32).
    Size,
    /// A packed cursor, seq:28 | pos:36.
    Cursor,
    /// A packed claim log entry, stamp:28 | state:2 | slot:8 | units:26 (a log
    /// entry, or a slot's open-claim word, which holds one).
    Entry,
    /// A statistic.
    Counter,
    /// A futex word or a waiting count.
    Futex,
    /// A count of units (the futexes' `need`).
    Units,
    /// A state word; the values its states may take.
    State(&'static [u32]),
    /// The tether mask (one bit per line).
    Mask,
    /// A pin's extent: ring offset (units, low half) and length (units, high half).
    Pin,
}

/// One field inside a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name in the layout (`seq`, `waiting`, `open_claim`, ...).
    pub name: String,
    /// Bit offset of the field inside its 8-byte word (0 or 32).
    pub shift: u32,
    /// 32 or 64.
    pub bits: u32,
    pub role: Role,
}

/// One 8-byte word of the segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// `write`, `cursors.read`, `slot[2].open_claim`, `log[5]`, `control@0x4c8`...
    pub name: String,
    /// Byte offset from the start of the segment (8-aligned).
    pub offset: usize,
    /// Fields living there (none: padding nobody reads).
    pub fields: Vec<Field>,
}

/// Where the structures start.
pub enum Region {
    Control,
    Slot(u32),
    Log(u32),
}

const SLOT_STATES: &[u32] = &[SLOT_FREE, SLOT_ACTIVE];
const TETHER_STATES: &[u32] = &[
    TETHER_FREE,
    TETHER_REQUESTED,
    TETHER_ACTIVE,
    TETHER_DETACHED,
];
/// The consumer role: 0 none, 1 attached (see [`ConsumerRole`]).
const ROLE_STATES: &[u32] = &[0, 1];
/// The pins in use: none, one, every entry.
const PINNED_STATES: &[u32] = &[0, 1, MAX_PINS as u32];
/// The pin entries named (and given their own values): the first two and the
/// last; the others get the absolute values of every word.
const PINS_NAMED: &[usize] = &[0, 1, MAX_PINS - 1];

/// A field of the layout at a byte offset.
struct At {
    off: usize,
    size: usize,
    name: &'static str,
    role: Role,
}

macro_rules! at {
    ($base:expr, $ty:ty, $field:ident, $size:expr, $role:expr) => {
        At {
            off: $base + offset_of!($ty, $field),
            size: $size,
            name: stringify!($field),
            role: $role,
        }
    };
}

/// Pushes the counters `field: size, ...` of `$ty` at `$base`, named `prefix` + field.
macro_rules! counters {
    ($push:ident, $prefix:expr, $base:expr, $ty:ty, $($field:ident: $size:expr),+ $(,)?) => {
        $( $push($prefix, at!($base, $ty, $field, $size, Role::Counter)); )+
    };
}

fn control_fields() -> Vec<(String, At)> {
    let mut v: Vec<(String, At)> = Vec::new();
    let mut push = |prefix: &str, a: At| v.push((format!("{prefix}{}", a.name), a));
    let id = offset_of!(Control, identity) + offset_of!(Line<Identity>, 0);
    push("identity.", at!(id, Identity, magic, 8, Role::Magic));
    push("identity.", at!(id, Identity, version, 4, Role::Size));
    push("identity.", at!(id, Identity, control_size, 4, Role::Size));
    push("identity.", at!(id, Identity, capacity, 8, Role::Size));
    push("identity.", at!(id, Identity, max_record, 8, Role::Size));
    push("identity.", at!(id, Identity, log_entries, 4, Role::Size));
    push("identity.", at!(id, Identity, max_producers, 4, Role::Size));
    push("identity.", at!(id, Identity, flags, 4, Role::Size));
    push("identity.", at!(id, Identity, data_offset, 8, Role::Size));
    push("identity.", at!(id, Identity, total_size, 8, Role::Size));
    v.push((
        "write".into(),
        At {
            off: offset_of!(Control, write),
            size: 8,
            name: "write",
            role: Role::Cursor,
        },
    ));
    let mut push = |prefix: &str, a: At| v.push((format!("{prefix}{}", a.name), a));
    let cur = offset_of!(Control, cursors);
    push("cursors.", at!(cur, Cursors, read, 8, Role::Cursor));
    push("cursors.", at!(cur, Cursors, peek, 8, Role::Cursor));
    push("cursors.", at!(cur, Cursors, owner_read, 8, Role::Cursor));
    push(
        "cursors.",
        at!(cur, Cursors, pinned, 4, Role::State(PINNED_STATES)),
    );
    for (prefix, base) in [
        ("data.", offset_of!(Control, data)),
        ("space.", offset_of!(Control, space)),
        ("tether_data.", offset_of!(Control, tether_data)),
    ] {
        push(prefix, at!(base, Futex, seq, 4, Role::Futex));
        push(prefix, at!(base, Futex, waiting, 4, Role::Futex));
        push(prefix, at!(base, Futex, need, 4, Role::Units));
    }
    let role = offset_of!(Control, consumer);
    push(
        "consumer.",
        at!(role, ConsumerRole, state, 4, Role::State(ROLE_STATES)),
    );
    let cc = offset_of!(Control, counters);
    counters!(push, "counters.", cc, ConsumerCounters,
        records_consumed: 8, bytes_consumed: 8, abandoned: 8,
        skipped_aborted: 8, corruption: 8, waits: 8,
        wakes_sent: 8, peak_occupancy: 8, resets: 8,
        reaped_slots: 8,
    );
    let h = offset_of!(Control, health);
    counters!(push, "health.", h, ClaimHealth,
        stalled_claims: 8, forged_claims: 8, repairs: 8,
        oldest_pending_since_ns: 8, oldest_pending_slot: 4, oldest_pending_pid: 4,
    );
    let t = offset_of!(Control, tethers);
    push("tethers.", at!(t, Tethers, mask, 4, Role::Mask));
    push("tethers.", at!(t, Tethers, detached, 8, Role::Counter));
    for j in 0..MAX_TETHERS as usize {
        let base = offset_of!(Control, tether) + j * size_of::<Line<TetherLine>>();
        let p = format!("tether[{j}].");
        let mut push = |a: At| v.push((format!("{p}{}", a.name), a));
        push(at!(base, TetherLine, state, 4, Role::State(TETHER_STATES)));
        push(at!(base, TetherLine, read, 8, Role::Cursor));
        push(at!(base, TetherLine, peek, 8, Role::Cursor));
        push(at!(base, TetherLine, records_consumed, 8, Role::Counter));
        push(at!(base, TetherLine, bytes_consumed, 8, Role::Counter));
        push(at!(base, TetherLine, lost, 8, Role::Counter));
    }
    let pins = offset_of!(Control, pins);
    for &i in PINS_NAMED {
        for (name, base, role) in [
            ("extent", pins + offset_of!(Pins, extent), Role::Pin),
            ("claim", pins + offset_of!(Pins, claim), Role::Entry),
        ] {
            v.push((
                format!("pins.{name}[{i}]"),
                At {
                    off: base + 8 * i,
                    size: 8,
                    name: if name == "extent" { "extent" } else { "claim" },
                    role,
                },
            ));
        }
    }
    v
}

fn slot_fields() -> Vec<(String, At)> {
    let mut v: Vec<(String, At)> = Vec::new();
    let mut push = |prefix: &str, a: At| v.push((format!("{prefix}{}", a.name), a));
    push("", at!(0, Slot, state, 4, Role::State(SLOT_STATES)));
    push("", at!(0, Slot, open_claim, 8, Role::Entry));
    push("", at!(0, Slot, space_waiting, 4, Role::State(&[0, 1])));
    let pc = offset_of!(Slot, counters);
    counters!(push, "counters.", pc, ProducerCounters,
        records_committed: 8, bytes_committed: 8, aborted: 8,
        drops_full: 8, waits: 8, wakes_sent: 8, paddings: 8,
    );
    v
}

/// Groups fields into the 8-byte words of `len` bytes starting at `base`;
/// `prefix` names the structure. A word no field covers is named by its offset
/// (`@0x48`); one with two fields of one structure `data.seq|waiting`.
fn group(base: usize, len: usize, fields: &[(String, At)], prefix: &str) -> Vec<Word> {
    (0..len / 8)
        .map(|w| {
            let off = w * 8;
            let inside: Vec<&(String, At)> =
                fields.iter().filter(|(_, a)| a.off / 8 == w).collect();
            let name = match inside.as_slice() {
                [] => format!("{prefix}@{off:#x}"),
                [(n, _)] => format!("{prefix}{n}"),
                [(first, _), rest @ ..] => {
                    let mut n = format!("{prefix}{first}");
                    for (other, a) in rest {
                        // `data.seq|waiting`: the structure is named once.
                        let short = if other.ends_with(a.name) {
                            a.name
                        } else {
                            other
                        };
                        n = format!("{n}|{short}");
                    }
                    n
                }
            };
            let fields = inside
                .iter()
                .map(|(_, a)| Field {
                    name: a.name.to_string(),
                    shift: ((a.off % 8) * 8) as u32,
                    bits: (a.size * 8) as u32,
                    role: a.role,
                })
                .collect();
            Word {
                name,
                offset: base + off,
                fields,
            }
        })
        .collect()
}

/// Every word of the control block ([`CONTROL_SIZE`] bytes), the slot table and
/// the claim log of a ring of geometry `geo`, in segment order.
pub fn words(geo: &Geometry) -> Vec<Word> {
    let mut all = group(0, CONTROL_SIZE as usize, &control_fields(), "");
    let slot = slot_fields();
    let slot_size = size_of::<Slot>();
    for i in 0..geo.max_producers {
        let base = geo.slots_offset as usize + i as usize * slot_size;
        all.extend(group(base, slot_size, &slot, &format!("slot[{i}].")));
    }
    for i in 0..geo.log_entries as usize {
        all.push(Word {
            name: format!("log[{i}]"),
            offset: geo.log_offset as usize + 8 * i,
            fields: vec![Field {
                name: "entry".into(),
                shift: 0,
                bits: 64,
                role: Role::Entry,
            }],
        });
    }
    all
}

/// Which structure a word belongs to.
pub fn region(geo: &Geometry, w: &Word) -> Region {
    if (w.offset as u64) < geo.slots_offset {
        Region::Control
    } else if (w.offset as u64) < geo.log_offset {
        Region::Slot(((w.offset as u64 - geo.slots_offset) / size_of::<Slot>() as u64) as u32)
    } else {
        Region::Log(((w.offset as u64 - geo.log_offset) / 8) as u32)
    }
}
