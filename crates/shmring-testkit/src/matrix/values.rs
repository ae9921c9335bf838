//! The values written over a word: absolute boundaries for every word, and, per
//! field, values relative to what the field holds when it is written (a cursor's
//! claim number ±1/±N/±2N and position ±1 unit, ±capacity, ±capacity ∓ a few
//! records, just below and above its mask; a log entry's stamp, each state, each
//! interesting slot and length; each state word's known states ±1).
//!
//! A value is a rule ([`Op`]), applied to the word's value at the moment of the
//! write ([`apply`]): the same case names the same rule in every ring state.

use shmring::layout::{
    cursor_seq, ClaimState, Geometry, POS_BITS, SEQ_BITS, UNITS_BITS, UNITS_MASK,
};

use super::words::{Role, Word};

/// What the values are relative to: the ring's geometry and a typical record.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Claim log entries (N).
    pub n: u64,
    /// Data ring capacity in units.
    pub cap: u64,
    /// Units of a typical record of the honest producers.
    pub rec: u64,
    pub max_producers: u64,
    /// Units of the largest record.
    pub max_units: u64,
    /// Offsets of the ring's read cursor and the log (for values taken from them).
    pub read_offset: usize,
    pub log_offset: usize,
    pub write_offset: usize,
    pub peek_offset: usize,
}

impl Ctx {
    pub fn new(geo: &Geometry, rec: u64) -> Ctx {
        use shmring::layout::{Control, Cursors};
        use std::mem::offset_of;
        Ctx {
            n: geo.log_entries as u64,
            cap: geo.cap_units(),
            rec,
            max_producers: geo.max_producers as u64,
            max_units: shmring::layout::record_units(geo.max_record),
            read_offset: offset_of!(Control, cursors) + offset_of!(Cursors, read),
            peek_offset: offset_of!(Control, cursors) + offset_of!(Cursors, peek),
            write_offset: offset_of!(Control, write),
            log_offset: geo.log_offset as usize,
        }
    }
}

/// How one field changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOp {
    /// Add (wrapping inside the field).
    Add(i64),
    /// Set to this value (masked to the field).
    Set(u64),
    /// Add what makes the field overflow (it reads 0 and carries one into the field
    /// above it): "just above the mask".
    CarryOut,
    /// Twice / half the value (sizes).
    Double,
    Halve,
}

/// A bit field of a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits {
    pub shift: u32,
    pub bits: u32,
}

impl Bits {
    const fn mask(self) -> u64 {
        if self.bits == 64 {
            u64::MAX
        } else {
            (1 << self.bits) - 1
        }
    }
    fn get(self, w: u64) -> u64 {
        (w >> self.shift) & self.mask()
    }
    fn set(self, w: u64, f: u64) -> u64 {
        (w & !(self.mask() << self.shift)) | ((f & self.mask()) << self.shift)
    }
    fn apply(self, w: u64, op: FieldOp) -> u64 {
        let f = self.get(w);
        match op {
            FieldOp::Add(d) => self.set(w, f.wrapping_add(d as u64)),
            FieldOp::Set(v) => self.set(w, v),
            FieldOp::CarryOut if self.bits == 64 => 0,
            FieldOp::CarryOut => w.wrapping_add((self.mask() + 1 - f) << self.shift),
            FieldOp::Double => self.set(w, f << 1),
            FieldOp::Halve => self.set(w, f >> 1),
        }
    }
}

