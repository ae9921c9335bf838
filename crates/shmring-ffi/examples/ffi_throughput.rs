//! Throughput and CPU cost of a producer process feeding a Rust consumer, for the
//! C producer (examples/c/producer.c through the C ABI) and for an equivalent Rust
//! producer (same in-place fill, media header and checksum), on 1080p I420 frames.
//!
//! ```text
//! cargo run --release -p shmring-ffi --example ffi_throughput -- c PATH/TO/producer [FRAMES]
//! cargo run --release -p shmring-ffi --example ffi_throughput -- rust [FRAMES]
//! ```

#[path = "../tests/common/pattern.rs"]
mod pattern;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::{Duration, Instant};

use shmring::media::{kind, Format, MediaHeader};
use shmring::{Address, Config, Meta};
use shmring_host::rusage;

fn rust_child(frames: u64, count: RawFd) -> i32 {
    // SAFETY: the parent placed the ring's `count` descriptors at 3, 4, ... for us.
    let fds = (3..3 + count)
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    let seg = Address::Descriptors(fds)
        .open()
        .expect("attach the ring's descriptors");
    let mut p = seg.producer().expect("producer");
    let ramp = pattern::ramp();
    for i in 0..frames {
        let h =
            MediaHeader::video(Format::I420, 1920, 1080, shmring::now_ns(), i).expect("1080p I420");
        let mut r = p.reserve(h.payload_len()).expect("reserve");
        h.write_to(r.payload()).expect("header");
        pattern::fill(&h, r.payload(), &ramp);
        let sum = pattern::payload_checksum(r.payload());
        r.commit(Meta::new(1, kind::VIDEO).with_flags(sum))
            .expect("commit");
    }
    0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: ffi_throughput (c PATH/TO/producer | rust) [FRAMES]";
    if args.first().map(String::as_str) == Some("--child") {
        let n = |i: usize| args.get(i).and_then(|a| a.parse().ok()).expect(usage);
        std::process::exit(rust_child(n(1), n(2) as RawFd));
    }
    // The ring first: the producer gets every one of its descriptors (a memfd ring's
    // segment and lock file), placed at 3, 4, ...
    let config = Config::with_capacity(64 << 20);
    let seg = Address::memfd("ffi-throughput", config).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let fds: Vec<RawFd> = seg.descriptors().iter().map(|d| d.as_raw_fd()).collect();
    let count = fds.len() as RawFd;
    let (mut cmd, frames) = match args.first().map(String::as_str) {
        Some("c") if args.len() >= 2 => {
            let frames: u64 = args.get(2).map_or(2000, |f| f.parse().expect(usage));
            let list: Vec<String> = (3..3 + count).map(|fd| fd.to_string()).collect();
            let mut c = Command::new(&args[1]);
            c.args(["--fds", &list.join(",")])
                .args(["--frames", &frames.to_string(), "--quiet"]);
            (c, frames)
        }
        Some("rust") => {
            let frames: u64 = args.get(1).map_or(2000, |f| f.parse().expect(usage));
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args(["--child", &frames.to_string(), &count.to_string()]);
            (c, frames)
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(1);
        }
    };
    shmring_host::place_fds(&mut cmd, &fds, 3);
    let cpu0 = rusage(false).cpu_s();
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn producer");
    let (mut bytes, mut bad) = (0u64, 0u64);
    for i in 0..frames {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("a frame within 10 s");
        match MediaHeader::parse(f.payload()) {
            Ok(h) if h.sequence == i && h.width == 1920 => {}
            _ => bad += 1,
        }
        bytes += f.len() as u64;
    }
    let wall = start.elapsed();
    let status = child.wait().unwrap();
    let cons_cpu = rusage(false).cpu_s() - cpu0;
    let prod_cpu = rusage(true).cpu_s();
    let gib = bytes as f64 / (1u64 << 30) as f64;
    println!(
        "{} producer: {frames} frames, {:.2} GiB in {:.3} s = {:.2} GiB/s ({:.0} frames/s); \
         CPU per GiB: producer {:.3} s, consumer {:.3} s, total {:.3} s; bad frames {bad}; \
         producer {status}",
        args[0],
        gib,
        wall.as_secs_f64(),
        gib / wall.as_secs_f64(),
        frames as f64 / wall.as_secs_f64(),
        prod_cpu / gib,
        cons_cpu / gib,
        (prod_cpu + cons_cpu) / gib,
    );
}
