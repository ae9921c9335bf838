//! C producer -> Rust consumer and Rust producer -> C consumer, through one ring,
//! with the media header and per-frame checksums checked on the far side.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::pattern::{expected, fill, payload_checksum, ramp};
use common::{c_example, pass_fds};
use shmring::media::{kind, Format, MediaHeader};
use shmring::{Address, Config, Meta, Segment};
use shmring_host::ChildGuard;

/// A new memfd ring of `capacity` bytes.
fn memfd(label: &str, capacity: u64) -> std::sync::Arc<Segment> {
    let config = Config::with_capacity(capacity);
    let label = label.into();
    Address::Memfd { label, config }.open().unwrap()
}

#[test]
fn c_producer_to_rust_consumer_1080p() {
    let producer = c_example("producer");
    let seg = memfd("c-to-rust", 32 << 20);
    let consumer = seg.consumer().unwrap();
    let mut cmd = Command::new(&producer);
    cmd.args(["--fds", "3,4", "--frames", "60", "--stream", "5", "--quiet"]);
    pass_fds(&mut cmd, &seg.descriptors());
    let child = ChildGuard::spawn(cmd.stderr(Stdio::piped())).unwrap();
    for i in 0..60u64 {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .unwrap_or_else(|| panic!("frame {i} did not arrive"));
        assert_eq!((f.stream(), f.kind()), (5, kind::VIDEO));
        let h = MediaHeader::parse(f.payload()).expect("a valid media header");
        assert_eq!(
            (h.format, h.width, h.height, h.sequence),
            (Format::I420, 1920, 1080, i)
        );
        assert_eq!(f.len(), 128 + 3_110_400);
        assert_eq!(f.timestamp_ns(), h.pts_ns);
        assert_eq!(payload_checksum(f.payload()), f.meta().flags, "frame {i}");
        // Spot-check the pattern itself, not just the checksum.
        for (p, y, x) in [(0, 0, 0), (0, 1079, 1919), (1, 17, 300), (2, 539, 959)] {
            let at = h.offset[p] as usize + y * h.stride[p] as usize + x;
            assert_eq!(f.payload()[at], expected(i, p, y, x), "frame {i} plane {p}");
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "producer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = seg.stats();
    assert_eq!((s.records_committed, s.records_consumed), (60, 60));
}

/// Starts the C consumer on a fresh ring and waits until it is attached.
fn start_c_consumer(
    seg: &Segment,
    frames: u32,
) -> (ChildGuard, BufReader<std::process::ChildStdout>) {
    let mut cmd = Command::new(c_example("consumer"));
    cmd.args([
        "--fds",
        "3,4",
        "--frames",
        &frames.to_string(),
        "--timeout-ms",
        "10000",
        "--quiet",
    ]);
    pass_fds(&mut cmd, &seg.descriptors());
    let mut guard = ChildGuard::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped())).unwrap();
    let mut out = BufReader::new(guard.take_stdout().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the C consumer did not attach");
    (guard, out)
}

fn send_frames(seg: &std::sync::Arc<Segment>, n: u64, corrupt: Option<u64>) {
    let mut producer = seg.producer().unwrap();
    let ramp = ramp();
    for i in 0..n {
        let h = MediaHeader::video(Format::I420, 1280, 720, shmring::now_ns(), i).unwrap();
        let mut r = producer.reserve(h.payload_len()).unwrap();
        h.write_to(r.payload()).unwrap();
        fill(&h, r.payload(), &ramp);
        let mut sum = payload_checksum(r.payload());
        if corrupt == Some(i) {
            sum ^= 1;
        }
        r.commit(
            Meta::new(2, kind::VIDEO)
                .with_timestamp(h.pts_ns)
                .with_flags(sum),
        )
        .unwrap();
    }
}

#[test]
fn rust_producer_to_c_consumer() {
    let seg = memfd("rust-to-c", 16 << 20);
    let (child, mut out) = start_c_consumer(&seg, 40);
    send_frames(&seg, 40, None);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "C consumer failed ({:?}): {rest}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(rest.contains("consumed 40 frames"), "{rest}");
    assert!(rest.contains("0 failed verification"), "{rest}");
}

#[test]
fn c_consumer_detects_a_bad_checksum() {
    let seg = memfd("rust-to-c-bad", 16 << 20);
    let (child, mut out) = start_c_consumer(&seg, 3);
    send_frames(&seg, 3, Some(1));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "expected a verification failure: {rest}"
    );
    assert!(rest.contains("1 failed verification"), "{rest}");
}
