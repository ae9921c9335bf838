//! Property tests of the record format and the cursor arithmetic in `layout`.

use proptest::prelude::*;
use shmring::layout::{
    claim_geometry, claim_total, cursor_pos, cursor_seq, pack_cursor, pos_diff, record_units,
    seq_diff, ClaimState, Geometry, LogEntry, MAX_CAPACITY, MIN_CAPACITY, POS_MASK, SEQ_MASK, UNIT,
    UNITS_MASK,
};

fn state() -> impl Strategy<Value = ClaimState> {
    prop_oneof![
        Just(ClaimState::Claimed),
        Just(ClaimState::Committed),
        Just(ClaimState::Aborted),
        Just(ClaimState::Abandoned),
    ]
}

/// Data ring sizes in units, every power of two the layout allows.
fn cap_units() -> impl Strategy<Value = u64> {
    let lo = MIN_CAPACITY.trailing_zeros();
    let hi = MAX_CAPACITY.trailing_zeros();
    (lo..=hi).prop_map(|b| (1u64 << b) / UNIT)
}

/// Positions anywhere in the 36-bit space, with extra weight right below the wrap
/// and on/around every ring alignment.
fn position() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=POS_MASK,
        (0u64..4096).prop_map(|d| POS_MASK - d),
        (0u64..4096),
        (1u32..36, 0u64..3).prop_map(|(b, d)| ((1u64 << b) - 1 + d) & POS_MASK),
    ]
}