const SEQ: Bits = Bits {
    shift: POS_BITS,
    bits: SEQ_BITS,
};
const POS: Bits = Bits {
    shift: 0,
    bits: POS_BITS,
};
const STAMP: Bits = Bits {
    shift: 64 - SEQ_BITS,
    bits: SEQ_BITS,
};
const STATE: Bits = Bits {
    shift: 64 - SEQ_BITS - 2,
    bits: 2,
};
const SLOT: Bits = Bits {
    shift: UNITS_BITS,
    bits: 64 - SEQ_BITS - 2 - UNITS_BITS,
};
const UNITS: Bits = Bits {
    shift: 0,
    bits: UNITS_BITS,
};

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// This exact value.
    Abs(u64),
    /// Some fields changed, the others kept.
    Fields(Vec<(Bits, FieldOp)>),
    /// A cursor whose position is the ring's read cursor's plus this many units.
    PosFromRead(i64),
    /// The log entry of the claim this far from the cursor at this offset (an
    /// open-claim word made to match a claim in the log).
    EntryAt { cursor: usize, delta: i64 },
    /// A pin of this many units where the cursor at this offset points (a pin
    /// on the space the next record takes).
    PinAt { cursor: usize, units: u64 },
    /// The cursor moved back over its last claims, as the claim log says they
    /// were: claim number less this many, position less their lengths (a move
    /// back that agrees with the log).
    BackClaims(u64),
}

/// One value of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// Unique among one word's values: `=0`, `pos+cap-2r`, `waiting=0xffffffff`.
    pub name: String,
    pub op: Op,
}

/// The absolute boundaries written over every word.
pub const ABSOLUTE: &[(&str, u64)] = &[
    ("=0", 0),
    ("=1", 1),
    ("=2", 2),
    ("=max", u64::MAX),
    ("=max-1", u64::MAX - 1),
    ("=1<<63", 1 << 63),
    ("=(1<<63)-1", (1 << 63) - 1),
    ("=0xffffffff", 0xffff_ffff),
    ("=1<<32", 1 << 32),
];

/// Reads a word of the segment (for values taken from another word).
pub trait Peek {
    fn word(&self, offset: usize) -> u64;
}

/// The value `op` writes over a word that holds `cur`.
pub fn apply(op: &Op, cur: u64, ctx: &Ctx, seg: &dyn Peek) -> u64 {
    match op {
        Op::Abs(v) => *v,
        Op::Fields(ops) => ops.iter().fold(cur, |w, &(b, op)| b.apply(w, op)),
        Op::PosFromRead(d) => {
            let read = seg.word(ctx.read_offset);
            POS.set(cur, POS.get(read).wrapping_add(*d as u64))
        }
        Op::EntryAt { cursor, delta } => {
            let k = cursor_seq(seg.word(*cursor)).wrapping_add(*delta as u64);
            seg.word(ctx.log_offset + 8 * (k % ctx.n) as usize)
        }
        Op::PinAt { cursor, units } => {
            let off = POS.get(seg.word(*cursor)) % ctx.cap;
            shmring::protocol::pack_pin(off, *units)
        }
        Op::BackClaims(claims) => {
            let (mut k, mut pos) = (cursor_seq(cur), POS.get(cur));
            for _ in 0..*claims {
                k = k.wrapping_sub(1);
                let e = seg.word(ctx.log_offset + 8 * (k % ctx.n) as usize);
                pos = pos.wrapping_sub(shmring::layout::LogEntry::unpack(e).units);
            }
            POS.set(SEQ.set(cur, k), pos)
        }
    }
}

/// A pin's extent: where it lies and how long it is, inside the ring and past it.
fn pin_values(ctx: &Ctx, out: &mut Vec<Value>) {
    let (cap, r) = (ctx.cap, ctx.rec);
    let pin = shmring::protocol::pack_pin;
    for (sym, v) in [
        ("whole", pin(0, cap)),
        ("first", pin(0, 1)),
        ("first-r", pin(0, r)),
        ("half", pin(cap / 2, cap / 2)),
        ("last", pin(cap - 1, 1)),
        ("off=cap", pin(cap, 1)),
        ("units=cap+1", pin(0, cap + 1)),
        ("off=mask", pin(0xffff_ffff, 1)),
        ("units=mask", pin(0, 0xffff_ffff)),
    ] {
        out.push(Value {
            name: format!("pin={sym}"),
            op: Op::Abs(v),
        });
    }
    for (sym, cursor) in [("write", ctx.write_offset), ("read", ctx.read_offset)] {
        for (usym, units) in [("1", 1), ("r", r), ("cap", cap)] {
            out.push(Value {
                name: format!("pin=at-{sym},units={usym}"),
                op: Op::PinAt { cursor, units },
            });
        }
    }
}

