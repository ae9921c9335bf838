//! `ring-peer`: the Rust producer every binding's cross-process tests drive
//! (Python, Node.js, Go). It attaches to a ring handed over as inherited
//! descriptors, or from a consumer's socket, and commits `count` checked records
//! (`shmring_testkit::record`: index, CRC-32, body), so the consumer can check
//! every byte.
//!
//! `ring-peer <fd[,fd[,fd]]> <count> [pause-us]`: the ring's descriptors, in the
//! order of `Segment::descriptors` (segment, lock file, eventfd).
//! `ring-peer --connect <socket-path> <count> [pause-us]`
//!
//! Record `i`: stream 1, flags `i`, `record::peer_len(i)` bytes (64 + (i × 7919) mod
//! 65536). A pause (default 100 µs) between records makes the consumer wait often.
//! Built with `cargo build --release -p shmring-testkit --bin ring-peer`.

use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use shmring::{Address, FullPolicy, Meta};
use shmring_testkit::record;

/// Where the ring comes from.
enum Source {
    /// The ring's descriptors, in the order of `Segment::descriptors`.
    Fds(Vec<OwnedFd>),
    Socket(String),
}

fn fd_arg(s: &str) -> Option<OwnedFd> {
    let n: i32 = s.parse().ok()?;
    // SAFETY: the parent handed this descriptor to us; nothing else owns it here.
    Some(unsafe { OwnedFd::from_raw_fd(n) })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || (args[1] == "--connect" && args.len() < 4) {
        eprintln!("usage: ring-peer (<fd[,fd[,fd]]> | --connect <socket-path>) <count> [pause-us]");
        std::process::exit(2);
    }
    let (source, rest) = if args[1] == "--connect" {
        (Source::Socket(args[2].clone()), &args[3..])
    } else {
        let fds = args[1]
            .split(',')
            .map(|s| {
                fd_arg(s).unwrap_or_else(|| {
                    eprintln!("ring-peer: {s:?} is not a descriptor number");
                    std::process::exit(2)
                })
            })
            .collect();
        (Source::Fds(fds), &args[2..])
    };
    let count: u32 = rest[0].parse().unwrap_or_else(|_| {
        eprintln!("ring-peer: count {:?} is not a number", rest[0]);
        std::process::exit(2)
    });
    let pause = Duration::from_micros(rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(100));
    let run = move || -> shmring::Result<()> {
        let seg = match source {
            Source::Socket(path) => Address::socket(path).open()?,
            Source::Fds(fds) => Address::Descriptors(fds).open()?,
        };
        let mut p = seg.producer()?;
        for i in 0..count {
            let len = record::peer_len(i);
            let r = p.reserve_raw(len, FullPolicy::Block(Duration::from_secs(10)))?;
            // SAFETY: r.ptr is r.len writable bytes of our open reservation.
            let buf = unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) };
            record::fill(buf, i);
            p.commit_raw(len, Meta::new(1, 0).with_flags(i))?;
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("ring-peer: {e}");
        std::process::exit(1);
    }
}
