//! Helpers shared by the behavioural tests: unique segment names that are unlinked
//! on drop, a deterministic record scheme with checksums, an order/content checker,
//! and child processes (the test binary re-executed) that are killed on drop.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use shmring::{Address, Consumer, Error, FullPolicy, Meta, Producer, Segment};

// ---- names and cleanup -------------------------------------------------------------

#[allow(unused_imports)] // each test binary uses its own part
pub use shmring_testkit::{checksum, mix, pid_gone, ChildGuard, Rng, ShmName};

/// A `/dev/shm` name unique to this process and call, unlinked when dropped.
pub fn shm_name(tag: &str) -> ShmName {
    ShmName::new("test", tag)
}

// ---- deterministic records -------------------------------------------------------

/// Random bytes every record's payload is cut from (4 MiB + 64 KiB; under Miri,
/// whose records are small, 192 KiB).
pub const POOL_LEN: usize = if cfg!(miri) {
    192 << 10
} else {
    (4 << 20) + (64 << 10)
};

pub fn pool() -> &'static [u8] {
    static POOL: OnceLock<Vec<u64>> = OnceLock::new();
    let v = POOL.get_or_init(|| {
        let mut r = Rng(0x5eed);
        (0..POOL_LEN / 8).map(|_| r.next()).collect()
    });
    // SAFETY: a u64 slice viewed as bytes; the Vec lives for the whole process.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 8) }
}

/// Payload length of record `i` of producer `p`: mostly small, some large, the
/// first one empty and the second one exactly `max`.
pub fn size_for(p: u32, i: u64, max: usize) -> usize {
    if i == 0 {
        return 0;
    }
    if i == 1 {
        return max;
    }
    let h = mix(((p as u64) << 40) ^ i ^ 0xabcd_0000_0000_0000);
    let u = h % 1000;
    let (lo, hi) = if u < 944 {
        (0, 2048)
    } else if u < 994 {
        (2048, 64 << 10)
    } else if u < 999 {
        (64 << 10, max / 4)
    } else {
        (max / 4, max)
    };
    let hi = hi.min(max);
    let lo = lo.min(hi);
    lo + ((h >> 10) % (hi - lo + 1) as u64) as usize
}

/// Where in the pool record `(p, i)` of `len` bytes is cut from (8-aligned).
fn offset_for(p: u32, i: u64, len: usize) -> usize {
    let h = mix(((p as u64) << 32) ^ i ^ 0x1234_5678);
    ((h % ((POOL_LEN - len) / 8 + 1) as u64) * 8) as usize
}

/// The metadata and payload of record `(p, i)`: stream = p, kind = i, flags = the
/// pool offset in words, timestamp = the payload's checksum.
pub fn record(p: u32, i: u64, max: usize) -> (Meta, &'static [u8]) {
    let len = size_for(p, i, max);
    let off = offset_for(p, i, len);
    let bytes = &pool()[off..off + len];
    let meta = Meta {
        stream: p,
        kind: i as u32,
        timestamp_ns: checksum(bytes),
        flags: (off / 8) as u32,
    };
    (meta, bytes)
}

/// Writes record `(p, i)`: in place (reserve/commit) for most, with `send` for
/// every fourth.
pub fn write_record(prod: &mut Producer, p: u32, i: u64, max: usize) -> shmring::Result<()> {
    let (meta, bytes) = record(p, i, max);
    if i % 4 == 3 {
        prod.send(bytes, meta)
    } else {
        let mut r = prod.reserve(bytes.len())?;
        r.payload().copy_from_slice(bytes);
        r.commit(meta)
    }
}

/// Checks a received record against the scheme (length, checksum, content) and
/// returns `(producer, index)`.
pub fn verify(payload: &[u8], meta: Meta, max: usize) -> (u32, u64) {
    let (p, i) = (meta.stream, meta.kind as u64);
    let len = size_for(p, i, max);
    assert_eq!(payload.len(), len, "length of record {i} of producer {p}");
    assert_eq!(
        checksum(payload),
        meta.timestamp_ns,
        "checksum of record {i} of producer {p} ({len} bytes)"
    );
    let off = offset_for(p, i, len);
    assert_eq!(
        meta.flags as usize,
        off / 8,
        "pool offset of record {i} of producer {p}"
    );
    assert!(
        payload == &pool()[off..off + len],
        "content of record {i} of producer {p}"
    );
    (p, i)
}

