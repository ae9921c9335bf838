//! Placement: once the ring is empty with its write cursor past the window at the
//! ring's start, the next record goes to the ring's start (after a padding claim
//! to the ring's end), so a stream of records reuses the same memory; the padding
//! is released when the consumer steps over it, never held with the record; rings
//! below 1 MiB go round as before; a tap counts paddings as no records.

use std::sync::Arc;
use std::time::Duration;

use shmring::layout::{record_units, UNIT};
use shmring::protocol::{place_window, PLACE_FRACTION};
use shmring::{
    Address, Config, Error, FullPolicy, Meta, ReadOnlySegment, Segment, Tap, TapOptions,
};

/// A 4 MiB ring: its placement window is 64 KiB (1/64 of it). Under Miri (a slow
/// machine), 1 MiB and frames of 64 KiB.
const CAP: u64 = if cfg!(miri) { 1 << 20 } else { 4 << 20 };
/// A frame well over the window.
const FRAME: usize = if cfg!(miri) { 64 << 10 } else { 256 << 10 };

fn ring(name: &str, capacity: u64) -> Arc<Segment> {
    Address::memfd(name, Config::with_capacity(capacity))
        .open()
        .unwrap()
}

fn cap_units(capacity: u64) -> u64 {
    capacity / UNIT
}

#[test]
fn the_window_is_a_sixty_fourth_of_a_ring_of_at_least_one_mebibyte() {
    assert_eq!(
        place_window(cap_units(CAP)),
        cap_units(CAP) / PLACE_FRACTION
    );
    assert_eq!(place_window(cap_units(1 << 20)), (1 << 20) / UNIT / 64);
    assert_eq!(place_window(cap_units(512 << 10)), u64::MAX);
}

#[test]
fn frames_of_a_consumer_that_keeps_up_all_land_at_the_ring_start() {
    let seg = ring("place-start", CAP);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    let mut addresses = Vec::new();
    for i in 0..40u32 {
        prod.send(&[i as u8; FRAME], Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().expect("the frame");
        assert_eq!((f.meta().kind, f.payload()[FRAME - 1]), (i, i as u8));
        addresses.push(f.payload().as_ptr() as usize);
        f.release();
    }
    // 40 frames of 256 KiB go round a 4 MiB ring 2.5 times; placed, they all sit
    // in the same place.
    addresses.dedup();
    assert_eq!(addresses.len(), 1, "every frame at the ring's start");
    let st = seg.stats();
    assert_eq!(st.records_consumed, 40);
    // A padding after each frame (the consumer pads once it released it):
    // skipped, not counted as aborted claims, not lost.
    assert_eq!((st.skipped_aborted, st.records_aborted), (0, 0));
    assert_eq!(st.placements, 40, "a padding after each frame");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "checks a ring's worth of bytes one by one: too slow under Miri"
)]
fn a_held_placed_frame_holds_only_itself() {
    let seg = ring("place-held", CAP);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.set_policy(FullPolicy::Fail);
    prod.send(&[1; FRAME], Meta::new(0, 1)).unwrap();
    consumer.try_next().unwrap().unwrap().release();
    // Placed: a padding to the ring's end, then the frame at the start.
    prod.send(&[2; FRAME], Meta::new(0, 2)).unwrap();
    let placed = consumer.try_next().unwrap().expect("the placed frame");
    assert_eq!(placed.payload()[0], 2);
    // While it is held, producers get everything else: as many frames as fit
    // beside it.
    let units = record_units(FRAME as u64);
    let fit = (cap_units(CAP) - units) / units;
    for i in 0..fit {
        prod.send(&[3; FRAME], Meta::new(0, 3))
            .unwrap_or_else(|e| panic!("frame {i} of {fit} beside the held one: {e}"));
    }
    assert!(matches!(
        prod.send(&[4; FRAME], Meta::new(0, 4)),
        Err(Error::Full { .. })
    ));
    // Every frame comes out intact, in order, and the ring empties.
    let mut n = 0;
    while let Some(f) = consumer.try_next().unwrap() {
        assert!(f.payload().iter().all(|&b| b == 3));
        f.release();
        n += 1;
    }
    assert_eq!(n, fit);
    placed.release();
    assert_eq!(seg.stats().occupancy, 0);
}

