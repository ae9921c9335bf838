//! Descriptors per process stay bounded whatever the open/close pattern: a process
//! that keeps a consumer open opens and closes producers, tethered consumers and
//! taps by name thousands of times, and its descriptor table does not grow (the
//! lock file of a named ring open here is never opened again; see
//! `shmring::Segment::open_named`). One test per binary: the count is the process's.

mod common;

use std::time::Duration;

use shmring::{Config, Consumer, ConsumerOptions, Meta, ReadOnlySegment, Segment, Tap, TapOptions};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn ten_thousand_opens_and_closes_by_name_leave_the_descriptor_count_flat() {
    let name = common::shm_name("fds-by-name");
    let seg = Segment::create_named(&name.0, &Config::with_capacity(1 << 20)).unwrap();
    let consumer = seg.consumer().unwrap();
    // Warm up: whatever one cycle opens for good (none expected) is counted once.
    let cycle = |i: u64| {
        let p_seg = Segment::open_named(&name.0).unwrap();
        let mut p = p_seg.producer().unwrap();
        p.send(&i.to_le_bytes(), Meta::new(0, 0)).unwrap();
        drop((p, p_seg));
        let tap = Tap::new(
            ReadOnlySegment::open_named(&name.0).unwrap(),
            TapOptions::default(),
        );
        drop(tap);
        if i % 10 == 0 {
            let t_seg = Segment::open_named(&name.0).unwrap();
            drop(Consumer::tethered(t_seg, ConsumerOptions::default()).unwrap());
        }
        drop(consumer.recv().unwrap());
    };
    cycle(0);
    let before = open_fds();
    for i in 1..10_000 {
        cycle(i);
    }
    let after = open_fds();
    assert_eq!(before, after, "descriptors before and after 10,000 cycles");
    assert!(consumer
        .next_timeout(Some(Duration::ZERO))
        .unwrap()
        .is_none());
    drop((consumer, seg));
    assert!(!name.exists());
    descriptors_handed_over_are_closed_once_no_role_needs_them();
}

/// Descriptors handed over for a ring this process holds no role on are closed
/// with the segment.
fn descriptors_handed_over_are_closed_once_no_role_needs_them() {
    let seg = Segment::create_memfd("fds-handed", &Config::with_capacity(1 << 20)).unwrap();
    let dup = || -> Vec<std::os::fd::OwnedFd> {
        seg.descriptors()
            .iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect()
    };
    let base = open_fds();
    for _ in 0..100 {
        let other = Segment::from_descriptors(dup()).unwrap();
        drop(other.producer().unwrap());
        drop(other);
    }
    assert_eq!(open_fds(), base, "no role held: every copy closed");
}
