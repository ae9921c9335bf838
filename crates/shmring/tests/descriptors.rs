//! Descriptors per process stay bounded whatever the open/close pattern: a process
//! that keeps a consumer open opens and closes producers, tethered consumers and
//! taps by name thousands of times, and its descriptor table does not grow (the
//! lock file of a named ring open here is never opened again; see
//! `shmring::Address::open` of a named ring). One test per binary: the count is the process's.

mod common;

use std::time::Duration;

use std::os::fd::AsRawFd;

use shmring::{Address, Config, Consumer, ConsumerOptions, Meta, Segment, Tap, TapOptions};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Bytes of `seg`'s lock file this process holds record locks on, as the kernel
/// lists them (a process cannot see its own locks through `F_GETLK`; the kernel
/// merges a process's locks on adjacent bytes into one range).
fn own_locks(seg: &Segment) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // Looked up through /proc, never through a copy of the descriptor: closing
    // one would drop the very locks counted.
    let lock_file = seg.descriptors()[seg.descriptors().len().min(2) - 1].as_raw_fd();
    let ino = std::fs::metadata(format!("/proc/self/fd/{lock_file}"))
        .unwrap()
        .ino();
    let me = std::process::id().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 7 && f[4] == me && f[5].rsplit(':').next() == Some(&ino.to_string())
        })
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (start, end) = (f[6].parse::<u64>().unwrap(), f[7].parse::<u64>().unwrap());
            end - start + 1
        })
        .sum()
}

#[test]
fn ten_thousand_opens_and_closes_by_name_leave_the_descriptor_count_flat() {
    let name = common::shm_name("fds-by-name");
    let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    // Warm up: whatever one cycle opens for good (none expected) is counted once.
    let cycle = |i: u64| {
        let p_seg = Address::named(&name.0).open().unwrap();
        let mut p = p_seg.producer().unwrap();
        p.send(&i.to_le_bytes(), Meta::new(0, 0)).unwrap();
        drop((p, p_seg));
        let tap = Tap::new(
            Address::named(&name.0).open_read_only().unwrap(),
            TapOptions::default(),
        );
        drop(tap);
        if i % 10 == 0 {
            let t_seg = Address::named(&name.0).open().unwrap();
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
    fd_addresses_opened_while_holding_a_role_add_no_descriptor();
    connects_while_holding_a_role_add_no_descriptor();
}

/// Descriptors handed over for a ring this process holds no role on are closed
/// with the segment.
fn descriptors_handed_over_are_closed_once_no_role_needs_them() {
    let seg = Address::memfd("fds-handed", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let dup = || -> Vec<std::os::fd::OwnedFd> {
        seg.descriptors()
            .iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect()
    };
    let base = open_fds();
    for _ in 0..100 {
        let other = Address::Descriptors(dup()).open().unwrap();
        drop(other.producer().unwrap());
        drop(other);
    }
    assert_eq!(open_fds(), base, "no role held: every copy closed");
}

/// `fd:` addresses of a ring this process holds a role on (here: its consumer),
/// opened and dropped 300 times, memfd and named: the descriptor count stays
/// flat (each open used to keep a copy of the lock file's descriptor aside for as
/// long as the role lasted), and the role's locks stay held throughout.
fn fd_addresses_opened_while_holding_a_role_add_no_descriptor() {
    let name = common::shm_name("fds-fd-address");
    let named = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let memfd = Address::memfd("fds-fd-address", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    for seg in [&named, &memfd] {
        let consumer = seg.consumer().unwrap();
        let text = format!(
            "fd:{}",
            seg.descriptors()
                .iter()
                .map(|f| f.as_raw_fd().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let cycle = |i: u64| {
            let opened = text.parse::<Address>().unwrap().open().unwrap();
            opened
                .producer()
                .unwrap()
                .send(&i.to_le_bytes(), Meta::new(0, 0))
                .unwrap();
            drop(opened);
            // An address parsed and never opened is harmless too.
            drop(text.parse::<Address>().unwrap());
            assert_eq!(consumer.recv().unwrap().payload(), i.to_le_bytes());
            assert!(
                own_locks(seg) >= 1,
                "{text} {i}: the consumer's lock is still held: {}",
                std::fs::read_to_string("/proc/locks").unwrap()
            );
        };
        cycle(0);
        let before = open_fds();
        for i in 1..300 {
            cycle(i);
        }
        assert_eq!(open_fds(), before, "{text}: 300 opens while a role is held");
    }
}

/// A producer that connects to the consumer's socket 300 times while this process
/// holds roles on the ring (its consumer, and a producer attached by the first
/// connect): the consumer sends the lock file it holds as an `O_PATH` descriptor,
/// so the count stays flat (each connect used to keep a copy of the lock file
/// aside for as long as the roles lasted), and the roles' locks stay held.
fn connects_while_holding_a_role_add_no_descriptor() {
    use shmring::handoff::{Listener, ListenerOptions};
    // An abstract socket: nothing to remove afterwards.
    let sock = format!("@shmring-fds-connect-{}", std::process::id());
    let seg = Address::memfd("fds-connect", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let listener = Listener::bind(&seg, &sock, ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let first = Address::socket(&sock).open().unwrap();
    let mut held = first.producer().unwrap();
    held.send(b"first", Meta::new(0, 0)).unwrap();
    assert_eq!(consumer.recv().unwrap().payload(), b"first");
    let cycle = |i: u64| {
        let s = Address::socket(&sock).open().unwrap();
        s.producer()
            .unwrap()
            .send(&i.to_le_bytes(), Meta::new(1, 0))
            .unwrap();
        drop(s);
        assert_eq!(consumer.recv().unwrap().payload(), i.to_le_bytes());
        assert!(
            own_locks(&seg) >= 2,
            "connect {i}: the consumer's and the first producer's locks are held: {}",
            std::fs::read_to_string("/proc/locks").unwrap()
        );
    };
    cycle(0);
    // The listener thread closes its side of each connection (and the `O_PATH`
    // copy it sent) just after the reply: counted once that is done.
    std::thread::sleep(Duration::from_millis(100));
    let before = open_fds();
    for i in 1..300 {
        cycle(i);
    }
    // Again once the last is done (a guard, not a measure).
    common::wait_until(
        "the listener's copies closed",
        Duration::from_secs(10),
        || open_fds() <= before,
    );
    assert_eq!(open_fds(), before, "300 connects while roles are held");
    held.send(b"last", Meta::new(0, 0)).unwrap();
    assert_eq!(consumer.recv().unwrap().payload(), b"last");
    assert_eq!(listener.stats().producers, 301);
}
