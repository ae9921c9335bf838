//! One ring reached by every form of its [`Address`]: by name, by descriptors,
//! through a consumer's socket (a `Listener`), read-only; creating a named ring
//! replaces one whose consumer is gone (its process killed) and refuses one whose
//! consumer is alive, or a file that is no ring.

mod common;

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use common::{shm_name, spawn};
use shmring::handoff::ListenerOptions;
use shmring::{Address, Config, Error, Listener, Meta, Occupant, Segment};

const ENTRY: &str = "address_child_entry";
const CHILD_RING: &str = "SHMRING_ADDRESS_CHILD_RING";
const GUARD: Duration = Duration::from_secs(20);

/// The child: creates the ring named in its environment, becomes its consumer, says
/// so, and waits to be killed (leaving the ring behind, stale).
#[test]
fn address_child_entry() {
    let Ok(name) = std::env::var(CHILD_RING) else {
        return;
    };
    let seg = Address::create(name, Config::with_capacity(1 << 16))
        .open()
        .expect("child creates the ring");
    let _consumer = seg.consumer().expect("child consumes");
    println!("@@ready");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn send(seg: &std::sync::Arc<Segment>, stream: u32) {
    seg.producer()
        .unwrap()
        .send(b"hello", Meta::new(stream, 0))
        .unwrap();
}

fn text_of(fds: &[std::os::fd::BorrowedFd<'_>]) -> String {
    let list: Vec<String> = fds.iter().map(|f| f.as_raw_fd().to_string()).collect();
    format!("fd:{}", list.join(","))
}

#[test]
fn a_named_ring_by_every_form() {
    let name = shm_name("address");
    let created: Address = format!("create:{},capacity=1M", name.0).parse().unwrap();
    let seg = created.open().unwrap();
    let consumer = seg.consumer().unwrap();

    // By name (bare, shm:, its file's path) and by the descriptors' text (copies).
    let texts = [
        name.0.clone(),
        format!("shm:{}", name.0),
        format!("/dev/shm/{}", name.0),
        text_of(&seg.descriptors()),
    ];
    for (i, text) in texts.iter().enumerate() {
        let a: Address = text.parse().unwrap();
        let other = a.open().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(other.geometry(), seg.geometry(), "{text}");
        send(&other, i as u32);
    }
    // Descriptors given as owned copies.
    let owned: Vec<OwnedFd> = seg
        .descriptors()
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect();
    send(&Address::Descriptors(owned).open().unwrap(), 9);
    for want in [0, 1, 2, 3, 9] {
        assert_eq!(consumer.try_next().unwrap().unwrap().stream(), want);
    }

    // Read-only: by name.
    let ro = name.0.parse::<Address>().unwrap().open_read_only().unwrap();
    assert_eq!(ro.stats().records_committed, 5);
    assert!(seg.consumer_alive());
}

#[test]
fn a_memfd_ring_by_descriptors_and_through_its_socket() {
    let dir = std::env::temp_dir().join(format!("shmring-address-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ring.sock");
    let seg: std::sync::Arc<Segment> = "memfd:address-test,capacity=64K,eventfd"
        .parse::<Address>()
        .unwrap()
        .open()
        .unwrap();
    assert!(seg.name().contains("address-test") && seg.uses_eventfd());
    let consumer = seg.consumer().unwrap();
    let listener = Listener::bind(&seg, &path, ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let p = path.display().to_string();
    for (i, text) in [format!("unix:{p}"), p.clone()].iter().enumerate() {
        let a: Address = text.parse().unwrap();
        assert_eq!(a, Address::Socket(path.clone()), "{text}");
        send(&a.open_timeout(GUARD).unwrap(), i as u32);
        let ro = text
            .parse::<Address>()
            .unwrap()
            .open_read_only_timeout(GUARD)
            .unwrap();
        assert_eq!(ro.geometry().capacity, 64 << 10);
    }
    assert_eq!(listener.stats().producers, 2);
    assert_eq!(listener.stats().observers, 2);
    send(
        &text_of(&seg.descriptors())
            .parse::<Address>()
            .unwrap()
            .open()
            .unwrap(),
        2,
    );
    for want in 0..3 {
        assert_eq!(consumer.try_next().unwrap().unwrap().stream(), want);
    }

    // Read-only from descriptors: the first (the segment) is mapped; the lock file
    // among them goes to this process's entry for it, so the consumer here keeps
    // its liveness lock.
    let ro = text_of(&seg.descriptors())
        .parse::<Address>()
        .unwrap()
        .open_read_only()
        .unwrap();
    assert_eq!(ro.stats().records_committed, 3);
    assert!(seg.consumer_alive(), "the consumer's lock survives");
    let ro_fd = seg.read_only_fd().unwrap().try_clone_to_owned().unwrap();
    let ro = Address::Descriptors(vec![ro_fd]).open_read_only().unwrap();
    assert!(ro.tethers().is_empty());
    drop(ro);
    assert!(seg.consumer_alive());

    // A socket nobody serves.
    let gone = dir.join("none.sock");
    let e = Address::Socket(gone).open().unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    drop(listener);
    drop(consumer);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn taking_descriptors_takes_none_when_one_is_not_open() {
    let seg = Address::memfd("address-take", Config::with_capacity(1 << 16))
        .open()
        .unwrap();
    let dup = seg.fd().try_clone_to_owned().unwrap();
    let n = std::os::fd::IntoRawFd::into_raw_fd(dup);
    // SAFETY: `n` is ours and handed over; 999999 is not open.
    let e = unsafe { Address::parse_taking(&format!("fd:{n},999999")) }.unwrap_err();
    assert!(
        e.to_string().contains("descriptor 999999 is not open"),
        "{e}"
    );
    // SAFETY: F_GETFD only reads the table: `n` is still open, not taken.
    assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0);
    // SAFETY: as above; this time it is taken, and closed with the address.
    let a = unsafe { Address::parse_taking(&format!("fd:{n}")) }.unwrap();
    let Address::Descriptors(fds) = &a else {
        panic!("{a:?}")
    };
    assert_eq!(fds[0].as_fd().as_raw_fd(), n);
    drop(a);
    // SAFETY: F_GETFD only reads the table.
    assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } < 0);
}

#[test]
fn creating_replaces_a_stale_ring_and_refuses_a_live_one() {
    let name = shm_name("address-stale");
    let mut child = spawn(ENTRY, "stale", &[(CHILD_RING, name.0.clone())], &[]);
    child.expect("ready", GUARD);
    // Alive in another process: refused, whatever the policy.
    for text in [
        format!("create:{}", name.0),
        format!("create:{},stale=refuse", name.0),
    ] {
        match text.parse::<Address>().unwrap().open() {
            Err(Error::Exists {
                occupant: Occupant::Live,
                ..
            }) => {}
            r => panic!("{text}: {r:?}"),
        }
    }
    child.kill();
    assert!(name.exists(), "a killed consumer leaves its ring");

    // Its consumer gone: refused on request, saying so; replaced otherwise.
    let e = format!("create:{},stale=refuse", name.0)
        .parse::<Address>()
        .unwrap()
        .open()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Exists {
                occupant: Occupant::Stale,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&name.0), "{e}");
    assert!(e.to_string().contains("its consumer is gone"), "{e}");
    let opened = Address::create(name.0.clone(), Config::with_capacity(1 << 17))
        .open_detailed(GUARD)
        .unwrap();
    assert!(opened.replaced_stale);
    let seg = opened.segment;
    assert_eq!(seg.geometry().capacity, 1 << 17, "a new ring");
    assert_eq!(seg.stats().records_committed, 0);
    let _consumer = seg.consumer().unwrap();
    let e = Address::create(name.0.clone(), Config::default())
        .open()
        .unwrap_err();
    assert!(e.to_string().contains("its consumer is alive"), "{e}");
    drop(_consumer);
    drop(seg);
    assert!(!name.exists(), "the ring made here is removed with it");

    // A file that is no ring is left alone.
    std::fs::write(name.path(), b"someone else's file").unwrap();
    let e = Address::create(name.0.clone(), Config::default())
        .open()
        .unwrap_err();
    match &e {
        Error::Exists {
            occupant: Occupant::Foreign(why),
            ..
        } => assert!(why.contains("not a shmring ring"), "{why}"),
        e => panic!("{e:?}"),
    }
    assert!(e.to_string().contains("left alone"), "{e}");
    assert_eq!(std::fs::read(name.path()).unwrap(), b"someone else's file");
}

#[test]
fn removing_a_stale_ring_follows_the_rule_creating_uses() {
    let name = shm_name("address-rm");
    assert!(
        matches!(shmring::remove_stale(&name.0), Err(Error::NotFound(_))),
        "no ring of that name"
    );
    let mut child = spawn(ENTRY, "rm", &[(CHILD_RING, name.0.clone())], &[]);
    child.expect("ready", GUARD);
    // A producer slot taken in the ring, then its consumer alive elsewhere: kept.
    let producer = Address::Named(name.0.clone())
        .open()
        .unwrap()
        .producer()
        .unwrap();
    match shmring::remove_stale(&name.0) {
        Err(
            e @ Error::Exists {
                occupant: Occupant::Live,
                ..
            },
        ) => assert!(e.to_string().contains("its consumer is alive"), "{e}"),
        r => panic!("{r:?}"),
    }
    assert!(name.exists());
    child.kill();
    let removed = shmring::remove_stale(&name.0).unwrap();
    assert_eq!(
        removed.producers, 1,
        "the producer here still holds its slot"
    );
    assert!(!name.exists());
    drop(producer);

    // A file that is no ring is left alone.
    std::fs::write(name.path(), b"someone else's file").unwrap();
    match shmring::remove_stale(&name.0) {
        Err(Error::Exists {
            occupant: Occupant::Foreign(_),
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
    assert_eq!(std::fs::read(name.path()).unwrap(), b"someone else's file");
}

#[test]
fn a_named_eventfd_ring_by_name_and_eventfd() {
    let name = shm_name("address-eventfd");
    let mut cfg = Config::with_capacity(1 << 16);
    cfg.eventfd = true;
    let seg = Address::create(name.0.clone(), cfg).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let efd = seg.eventfd().unwrap().as_raw_fd();
    // By name alone a producer is refused; with the eventfd it wakes the consumer.
    let e = Address::Named(name.0.clone())
        .open()
        .unwrap()
        .producer()
        .unwrap_err();
    assert!(matches!(e, Error::EventfdRequired(_)), "{e}");
    for text in [
        format!("{},eventfd={efd}", name.0),
        format!("shm:{},eventfd={efd}", name.0),
        format!("/dev/shm/{},eventfd={efd}", name.0),
    ] {
        let a: Address = text.parse().unwrap();
        assert!(
            matches!(&a, Address::NamedEventfd { name: n, eventfd } if *n == name.0 && eventfd.as_raw_fd() != efd),
            "{text}: a copy of the eventfd: {a:?}"
        );
        let b: Address = a.to_string().parse().unwrap();
        assert!(matches!(b, Address::NamedEventfd { .. }), "{a} reads back");
        send(&a.open().unwrap(), 3);
        let f = consumer.try_next().unwrap().expect("the record");
        assert_eq!(f.meta().stream, 3);
    }
    // The read-only open uses the name alone.
    let a: Address = format!("{},eventfd={efd}", name.0).parse().unwrap();
    assert_eq!(a.open_read_only().unwrap().geometry().capacity, 1 << 16);
    for (text, needle) in [
        (
            format!("{},eventfd=x", name.0),
            "\"x\" is not a descriptor number",
        ),
        (
            format!("{},eventfd=999999", name.0),
            "descriptor 999999 is not open",
        ),
        ("a b,eventfd=3".to_string(), "no white space"),
    ] {
        let e = text.parse::<Address>().unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}
