//! The secure hand-off: a consumer serving its sealed memfd on a Unix socket.
//! Producers in other processes connect and write; observers get a read-only
//! descriptor the kernel refuses to map writable; refused peers get the rule they
//! failed; stalled, garbage and flooding clients leave the consumer delivering and
//! its descriptor count flat; a restarted consumer is found again; a producer in
//! its own mount namespace (private, empty /dev/shm) under another uid produces
//! when the policy allows its uid and is refused when not.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{spawn, wait_until, Child};
use shmring::handoff::{self, Allow, Listener, ListenerOptions, Role};
use shmring::{Address, Config, Error, FullPolicy, Meta, Segment};

const ENTRY: &str = "handoff_child_entry";
const GUARD: Duration = Duration::from_secs(60);

/// A private directory for sockets, removed (with everything in it) on drop.
struct SockDir(PathBuf);

impl SockDir {
    fn new(tag: &str) -> SockDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "shmring-handoff-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        // Other uids (the namespace test) must reach the socket inside.
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        SockDir(d)
    }
    fn sock(&self) -> PathBuf {
        self.0.join("ring.sock")
    }
}

impl Drop for SockDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ring(eventfd: bool) -> Arc<Segment> {
    let cfg = Config {
        capacity: 1 << 20,
        eventfd,
        ..Config::default()
    };
    Address::memfd("handoff-test", cfg).open().unwrap()
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("child: {k} not set"))
}