/// Per-producer order and exactly-once: record `i` of producer `p` must be the next
/// one expected from `p`.
pub struct Checker {
    pub next: Vec<u64>,
    pub max: usize,
    pub records: u64,
    pub bytes: u64,
}

impl Checker {
    pub fn new(producers: usize, max: usize) -> Checker {
        Checker {
            next: vec![0; producers],
            max,
            records: 0,
            bytes: 0,
        }
    }
    pub fn check(&mut self, payload: &[u8], meta: Meta) -> (u32, u64) {
        let (p, i) = verify(payload, meta, self.max);
        assert!((p as usize) < self.next.len(), "unknown producer {p}");
        assert_eq!(i, self.next[p as usize], "order of producer {p}");
        self.next[p as usize] += 1;
        self.records += 1;
        self.bytes += payload.len() as u64;
        (p, i)
    }
}

/// Consumes until the checker has seen `per` records from each producer, holding
/// up to a random number of frames (and `max_held` bytes) and releasing them in a
/// shuffled order. Panics if nothing arrives for `stall`.
pub fn consume_all(consumer: &Consumer, ck: &mut Checker, per: u64, seed: u64, max_held: usize) {
    let mut rng = Rng(seed);
    let mut held = Vec::new();
    let mut held_bytes = 0usize;
    let mut limit = 1 + rng.below(12) as usize;
    let stall = Duration::from_secs(60);
    let mut last = Instant::now();
    while ck.next.iter().any(|&n| n < per) {
        match consumer
            .next_timeout(Some(Duration::from_millis(20)))
            .unwrap()
        {
            Some(f) => {
                ck.check(f.payload(), f.meta());
                held_bytes += f.len();
                held.push(f);
                last = Instant::now();
            }
            None => {
                assert!(
                    !held.is_empty() || last.elapsed() < stall,
                    "no record for {stall:?}; expected {per} per producer, have {:?}",
                    ck.next
                );
                limit = 0;
            }
        }
        if held.len() >= limit || held_bytes >= max_held {
            rng.shuffle(&mut held);
            held.clear();
            held_bytes = 0;
            limit = 1 + rng.below(12) as usize;
        }
    }
    drop(held);
    assert!(
        ck.next.iter().all(|&n| n == per),
        "extra records: {:?}",
        ck.next
    );
}

