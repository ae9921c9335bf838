//! Misuse gets a clear error, never a panic or a hang: double release, a second
//! consumer, oversize records, missing segments, segments of another layout or not
//! ours at all, unsealed memfds, invalid configurations.

mod common;

use std::os::unix::fs::FileExt;

use common::{shm_name, ShmName};
use shmring::{Address, Config, Error, Meta, Segment};

fn small() -> Config {
    Config::with_capacity(1 << 20)
}

#[test]
fn double_release_of_a_raw_frame_is_not_held() {
    let seg = Address::memfd("misuse-raw", small()).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    for i in 0..3u8 {
        prod.send(&[i; 100], Meta::new(0, 0)).unwrap();
    }
    let a = consumer.next_raw(None).unwrap().unwrap();
    let b = consumer.try_next().unwrap().unwrap().into_raw();
    let c = consumer
        .next_raw(Some(std::time::Duration::ZERO))
        .unwrap()
        .unwrap();
    assert!(consumer.is_held(a.seq) && consumer.is_held(b.seq) && consumer.is_held(c.seq));
    assert_eq!(consumer.outstanding(), 3);

    // Out of order: the middle one first, then twice.
    consumer.release_raw(b.seq).unwrap();
    assert!(!consumer.is_held(b.seq));
    let e = consumer.release_raw(b.seq).unwrap_err();
    assert!(
        matches!(e, Error::NotHeld { seq, .. } if seq == b.seq),
        "{e}"
    );
    consumer.release_raw(a.seq).unwrap();
    assert!(matches!(
        consumer.release_raw(a.seq),
        Err(Error::NotHeld { .. })
    ));
    // A sequence number never handed out.
    assert!(matches!(
        consumer.release_raw(c.seq + 1),
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        consumer.release_raw(u64::MAX),
        Err(Error::NotHeld { .. })
    ));
    consumer.release_raw(c.seq).unwrap();
    assert!(matches!(
        consumer.release_raw(c.seq),
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(consumer.outstanding(), 0);
    assert_eq!(
        seg.stats().occupancy,
        0,
        "all space returned despite the bad releases"
    );
    // The ring still works.
    prod.send(b"after", Meta::new(0, 0)).unwrap();
    assert_eq!(consumer.try_next().unwrap().unwrap().payload(), b"after");
}

#[test]
fn second_consumer_is_busy_while_the_first_lives() {
    let seg = Address::memfd("misuse-busy", small()).open().unwrap();
    let first = seg.consumer().unwrap();
    let e = seg.consumer().err().expect("second consumer refused");
    assert!(matches!(e, Error::ConsumerBusy(_)), "{e}");
    // Also through a second Segment mapping the same file.
    let again = Address::Descriptors(dup_descriptors(&seg)).open().unwrap();
    assert!(matches!(again.consumer(), Err(Error::ConsumerBusy(_))));
    assert!(seg.stats().consumer_attached);
    drop(first);
    assert!(!seg.stats().consumer_attached);
    let second = again.consumer().expect("free once the first is dropped");
    let mut prod = seg.producer().unwrap();
    prod.send(b"x", Meta::default()).unwrap();
    assert_eq!(second.try_next().unwrap().unwrap().payload(), b"x");
}

#[test]
fn oversize_record_is_too_large() {
    let cfg = Config {
        max_record: Some(100_000),
        ..small()
    };
    let seg = Address::memfd("misuse-large", cfg).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    let e = prod.reserve(100_001).err().expect("too large");
    assert!(
        matches!(
            e,
            Error::TooLarge {
                len: 100_001,
                max: 100_000,
                ..
            }
        ),
        "{e}"
    );
    let e = prod.send(&vec![0; 200_000], Meta::default()).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("max_record 100000"), "{e}");
    // Exactly the maximum is fine; nothing was counted as a drop or an abort.
    prod.send(&vec![7; 100_000], Meta::default()).unwrap();
    assert_eq!(consumer.try_next().unwrap().unwrap().len(), 100_000);
    let s = seg.stats();
    assert_eq!(
        (s.drops_full, s.records_aborted, s.records_committed),
        (0, 0, 1)
    );
    // The largest record the layout allows is capacity/2 - 64.
    let e = Address::memfd(
        "misuse-cfg",
        Config {
            max_record: Some((1 << 19) - 63),
            ..small()
        },
    )
    .open()
    .expect_err("max_record above capacity/2 - 64");
    assert!(
        matches!(&e, Error::Config(m) if m.contains("max_record")),
        "{e}"
    );
}

#[test]
fn opening_a_missing_name_is_not_found() {
    let name = shm_name("missing");
    let e = Address::named(&name.0).open().expect_err("no such segment");
    assert!(
        matches!(&e, Error::NotFound(n) if n.contains(&name.0)),
        "{e}"
    );
    assert!(!name.exists());
}

/// Writes `bytes` at `offset` of the named segment's file, bypassing shmring.
/// Writes `bytes` at `offset`; an offset inside the identity line goes to all three
/// identity lines (line 0 and its two copies), as a ring of another layout would
/// differ in all of them.
fn scribble(name: &ShmName, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .unwrap();
    let copies = std::mem::offset_of!(shmring::layout::Control, identity_copies) as u64;
    let lines: &[u64] = if offset < 64 {
        &[0, copies, copies + 64]
    } else {
        &[0]
    };
    for line in lines {
        f.write_at(bytes, line + offset).unwrap();
    }
}

fn mismatch_field(e: Error) -> (&'static str, String, String) {
    match e {
        Error::LayoutMismatch {
            field,
            expected,
            found,
            ..
        } => (field, expected, found),
        e => panic!("expected LayoutMismatch, got {e}"),
    }
}

#[test]
fn segment_of_another_layout_is_a_layout_mismatch() {
    let name = shm_name("layout");
    let seg = Address::create(&name.0, small()).open().unwrap();
    // Offsets in the identity line (see layout.rs): magic 0, version 8,
    // capacity 16, total_size 56.
    let open = || Address::named(&name.0).open().expect_err("mismatch");

    scribble(&name, 8, &99u32.to_le_bytes());
    let e = open();
    assert!(e.to_string().contains("layout version"), "{e}");
    assert_eq!(
        mismatch_field(e),
        (
            "layout version",
            shmring::layout::LAYOUT_VERSION.to_string(),
            "99".into()
        )
    );
    scribble(&name, 8, &shmring::layout::LAYOUT_VERSION.to_le_bytes());

    scribble(&name, 0, b"SHMRING0");
    let (field, _, found) = mismatch_field(open());
    assert_eq!(
        (field, found),
        ("magic", format!("{:#x}", u64::from_le_bytes(*b"SHMRING0")))
    );
    scribble(&name, 0, b"SHMRING1");

    scribble(&name, 16, &1000u64.to_le_bytes());
    assert_eq!(mismatch_field(open()).0, "geometry");
    scribble(&name, 16, &(1u64 << 20).to_le_bytes());

    scribble(&name, 56, &12345u64.to_le_bytes());
    let e = open();
    assert!(e.to_string().contains("size field says 12345"), "{e}");
    assert_eq!(mismatch_field(e).0, "segment size");
    let total = small().segment_size().unwrap();
    scribble(&name, 56, &total.to_le_bytes());

    // A file shorter than its header says: the message says so in words.
    std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .unwrap()
        .set_len(total + 4096)
        .unwrap();
    let e = open().to_string();
    assert!(
        e.contains(&format!(
            "the file is {} bytes but its header describes a ring of {total} bytes",
            total + 4096
        )),
        "{e}"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .unwrap()
        .set_len(total)
        .unwrap();

    // Restored: it opens again.
    let again = Address::named(&name.0).open().unwrap();
    assert_eq!(again.geometry(), seg.geometry());
    drop((again, seg));
    assert!(!name.exists());
}

#[test]
fn foreign_files_are_layout_mismatches() {
    // Not ours at all: wrong magic.
    let name = shm_name("foreign");
    std::fs::write(name.path(), vec![b'x'; 8192]).unwrap();
    let e = Address::named(&name.0).open().err().unwrap().to_string();
    assert!(e.contains("not a shmring ring (bad magic"), "{e}");
    assert_eq!(
        mismatch_field(Address::named(&name.0).open().err().unwrap()).0,
        "magic"
    );
    // Too small to hold a control block.
    std::fs::write(name.path(), [0u8; 100]).unwrap();
    let e = Address::named(&name.0).open().err().unwrap().to_string();
    assert!(
        e.contains("not a shmring ring (the file is 100 bytes"),
        "{e}"
    );
    assert_eq!(
        mismatch_field(Address::named(&name.0).open().err().unwrap()).0,
        "file size"
    );
    // Empty.
    std::fs::write(name.path(), []).unwrap();
    assert_eq!(
        mismatch_field(Address::named(&name.0).open().err().unwrap()).0,
        "file size"
    );
    drop(name);
}

#[test]
fn memfd_without_seals_is_unsealed() {
    use rustix::fs::{MemfdFlags, SealFlags};
    let size = small().segment_size().unwrap();
    let make = || {
        let fd =
            rustix::fs::memfd_create("unsealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .unwrap();
        rustix::fs::ftruncate(&fd, size).unwrap();
        fd
    };
    let e = Address::Descriptors(vec![make()])
        .open()
        .expect_err("unsealed");
    assert!(matches!(e, Error::Unsealed(_)), "{e}");
    // Sealed against shrinking only: a peer could still grow it.
    let fd = make();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
    assert!(matches!(
        Address::Descriptors(vec![fd]).open(),
        Err(Error::Unsealed(_))
    ));
    // Sealed but not a segment.
    let fd = make();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
    assert_eq!(
        mismatch_field(Address::Descriptors(vec![fd]).open().err().unwrap()).0,
        "magic"
    );
}

#[test]
fn invalid_configurations_name_the_field() {
    let cases: [(Config, &str); 4] = [
        (Config::with_capacity(100_000), "capacity"),
        (Config::with_capacity(1 << 12), "capacity"),
        (
            Config {
                log_entries: Some(1000),
                ..small()
            },
            "log_entries",
        ),
        (
            Config {
                max_producers: 0,
                ..small()
            },
            "max_producers",
        ),
    ];
    for (cfg, field) in cases {
        let e = Address::memfd("cfg", cfg.clone())
            .open()
            .expect_err("invalid");
        assert!(
            matches!(&e, Error::Config(m) if m.contains(field)),
            "{field}: {e}"
        );
    }
}

#[test]
fn eventfd_ring_producer_without_the_eventfd_is_refused() {
    let cfg = Config {
        eventfd: true,
        ..small()
    };
    let seg = Address::memfd("misuse-efd", cfg).open().unwrap();
    let mut fds = dup_descriptors(&seg);
    assert_eq!(fds.len(), 3, "segment, lock file, eventfd");
    fds.pop();
    let bare = Address::Descriptors(fds).open().unwrap();
    let e = bare.producer().expect_err("no eventfd");
    assert!(matches!(e, Error::EventfdRequired(_)), "{e}");
    let with = Address::Descriptors(dup_descriptors(&seg)).open().unwrap();
    let consumer = seg.consumer().unwrap();
    with.producer()
        .unwrap()
        .send(b"ok", Meta::default())
        .unwrap();
    assert_eq!(consumer.try_next().unwrap().unwrap().payload(), b"ok");
}

#[test]
fn raw_reservations_are_one_at_a_time_and_commit_at_most_their_length() {
    use shmring::FullPolicy;
    let seg = Address::memfd("misuse-raw-res", small()).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    assert!(matches!(
        prod.commit_raw(0, Meta::new(0, 0)),
        Err(Error::NoReservation(_))
    ));
    assert!(!prod.abort_raw());
    let r = prod.reserve_raw(100, FullPolicy::Fail).unwrap();
    assert!(prod.has_reservation());
    assert!(matches!(
        prod.reserve_raw(10, FullPolicy::Fail),
        Err(Error::ReservationOpen(_))
    ));
    // Longer than the record's room: refused, and the reservation stays open.
    assert!(matches!(
        prod.commit_raw(100_000, Meta::new(0, 0)),
        Err(Error::TooLarge { .. })
    ));
    // SAFETY: r.ptr points at r.len writable bytes until commit or abort.
    unsafe { std::ptr::write_bytes(r.ptr, 9, r.len) };
    prod.commit_raw(60, Meta::new(3, 0)).unwrap();
    assert!(!prod.has_reservation());
    // An aborted raw reservation is skipped; a dropped producer aborts its open one.
    prod.reserve_raw(10, FullPolicy::Fail).unwrap();
    assert!(prod.abort_raw());
    prod.reserve_raw(10, FullPolicy::Fail).unwrap();
    drop(prod);
    let f = consumer.try_next().unwrap().unwrap();
    assert_eq!((f.stream(), f.payload()), (3, &[9u8; 60][..]));
    drop(f);
    assert!(consumer.try_next().unwrap().is_none());
    assert_eq!(seg.stats().records_aborted, 2, "{:?}", seg.stats());
}

#[test]
fn consumer_alive_and_unlink_named() {
    let name = shm_name("unlink");
    let seg = Address::create(&name.0, small()).open().unwrap();
    seg.persist();
    assert!(!seg.consumer_alive(), "no consumer yet");
    let c = seg.consumer().unwrap();
    let other = Address::named(&name.0).open().unwrap();
    assert!(other.consumer_alive());
    drop(c);
    assert!(!other.consumer_alive(), "the consumer detached");
    Segment::unlink_named(&name.0).unwrap();
    assert!(!name.exists());
    assert!(matches!(
        Segment::unlink_named(&name.0),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        Segment::unlink_named("../etc/passwd"),
        Err(Error::Config(_))
    ));
    drop((seg, other));
}

/// Copies of the ring's descriptors, to attach a second mapping as another process
/// would.
fn dup_descriptors(seg: &Segment) -> Vec<std::os::fd::OwnedFd> {
    seg.descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect()
}

#[test]
fn a_memfd_ring_attached_without_its_lock_file_says_so() {
    let seg = Address::memfd("misuse-locks", small()).open().unwrap();
    let e = Address::Descriptors(vec![seg.fd().try_clone_to_owned().unwrap()])
        .open()
        .expect_err("no lock file");
    assert!(matches!(e, Error::Descriptors { .. }), "{e}");
    assert!(e.to_string().contains("lock file"), "{e}");
    let mut fds = dup_descriptors(&seg);
    fds.push(seg.fd().try_clone_to_owned().unwrap());
    let e = Address::Descriptors(fds).open().expect_err("one too many");
    assert!(e.to_string().contains("more than the ring has"), "{e}");
    // The segment given twice: its copy is not a lock file.
    let twice = vec![
        seg.fd().try_clone_to_owned().unwrap(),
        seg.fd().try_clone_to_owned().unwrap(),
    ];
    let e = Address::Descriptors(twice)
        .open()
        .expect_err("not a lock file");
    assert!(e.to_string().contains("lock file"), "{e}");
}