fn say(msg: &str) {
    println!("@@{msg}");
    let _ = std::io::stdout().flush();
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Not a test: the body of the child processes (returns at once in the test run).
#[test]
fn handoff_child_entry() {
    let Ok(role) = std::env::var(common::ROLE_ENV) else {
        return;
    };
    if role == "serve" || role == "flood" {
        // Exit if the parent goes away without killing us (it holds our stdin).
        std::thread::spawn(|| {
            let mut b = [0u8; 64];
            while let Ok(n) = std::io::stdin().read(&mut b) {
                if n == 0 {
                    break;
                }
            }
            std::process::exit(3)
        });
    }
    match role.as_str() {
        // Connect as a producer and write N records 0..N (payload = index).
        "produce" => {
            let seg = match Address::socket(env("SOCK")).open() {
                Ok(s) => s,
                Err(e) => {
                    say(&format!("ERR {e}"));
                    return;
                }
            };
            let shm_entries = std::fs::read_dir("/dev/shm").map_or(0, |d| d.count());
            let n: u64 = env("N").parse().unwrap();
            let mut p = seg.producer().unwrap();
            for i in 0..n {
                p.send(&i.to_le_bytes(), Meta::new(7, 0)).unwrap();
            }
            say(&format!(
                "DONE uid {} dev-shm-entries {shm_entries}",
                rustix::process::getuid().as_raw()
            ));
        }
        // Serve a fresh ring on SOCK; print how many records arrived when told.
        "serve" => {
            let seg = Address::memfd("served", Config::with_capacity(1 << 20))
                .open()
                .unwrap();
            let consumer = seg.consumer().unwrap();
            let _l = Listener::bind(&seg, env("SOCK"), ListenerOptions::default())
                .unwrap()
                .spawn()
                .unwrap();
            say("READY");
            let n: u64 = env("N").parse().unwrap();
            let mut got = 0u64;
            while got < n {
                if consumer
                    .next_timeout(Some(Duration::from_millis(50)))
                    .unwrap()
                    .is_some()
                {
                    got += 1;
                }
            }
            say(&format!("GOT {got}"));
        }
        // The flood: see `stalled_garbage_and_flood_leave_consumer_delivering`.
        "flood" => flood(),
        // Holds N silent connections to SOCK, opening a new one whenever one is
        // closed on it, until its stdin closes.
        "hog" => {
            let sock = env("SOCK");
            let n: usize = env("N").parse().unwrap();
            let mut held: Vec<UnixStream> = Vec::new();
            say("HOGGING");
            loop {
                held.retain(|s| {
                    let mut b = [0u8; 1];
                    s.set_nonblocking(true).unwrap();
                    // Still open and unanswered: WouldBlock.
                    matches!(
                        (&*s).read(&mut b),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                    )
                });
                while held.len() < n {
                    match UnixStream::connect(&sock) {
                        Ok(s) => held.push(s),
                        Err(_) => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // A producer that gets through after the stall, then 1,000 connections in a
        // row: closed at once, garbage, half a hello, and valid observers.
        "flood-client" => {
            let sock = env("SOCK");
            drop(Address::socket(&sock).open().unwrap());
            for i in 0..1000 {
                if i % 4 == 3 {
                    drop(handoff::request(&sock, Role::Observer, GUARD).unwrap());
                    continue;
                }
                let mut s = UnixStream::connect(&sock).unwrap();
                match i % 4 {
                    0 => {}
                    1 => {
                        let _ = s.write_all(&[0xAB; 64]);
                    }
                    _ => {
                        let _ = s.write_all(b"SRH?");
                    }
                }
            }
            say("DONE");
        }
        // Connect as an observer (as uid 65534 with AS_NOBODY) and try every way to
        // write through the descriptor received.
        "observe-raw" => observe_raw(),
        r => panic!("unknown role {r}"),
    }
}

fn observe_raw() {
    if std::env::var_os("AS_NOBODY").is_some() {
        // SAFETY: plain system calls on our own credentials.
        unsafe {
            assert_eq!(libc::setgid(65534), 0);
            assert_eq!(libc::setuid(65534), 0);
            // Changing credentials made us non-dumpable, which alone would bar
            // /proc/self/fd: restore it, so that the file's mode is what is tested.
            assert_eq!(libc::prctl(libc::PR_SET_DUMPABLE, 1), 0);
        }
    }
    let got = handoff::request(env("SOCK"), Role::Observer, GUARD).unwrap();
    assert_eq!(
        got.fds.len(),
        1,
        "observers get the read-only segment alone"
    );
    let fd = got.fds.into_iter().next().unwrap();
    let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
    let rdonly = flags & rustix::fs::OFlags::RWMODE == rustix::fs::OFlags::RDONLY;
    let len = got.announced.total_size as usize;
    let map = writable_map_errno(fd.as_fd(), len);
    // A read-only mapping cannot be made writable later either.
    // SAFETY: a fresh read-only mapping, unmapped below.
    let p_ro = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            &fd,
            0,
        )
    }
    .unwrap();
    // SAFETY: the range is the mapping made above.
    let up = unsafe {
        rustix::mm::mprotect(
            p_ro,
            len,
            rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE,
        )
    }
    .err()
    .map(|e| e.raw_os_error());
    // SAFETY: our mapping.
    unsafe { rustix::mm::munmap(p_ro, len).unwrap() };
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let reopen = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .err()
        .and_then(|e| e.raw_os_error());
    let chmod = rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o666))
        .err()
        .map(|e| e.raw_os_error());
    say(&format!(
        "DONE rdonly {rdonly} map {map:?} mprotect {up:?} reopen {reopen:?} fchmod {chmod:?}"
    ));
}

/// Returns the errno of a writable shared mapping of `fd` (None if it worked).
fn writable_map_errno(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> Option<i32> {
    // SAFETY: a fresh mapping chosen by the kernel; unmapped at once if it worked.
    let r = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )
    };
    match r {
        Ok(p) => {
            // SAFETY: the mapping we just made.
            unsafe {
                let _ = rustix::mm::munmap(p, len);
            }
            None
        }
        Err(e) => Some(e.raw_os_error()),
    }
}

fn spawn_child(role: &str, env: &[(&str, String)]) -> Child {
    spawn(ENTRY, role, env, &[])
}

