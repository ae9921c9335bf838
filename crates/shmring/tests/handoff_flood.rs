//! The hand-off under a forking flood: 64 processes keep the consumer's pending
//! connections full (each holds two connections, never says hello, and connects
//! again as soon as a connection is dropped), and 15 honest producers in processes
//! of their own connect meanwhile. Every one of them must be handed the ring before its
//! client timeout, receive its descriptors and deliver a record.
//!
//! Nothing here asserts time. What the listener refused and how many connections
//! each honest producer needed are counted and printed, with the connect times
//! measured (`cargo test -p shmring --test handoff_flood -- --nocapture`).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{spawn, wait_until, Child};
use shmring::handoff::{self, Listener, ListenerOptions, Role, DEFAULT_CONNECT_TIMEOUT};
use shmring::{Address, Config, Meta};

const ENTRY: &str = "flood_child_entry";
const GUARD: Duration = Duration::from_secs(120);
/// Flooding processes.
const FLOODERS: usize = 64;
/// Silent connections each flooding process keeps open: 128 in all, for 16
/// pending entries and a backlog of 64.
const HOLD: usize = 2;
/// Honest producers.
const HONEST: usize = 15;

/// One flood at a time: the two tests would otherwise run their floods at once.
static ONE_FLOOD: Mutex<()> = Mutex::new(());

fn one_flood() -> std::sync::MutexGuard<'static, ()> {
    ONE_FLOOD.lock().unwrap_or_else(|e| e.into_inner())
}

/// A private directory for the socket, removed (with everything in it) on drop.
struct SockDir(PathBuf);

impl SockDir {
    fn new(tag: &str) -> SockDir {
        let d = std::env::temp_dir().join(format!("shmring-flood-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        // Flooders of another uid must reach the socket inside.
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        SockDir(d)
    }
    fn sock(&self) -> String {
        self.0.join("ring.sock").display().to_string()
    }
}

impl Drop for SockDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("child: {k} not set"))
}

fn say(msg: &str) {
    println!("@@{msg}");
    let _ = std::io::stdout().flush();
}