/// Sequence numbers anywhere in the 28-bit space, weighted towards the wrap.
fn sequence() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=SEQ_MASK,
        (0u64..4096).prop_map(|d| SEQ_MASK - d),
        (0u64..4096),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 1024 } else { 4096 }))]

    #[test]
    fn cursor_round_trips(seq in sequence(), pos in position()) {
        let c = pack_cursor(seq, pos);
        prop_assert_eq!(cursor_seq(c), seq);
        prop_assert_eq!(cursor_pos(c), pos);
    }

    #[test]
    fn cursor_masks_out_of_range_values(seq in any::<u64>(), pos in any::<u64>()) {
        let c = pack_cursor(seq, pos);
        prop_assert_eq!(cursor_seq(c), seq & SEQ_MASK);
        prop_assert_eq!(cursor_pos(c), pos & POS_MASK);
    }

    #[test]
    fn cursor_advances_across_both_wraps(seq in sequence(), pos in position(), ds in 0u64..1 << 20, dp in 0u64..1 << 30) {
        // What a producer does: pack (k + 1, p + units) from an unpacked cursor.
        let c = pack_cursor(seq, pos);
        let n = pack_cursor(cursor_seq(c) + ds, cursor_pos(c) + dp);
        prop_assert_eq!(seq_diff(cursor_seq(n), cursor_seq(c)), ds);
        prop_assert_eq!(pos_diff(cursor_pos(n), cursor_pos(c)), dp);
        prop_assert!(cursor_seq(n) <= SEQ_MASK && cursor_pos(n) <= POS_MASK);
    }

    #[test]
    fn diffs_are_wrapping(a in any::<u64>(), d in any::<u64>()) {
        prop_assert_eq!(seq_diff(a.wrapping_add(d), a), d & SEQ_MASK);
        prop_assert_eq!(pos_diff(a.wrapping_add(d), a), d & POS_MASK);
        prop_assert_eq!(seq_diff((a + (d & SEQ_MASK)) & SEQ_MASK, a & SEQ_MASK), d & SEQ_MASK);
    }

    #[test]
    fn log_entry_round_trips(stamp in sequence(), st in state(), slot in 0u32..256, units in 0..=UNITS_MASK) {
        let e = LogEntry { stamp, state: st, slot, units };
        prop_assert_eq!(LogEntry::unpack(e.pack()), e);
    }

    #[test]
    fn every_u64_unpacks_into_range_and_repacks(v in any::<u64>()) {
        let e = LogEntry::unpack(v);
        prop_assert!(e.stamp <= SEQ_MASK && e.slot < 256 && e.units <= UNITS_MASK);
        prop_assert_eq!(e.pack(), v);
    }

    #[test]
    fn log_entry_masks_fields(stamp in any::<u64>(), st in state(), slot in any::<u32>(), units in any::<u64>()) {
        let e = LogEntry::unpack(LogEntry { stamp, state: st, slot, units }.pack());
        prop_assert_eq!(e, LogEntry { stamp: stamp & SEQ_MASK, state: st, slot: slot & 0xff, units: units & UNITS_MASK });
    }

    #[test]
    fn initial_entry_is_previous_generation(seq in sequence(), log_bits in 4u32..=22) {
        let n = 1u64 << log_bits;
        let e = LogEntry::unpack(LogEntry::initial(seq, n));
        prop_assert_eq!(e.state, ClaimState::Aborted);
        prop_assert_eq!(e.units, 0);
        // Exactly what a producer claiming `seq` expects to find: stamp seq - N.
        prop_assert_eq!(e.stamp, seq.wrapping_sub(n) & SEQ_MASK);
        prop_assert_eq!(seq_diff(seq, e.stamp), n);
        // And never what a consumer polling `seq` would take for a claim.
        prop_assert_ne!(e.stamp, seq & SEQ_MASK);
    }

    #[test]
    fn record_units_hold_payload_minimally(len in prop_oneof![0u64..1 << 12, 0u64..1 << 31]) {
        let u = record_units(len);
        let room = (u - 1) * UNIT;
        prop_assert!(room >= len, "payload fits");
        prop_assert!(room < len + UNIT, "no whole unit wasted");
        prop_assert_eq!(len == 0, u == 1);
    }

    #[test]
    fn claim_places_record_inside_ring_and_claim(
        cap in cap_units(),
        pos in position(),
        pick in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
    ) {
        // Payloads from empty up to the largest the ring accepts (header included).
        let max_record = Geometry::largest_record(cap * UNIT);
        let len = if pick == u64::MAX { max_record } else { pick % (max_record + 1) };
        let units = record_units(len);
        prop_assert!(units >= 1 && units <= cap / 2);
        let total = claim_total(pos, units, cap);
        let off = pos & (cap - 1);
        let (rec_off, rec_units) = claim_geometry(pos, total, cap).expect("honest claim");
        prop_assert_eq!(rec_units, units);
        // Never crosses the ring end.
        prop_assert!(rec_off + rec_units <= cap);
        // Fits in any empty ring: at most the whole capacity.
        prop_assert!(total <= cap);
        if off + units <= cap {
            // Fits before the end: no padding at all, record at the claim start.
            prop_assert_eq!(total, units);
            prop_assert_eq!(rec_off, off);
        } else {
            // Does not fit: padding exactly up to the ring end, record at offset 0.
            prop_assert_eq!(rec_off, 0);
            prop_assert_eq!(total, (cap - off) + units);
            prop_assert!(total - units < units, "padding is shorter than the record");
        }
        // The record lies within the claim, seen as ring offsets [off, off+total).
        let start_in_claim = (rec_off + cap - off) % cap;
        prop_assert!(start_in_claim + rec_units <= total);
        // The record ends exactly where the next claim starts (modulo the ring), also
        // across the 2^36 wrap of the position counter.
        let next = (pos + total) & POS_MASK;
        prop_assert_eq!((rec_off + rec_units) % cap, next & (cap - 1));
        prop_assert_eq!(pos_diff(next, pos), total);
    }

    #[test]
    fn claim_geometry_bounds_untrusted_input(cap in cap_units(), pos in any::<u64>(), total in any::<u64>()) {
        // Whatever a hostile producer stores, a `Some` is inside the ring and non-empty.
        match claim_geometry(pos, total, cap) {
            Some((off, units)) => {
                prop_assert!(total >= 1 && total <= cap);
                prop_assert!(units >= 1);
                prop_assert!(off + units <= cap);
                prop_assert!(units <= total);
            }
            None => prop_assert!(total == 0 || total > cap),
        }
    }

    #[test]
    fn geometry_accepts_exactly_the_largest_record(cap in cap_units(), log_bits in 4u32..=22, prods in 1u32..=256) {
        let capacity = cap * UNIT;
        let largest = Geometry::largest_record(capacity);
        let g = Geometry::new(capacity, largest, 1 << log_bits, prods, 0).expect("largest record");
        prop_assert_eq!(record_units(largest), cap / 2);
        prop_assert!(Geometry::new(capacity, largest + 1, 1 << log_bits, prods, 0).is_err());
        prop_assert!(g.slots_offset < g.log_offset && g.log_offset < g.data_offset);
        prop_assert_eq!(g.data_offset % 4096, 0);
        prop_assert_eq!(g.log_offset + (1u64 << log_bits) * 8 <= g.data_offset, true);
        prop_assert_eq!(g.total_size, g.data_offset + capacity);
    }
}

#[test]
fn edge_cases_by_hand() {
    let cap = 1024;
    // A zero-length payload is one header unit.
    assert_eq!(record_units(0), 1);
    assert_eq!(record_units(1), 2);
    assert_eq!(record_units(64), 2);
    assert_eq!(record_units(65), 3);
    // Exactly filling the end: no padding.
    assert_eq!(claim_total(cap - 4, 4, cap), 4);
    assert_eq!(claim_geometry(cap - 4, 4, cap), Some((cap - 4, 4)));
    // One unit too many: pad 4, record at 0.
    assert_eq!(claim_total(cap - 4, 5, cap), 9);
    assert_eq!(claim_geometry(cap - 4, 9, cap), Some((0, 5)));
    // The last position before the 2^36 wrap behaves like any ring end.
    assert_eq!(claim_total(POS_MASK, 1, cap), 1);
    assert_eq!(claim_total(POS_MASK, 2, cap), 3);
    assert_eq!(claim_geometry(POS_MASK, 3, cap), Some((0, 2)));
    assert_eq!(claim_geometry(0, 0, cap), None);
    assert_eq!(claim_geometry(0, cap + 1, cap), None);
    assert_eq!(cursor_pos(pack_cursor(SEQ_MASK + 1, POS_MASK + 1)), 0);
    assert_eq!(cursor_seq(pack_cursor(SEQ_MASK + 1, POS_MASK + 1)), 0);
}