fn one(name: String, b: Bits, op: FieldOp) -> Value {
    Value {
        name,
        op: Op::Fields(vec![(b, op)]),
    }
}

/// `+3`, `-N`, `+cap-2r`: a signed amount with its symbolic name.
fn signed(sym: &str, v: u64) -> [(String, i64); 2] {
    [
        (format!("+{sym}"), v as i64),
        (format!("-{sym}"), -(v as i64)),
    ]
}

fn cursor_values(ctx: &Ctx, out: &mut Vec<Value>) {
    let (n, cap, r) = (ctx.n, ctx.cap, ctx.rec);
    for (sym, d) in [("1", 1), ("N", n), ("2N", 2 * n)] {
        for (name, d) in signed(sym, d) {
            out.push(one(format!("seq{name}"), SEQ, FieldOp::Add(d)));
        }
    }
    let m = (1u64 << SEQ_BITS) - 1;
    out.push(one("seq=0".into(), SEQ, FieldOp::Set(0)));
    out.push(one("seq=mask".into(), SEQ, FieldOp::Set(m)));
    out.push(one("seq=mask-1".into(), SEQ, FieldOp::Set(m - 1)));
    let steps = [
        ("1", 1),
        ("cap/2", cap / 2),
        ("cap-3r", cap - 3 * r),
        ("cap-2r", cap - 2 * r),
        ("cap-r", cap - r),
        ("cap-1", cap - 1),
        ("cap", cap),
        ("cap+1", cap + 1),
        ("cap+r", cap + r),
        ("2cap-r", 2 * cap - r),
        ("2cap", 2 * cap),
        ("2cap+r", 2 * cap + r),
    ];
    for (sym, d) in steps {
        for (name, d) in signed(sym, d) {
            out.push(one(format!("pos{name}"), POS, FieldOp::Add(d)));
        }
    }
    let m = (1u64 << POS_BITS) - 1;
    out.push(one("pos=0".into(), POS, FieldOp::Set(0)));
    out.push(one("pos=mask".into(), POS, FieldOp::Set(m)));
    out.push(one("pos=mask-1".into(), POS, FieldOp::Set(m - 1)));
    out.push(one("pos=mask+1".into(), POS, FieldOp::CarryOut));
    for claims in [1, 2] {
        out.push(Value {
            name: format!("back{claims}"),
            op: Op::BackClaims(claims),
        });
    }
    for (sym, d) in [
        ("", 0),
        ("+cap", cap as i64),
        ("+cap-1", cap as i64 - 1),
        ("+cap+1", cap as i64 + 1),
        ("+cap-r", (cap - r) as i64),
    ] {
        out.push(Value {
            name: format!("pos=read{sym}"),
            op: Op::PosFromRead(d),
        });
    }
}