#[test]
fn producer_in_another_process_connects_and_writes() {
    let dir = SockDir::new("produce");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let n = 5000u64;
    let mut child = spawn_child(
        "produce",
        &[
            ("SOCK", dir.sock().display().to_string()),
            ("N", n.to_string()),
        ],
    );
    for i in 0..n {
        let f = consumer
            .next_timeout(Some(GUARD))
            .unwrap()
            .expect("a record");
        assert_eq!(f.payload(), i.to_le_bytes(), "record {i}");
        assert_eq!(f.stream(), 7);
    }
    child.expect("DONE", GUARD);
    child.wait_ok(GUARD);
    wait_until("the hand-off counted", GUARD, || l.stats().producers == 1);
    let s = l.stats();
    assert_eq!((s.producers, s.observers, s.refused()), (1, 0, 0));
    drop(l);
    assert!(
        !dir.sock().exists(),
        "the socket file is removed with the listener"
    );
}

#[test]
fn eventfd_ring_hands_over_the_eventfd() {
    let dir = SockDir::new("eventfd");
    let seg = ring(true);
    let consumer = seg.consumer().unwrap();
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default()).unwrap();
    let l = l.spawn().unwrap();
    let remote = Address::socket(dir.sock()).open().unwrap();
    // The eventfd received is the ring's: a write on it wakes the consumer's.
    let efd = remote.eventfd().expect("an eventfd ring sends its eventfd");
    assert!(!consumer.arm(), "nothing in the ring yet");
    rustix::io::write(efd, &1u64.to_ne_bytes()).unwrap();
    let ring_efd = seg.eventfd().unwrap();
    let mut fds = [rustix::event::PollFd::new(
        &ring_efd,
        rustix::event::PollFlags::IN,
    )];
    let guard = rustix::time::Timespec {
        tv_sec: GUARD.as_secs() as _,
        tv_nsec: 0,
    };
    assert_eq!(rustix::event::poll(&mut fds, Some(&guard)).unwrap(), 1);
    consumer.disarm();
    // The producer's records arrive.
    remote
        .producer()
        .unwrap()
        .send(b"ev", Meta::new(1, 0))
        .unwrap();
    assert_eq!(consumer.recv().unwrap().payload(), b"ev");
    // Counted by the listener (before its reply went out).
    wait_until("the hand-off counted", GUARD, || l.stats().producers == 1);
}

#[test]
fn observer_gets_a_read_only_descriptor_the_kernel_will_not_map_writable() {
    let dir = SockDir::new("observe");
    let seg = ring(true);
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    for i in 0..3u8 {
        p.send(&[i; 100], Meta::new(0, 0)).unwrap();
    }
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();

    // In another process: the descriptor received must stay out of this one, where
    // closing it would drop the consumer's record lock on the file.
    let sock = dir.sock().display().to_string();
    let mut c = spawn_child("observe-raw", &[("SOCK", sock.clone())]);
    let msg = c.expect("DONE", GUARD);
    c.wait_ok(GUARD);
    let eacces = libc::EACCES;
    assert!(
        msg.starts_with(&format!(
            "rdonly true map Some({eacces}) mprotect Some({eacces})"
        )),
        "{msg}"
    );

    // A read-only open of the socket: counters through the read-only mapping.
    let obs = Address::socket(dir.sock()).open_read_only().unwrap();
    let s = obs.stats();
    assert_eq!(s.records_committed, 3);
    assert!(s.consumer_attached);
    assert_eq!(obs.geometry(), seg.geometry());
    drop(consumer.recv().unwrap());
    assert_eq!(obs.stats().records_consumed, 1);
    wait_until("the hand-offs counted", GUARD, || l.stats().observers == 2);

    // Another uid, allowed as an observer: cannot map writable, cannot re-open the
    // memfd writable through /proc (its mode is 0400), cannot chmod it.
    if rustix::process::geteuid().is_root() {
        drop(l);
        let opts = ListenerOptions {
            observers: Allow::same_uid().uid(65534),
            ..ListenerOptions::default()
        };
        let _l = Listener::bind(&seg, dir.sock(), opts)
            .unwrap()
            .spawn()
            .unwrap();
        let mut c = spawn_child("observe-raw", &[("SOCK", sock), ("AS_NOBODY", "1".into())]);
        let msg = c.expect("DONE", GUARD);
        c.wait_ok(GUARD);
        let eperm = libc::EPERM;
        assert_eq!(
            msg,
            format!(
                "rdonly true map Some({eacces}) mprotect Some({eacces}) reopen Some({eacces}) \
                 fchmod Some({eperm})"
            )
        );
    } else {
        eprintln!("observer test: not root, the other-uid part is skipped");
    }
}