/// Polls `cond` until it holds; panics after `guard` (a failure guard, not a timing
/// assertion).
pub fn wait_until(what: &str, guard: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < guard, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---- child processes -------------------------------------------------------------

pub const ROLE_ENV: &str = "SHMRING_TEST_ROLE";

/// The test binary re-executed to run one role; killed (SIGKILL) and reaped on drop.
pub struct Child {
    kid: ChildGuard,
    lines: mpsc::Receiver<String>,
    pub pid: u32,
}

/// Spawns `entry` (the name of the test function that calls [`child_entry`]) with
/// `role` and `env`, keeping the descriptors in `inherit` open across exec.
pub fn spawn(entry: &str, role: &str, env: &[(&str, String)], inherit: &[RawFd]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1", "-q"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut kid = ChildGuard::spawn_tied(&mut cmd, inherit).expect("spawn child process");
    let out = kid.take_stdout().expect("child stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(msg) = line.strip_prefix("@@") {
                if tx.send(msg.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let pid = kid.pid();
    Child {
        kid,
        lines: rx,
        pid,
    }
}

impl Child {
    /// Waits for the next message from the child, which must start with `word`;
    /// returns the rest.
    pub fn expect(&self, word: &str, guard: Duration) -> String {
        match self.lines.recv_timeout(guard) {
            Ok(line) => {
                let rest = line
                    .strip_prefix(word)
                    .unwrap_or_else(|| panic!("child {} said {line:?}, expected {word}", self.pid));
                rest.trim().to_string()
            }
            Err(e) => panic!("child {}: no {word} within {guard:?} ({e})", self.pid),
        }
    }

    /// The next message, if one is waiting.
    pub fn try_message(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Every message the child wrote before its stdout closed (it exited or was
    /// killed).
    pub fn remaining_messages(&self, guard: Duration) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(guard) {
                Ok(m) => out.push(m),
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(e) => panic!("child {}: output did not end ({e})", self.pid),
            }
        }
    }

    pub fn message_timeout(&self, t: Duration) -> Option<String> {
        self.lines.recv_timeout(t).ok()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.kid.kill();
    }

    /// Waits for the child to end, however it ends; kills it and panics after `guard`.
    pub fn wait_status(&mut self, guard: Duration) -> std::process::ExitStatus {
        self.kid
            .wait_or_kill(guard)
            .unwrap_or_else(|| panic!("child {} did not finish within {guard:?}", self.pid))
    }

    /// Waits for a successful exit; kills the child and panics after `guard`.
    pub fn wait_ok(&mut self, guard: Duration) {
        match self.kid.wait_or_kill(guard) {
            Some(st) => assert!(st.success(), "child {} failed: {st}", self.pid),
            None => panic!("child {} did not finish within {guard:?}", self.pid),
        }
    }
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("child: {k} not set"))
}
fn env_num(k: &str) -> u64 {
    env(k)
        .parse()
        .unwrap_or_else(|_| panic!("child: {k} is not a number"))
}

/// The spec (`fd:N,M,...`) and the raw descriptors a child needs to attach to
/// `seg` from inherited descriptors (see [`open_segment`]).
pub fn inherit(seg: &Segment) -> (String, Vec<RawFd>) {
    let fds: Vec<RawFd> = seg.descriptors().iter().map(|f| f.as_raw_fd()).collect();
    let list: Vec<String> = fds.iter().map(|f| f.to_string()).collect();
    (format!("fd:{}", list.join(",")), fds)
}

/// Attaches to a segment described as `fd:N[,M...]` (inherited descriptors, in the
/// order of `Segment::descriptors`), `sock:N` (receive them over the inherited
/// Unix socket N) or `name:NAME`.
pub fn open_segment(spec: &str) -> Arc<Segment> {
    let (how, arg) = spec.split_once(':').expect("segment spec");
    match how {
        "fd" => {
            let fds = arg
                .split(',')
                // SAFETY: the parent left these descriptors open for us, and nobody
                // else in this process owns them.
                .map(|n| unsafe { OwnedFd::from_raw_fd(n.parse().unwrap()) })
                .collect();
            Address::Descriptors(fds)
                .open()
                .expect("attach inherited descriptors")
        }
        "sock" => {
            // SAFETY: as above, for the socket.
            let sock = unsafe { UnixStream::from_raw_fd(arg.parse().unwrap()) };
            let fds = shmring::recv_fds(&sock).expect("receive the ring's descriptors");
            Address::Descriptors(fds)
                .open()
                .expect("attach the ring's descriptors")
        }
        "name" => Address::named(arg).open().expect("open named segment"),
        _ => panic!("bad segment spec {spec}"),
    }
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Body of the child-process entry test: returns at once unless [`ROLE_ENV`] is
/// set, else runs the role and exits the process.
pub fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    // Exit if the parent goes away without killing us (it holds our stdin).
    std::thread::spawn(|| {
        let mut b = [0u8; 64];
        loop {
            match std::io::stdin().read(&mut b) {
                Ok(0) | Err(_) => std::process::exit(3),
                Ok(_) => {}
            }
        }
    });
    run_role(&role);
    std::process::exit(0);
}

/// Roles that only read: they map the ring read-only and never open it writable.
fn run_tap_role(role: &str) -> bool {
    match role {
        // Tap every record from an inherited read-only descriptor until delivered +
        // lost reaches N, checking each delivered one.
        "tap-check" => {
            // SAFETY: the parent left this descriptor open for us; nobody else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(env_num("SHMRING_TEST_RO") as RawFd) };
            let ro = shmring::Address::Descriptors(vec![fd])
                .open_read_only()
                .expect("map read-only");
            let (n, max) = (env_num("N"), env_num("MAX") as usize);
            let mut tap = shmring::Tap::new(ro, shmring::TapOptions::default());
            println!("@@ATTACHED");
            let mut buf = Vec::new();
            loop {
                let st = tap.stats();
                if st.delivered + st.lost >= n {
                    break;
                }
                if let Some(f) = tap
                    .next_into(&mut buf, Some(Duration::from_millis(50)))
                    .unwrap()
                {
                    verify(&buf, f.meta, max);
                }
            }
            let st = tap.stats();
            println!("@@TAPPED {} {} {}", st.delivered, st.lost, st.torn);
            true
        }
        // A read-only peer that read-locks every byte of every file it can reach:
        // the read-only descriptor in SHMRING_TEST_RO, or, with SHMRING_TEST_OBSERVE,
        // one received as an observer on that socket (as uid SHMRING_TEST_UID when
        // given), or the named ring in SHMRING_TEST_SEG opened read-only.
        "ro-lock-all" => {
            let fd: OwnedFd = if let Ok(sock) = std::env::var("SHMRING_TEST_OBSERVE") {
                if let Ok(uid) = std::env::var("SHMRING_TEST_UID") {
                    let uid: u32 = uid.parse().unwrap();
                    // SAFETY: plain system calls changing this process's ids.
                    unsafe {
                        assert_eq!(libc::setgid(uid), 0);
                        assert_eq!(libc::setuid(uid), 0);
                    }
                }
                let ro = Address::socket(&sock).open_read_only().expect("observe");
                ro.fd().try_clone_to_owned().unwrap()
            } else if let Ok(n) = std::env::var("SHMRING_TEST_RO") {
                // SAFETY: the parent left this descriptor open for us.
                unsafe { OwnedFd::from_raw_fd(n.parse().unwrap()) }
            } else {
                let name = env("SHMRING_TEST_SEG");
                let name = name.strip_prefix("name:").expect("a named ring");
                let path = format!("/dev/shm/{name}");
                std::fs::File::open(path).expect("open read-only").into()
            };
            // SAFETY: `flock` is a plain C struct; all-zero is valid.
            let mut fl: libc::flock = unsafe { std::mem::zeroed() };
            fl.l_type = libc::F_RDLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_start = 0;
            fl.l_len = 0; // every byte, to the end of all files
                          // SAFETY: a valid descriptor and struct for the call.
            let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &fl) };
            println!("@@LOCKED {r}");
            sleep_forever();
        }
        // Map a named ring read-only, try to make it writable, then write to it.
        "tap-write" => {
            let name = env("SHMRING_TEST_SEG");
            let name = name.strip_prefix("name:").expect("a named ring");
            let ro = shmring::Address::named(name)
                .open_read_only()
                .expect("open read-only");
            let (ptr, len) = ro.mapping();
            // SAFETY: asking the kernel to change the protection of our own mapping.
            let r =
                unsafe { libc::mprotect(ptr as *mut _, len, libc::PROT_READ | libc::PROT_WRITE) };
            let err = std::io::Error::last_os_error();
            println!("@@MPROTECT {r} {err}");
            // SAFETY: deliberately writing through a read-only mapping: the kernel
            // must stop us (SIGSEGV), which the parent checks.
            unsafe { std::ptr::write_volatile(ptr.add(4096 + 64) as *mut u8, 0xff) };
            println!("@@WROTE");
            true
        }
        _ => false,
    }
}

