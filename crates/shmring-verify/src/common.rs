//! Shared pieces: the verifiable record format, the flag table that producer
//! processes publish their progress in, child processes that die with us, process
//! memory figures, and the report every subcommand prints.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use shmring_host::SharedMemory;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

pub use shmring_testkit::{checksum, mix, ChildGuard, Rng};

/// A `/dev/shm` name unique to this process, unlinked on drop.
pub type ShmName = shmring_testkit::ShmName;

/// A unique ring name for this suite (see [`ShmName`]).
pub fn shm_name(tag: &str) -> ShmName {
    ShmName::new("verify", tag)
}

// ---- records -------------------------------------------------------------------------

/// Every record starts with: checksum u64 (of bytes 8..), magic u32, producer
/// instance u32, sequence u64, payload length u64. The rest is a pattern derived
/// from (instance, sequence).
pub const REC_HDR: usize = 32;
pub const REC_MAGIC: u32 = 0x5652_4659;

/// Why a received record is not one a producer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecord {
    Short,
    Magic,
    Length,
    Checksum,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadRecord::Short => "shorter than the record header",
            BadRecord::Magic => "bad magic",
            BadRecord::Length => "length field differs from the payload length",
            BadRecord::Checksum => "checksum mismatch",
        })
    }
}

/// Fills `buf[REC_HDR..]` with the pattern of record (instance, seq), in chunks of
/// `chunk` bytes, calling `between` after each chunk (to write slowly).
pub fn fill_body(buf: &mut [u8], instance: u32, seq: u64, chunk: usize, mut between: impl FnMut()) {
    let mut x = mix(((instance as u64) << 40) ^ seq ^ 0x5eed_0000);
    let start = REC_HDR.min(buf.len());
    let body = &mut buf[start..];
    for part in body.chunks_mut(chunk.max(8)) {
        let mut words = part.chunks_exact_mut(8);
        for w in &mut words {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            w.copy_from_slice(&(x ^ (x >> 29)).to_le_bytes());
        }
        for b in words.into_remainder() {
            *b = x as u8;
        }
        between();
    }
}

/// Writes the header (and checksum) of record (instance, seq); `buf.len() >= REC_HDR`.
pub fn seal_record(buf: &mut [u8], instance: u32, seq: u64) {
    let len = buf.len() as u64;
    buf[8..12].copy_from_slice(&REC_MAGIC.to_le_bytes());
    buf[12..16].copy_from_slice(&instance.to_le_bytes());
    buf[16..24].copy_from_slice(&seq.to_le_bytes());
    buf[24..32].copy_from_slice(&len.to_le_bytes());
    let c = checksum(&buf[8..]);
    buf[..8].copy_from_slice(&c.to_le_bytes());
}

/// Checks a received payload; returns (instance, seq).
pub fn verify_record(p: &[u8]) -> Result<(u32, u64), BadRecord> {
    if p.len() < REC_HDR {
        return Err(BadRecord::Short);
    }
    let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    // Read every field once into locals: the bytes are untrusted and may change.
    let (sum, magic, inst, seq, len) = (u64_at(0), u32_at(8), u32_at(12), u64_at(16), u64_at(24));
    if magic != REC_MAGIC {
        return Err(BadRecord::Magic);
    }
    if len != p.len() as u64 {
        return Err(BadRecord::Length);
    }
    if checksum(&p[8..]) != sum {
        return Err(BadRecord::Checksum);
    }
    Ok((inst, seq))
}

/// Claim sequence numbers are compared modulo 2^28 (the ring's wrap).
pub use shmring::layout::SEQ_MASK;

/// Is claim `a` after claim `b` (modulo 2^28)?
pub fn seq_after(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b) & SEQ_MASK;
    d != 0 && d < (1 << 27)
}

// ---- the flag table --------------------------------------------------------------------

/// Producer states published in the flag table.
pub mod state {
    /// Started, not attached yet.
    pub const INIT: u32 = 0;
    /// Attached, no reservation (between records).
    pub const OUT: u32 = 1;
    /// Inside `reserve` (the claim may or may not exist yet).
    pub const RESERVING: u32 = 2;
    /// `reserve` returned: the claim exists and is not committed.
    pub const IN: u32 = 3;
    /// Inside `commit` (the claim may or may not be committed yet).
    pub const COMMITTING: u32 = 4;
    /// Stopped on request; every count is final.
    pub const DONE: u32 = 5;
    /// Gave up on an error.
    pub const FAILED: u32 = 6;
}

/// One producer process's line (64 bytes) in the flag table.
#[repr(C, align(64))]
pub struct Line {
    pub state: AtomicU32,
    /// Set by the orchestrator: finish the current record and exit.
    pub stop: AtomicU32,
    /// Records committed: sequences `0..committed` (retry mode) or the count.
    pub committed: AtomicU64,
    /// Claim sequence of the current reservation (valid in state IN).
    pub claim_seq: AtomicU64,
    pub no_consumer: AtomicU64,
    /// `Timeout` and `Full` errors (dropped records in drop mode).
    pub timeouts: AtomicU64,
    /// Any other error (`Corrupt`, `Abandoned`, ...).
    pub other_errors: AtomicU64,
    /// Longest time one `reserve` call took, in nanoseconds.
    pub max_block_ns: AtomicU64,
    /// Records attempted (committed + dropped).
    pub attempts: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Line>() == 64);