#[test]
fn refused_peers_get_the_rule_they_failed_and_are_counted() {
    let dir = SockDir::new("refuse");
    let seg = ring(false);
    let _consumer = seg.consumer().unwrap();
    let me = rustix::process::geteuid().as_raw();
    let opts = ListenerOptions {
        producers: Allow::nobody().uid(me.wrapping_add(4242)),
        observers: Allow::nobody(),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();

    match Address::socket(dir.sock()).open() {
        Err(Error::Refused { rule, message, .. }) => {
            assert_eq!(rule, "peer-credentials");
            assert!(message.contains(&format!("uid {me}")), "{message}");
            assert!(message.contains("producer allow-list"), "{message}");
        }
        r => panic!("expected a refusal, got {r:?}"),
    }
    match Address::socket(dir.sock()).open_read_only() {
        Err(Error::Refused { rule, .. }) => assert_eq!(rule, "role"),
        r => panic!("expected a refusal, got {r:?}"),
    }
    // A hello of another protocol version.
    let mut s = UnixStream::connect(dir.sock()).unwrap();
    let mut hello = [0u8; handoff::HELLO_LEN];
    hello[..4].copy_from_slice(b"SRH?");
    hello[4..6].copy_from_slice(&9u16.to_le_bytes());
    hello[6] = 1;
    s.write_all(&hello).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.len(), handoff::REPLY_LEN);
    assert_eq!(reply[6], 2, "status: protocol-version");
    let text = String::from_utf8_lossy(&reply[52..]);
    assert!(text.contains("protocol version 9"), "{text}");
    // Garbage.
    let mut s = UnixStream::connect(dir.sock()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert_eq!(reply.get(6), Some(&4u8), "status: malformed-hello");

    wait_until("the listener to count", GUARD, || l.stats().refused() == 4);
    let st = l.stats();
    assert_eq!(
        (
            st.refused_credentials,
            st.refused_role,
            st.refused_version,
            st.refused_malformed,
            st.producers,
            st.observers
        ),
        (1, 1, 1, 1, 0, 0)
    );
    // The ring took no producer.
    assert_eq!(seg.stats().producers, 0);
}

#[test]
fn a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced() {
    let dir = SockDir::new("stale");
    let seg = ring(false);
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default()).unwrap();
    let seg2 = ring(false);
    match Listener::bind(&seg2, dir.sock(), ListenerOptions::default()) {
        Err(Error::Handoff { what, .. }) => assert!(what.contains("live consumer"), "{what}"),
        r => panic!("expected an error, got {r:?}"),
    }
    // A stale socket file: its listener closed without removing it (as after a crash).
    drop(l);
    let stale = std::os::unix::net::UnixListener::bind(dir.sock()).unwrap();
    drop(stale); // the file stays, nobody accepts
    assert!(dir.sock().exists());
    // Every descriptor is copied into a child between its fork and its exec, so a
    // child another test spawns at this moment holds the socket for that instant:
    // wait for the one answer a socket nobody holds gives.
    wait_until("the stale socket to answer `no consumer`", GUARD, || {
        let r = Address::socket(dir.sock()).open();
        let stale = matches!(r, Err(Error::NoConsumer(_)));
        if !stale {
            eprintln!("a stale socket answered {r:?}");
        }
        stale
    });
    let mut replaced = None;
    wait_until("the stale socket to be replaced", GUARD, || {
        replaced = Listener::bind(&seg2, dir.sock(), ListenerOptions::default()).ok();
        replaced.is_some()
    });
    // Not a socket: left alone.
    let file = dir.0.join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(Listener::bind(&seg2, &file, ListenerOptions::default()).is_err());
    assert!(file.exists());
    // A named segment is not served.
    let name = common::shm_name("handoff-named");
    let named = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    match Listener::bind(&named, dir.0.join("n.sock"), ListenerOptions::default()) {
        Err(Error::Config(m)) => assert!(m.contains("not a sealed memfd"), "{m}"),
        r => panic!("expected a config error, got {r:?}"),
    }
}

