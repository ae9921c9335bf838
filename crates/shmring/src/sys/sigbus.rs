//! Turns a peer's truncation of a named segment from a SIGBUS crash into an error.
//!
//! A memfd segment is sealed, so nobody can resize it. A named segment
//! (`/dev/shm/NAME`) cannot be sealed: any process able to open it can `ftruncate`
//! it, and touching a page past the new end raises SIGBUS, which kills the process.
//!
//! Every mapping of a named segment is registered here. One process-wide SIGBUS
//! handler, installed the first time a named segment is mapped, looks up the faulting
//! address: inside a registered mapping, it maps anonymous zero pages over the whole
//! mapping (`MAP_FIXED`, so the address range stays ours and nothing else moves) and
//! flags it; the faulting access is then retried and reads zeros. Whoever maps the
//! ring learns of it from [`Guard::tripped`], which the consumer and producers check after
//! touching the ring, and reports [`crate::Error::Truncated`]. A fault outside every
//! registered mapping goes to the handler that was installed before ours, or, if
//! there was none, kills the process as SIGBUS always did.
//!
//! Memfd segments register nothing and install no handler: a sandboxed producer
//! attached from a descriptor keeps its signal dispositions untouched.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Registered mappings at once (named segments mapped by this process).
const RANGES: usize = 256;

struct Range {
    start: AtomicUsize,
    len: AtomicUsize,
    tripped: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Range = Range {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    tripped: AtomicBool::new(false),
};
static TABLE: [Range; RANGES] = [EMPTY; RANGES];

/// The disposition SIGBUS had before ours: where foreign faults go.
struct Previous(libc::sigaction);
// SAFETY: a plain C struct of integers and function addresses, written once before
// our handler is installed and only read afterwards.
unsafe impl Sync for Previous {}
// SAFETY: as for `Sync`: nothing in it belongs to a thread.
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Result<Previous, i32>> = OnceLock::new();

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for r in &TABLE {
        // Acquire: pairs with the Release stores of `register`.
        let start = r.start.load(Ordering::Acquire);
        let len = r.len.load(Ordering::Acquire);
        if start != 0 && start != usize::MAX && addr.wrapping_sub(start) < len {
            // SAFETY: replaces exactly a registered segment mapping, which its
            // Segment owns and unmaps after unregistering it; mmap is a plain system
            // call, async-signal-safe on Linux.
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                r.tripped.store(true, Ordering::Release);
                return; // the access is retried and reads zeros
            }
        }
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to the previous disposition.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = match PREVIOUS.get() {
        Some(Ok(p)) => &p.0,
        _ => return default_action(sig),
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return default_action(sig);
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so this is its
        // three-argument signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: installed without SA_SIGINFO: the one-argument signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Restores the default action; returning retries the access, which faults again
/// and ends the process with SIGBUS, as if we had never been installed.
fn default_action(sig: libc::c_int) {
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

fn install() -> Result<(), i32> {
    PREVIOUS
        .get_or_init(|| {
            // SAFETY: sigaction with zeroed structs we own; the handler is
            // async-signal-safe (atomics and mmap only).
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_sigbus as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(libc::SIGBUS, &sa, &mut old) != 0 {
                    return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
                }
                Ok(Previous(old))
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(|e| *e)
}

/// A registered mapping; unregistered on drop (before the mapping goes).
#[derive(Debug)]
pub struct Guard {
    index: usize,
}

/// Registers `len` bytes at `base`. `Err` names why not: the handler could not be
/// installed (errno), or every entry is in use (`None`).
pub fn register(base: *const u8, len: usize) -> Result<Guard, Option<i32>> {
    install().map_err(Some)?;
    for (index, r) in TABLE.iter().enumerate() {
        // AcqRel: claims the entry exclusively against other registering threads.
        if r.start
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            r.tripped.store(false, Ordering::Relaxed);
            // Release: the handler sees len before it sees a real start.
            r.len.store(len, Ordering::Release);
            r.start.store(base as usize, Ordering::Release);
            return Ok(Guard { index });
        }
    }
    Err(None)
}

impl Guard {
    /// Has a fault in this mapping been absorbed (the segment was truncated under
    /// us; the mapping now reads zeros and is no longer shared)?
    pub fn tripped(&self) -> bool {
        // Acquire: pairs with the handler's Release store.
        TABLE[self.index].tripped.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let r = &TABLE[self.index];
        // Release: the entry is empty before the mapping is unmapped by our caller.
        r.start.store(0, Ordering::Release);
        r.len.store(0, Ordering::Release);
    }
}
