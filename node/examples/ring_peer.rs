//! A Rust producer for the Node and Go packages' tests: attaches to a ring handed
//! over as inherited descriptors, or from a consumer's socket, and commits `count`
//! records whose first 4 bytes are the FNV-1a (32-bit) checksum of the rest, so the
//! consumer can check every byte.
//!
//! `ring_peer <fd[,fd[,fd]]> <count> [pause-us]`: the ring's descriptors, in the
//! order of `Segment::descriptors` (segment, lock file, eventfd).
//! `ring_peer --connect <socket-path> <count> [pause-us]`
//!
//! Record `i`: stream 1, flags `i`, 64 + (i * 7919) % 65536 bytes of a pattern seeded
//! by `i`. A pause (default 100 µs) between records makes the consumer wait often.

use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use shmring::{FullPolicy, Meta, Segment};

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

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
        eprintln!("usage: ring_peer (<fd[,fd[,fd]]> | --connect <socket-path>) <count> [pause-us]");
        std::process::exit(2);
    }
    let (source, rest) = if args[1] == "--connect" {
        (Source::Socket(args[2].clone()), &args[3..])
    } else {
        let fds = args[1]
            .split(',')
            .map(|s| {
                fd_arg(s).unwrap_or_else(|| {
                    eprintln!("ring_peer: {s:?} is not a descriptor number");
                    std::process::exit(2)
                })
            })
            .collect();
        (Source::Fds(fds), &args[2..])
    };
    let count: u32 = rest[0].parse().unwrap_or_else(|_| {
        eprintln!("ring_peer: count {:?} is not a number", rest[0]);
        std::process::exit(2)
    });
    let pause = Duration::from_micros(rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(100));
    let run = move || -> shmring::Result<()> {
        let seg = match source {
            Source::Socket(path) => Segment::connect(path)?,
            Source::Fds(fds) => Segment::from_descriptors(fds)?,
        };
        let mut p = seg.producer()?;
        for i in 0..count {
            let len = 64 + (i as usize * 7919) % 65536;
            let r = p.reserve_raw(len, FullPolicy::Block(Duration::from_secs(10)))?;
            // SAFETY: r.ptr is r.len writable bytes of our open reservation.
            let buf = unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) };
            let mut x = 0x9e37_79b9u32 ^ i.wrapping_mul(0x85eb_ca6b);
            for b in &mut buf[4..] {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            let sum = fnv1a(&buf[4..]);
            buf[..4].copy_from_slice(&sum.to_le_bytes());
            p.commit_raw(len, Meta::new(1, 0).with_flags(i))?;
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("ring_peer: {e}");
        std::process::exit(1);
    }
}
