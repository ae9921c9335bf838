//! The secure hand-off: a consumer serving its sealed memfd on a Unix socket.
//! Producers in other processes connect and write; observers get a read-only
//! descriptor the kernel refuses to map writable; refused peers get the rule they
//! failed; stalled, garbage and flooding clients leave the consumer delivering and
//! its descriptor count flat; a restarted consumer is found again; a producer in
//! its own mount namespace (private, empty /dev/shm) under another uid produces
//! when the policy allows its uid and is refused when not. One file per concept:
//! `connect`, `policy`, `hostile` and `restart`; the child processes' entry and the
//! shared helpers are here.

#[path = "../common/mod.rs"]
mod common;

mod connect;
mod hostile;
mod policy;
mod restart;

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
        "flood" => hostile::flood(),
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
        "observe-raw" => connect::observe_raw(),
        r => panic!("unknown role {r}"),
    }
}

fn spawn_child(role: &str, env: &[(&str, String)]) -> Child {
    spawn(ENTRY, role, env, &[])
}
