//! The `wakeup` reference row: a futex ping-pong between the two processes through
//! one shared page, no ring and no payload. The producer stamps the time, bumps
//! the ping word and wakes the consumer, which records how long it took to be
//! running again and answers on the pong word; the producer waits for the answer
//! before its next ping, on the same schedule as the other rows' frames. Every
//! wait is a real sleep in the kernel: this is the wake-up latency beneath every
//! transport's figures.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::args::WorkerArgs;
use crate::kit::{fd_arg, produce, ready, Checker, Res, STALL};
use crate::report::WorkerReport;

/// The shared page.
#[repr(C)]
struct Page {
    ping: AtomicU32,
    pong: AtomicU32,
    /// When the last ping was sent (CLOCK_MONOTONIC ns).
    sent_ns: AtomicU64,
    /// Set with the last ping: the run is over.
    done: AtomicU32,
}

/// Bytes of the shared memory the parent creates.
pub const PAGE: usize = 4096;

struct Shared {
    ptr: *mut Page,
}

impl Shared {
    fn map(a: &WorkerArgs) -> Res<Shared> {
        let fd = fd_arg(a)?;
        use std::os::fd::AsRawFd;
        // SAFETY: maps PAGE bytes of the memfd the parent sized to PAGE; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "cannot map the shared page: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Shared {
            ptr: p as *mut Page,
        })
    }
    fn page(&self) -> &Page {
        // SAFETY: a live, page-aligned shared mapping of at least size_of::<Page>()
        // bytes, only ever accessed through atomics.
        unsafe { &*self.ptr }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmaps our own mapping; no reference to it outlives self.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, PAGE) };
    }
}

/// Sleeps while `*w == val` (at most `timeout`); a shared (not private) futex.
fn futex_wait(w: &AtomicU32, val: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 in shared memory; spurious returns
    // are fine, the callers look again.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 in shared memory.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Waits until `w` is no longer `val`; false after STALL.
fn wait_change(w: &AtomicU32, val: u32) -> bool {
    let until = shmring::now_ns() + STALL.as_nanos() as u64;
    while w.load(Ordering::Acquire) == val {
        let now = shmring::now_ns();
        if now >= until {
            return false;
        }
        futex_wait(w, val, Duration::from_nanos(until - now));
    }
    true
}

pub fn producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let shared = Shared::map(a)?;
    let pg = shared.page();
    let ping = |n: u32| {
        pg.sent_ns.store(shmring::now_ns(), Ordering::Relaxed);
        pg.ping.store(n, Ordering::Release);
        futex_wake(&pg.ping);
    };
    let mut rep = produce(a, |_, seq| {
        let n = seq as u32 + 1;
        ping(n);
        if wait_change(&pg.pong, n - 1) {
            Ok(())
        } else {
            Err(format!("no answer for {} s", STALL.as_secs()))
        }
    })?;
    pg.done.store(1, Ordering::Release);
    ping(rep.frames as u32 + 1);
    rep.bytes = 0;
    Ok(rep)
}

pub fn consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    let shared = Shared::map(a)?;
    let pg = shared.page();
    let mut ck = Checker::new(0);
    ready();
    ck.begin();
    let mut seen = 0u32;
    loop {
        if !wait_change(&pg.ping, seen) {
            return Err(format!(
                "no ping for {} s after {} pings",
                STALL.as_secs(),
                ck.frames()
            ));
        }
        let now = shmring::now_ns();
        seen = pg.ping.load(Ordering::Acquire);
        if pg.done.load(Ordering::Acquire) != 0 {
            break;
        }
        ck.frame(
            u64::from(seen - 1),
            u64::from(u32::MAX),
            pg.sent_ns.load(Ordering::Relaxed),
            now,
            &[],
        );
        pg.pong.store(seen, Ordering::Release);
        futex_wake(&pg.pong);
    }
    Ok(ck.finish())
}

/// A shared page for the two sides (a sealed-size memfd).
pub fn page() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a valid C string; the descriptor is ours.
    let fd = unsafe { libc::memfd_create(c"shmring-bench-wakeup".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizes our own memfd.
    if unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), PAGE as libc::off_t) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}