#[test]
fn a_consumer_holding_several_frames_gets_the_next_one() {
    // A consumer that keeps a window of frames (as an encoder with look-ahead
    // does) while placed frames and their paddings come and go: it always gets the
    // next frame.
    let seg = ring("place-window", CAP);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.set_policy(FullPolicy::Block(Duration::from_secs(30)));
    let window = 7;
    let mut held = std::collections::VecDeque::new();
    for i in 0..100u32 {
        prod.send(&[i as u8; FRAME], Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().expect("the frame");
        assert_eq!(f.meta().kind, i);
        held.push_back(f);
        if held.len() > window || i % 13 == 0 {
            // Sometimes all of them go at once: the ring empties and the next frame
            // is placed.
            let all = i % 13 == 0;
            while held.len() > if all { 0 } else { window } {
                held.pop_front().unwrap().release();
            }
        }
    }
    drop(held);
    assert_eq!(seg.stats().records_consumed, 100);
}

#[test]
#[cfg_attr(miri, ignore = "a thousand records: too slow under Miri")]
fn small_records_keep_to_the_window_and_small_rings_go_round() {
    // Records far below the window, each read before the next is sent: they fill
    // the window at the ring's start and go back to the start, never further.
    let seg = ring("place-small-record", CAP);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    let small = 4096;
    let window = place_window(cap_units(CAP)) * UNIT;
    let step = record_units(small as u64) * UNIT;
    let mut addresses = Vec::new();
    for i in 0..1000u32 {
        prod.send(&[i as u8; 4096], Meta::new(0, i)).unwrap();
        let f = consumer.try_next().unwrap().unwrap();
        assert_eq!((f.meta().kind, f.payload()[small - 1]), (i, i as u8));
        addresses.push(f.payload().as_ptr() as usize);
    }
    let base = addresses[0];
    // The first lap: each record after the last, up to the window's end.
    let lap = window.div_ceil(step) as usize;
    for (i, a) in addresses[..lap].iter().enumerate() {
        assert_eq!(*a - base, i * step as usize, "record {i} of the first lap");
    }
    // Then the same places again and again.
    assert_eq!(addresses[lap], base, "back at the ring's start");
    addresses.sort();
    addresses.dedup();
    assert_eq!(
        addresses.len(),
        lap,
        "1000 records in the window's places only"
    );
    let st = seg.stats();
    assert_eq!(st.records_consumed, 1000);
    // A padding after each full window: 1000 records, `lap` to a window.
    assert_eq!(st.placements, 1000 / lap as u64);
    // A ring below 1 MiB places nothing, whatever the record.
    let seg = ring("place-small-ring", 512 << 10);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    let mut addresses = Vec::new();
    for _ in 0..3 {
        prod.send(&[7; 64 << 10], Meta::new(0, 0)).unwrap();
        let f = consumer.try_next().unwrap().unwrap();
        addresses.push(f.payload().as_ptr() as usize);
    }
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "each record after the last");
}

#[test]
fn a_lagging_tap_counts_paddings_as_no_records() {
    // A padding after every frame.
    lagging_tap("place-tap", FRAME);
}

#[test]
#[cfg_attr(miri, ignore = "forty rings of small records: too slow under Miri")]
fn a_lagging_tap_over_small_records_counts_paddings_as_no_records() {
    // A padding after every window's worth of records (16 of them here).
    lagging_tap("place-tap-small", 4000);
}

/// A tap that does not look while ten rings' worth of records of `size` bytes go
/// by, placed, then steps over paddings one record at a time, then jumps again:
/// `lost` counts records only, exactly.
fn lagging_tap(name: &str, size: usize) {
    let seg = ring(name, CAP);
    let consumer = seg.consumer().unwrap();
    let mut tap = Tap::new(ReadOnlySegment::of(&seg).unwrap(), TapOptions::default());
    let mut prod = seg.producer().unwrap();
    let mut send = |kind: u32| {
        prod.send(&vec![kind as u8; size], Meta::new(0, kind))
            .unwrap();
        consumer.try_next().unwrap().unwrap().release();
    };
    let n = 10 * CAP as usize / size;
    for i in 0..n {
        send(i as u32);
    }
    assert!(seg.stats().placements > 0, "paddings went by");
    let mut buf = Vec::new();
    let got = tap
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .expect("the newest record");
    assert_eq!(got.meta.kind as usize, n - 1);
    assert_eq!((tap.stats().lost, tap.stats().skips), ((n - 1) as u64, 1));
    // Stepping over paddings one by one counts nothing: as many records as make
    // two paddings go by, each read before the next is sent.
    let placed = seg.stats().placements;
    let mut i = 0;
    while seg.stats().placements < placed + 2 {
        send(1_000_000 + i);
        let got = tap
            .next_into(&mut buf, Some(Duration::from_secs(5)))
            .unwrap()
            .expect("the next record");
        assert_eq!(got.meta.kind, 1_000_000 + i);
        i += 1;
    }
    let st = tap.stats();
    assert_eq!((st.lost, st.delivered), ((n - 1) as u64, 1 + i as u64));
    // And a later jump over more of them still counts records only.
    let more = 4 * CAP as usize / size;
    for j in 0..more {
        send(2_000_000 + j as u32);
    }
    let got = tap
        .next_into(&mut buf, Some(Duration::ZERO))
        .unwrap()
        .expect("the newest record");
    assert_eq!(got.meta.kind as usize, 2_000_000 + more - 1);
    assert_eq!(tap.stats().lost, (n - 1 + more - 1) as u64);
}

#[test]
fn an_aborted_placed_reservation_then_a_small_record() {
    // A reservation at the ring's start given up, then a small record sent, with
    // the consumer in the same thread: nothing waits for the consumer.
    let seg = ring("place-abort", CAP);
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.set_policy(FullPolicy::Fail);
    for i in 0..40u32 {
        let r = prod.reserve(FRAME).unwrap();
        if i % 3 == 0 {
            drop(r);
            prod.send(&[i as u8; 1000], Meta::new(0, i)).unwrap();
        } else {
            r.commit(Meta::new(0, i)).unwrap();
        }
        let f = consumer
            .next_timeout(Some(Duration::from_secs(1)))
            .unwrap()
            .unwrap_or_else(|| panic!("record {i}"));
        assert_eq!(f.meta().kind, i);
        f.release();
    }
}
