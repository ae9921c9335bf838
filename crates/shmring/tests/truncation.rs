//! A peer truncating a named segment (which cannot be sealed) must not crash the
//! consumer with SIGBUS: its calls fail with `Error::Corrupt` naming the
//! truncation. Memfd segments cannot be truncated at all (sealed).

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::{shm_name, ShmName};
use shmring::{Address, Config, Error, Meta};

fn truncate(name: &ShmName, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .and_then(|f| f.set_len(len))
        .expect("truncate the segment file");
}

fn is_truncation(e: &Error) -> bool {
    matches!(e, Error::Truncated(_))
}

#[test]
fn consumer_of_a_truncated_named_segment_gets_an_error_not_sigbus() {
    let name = shm_name("trunc");
    let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.send(&[9u8; 5000], Meta::new(1, 2)).unwrap();
    assert!(!seg.truncated());

    // Another process would do this with ftruncate; the control block stays, the
    // claim log and the data ring are gone.
    truncate(&name, 4096);

    for timeout in [Some(Duration::ZERO), Some(Duration::from_millis(5))] {
        let e = consumer.next_raw(timeout).unwrap_err();
        assert!(is_truncation(&e), "{e}");
        assert!(e.to_string().contains(&name.0), "error names the ring: {e}");
    }
    assert!(seg.truncated());
    // Producers of the same mapping learn it too.
    let e = prod.try_reserve(64).map(|_| ()).unwrap_err();
    assert!(is_truncation(&e), "{e}");
}

#[test]
fn truncation_to_zero_is_reported_too() {
    let name = shm_name("trunc0");
    let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    truncate(&name, 0);
    let e = consumer.try_next().map(|_| ()).unwrap_err();
    assert!(is_truncation(&e), "{e}");
    assert!(seg.truncated());
}

#[test]
fn a_guarded_segment_leaves_other_segments_alone() {
    let a = shm_name("trunc-a");
    let b = shm_name("trunc-b");
    let seg_a = Address::create(&a.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let seg_b = Address::create(&b.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let (ca, cb) = (seg_a.consumer().unwrap(), seg_b.consumer().unwrap());
    let mut pb = seg_b.producer().unwrap();
    truncate(&a, 0);
    assert!(ca.try_next().is_err());
    pb.send(b"still here", Meta::new(0, 0)).unwrap();
    let f = cb.try_next().unwrap().unwrap();
    assert_eq!(f.payload(), b"still here");
    assert!(seg_a.truncated() && !seg_b.truncated());
}

#[test]
fn a_memfd_segment_cannot_be_truncated() {
    let seg = Address::memfd("trunc-memfd", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let fd = seg.fd().as_raw_fd();
    for len in [0, 4096, 1 << 30] {
        // SAFETY: ftruncate on a descriptor we own.
        let rc = unsafe { libc::ftruncate(fd, len) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((rc, errno), (-1, Some(libc::EPERM)), "ftruncate to {len}");
    }
    assert!(!seg.truncated());
}

/// Truncated to half: the pages the consumer and a tap touch may all lie in the
/// half that is left, so nothing faults; both still notice at their next look
/// (within a liveness interval) and say so.
#[test]
fn truncation_to_half_is_noticed_by_the_consumer_and_a_tap() {
    let name = shm_name("trunc-half");
    let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let opts = shmring::ConsumerOptions {
        liveness_interval: Duration::from_millis(5),
        ..Default::default()
    };
    let consumer = shmring::Consumer::with_options(seg.clone(), opts).unwrap();
    let mut tap = shmring::Tap::new(
        shmring::Address::named(&name.0).open_read_only().unwrap(),
        shmring::TapOptions::default(),
    );
    let mut prod = seg.producer().unwrap();
    prod.send(&[1u8; 100], Meta::new(1, 2)).unwrap();
    drop(consumer.recv().unwrap());
    let half = seg.geometry().total_size / 2;
    truncate(&name, half);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let e = loop {
        match consumer.next_timeout(Some(Duration::from_millis(10))) {
            Err(e) => break e,
            Ok(_) => assert!(std::time::Instant::now() < deadline, "never noticed"),
        }
    };
    assert!(is_truncation(&e), "{e}");
    let mut buf = Vec::new();
    let e = loop {
        match tap.next_into(&mut buf, Some(Duration::from_millis(10))) {
            Err(e) => break e,
            Ok(_) => assert!(
                std::time::Instant::now() < deadline,
                "the tap never noticed"
            ),
        }
    };
    assert!(is_truncation(&e), "{e}");
}