#[test]
fn abstract_socket_names_work() {
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let name = format!("@shmring-test-{}", std::process::id());
    let mut l = Listener::bind(&seg, &name, ListenerOptions::default()).unwrap();
    // Driven by poll from this thread (no listener thread): the client in another.
    let n2 = name.clone();
    let t =
        std::thread::spawn(move || Address::socket(n2).open().map(|s| s.producer().map(|_| ())));
    let done = AtomicBool::new(false);
    while !done.load(Ordering::Relaxed) {
        l.poll(Some(Duration::from_millis(20))).unwrap();
        if l.stats().producers == 1 {
            done.store(true, Ordering::Relaxed);
        }
    }
    t.join().unwrap().unwrap().unwrap();
    let remote = Address::socket(&name).open_timeout(Duration::from_millis(200));
    // Nobody polls now: the connect is accepted by the kernel's backlog and the
    // reply never comes, so the client's own timeout ends it.
    assert!(matches!(remote, Err(Error::Timeout { .. })), "{remote:?}");
    drop(consumer);
}

/// The body of the flood test, in a child process of its own so that its
/// descriptor count is not disturbed by other tests running in parallel.
fn flood() {
    let dir = SockDir::new("flood");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        max_pending: 8,
        hello_timeout: Duration::from_millis(300),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    // A producer writing all along, and the consumer reading in this thread.
    let stop = Arc::new(AtomicBool::new(false));
    let prod = {
        let (seg, stop) = (seg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut p = seg.producer().unwrap();
            p.set_policy(FullPolicy::Block(Duration::from_millis(100)));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = p.send(&i.to_le_bytes(), Meta::new(0, 0));
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let received = Arc::new(AtomicU64::new(0));
    let cons = {
        let (stop, received) = (stop.clone(), received.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if consumer
                    .next_timeout(Some(Duration::from_millis(20)))
                    .unwrap()
                    .is_some()
                {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    wait_until("first records", GUARD, || {
        received.load(Ordering::Relaxed) > 100
    });
    let base = open_fds();

    // Stalled clients fill the pending set. A ninth silent connection makes room
    // by pushing out the one that has waited longest without a hello (all are
    // this uid's); the others time out, and a producer still gets through.
    let mut stalled: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(dir.sock()).unwrap())
        .collect();
    wait_until("stalled clients pending", GUARD, || l.stats().pending == 8);
    let r0 = received.load(Ordering::Relaxed);
    wait_until("the consumer to deliver while clients stall", GUARD, || {
        received.load(Ordering::Relaxed) > r0 + 100
    });
    stalled.push(UnixStream::connect(dir.sock()).unwrap());
    wait_until("the oldest stalled client pushed out", GUARD, || {
        l.stats().refused_busy == 1
    });
    wait_until("stalled clients timed out", GUARD, || {
        l.stats().timed_out == 8
    });
    for (i, mut s) in stalled.into_iter().enumerate() {
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let (status, rule) = if i == 0 {
            (6u8, "too-many-pending")
        } else {
            (5, "hello-timeout")
        };
        assert_eq!(reply.get(6), Some(&status), "stalled client {i}: {rule}");
    }
    // The clients that receive descriptors run in another process: this one's
    // descriptor table is the consumer's alone.
    let mut client = spawn_child(
        "flood-client",
        &[("SOCK", dir.sock().display().to_string())],
    );
    client.expect("DONE", GUARD);
    client.wait_ok(GUARD);
    drop(client); // its stdin pipe
    wait_until("every connection answered", GUARD, || {
        let s = l.stats();
        s.pending == 0 && s.refused_malformed + s.observers >= 1000
    });
    let r1 = received.load(Ordering::Relaxed);
    wait_until("the consumer to deliver after the flood", GUARD, || {
        received.load(Ordering::Relaxed) > r1 + 100
    });
    let after = open_fds();
    stop.store(true, Ordering::Relaxed);
    prod.join().unwrap();
    cons.join().unwrap();
    let s = l.stats();
    say(&format!(
        "DONE fds {base} {after} observers {} malformed {} busy {} timed_out {} producers {}",
        s.observers, s.refused_malformed, s.refused_busy, s.timed_out, s.producers
    ));
}

#[test]
fn stalled_garbage_and_flood_leave_consumer_delivering_and_fds_flat() {
    let mut c = spawn_child("flood", &[]);
    let msg = c.expect("DONE", Duration::from_secs(300));
    c.wait_ok(GUARD);
    let w: Vec<&str> = msg.split_whitespace().collect();
    assert_eq!(w[1], w[2], "descriptor count before and after: {msg}");
    let n = |i: usize| w[i].parse::<u64>().unwrap();
    // observers, malformed, timed out (7 stalled and the ninth), producers (the
    // one that got through after them); busy: the first stalled, pushed out.
    assert_eq!((n(4), n(6), n(10), n(12)), (250, 750, 8, 1), "{msg}");
    assert!(n(8) >= 1, "{msg}");
}

/// A peer that holds every pending connection open, replacing each one the
/// consumer drops, does not lock out others: an honest producer's hello is
/// answered as it is accepted, and only connections that stay silent give way
/// (the client retries while the consumer is busy).
#[test]
fn a_peer_holding_connections_open_does_not_lock_others_out() {
    let dir = SockDir::new("hog");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        hello_timeout: Duration::from_secs(30),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let max = ListenerOptions::default().max_pending;
    let hog = spawn_child(
        "hog",
        &[
            ("SOCK", dir.sock().display().to_string()),
            ("N", (max + 4).to_string()),
        ],
    );
    hog.expect("HOGGING", GUARD);
    wait_until("the hog fills the pending set", GUARD, || {
        l.stats().pending as usize == max
    });
    for i in 0..20u64 {
        let remote = Address::socket(dir.sock())
            .open()
            .unwrap_or_else(|e| panic!("connect {i} while a peer hogs the socket: {e}"));
        remote
            .producer()
            .unwrap()
            .send(&i.to_le_bytes(), Meta::new(0, 0))
            .unwrap();
        let f = consumer.recv().unwrap();
        assert_eq!(f.payload(), i.to_le_bytes());
    }
    assert_eq!(l.stats().producers, 20);
    assert!(
        l.stats().refused_busy > 0,
        "the hog was refused: {:?}",
        l.stats()
    );
    drop(hog);
}

/// A hello asking for `role`, as a peer sends it.
fn hello(role: Role) -> [u8; handoff::HELLO_LEN] {
    let mut h = [0u8; handoff::HELLO_LEN];
    h[..4].copy_from_slice(b"SRH?");
    h[4..6].copy_from_slice(&handoff::PROTOCOL_VERSION.to_le_bytes());
    h[6] = match role {
        Role::Producer => 1,
        Role::Observer => 2,
    };
    h
}

/// The status byte of the reply on `s` (read(2) discards the descriptors).
fn reply_status(s: &mut UnixStream) -> u8 {
    let mut reply = [0u8; handoff::REPLY_LEN];
    s.read_exact(&mut reply).unwrap();
    reply[6]
}

/// Every pending entry taken by silent connections of this uid, and this test
/// polling the listener itself (so the order is known): a peer whose hello is
/// there when it is accepted is answered without an entry; a hello that arrives
/// while its connection waits saves it when room is made; a new silent connection
/// pushes out the one that has waited longest without a hello, not the newest.
#[test]
fn a_full_pending_table_answers_hellos_and_pushes_out_the_longest_silent() {
    let dir = SockDir::new("full");
    let seg = ring(false);
    let opts = ListenerOptions {
        max_pending: 2,
        hello_timeout: GUARD,
        ..ListenerOptions::default()
    };
    let mut l = Listener::bind(&seg, dir.sock(), opts).unwrap();
    let mut poll_until = |what: &str, cond: &dyn Fn(&handoff::ListenerStats) -> bool| {
        let t = std::time::Instant::now();
        while !cond(&l.stats()) {
            assert!(t.elapsed() < GUARD, "timed out waiting for {what}: {l:?}");
            l.poll(Some(Duration::from_millis(10))).unwrap();
        }
        l.stats()
    };
    let silent = || UnixStream::connect(dir.sock()).unwrap();
    let mut a = silent();
    poll_until("a pending", &|s| s.pending == 1);
    let mut b = silent();
    poll_until("b pending", &|s| s.pending == 2);

    let mut h = silent();
    h.write_all(&hello(Role::Observer)).unwrap();
    let s = poll_until("h answered", &|s| s.observers == 1);
    assert_eq!((s.pending, s.refused_busy), (2, 0), "{s:?}");
    assert_eq!(reply_status(&mut h), 0, "h: granted");

    // a (the longest silent) says hello now; c arrives before a is read.
    a.write_all(&hello(Role::Observer)).unwrap();
    let _c = silent();
    let s = poll_until("a answered", &|s| s.observers == 2 && s.pending == 2);
    assert_eq!(s.refused_busy, 0, "{s:?}");
    assert_eq!(reply_status(&mut a), 0, "a: granted");

    // b has now waited longest without a hello: d pushes it out.
    let _d = silent();
    let s = poll_until("b pushed out", &|s| s.refused_busy == 1);
    assert_eq!(s.pending, 2, "{s:?}");
    assert_eq!(reply_status(&mut b), 6, "b: too-many-pending");
}

#[test]
fn consumer_restart_producers_get_no_consumer_and_reconnect() {
    let dir = SockDir::new("restart");
    let sock = dir.sock().display().to_string();
    let mut first = spawn_child("serve", &[("SOCK", sock.clone()), ("N", "1000000".into())]);
    first.expect("READY", GUARD);
    let seg = Address::socket(&sock).open().unwrap();
    let mut p = seg.producer().unwrap();
    p.set_policy(FullPolicy::Block(Duration::from_millis(100)));
    p.send(b"before", Meta::new(0, 0)).unwrap();
    first.kill();
    // Nobody reads now: the ring fills, and the wait for space ends in NoConsumer.
    let err = loop {
        match p.send(&[0u8; 4096], Meta::new(0, 0)) {
            Ok(()) => continue,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::NoConsumer(_)), "{err}");
    assert!(matches!(
        Address::socket(&sock).open(),
        Err(Error::NoConsumer(_))
    ));
    drop(p);
    drop(seg);

    let mut second = spawn_child("serve", &[("SOCK", sock.clone()), ("N", "10".into())]);
    second.expect("READY", GUARD);
    let seg = Address::socket(&sock).open().unwrap();
    let mut p = seg.producer().unwrap();
    for _ in 0..10 {
        p.send(b"after", Meta::new(0, 0)).unwrap();
    }
    assert_eq!(second.expect("GOT", GUARD), "10");
    second.wait_ok(GUARD);
}

/// How a producer gets its own mount namespace with an empty private /dev/shm
/// (`shmring_testkit::small_shm`): as root, then `setpriv` to the uid given (the
/// consumer sees that uid); unprivileged, in a user namespace (root inside, the
/// runner's uid as the consumer sees it). The command runs the program named next.
/// Err: why it cannot be done here.
enum Namespace {
    /// Root runner: the producer runs as this uid.
    AsUid(Command),
    /// Unprivileged runner in a user namespace: the consumer sees the runner's uid.
    UserNs(Command),
}

fn namespace_runner(uid: u32) -> Result<Namespace, String> {
    if rustix::process::geteuid().is_root() {
        let mut cmd = shmring_testkit::small_shm::command(1, 120, "setpriv")?;
        let uid = uid.to_string();
        cmd.args(["--reuid", &uid, "--regid", &uid, "--clear-groups"]);
        return Ok(Namespace::AsUid(cmd));
    }
    Ok(Namespace::UserNs(shmring_testkit::small_shm::command(
        1, 120, "env",
    )?))
}

fn run_in_namespace(mut cmd: Command, sock: &Path, n: u64) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = cmd
        .arg(exe)
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1", "-q"])
        .env(common::ROLE_ENV, "produce")
        .env("SOCK", sock)
        .env("N", n.to_string())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "namespaced child: {}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("@@").map(str::to_string))
        .expect("a message from the namespaced child")
}

#[test]
fn producer_in_its_own_mount_namespace_under_another_uid() {
    let me = rustix::process::geteuid().as_raw();
    let (allowed, other) = (4242u32, 4243u32);
    let ns = match namespace_runner(allowed) {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED producer_in_its_own_mount_namespace_under_another_uid: {why}");
            return;
        }
    };
    // Who the consumer sees, and the uid the producer has inside its namespace.
    let (prefix, seen, inside) = match ns {
        Namespace::AsUid(p) => (p, allowed, allowed),
        Namespace::UserNs(p) => (p, me, 0),
    };
    let dir = SockDir::new("ns");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        producers: Allow::nobody().uid(seen),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let n = 500;
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        while got < n {
            let f = consumer
                .next_timeout(Some(GUARD))
                .unwrap()
                .expect("a record");
            assert_eq!(f.payload(), got.to_le_bytes());
            got += 1;
        }
        got
    });
    let msg = run_in_namespace(prefix, &dir.sock(), n);
    assert_eq!(msg, format!("DONE uid {inside} dev-shm-entries 0"));
    assert_eq!(reader.join().unwrap(), n);

    // Another uid: as root, a producer running as `other`; unprivileged, the same
    // producer against a consumer whose list names another uid than the runner's.
    let (prefix, refused_uid) = match namespace_runner(other).unwrap() {
        Namespace::AsUid(p) => (p, other),
        Namespace::UserNs(p) => {
            drop(l);
            let opts = ListenerOptions {
                producers: Allow::nobody().uid(me.wrapping_add(1)),
                ..ListenerOptions::default()
            };
            let l2 = Listener::bind(&seg, dir.sock(), opts)
                .unwrap()
                .spawn()
                .unwrap();
            let msg = run_in_namespace(p, &dir.sock(), n);
            assert!(
                msg.starts_with("ERR")
                    && msg.contains("peer-credentials")
                    && msg.contains(&format!("uid {me} ")),
                "{msg}"
            );
            assert_eq!(l2.stats().refused_credentials, 1);
            return;
        }
    };
    let msg = run_in_namespace(prefix, &dir.sock(), n);
    assert!(
        msg.starts_with("ERR")
            && msg.contains("peer-credentials")
            && msg.contains(&format!("uid {refused_uid} ")),
        "{msg}"
    );
    let s = l.stats();
    assert_eq!((s.producers, s.refused_credentials), (1, 1));
}