fn run_role(role: &str) {
    if run_tap_role(role) {
        return;
    }
    let seg = open_segment(&env("SHMRING_TEST_SEG"));
    match role {
        // A tethered consumer that takes one frame and holds it forever.
        "tether-hold" => {
            let c = Consumer::tethered(seg.clone(), shmring::ConsumerOptions::default()).unwrap();
            let mut prod = seg.producer().unwrap();
            prod.send(b"held", Meta::new(9, 9)).unwrap();
            let f = c.recv().unwrap();
            println!("@@HOLDING {}", f.seq());
            sleep_forever();
        }
        // A tethered consumer checking P producers' N records each, then reporting.
        "tether-check" => {
            let (p, n, max) = (env_num("P") as usize, env_num("N"), env_num("MAX") as usize);
            let c = Consumer::tethered(seg.clone(), shmring::ConsumerOptions::default()).unwrap();
            println!("@@ATTACHED");
            let mut ck = Checker::new(p, max);
            consume_all(&c, &mut ck, n, std::process::id() as u64, 256 << 10);
            println!("@@CHECKED {} {}", ck.records, ck.bytes);
        }
        // Write records 0..N of producer P, then exit.
        "produce" => {
            let (p, n, max) = (env_num("P") as u32, env_num("N"), env_num("MAX") as usize);
            let mut prod = seg.producer().unwrap();
            prod.set_policy(FullPolicy::Block(Duration::from_secs(60)));
            for i in 0..n {
                write_record(&mut prod, p, i, max).unwrap();
            }
            println!("@@DONE");
        }
        // Write N records, then reserve one more and never commit it.
        "reserve-and-hang" => {
            let (p, n, max) = (env_num("P") as u32, env_num("N"), env_num("MAX") as usize);
            let mut prod = seg.producer().unwrap();
            for i in 0..n {
                write_record(&mut prod, p, i, max).unwrap();
            }
            let mut r = prod.reserve(1000).unwrap();
            r.payload()[..500].fill(0xee);
            println!("@@HOLDING {}", r.seq());
            sleep_forever();
        }
        // Write N records, then idle with the producer attached.
        "produce-then-hang" => {
            let (p, n, max) = (env_num("P") as u32, env_num("N"), env_num("MAX") as usize);
            let mut prod = seg.producer().unwrap();
            for i in 0..n {
                write_record(&mut prod, p, i, max).unwrap();
            }
            println!("@@IDLE");
            sleep_forever();
        }
        // Write records forever, blocking (for a day) whenever the ring is full.
        "fill-and-block" => {
            let (p, max) = (env_num("P") as u32, env_num("MAX") as usize);
            let mut prod = seg.producer().unwrap();
            prod.set_policy(FullPolicy::Block(Duration::from_secs(86400)));
            for i in 0.. {
                write_record(&mut prod, p, i, max).unwrap();
                println!("@@SENT {i}");
            }
        }
        // Consume and verify records, reporting each one before it is released;
        // hold a few at a time and release them shuffled.
        "consume-report" => {
            let max = env_num("MAX") as usize;
            let consumer = seg.consumer().unwrap();
            println!("@@ATTACHED");
            let mut rng = Rng(std::process::id() as u64);
            let mut held = Vec::new();
            loop {
                match consumer.next_timeout(Some(Duration::from_millis(20))) {
                    Ok(Some(f)) => {
                        let (p, i) = verify(f.payload(), f.meta(), max);
                        println!("@@GOT {p} {i}");
                        held.push(f);
                        if held.len() > rng.below(8) as usize {
                            rng.shuffle(&mut held);
                            held.clear();
                        }
                    }
                    Ok(None) => held.clear(),
                    Err(e) => panic!("consumer child: {e}"),
                }
            }
        }
        // Become the consumer and wait for records forever (asleep on the ring).
        "consume-wait" => {
            let consumer = seg.consumer().unwrap();
            println!("@@ATTACHED");
            loop {
                let f = consumer.recv().unwrap();
                println!("@@GOT {} {}", f.stream(), f.kind());
            }
        }
        // Become the consumer and idle.
        "consume-idle" => {
            let _consumer = seg.consumer().unwrap();
            println!("@@ATTACHED");
            sleep_forever();
        }
        _ => panic!("unknown role {role}"),
    }
}

/// Retries `f` while it fails with `Timeout` or `NoConsumer`, counting those.
pub fn retry_full(
    no_consumer: &std::sync::atomic::AtomicU64,
    timeouts: &std::sync::atomic::AtomicU64,
    mut f: impl FnMut() -> shmring::Result<()>,
) {
    loop {
        match f() {
            Ok(()) => return,
            Err(Error::NoConsumer(_)) => {
                no_consumer.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::Timeout { .. }) => {
                timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("producer: {e}"),
        }
    }
}