fn entry_values(ctx: &Ctx, open_claim: bool, out: &mut Vec<Value>) {
    let (n, cap, r) = (ctx.n, ctx.cap, ctx.rec);
    for (sym, d) in [("1", 1), ("N", n), ("2N", 2 * n)] {
        for (name, d) in signed(sym, d) {
            out.push(one(format!("stamp{name}"), STAMP, FieldOp::Add(d)));
        }
    }
    out.push(one("stamp=0".into(), STAMP, FieldOp::Set(0)));
    out.push(one(
        "stamp=mask".into(),
        STAMP,
        FieldOp::Set((1 << SEQ_BITS) - 1),
    ));
    for s in [
        ClaimState::Claimed,
        ClaimState::Committed,
        ClaimState::Aborted,
        ClaimState::Abandoned,
    ] {
        out.push(one(format!("state={s:?}"), STATE, FieldOp::Set(s as u64)));
    }
    let p = ctx.max_producers;
    for (sym, v) in [
        ("0", 0),
        ("1", 1),
        ("last", p - 1),
        ("max_producers", p),
        ("255", 255),
    ] {
        out.push(one(format!("slot={sym}"), SLOT, FieldOp::Set(v)));
    }
    out.push(one("slot+1".into(), SLOT, FieldOp::Add(1)));
    out.push(one("slot-1".into(), SLOT, FieldOp::Add(-1)));
    for (sym, v) in [
        ("0", 0),
        ("1", 1),
        ("r", r),
        ("cap/2", cap / 2),
        ("cap-1", cap - 1),
        ("cap", cap),
        ("cap+1", cap + 1),
        ("max_record", ctx.max_units),
        ("max_record+1", ctx.max_units + 1),
        ("mask", UNITS_MASK),
    ] {
        out.push(one(format!("units={sym}"), UNITS, FieldOp::Set(v)));
    }
    out.push(one("units=mask+1".into(), UNITS, FieldOp::CarryOut));
    out.push(one("units+1".into(), UNITS, FieldOp::Add(1)));
    out.push(one("units-1".into(), UNITS, FieldOp::Add(-1)));
    // A whole claim forged over the entry's next generation (a free entry becomes
    // claim k): every state a producer could leave, lengths from one unit to more
    // than the ring, naming a live producer (slot 0) or the last slot.
    for s in [
        ClaimState::Claimed,
        ClaimState::Committed,
        ClaimState::Aborted,
    ] {
        for (usym, u) in [("1", 1), ("r", r), ("cap", cap), ("cap+1", cap + 1)] {
            for (ssym, slot) in [("0", 0), ("last", p - 1)] {
                out.push(Value {
                    name: format!("claim(stamp+N,{s:?},slot={ssym},units={usym})"),
                    op: Op::Fields(vec![
                        (STAMP, FieldOp::Add(n as i64)),
                        (STATE, FieldOp::Set(s as u64)),
                        (SLOT, FieldOp::Set(slot)),
                        (UNITS, FieldOp::Set(u)),
                    ]),
                });
            }
        }
    }
    if open_claim {
        // The open-claim word made to vouch for a claim in the log.
        for (sym, cursor, delta) in [
            ("log[peek]", ctx.peek_offset, 0),
            ("log[write-1]", ctx.write_offset, -1),
            ("log[write]", ctx.write_offset, 0),
        ] {
            out.push(Value {
                name: format!("={sym}"),
                op: Op::EntryAt { cursor, delta },
            });
        }
    }
}

fn half_values(name: &str, shift: u32, role: Role, ctx: &Ctx, out: &mut Vec<Value>) {
    let b = Bits { shift, bits: 32 };
    let mut sets: Vec<(String, u64)> = [0u64, 1, 2, 3, 4, 0x7fff_ffff, 0x8000_0000]
        .iter()
        .chain(&[0xffff_fffe, 0xffff_ffff])
        .map(|&v| {
            (
                if v > 4 {
                    format!("{v:#x}")
                } else {
                    v.to_string()
                },
                v,
            )
        })
        .collect();
    match role {
        Role::State(known) => {
            for &k in known {
                for v in [k.wrapping_sub(1), k, k + 1] {
                    if !sets.iter().any(|(_, s)| *s == v as u64) {
                        sets.push((v.to_string(), v as u64));
                    }
                }
            }
        }
        Role::Units => {
            sets.push(("cap".into(), ctx.cap));
            sets.push(("cap/2".into(), ctx.cap / 2));
            sets.push(("cap+1".into(), ctx.cap + 1));
            sets.push(("max_record".into(), ctx.max_units));
        }
        Role::Mask => {
            for v in [0xffu64, 0x80, 0x100, 0xffff_ff00] {
                sets.push((format!("{v:#x}"), v));
            }
        }
        _ => {}
    }
    for (sym, v) in sets {
        out.push(one(format!("{name}={sym}"), b, FieldOp::Set(v)));
    }
    out.push(one(format!("{name}+1"), b, FieldOp::Add(1)));
    out.push(one(format!("{name}-1"), b, FieldOp::Add(-1)));
    if role == Role::Size {
        out.push(one(format!("{name}*2"), b, FieldOp::Double));
        out.push(one(format!("{name}/2"), b, FieldOp::Halve));
    }
}