/// A small shared mapping (its own memfd) with one [`Line`] per producer instance.
pub struct Flags(SharedMemory);

impl Flags {
    pub fn create(lines: usize) -> std::io::Result<Flags> {
        SharedMemory::create(c"shmring-verify-flags", lines.max(1) * 64).map(Flags)
    }

    /// Maps a flag table received as descriptor `fd` (taking ownership).
    pub fn from_raw_fd(fd: RawFd) -> std::io::Result<Flags> {
        // SAFETY: the orchestrator left this descriptor open for us; nobody else in
        // this process owns it.
        let m = SharedMemory::map(unsafe { OwnedFd::from_raw_fd(fd) })?;
        if m.len() < 64 {
            return Err(std::io::Error::other("flag table smaller than one line"));
        }
        Ok(Flags(m))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }

    pub fn line(&self, i: usize) -> &Line {
        let lines = self.0.len() / 64;
        assert!(i < lines, "flag line {i} of {lines}");
        // SAFETY: inside the page-aligned mapping; Line is 64 bytes of atomics (zero
        // is valid).
        unsafe { &*self.0.ptr().cast::<Line>().add(i) }
    }
}

/// After the producers were told to stop, with nothing to read just now: every
/// producer has exited and nothing is in flight (`Ok(true)`: the drain is over),
/// or not yet (`Ok(false)`), or a minute has passed since `since` (an error).
pub fn drained(
    producers: &mut [ChildGuard],
    seg: &shmring::Segment,
    since: std::time::Instant,
) -> Result<bool, String> {
    let all_done = producers
        .iter_mut()
        .all(|k| k.is_reaped() || k.exited().is_some());
    if all_done && seg.stats().records_in_flight == 0 {
        return Ok(true);
    }
    if since.elapsed() > Duration::from_secs(60) {
        return Err("drain timed out".into());
    }
    Ok(false)
}

// ---- process memory --------------------------------------------------------------------

/// Resident memory of a process from /proc/PID/status, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rss {
    pub vm_rss: u64,
    /// RssAnon + RssFile (everything but shared memory).
    pub private: u64,
}

pub fn read_rss(pid: i32) -> Option<Rss> {
    let m = shmring_host::proc_memory(Some(u32::try_from(pid).ok()?))?;
    Some(Rss {
        vm_rss: m.rss_kb * 1024,
        private: m.rss_without_shmem_kb() * 1024,
    })
}

// ---- statistics ------------------------------------------------------------------------

/// The `q` quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e6 * 1000.0).round() / 1000.0
}

// ---- the report ----------------------------------------------------------------------

/// What a subcommand measured and which properties held.
pub struct Report {
    command: &'static str,
    figures: serde_json::Map<String, serde_json::Value>,
    checks: Vec<(String, bool, String)>,
    notes: Vec<String>,
}

impl Report {
    pub fn new(command: &'static str) -> Report {
        Report {
            command,
            figures: serde_json::Map::new(),
            checks: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn fig(&mut self, key: &str, v: impl Into<serde_json::Value>) {
        self.figures.insert(key.to_string(), v.into());
    }

    /// Records a property: `ok` and what was observed.
    pub fn check(&mut self, name: &str, ok: bool, detail: impl Into<String>) -> bool {
        self.checks.push((name.to_string(), ok, detail.into()));
        ok
    }

    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.1)
    }

    /// Prints the report (and the JSON line); returns the exit code.
    pub fn finish(self, json: bool) -> i32 {
        let ok = self.ok();
        println!("== shmring-verify {} ==", self.command);
        for (k, v) in &self.figures {
            println!("  {k:<28} {v}");
        }
        for n in &self.notes {
            println!("  note: {n}");
        }
        for (name, pass, detail) in &self.checks {
            println!(
                "  [{}] {name}: {detail}",
                if *pass { "PASS" } else { "FAIL" }
            );
        }
        println!("result: {}", if ok { "PASS" } else { "FAIL" });
        if json {
            let failed: Vec<&str> = self
                .checks
                .iter()
                .filter(|c| !c.1)
                .map(|c| c.0.as_str())
                .collect();
            let v = serde_json::json!({
                "command": self.command,
                "ok": ok,
                "failed": failed,
                "checks": self.checks.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
                "figures": self.figures,
            });
            println!("{v}");
        }
        if ok {
            0
        } else {
            1
        }
    }
}

/// Exits the process with a message if a call runs far past its deadline (the
/// consumer must never hang): arm before each call, disarm after.
pub struct Watchdog {
    started_ns: std::sync::Arc<AtomicU64>,
}

impl Watchdog {
    pub fn new(what: &'static str, limit: Duration) -> Watchdog {
        let started_ns = std::sync::Arc::new(AtomicU64::new(0));
        let s = started_ns.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let t = s.load(Ordering::Relaxed);
            if t != 0 && shmring::now_ns().saturating_sub(t) > limit.as_nanos() as u64 {
                eprintln!("shmring-verify: FAIL: {what} did not return within {limit:?} (hang)");
                println!("result: FAIL ({what} hung)");
                std::process::exit(1);
            }
        });
        Watchdog { started_ns }
    }
    pub fn arm(&self) {
        self.started_ns.store(shmring::now_ns(), Ordering::Relaxed);
    }
    pub fn disarm(&self) {
        self.started_ns.store(0, Ordering::Relaxed);
    }
}
