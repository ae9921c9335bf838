//! A peer with a read-only descriptor cannot change anyone's behaviour, locks
//! included: with POSIX *read* locks on every byte it can reach, it can make no
//! dead producer, consumer or tethered consumer look alive, and (for a memfd ring,
//! whose lock file it never gets) no free slot or line look taken. Each attacker is
//! a separate process, given a tap's descriptor, or an observer's received over the
//! consumer's socket (also as another uid).

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::{inherit, shm_name, spawn, wait_until, Child};
use shmring::handoff::{Allow, ListenerOptions};
use shmring::{Address, Config, ConsumerOptions, Listener, Meta, Segment};

const ENTRY: &str = "child_process_entry";
const GUARD: Duration = Duration::from_secs(20);

#[test]
fn child_process_entry() {
    common::child_entry();
}

fn cfg() -> Config {
    Config {
        capacity: 1 << 20,
        max_producers: 8,
        ..Config::default()
    }
}

fn fast() -> ConsumerOptions {
    ConsumerOptions {
        liveness_interval: Duration::from_millis(5),
        ..Default::default()
    }
}

/// A producer process reserves a record and is SIGKILLed holding the claim.
fn kill_holding_a_claim(seg: &Segment) {
    let (spec, fds) = inherit(seg);
    let env = [
        ("SHMRING_TEST_SEG", spec),
        ("P", "0".into()),
        ("N", "0".into()),
        ("MAX", "1000".into()),
    ];
    let mut holder = spawn(ENTRY, "reserve-and-hang", &env, &fds);
    holder.expect("HOLDING", GUARD);
    holder.kill();
}

/// The kernel-held facts the attacker tried to fake: a producer killed holding a
/// reservation is found dead (its claim skipped), every slot can be taken, a
/// tethered consumer can attach, and a killed consumer is found dead and replaced.
fn liveness_holds(seg: &std::sync::Arc<Segment>) {
    let consumer = shmring::Consumer::with_options(seg.clone(), fast()).unwrap();
    kill_holding_a_claim(seg);
    let mut p = seg.producer().unwrap();
    p.send(b"behind the dead claim", Meta::new(1, 0)).unwrap();
    let f = consumer
        .next_timeout(Some(GUARD))
        .unwrap()
        .expect("the record behind a dead producer's claim");
    assert_eq!(f.payload(), b"behind the dead claim");
    drop(f);
    assert_eq!(seg.stats().abandoned, 1);
    drop(p);
    consumer.reap();
    // Every slot and a tether line are free to take.
    let all: Vec<_> = (0..seg.geometry().max_producers)
        .map(|i| seg.producer().unwrap_or_else(|e| panic!("slot {i}: {e}")))
        .collect();
    drop(all);
    drop(shmring::Consumer::tethered(seg.clone(), fast()).expect("a tether line"));
    drop(consumer);
    // A consumer process killed is found dead, and replaced.
    let (spec, fds) = inherit(seg);
    let mut cons: Child = spawn(ENTRY, "consume-idle", &[("SHMRING_TEST_SEG", spec)], &fds);
    cons.expect("ATTACHED", GUARD);
    assert!(seg.consumer_alive());
    cons.kill();
    wait_until("the killed consumer is seen dead", GUARD, || {
        !seg.consumer_alive()
    });
    drop(seg.consumer().expect("a new consumer takes over"));
}

#[test]
fn a_taps_descriptor_cannot_fake_liveness_with_read_locks() {
    let seg = Address::memfd("ro-peers-tap", cfg()).open().unwrap();
    let ro = seg.read_only_fd().unwrap().as_raw_fd();
    let attacker = spawn(
        ENTRY,
        "ro-lock-all",
        &[("SHMRING_TEST_RO", ro.to_string())],
        &[ro],
    );
    assert_eq!(
        attacker.expect("LOCKED", GUARD),
        "0",
        "the read lock was taken"
    );
    liveness_holds(&seg);
}

#[test]
fn an_observer_of_another_uid_cannot_fake_liveness_with_read_locks() {
    let seg = Address::memfd("ro-peers-observer", cfg()).open().unwrap();
    let dir = tempdir();
    let sock = dir.join("ring.sock");
    let uid = if rustix::process::geteuid().is_root() {
        Some(65534)
    } else {
        None
    };
    let opts = ListenerOptions {
        observers: uid.map_or(Allow::same_uid(), |u| Allow::same_uid().uid(u)),
        ..Default::default()
    };
    let listener = Listener::bind(&seg, &sock, opts).unwrap().spawn().unwrap();
    let mut env = vec![("SHMRING_TEST_OBSERVE", sock.display().to_string())];
    if let Some(u) = uid {
        env.push(("SHMRING_TEST_UID", u.to_string()));
    }
    let attacker = spawn(ENTRY, "ro-lock-all", &env, &[]);
    assert_eq!(
        attacker.expect("LOCKED", GUARD),
        "0",
        "the read lock was taken"
    );
    liveness_holds(&seg);
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A named ring is shared by processes of one user, who could open it writable;
/// still, read locks taken through a read-only open never make the dead look alive.
#[test]
fn read_locks_on_a_named_ring_never_make_the_dead_look_alive() {
    let name = shm_name("ro-peers-named");
    let seg = Address::create(&name.0, cfg()).open().unwrap();
    // Producers and the consumer hold their locks before the attacker comes.
    let consumer = shmring::Consumer::with_options(seg.clone(), fast()).unwrap();
    kill_holding_a_claim(&seg);
    let mut p = seg.producer().unwrap();
    p.send(b"x", Meta::new(1, 0)).unwrap();
    let f = consumer
        .next_timeout(Some(GUARD))
        .unwrap()
        .expect("a record");
    assert_eq!(f.payload(), b"x");
    drop(f);
    drop((p, consumer));
    // Now that nobody holds a role, the read-only peer read-locks every byte.
    let attacker = spawn(
        ENTRY,
        "ro-lock-all",
        &[("SHMRING_TEST_SEG", format!("name:{}", name.0))],
        &[],
    );
    assert_eq!(attacker.expect("LOCKED", GUARD), "0");
    assert!(!seg.consumer_alive(), "a read lock is not a consumer");
    assert_eq!(seg.stats().producers, 0, "a read lock is not a producer");
    drop(attacker);
    drop(seg);
    assert!(!name.exists());
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "shmring-ro-peers-{}-{:x}",
        std::process::id(),
        shmring_testkit::Rng::seeded().next()
    ));
    std::fs::create_dir_all(&d).unwrap();
    // The observer may run as another uid: it must reach the socket.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}
