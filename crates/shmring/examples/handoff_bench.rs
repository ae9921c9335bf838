//! The hand-off's cost: how long a fresh producer process takes from the start of
//! `Address::open` of a socket to its first record committed (connect, hello, reply with
//! the descriptors, attach and validate, map, take a slot, reserve, commit), p50 /
//! p99 / max over many processes.
//!
//! ```sh
//! cargo run --release -p shmring --example handoff_bench -- 300
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use shmring::handoff::{Listener, ListenerOptions};
use shmring::{Address, Config, Meta};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--child" {
        // One producer: connect, attach, commit one 4 KiB record.
        let t0 = Instant::now();
        let seg = Address::socket(&args[2]).open().expect("connect");
        let mut p = seg.producer().expect("producer");
        let mut r = p.reserve(4096).expect("reserve");
        r.payload().fill(1);
        r.commit(Meta::new(0, 0)).expect("commit");
        println!("{}", t0.elapsed().as_nanos());
        return;
    }
    let runs: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("shmring-handoff-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket directory");
    let sock = dir.join("ring.sock");
    let seg = Address::memfd("bench", Config::with_capacity(64 << 20))
        .open()
        .expect("ring");
    let consumer = seg.consumer().expect("consumer");
    let listener = Listener::bind(&seg, &sock, ListenerOptions::default())
        .and_then(Listener::spawn)
        .expect("listen");
    let exe = std::env::current_exe().expect("own path");
    let mut ns: Vec<u64> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let out = Command::new(&exe)
            .arg("--child")
            .arg(&sock)
            .output()
            .expect("child");
        assert!(out.status.success(), "child failed: {out:?}");
        ns.push(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("child's figure"),
        );
        // The record arrived.
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .expect("ring")
            .expect("the child's record");
        assert_eq!(f.len(), 4096);
    }
    ns.sort_unstable();
    let q = |p: f64| ns[((ns.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e3;
    println!(
        "connect -> first record committed, {runs} producer processes: p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        q(0.5),
        q(0.99),
        q(1.0)
    );
    println!("listener: {:?}", listener.stats());
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
}
