//! `sigbus`: can a peer resize the segment under the consumer?
//!
//! * memfd segments: a producer's `ftruncate` (shrink or grow) must fail with
//!   EPERM (sealed).
//! * named segments: a peer that can open `/dev/shm/NAME` can truncate it, and the
//!   consumer touching a page past the new end gets SIGBUS. Shown with an unguarded
//!   consumer process (killed by SIGBUS), then with [`TruncationGuard`], a
//!   mitigation that needs no change to the core: a SIGBUS handler that, for a fault
//!   inside a guarded segment's mapping, maps anonymous zero pages over the whole
//!   mapping (as Wayland compositors do for client buffers) and flags the segment;
//!   the consumer's reads then see an empty ring and the application learns from
//!   [`TruncationGuard::check`] (also an `fstat` size check) that a peer truncated
//!   the segment.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use shmring::{Config, Meta, Segment};

use crate::common::{spawn_cmd, Report, ShmName};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

// ---- the mitigation ----------------------------------------------------------------

struct Range {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

const RANGES: usize = 16;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Range = Range {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};
static GUARDED: [Range; RANGES] = [EMPTY; RANGES];
static INSTALL: Once = Once::new();

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for r in &GUARDED {
        let (s, l) = (
            r.start.load(Ordering::Acquire),
            r.len.load(Ordering::Acquire),
        );
        if s != 0 && addr >= s && addr < s + l {
            // SAFETY: replaces (MAP_FIXED) exactly the guarded segment's own
            // mapping, which the Segment owns and unmaps later; mmap is a plain
            // system call, safe in a signal handler on Linux.
            let p = unsafe {
                libc::mmap(
                    s as *mut libc::c_void,
                    l,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                r.faulted.store(true, Ordering::Release);
                return; // the faulting access is retried and reads zeros
            }
        }
    }
    // Not ours: restore the default action; the access faults again and kills.
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}

/// Turns a peer's truncation of a segment from a SIGBUS crash into an error.
pub struct TruncationGuard {
    seg: Arc<Segment>,
    slot: usize,
    expected: u64,
}

/// The segment was truncated (or the mapping faulted) under us.
#[derive(Debug)]
pub struct Truncated {
    pub expected: u64,
    pub found: u64,
    pub faulted: bool,
}

impl TruncationGuard {
    pub fn install(seg: &Arc<Segment>) -> std::io::Result<TruncationGuard> {
        let mut err = None;
        INSTALL.call_once(|| {
            // SAFETY: installs a handler (SA_SIGINFO) for SIGBUS; the struct is zeroed
            // and filled before use.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_sigbus as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
                    err = Some(std::io::Error::last_os_error());
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        let (base, len) = seg.mapping();
        for (i, r) in GUARDED.iter().enumerate() {
            if r.start
                .compare_exchange(0, base as usize, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                r.faulted.store(false, Ordering::Release);
                r.len.store(len, Ordering::Release);
                return Ok(TruncationGuard {
                    seg: seg.clone(),
                    slot: i,
                    expected: len as u64,
                });
            }
        }
        Err(std::io::Error::other("too many guarded segments"))
    }

    /// Call after every consumer call (or wake-up): an error means a peer changed the
    /// segment's size; the ring is unusable (reads see zeros).
    pub fn check(&self) -> Result<(), Truncated> {
        let faulted = GUARDED[self.slot].faulted.load(Ordering::Acquire);
        let found = file_size(self.seg.fd()).unwrap_or(0);
        if faulted || found < self.expected {
            return Err(Truncated {
                expected: self.expected,
                found,
                faulted,
            });
        }
        Ok(())
    }
}

impl Drop for TruncationGuard {
    fn drop(&mut self) {
        let r = &GUARDED[self.slot];
        r.len.store(0, Ordering::Release);
        r.start.store(0, Ordering::Release);
    }
}

fn file_size(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    // SAFETY: fstat into a zeroed struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

// ---- child roles -------------------------------------------------------------------

/// A producer process tries to shrink and grow the memfd it was given.
pub fn child_resize(fd: i32) -> i32 {
    let seg = match crate::child::attach_fd(fd) {
        Ok(s) => s,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    let _prod = seg.producer();
    let size = seg.mapping().1 as libc::off_t;
    let try_size = |n: libc::off_t| -> i32 {
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(seg.fd().as_raw_fd(), n) } == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
    };
    let (shrink, grow) = (try_size(size / 2), try_size(size * 2));
    println!("shrink={shrink} grow={grow}");
    if shrink == libc::EPERM && grow == libc::EPERM {
        0
    } else {
        1
    }
}

/// A consumer process of a named segment: READY, waits for a line on stdin, then
/// reads (the parent truncated the file meanwhile).
pub fn child_named_consumer(name: &str, guard: bool) -> i32 {
    let seg = match Segment::open_named(name) {
        Ok(s) => s,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    let consumer = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    let g = if guard {
        match TruncationGuard::install(&seg) {
            Ok(g) => Some(g),
            Err(e) => {
                println!("ERR {e}");
                return 2;
            }
        }
    } else {
        None
    };
    if let Some(g) = &g {
        if let Err(t) = g.check() {
            println!("ERR false alarm before truncation: {t:?}");
            return 3;
        }
    }
    println!("READY");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let mut outcome = Vec::new();
    for _ in 0..3 {
        match consumer.next_timeout(Some(Duration::from_millis(20))) {
            Ok(Some(f)) => outcome.push(format!("frame {}", f.len())),
            Ok(None) => outcome.push("none".into()),
            Err(e) => outcome.push(format!("error {e}")),
        }
    }
    match &g {
        Some(g) => match g.check() {
            Err(t) => {
                println!(
                    "TRUNCATED expected={} found={} faulted={} reads={outcome:?}",
                    t.expected, t.found, t.faulted
                );
                0
            }
            Ok(()) => {
                println!("UNDETECTED reads={outcome:?}");
                1
            }
        },
        None => {
            println!("SURVIVED reads={outcome:?}");
            0
        }
    }
}

// ---- the checks ----------------------------------------------------------------------

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("sigbus");
    // 1. Sealed memfd.
    match Segment::create_memfd("verify-seals", &Config::with_capacity(1 << 20)) {
        Ok(seg) => {
            let fd = seg.fd().as_raw_fd();
            let mut cmd = Command::new(std::env::current_exe().expect("own path"));
            cmd.args(["child-resize", &format!("--fd={fd}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped());
            let out = spawn_cmd(cmd, &[fd]).map(|mut k| {
                let mut s = String::new();
                if let Some(o) = k.child.stdout.take() {
                    let _ = BufReader::new(o).read_line(&mut s);
                }
                (k.wait_exit(Duration::from_secs(20)), s)
            });
            let size_after = file_size(seg.fd()).unwrap_or(0);
            let (st, line) = match out {
                Ok(x) => x,
                Err(e) => (None, format!("spawn: {e}")),
            };
            rep.fig("memfd_resize_by_producer", line.trim().to_string());
            rep.check(
                "a producer cannot resize a memfd segment (EPERM)",
                st.is_some_and(|s| s.success()) && size_after == seg.mapping().1 as u64,
                format!(
                    "child reported {:?} (EPERM = {}); size after {size_after}",
                    line.trim(),
                    libc::EPERM
                ),
            );
        }
        Err(e) => {
            rep.check(
                "a producer cannot resize a memfd segment (EPERM)",
                false,
                e.to_string(),
            );
        }
    }
    // 2. Named segment truncated under a consumer, without and with the guard.
    for guard in [false, true] {
        let (status, line) = truncate_under_consumer(guard);
        if guard {
            rep.fig("named_truncated_guarded", line.clone());
            rep.check(
                "guarded consumer survives truncation and reports it",
                status.as_ref().is_some_and(|s| s.success()) && line.starts_with("TRUNCATED"),
                format!("child: {line:?}, exit {status:?}"),
            );
        } else {
            let sigbus = status.as_ref().and_then(|s| s.signal()) == Some(libc::SIGBUS);
            rep.fig(
                "named_truncated_unguarded",
                if sigbus {
                    "consumer killed by SIGBUS".to_string()
                } else {
                    format!("{line} ({status:?})")
                },
            );
            rep.note(
                "named segments: an unguarded consumer is killed by SIGBUS when a peer truncates \
                 the file (documented: named segments are for same-user cooperating processes)",
            );
            rep.check(
                "truncation of a named segment is reproduced (unguarded consumer dies of SIGBUS)",
                sigbus,
                format!("child: {line:?}, exit {status:?}"),
            );
        }
    }
    rep.finish(a.json)
}

/// Creates a named segment with one committed record, starts a consumer process,
/// truncates the file to one page, and lets the consumer read. Returns the child's
/// exit status and its last line.
fn truncate_under_consumer(guard: bool) -> (Option<std::process::ExitStatus>, String) {
    let name = ShmName::new(if guard { "trunc-guard" } else { "trunc" });
    let seg = match Segment::create_named(&name.0, &Config::with_capacity(64 << 10)) {
        Ok(s) => s,
        Err(e) => return (None, format!("create: {e}")),
    };
    let mut prod = match seg.producer() {
        Ok(p) => p,
        Err(e) => return (None, format!("producer: {e}")),
    };
    if let Err(e) = prod.send(&[7u8; 3000], Meta::new(0, 0)) {
        return (None, format!("send: {e}"));
    }
    // Detach now: after the truncation, this process must not touch the mapping
    // either (a detach writes the slot table, past the new end of the file).
    drop(prod);
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.args(["child-named-consumer", &format!("--name={}", name.0)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if guard {
        cmd.arg("--guard");
    }
    let mut kid = match spawn_cmd(cmd, &[]) {
        Ok(k) => k,
        Err(e) => return (None, format!("spawn: {e}")),
    };
    let mut out = BufReader::new(kid.child.stdout.take().expect("piped"));
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    if line.trim() != "READY" {
        return (
            kid.wait_exit(Duration::from_secs(10)),
            line.trim().to_string(),
        );
    }
    // The peer's move: truncate to one page.
    let truncated = std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .and_then(|f| f.set_len(4096));
    if let Err(e) = truncated {
        return (None, format!("truncate: {e}"));
    }
    if let Some(mut i) = kid.child.stdin.take() {
        let _ = i.write_all(b"go\n");
    }
    line.clear();
    let _ = out.read_line(&mut line);
    (
        kid.wait_exit(Duration::from_secs(20)),
        line.trim().to_string(),
    )
}