fn size_values(name: &str, out: &mut Vec<Value>) {
    let b = Bits { shift: 0, bits: 64 };
    for (sym, d) in [("1", 1), ("unit", shmring::layout::UNIT)] {
        for (n, d) in signed(sym, d) {
            out.push(one(format!("{name}{n}"), b, FieldOp::Add(d)));
        }
    }
    out.push(one(format!("{name}*2"), b, FieldOp::Double));
    out.push(one(format!("{name}/2"), b, FieldOp::Halve));
}

/// Every value written over `word`: the absolute boundaries, then the relative
/// ones of each field living there.
pub fn values(word: &Word, ctx: &Ctx) -> Vec<Value> {
    let mut out: Vec<Value> = ABSOLUTE
        .iter()
        .map(|&(name, v)| Value {
            name: name.into(),
            op: Op::Abs(v),
        })
        .collect();
    for f in &word.fields {
        match (f.role, f.bits) {
            (Role::Cursor, 64) => cursor_values(ctx, &mut out),
            (Role::Entry, 64) => entry_values(ctx, f.name == "open_claim", &mut out),
            (Role::Pin, 64) => pin_values(ctx, &mut out),
            (Role::Magic, _) => {
                let b = Bits { shift: 0, bits: 64 };
                out.push(one("magic+1".into(), b, FieldOp::Add(1)));
                out.push(one("magic+1<<56".into(), b, FieldOp::Add(1 << 56)));
            }
            (Role::Size, 64) => size_values(&f.name, &mut out),
            (Role::Counter, 64) => {}
            (role, 32) => half_values(&f.name, f.shift, role, ctx, &mut out),
            (role, bits) => unreachable!("a {bits}-bit field with role {role:?}"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::layout::LogEntry;

    struct NoPeek;
    impl Peek for NoPeek {
        fn word(&self, _: usize) -> u64 {
            0
        }
    }

    fn ctx() -> Ctx {
        let geo = Geometry::new(64 << 10, 16 << 10, 16, 4, 0).unwrap();
        Ctx::new(&geo, 4)
    }

    #[test]
    fn cursor_fields_move_alone() {
        let c = ctx();
        let cur = shmring::layout::pack_cursor(7, 100);
        let v = |d| apply(&Op::Fields(vec![(POS, FieldOp::Add(d))]), cur, &c, &NoPeek);
        assert_eq!(
            v(c.cap as i64),
            shmring::layout::pack_cursor(7, 100 + c.cap)
        );
        assert_eq!(
            v(-101),
            shmring::layout::pack_cursor(7, shmring::layout::POS_MASK)
        );
        let carry = apply(
            &Op::Fields(vec![(POS, FieldOp::CarryOut)]),
            cur,
            &c,
            &NoPeek,
        );
        assert_eq!(carry, shmring::layout::pack_cursor(8, 0));
        let seq = apply(&Op::Fields(vec![(SEQ, FieldOp::Add(-8))]), cur, &c, &NoPeek);
        assert_eq!(cursor_seq(seq), shmring::layout::SEQ_MASK);
    }

    #[test]
    fn entry_fields_match_the_layout() {
        let e = LogEntry {
            stamp: 5,
            state: ClaimState::Claimed,
            slot: 2,
            units: 9,
        };
        let v = e.pack();
        assert_eq!(
            (STAMP.get(v), STATE.get(v), SLOT.get(v), UNITS.get(v)),
            (5, 0, 2, 9)
        );
        let c = ctx();
        let carried = apply(
            &Op::Fields(vec![(UNITS, FieldOp::CarryOut)]),
            v,
            &c,
            &NoPeek,
        );
        let u = LogEntry::unpack(carried);
        assert_eq!((u.stamp, u.slot, u.units), (5, 3, 0));
    }
}