/// Holds HOLD silent connections to SOCK (as uid AS_UID if given); each one the
/// consumer answers or closes is replaced at once. Runs until killed.
fn flood() {
    if let Ok(uid) = std::env::var("AS_UID") {
        let uid: u32 = uid.parse().unwrap();
        // SAFETY: plain system calls on this process's own credentials.
        unsafe {
            assert_eq!(libc::setgid(uid), 0);
            assert_eq!(libc::setuid(uid), 0);
        }
    }
    let sock = env("SOCK");
    let hold: usize = env("HOLD").parse().unwrap();
    let connect = || loop {
        match UnixStream::connect(&sock) {
            Ok(s) => return s,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let mut held: Vec<UnixStream> = (0..hold).map(|_| connect()).collect();
    say("FLOODING");
    let mut junk = [0u8; 512];
    loop {
        let mut fds: Vec<rustix::event::PollFd<'_>> = held
            .iter()
            .map(|s| rustix::event::PollFd::new(s, rustix::event::PollFlags::IN))
            .collect();
        let _ = rustix::event::poll(&mut fds, None);
        let done: Vec<usize> = fds
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.revents().is_empty())
            .map(|(i, _)| i)
            .collect();
        drop(fds);
        for i in done {
            let _ = (&held[i]).read(&mut junk);
            held[i] = connect();
        }
    }
}

/// Not a test: the body of the child processes (returns at once in the test run).
#[test]
fn flood_child_entry() {
    let Ok(role) = std::env::var(common::ROLE_ENV) else {
        return;
    };
    // The parent kills and reaps every child when it is done or fails, and the
    // kernel kills it if the parent dies first (`ChildGuard::spawn_tied`).
    match role.as_str() {
        "flood" => flood(),
        // Connects as a producer, as `Address::open` of a socket does, counting the
        // connections it took; attaches and sends its index I.
        "honest" => {
            let i: u64 = env("I").parse().unwrap();
            let t = Instant::now();
            let got = handoff::request(env("SOCK"), Role::Producer, DEFAULT_CONNECT_TIMEOUT);
            let us = t.elapsed().as_micros();
            match got {
                Ok(got) => {
                    let (attempts, fds) = (got.attempts, got.fds.len());
                    let seg = Address::Descriptors(got.fds).open().unwrap();
                    seg.producer()
                        .unwrap()
                        .send(&i.to_le_bytes(), Meta::new(0, 0))
                        .unwrap();
                    say(&format!("CONNECTED {attempts} {fds} {us}"));
                }
                Err(e) => say(&format!("FAILED {us} {e}")),
            }
        }
        r => panic!("unknown role {r}"),
    }
}

#[test]
fn honest_producers_connect_through_a_forking_flood() {
    let _one = one_flood();
    let dir = SockDir::new("same-uid");
    let seg = Address::memfd("flood", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions::default();
    let max = opts.max_pending as u64;
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let sock = || ("SOCK", dir.sock());
    // Every child is killed and reaped when its `Child` is dropped, also while a
    // failed assertion unwinds.
    let flooders: Vec<Child> = (0..FLOODERS)
        .map(|_| spawn(ENTRY, "flood", &[sock(), ("HOLD", HOLD.to_string())], &[]))
        .collect();
    for f in &flooders {
        f.expect("FLOODING", GUARD);
    }
    wait_until("the flood to fill the pending table", GUARD, || {
        l.stats().pending == max
    });
    // How hard the flood pushes, for the report.
    let s0 = l.stats();
    std::thread::sleep(Duration::from_secs(1));
    let before = l.stats();
    println!(
        "the flood alone: {} connections refused too-many-pending and {} timed out in 1 s",
        before.refused_busy - s0.refused_busy,
        before.timed_out - s0.timed_out
    );

    let honest: Vec<Child> = (0..HONEST)
        .map(|i| spawn(ENTRY, "honest", &[sock(), ("I", i.to_string())], &[]))
        .collect();
    let said: Vec<String> = honest
        .iter()
        .map(|h| {
            h.message_timeout(GUARD)
                .expect("the honest producer's outcome")
        })
        .collect();
    let after = l.stats();

    let mut report = Vec::new();
    let mut connected = Vec::new();
    for (i, m) in said.iter().enumerate() {
        let w: Vec<&str> = m.split_whitespace().collect();
        if w[0] == "CONNECTED" {
            let n = |k: usize| w[k].parse::<u64>().unwrap();
            connected.push((i, n(1), n(2), n(3)));
            report.push(format!(
                "honest {i}: {} connection(s), {:.1} ms",
                n(1),
                n(3) as f64 / 1e3
            ));
        } else {
            report.push(format!("honest {i}: {m}"));
        }
    }
    let busy = after.refused_busy - before.refused_busy;
    let timed_out = after.timed_out - before.timed_out;
    println!(
        "{} of {HONEST} honest producers connected; longest connect {:.1} ms; the listener \
         refused {busy} connections too-many-pending and timed out {timed_out} meanwhile\n{}",
        connected.len(),
        connected.iter().map(|c| c.3).max().unwrap_or(0) as f64 / 1e3,
        report.join("\n")
    );

    wait_until(
        "the flood to go on filling the pending table",
        GUARD,
        || l.stats().pending == max,
    );
    drop(flooders);
    for mut h in honest {
        h.wait_ok(GUARD);
    }

    assert_eq!(
        connected.len(),
        HONEST,
        "every honest producer connects before its client timeout:\n{}",
        report.join("\n")
    );
    assert_eq!(after.producers - before.producers, HONEST as u64);
    let want = seg.descriptors().len() as u64;
    for &(i, _, fds, _) in &connected {
        assert_eq!(fds, want, "honest producer {i} got the ring's descriptors");
    }
    let mut seen = [false; HONEST];
    for _ in 0..HONEST {
        let f = consumer
            .next_timeout(Some(GUARD))
            .unwrap()
            .expect("a record from each honest producer");
        let i = u64::from_le_bytes(f.payload().try_into().unwrap()) as usize;
        assert!(!std::mem::replace(&mut seen[i], true), "record {i} twice");
    }
    // The flood went on meanwhile: the listener kept dropping its connections.
    assert!(busy + timed_out > 0, "{after:?}");
}

/// The other half of the fair share: a flood from another uid (64 processes of uid
/// 65534) never pushes out a connection of this uid, even one that takes its time
/// to say hello. Each of 15 slow peers connects, waits until the listener has
/// pushed out 200 of the flood's connections (enough to push out every
/// connection of the table and of the backlog ahead of it, oldest first), and
/// only then sends its hello: it is granted.
#[test]
fn a_flood_of_another_uid_never_pushes_out_a_slow_peer() {
    const NOBODY: u32 = 65534;
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED a_flood_of_another_uid_never_pushes_out_a_slow_peer: needs root");
        return;
    }
    let _one = one_flood();
    let dir = SockDir::new("other-uid");
    let seg = Address::memfd("flood", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let _consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        // Only pushing out can end a silent connection here.
        hello_timeout: GUARD,
        ..ListenerOptions::default().allow_uid(NOBODY)
    };
    let max = opts.max_pending as u64;
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let env = [
        ("SOCK", dir.sock()),
        ("HOLD", HOLD.to_string()),
        ("AS_UID", NOBODY.to_string()),
    ];
    let flooders: Vec<Child> = (0..FLOODERS)
        .map(|_| spawn(ENTRY, "flood", &env, &[]))
        .collect();
    for f in &flooders {
        f.expect("FLOODING", GUARD);
    }
    wait_until("the flood to fill the pending table", GUARD, || {
        l.stats().pending == max
    });
    let mut hello = [0u8; handoff::HELLO_LEN];
    hello[..4].copy_from_slice(b"SRH?");
    hello[4..6].copy_from_slice(&handoff::PROTOCOL_VERSION.to_le_bytes());
    hello[6] = 1; // producer
    let mut granted = 0;
    for i in 0..HONEST {
        let mut s = UnixStream::connect(dir.sock()).unwrap();
        let base = l.stats().refused_busy;
        wait_until("the flood to be pushed out 200 times", GUARD, || {
            l.stats().refused_busy >= base + 200
        });
        // Pushed out, it finds its refusal waiting (and its hello goes nowhere).
        let _ = s.write_all(&hello);
        // read(2) discards the descriptors that come with a grant.
        let mut reply = [0u8; handoff::REPLY_LEN];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(
            reply[6], 0,
            "slow peer {i}: status {} (0 granted, 6 too-many-pending)",
            reply[6]
        );
        granted += 1;
    }
    let st = l.stats();
    println!("{granted} of {HONEST} slow peers granted; {st:?}");
    assert_eq!(st.producers, HONEST as u64, "{st:?}");
    drop(flooders);
}
