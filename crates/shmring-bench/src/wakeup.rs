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
use shmring_host::{futex_wait, futex_wake, SharedMemory};

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

/// The page, mapped from the descriptor the parent passed.
struct Shared(SharedMemory);

impl Shared {
    fn map(a: &WorkerArgs) -> Res<Shared> {
        let m = SharedMemory::map(fd_arg(a)?)
            .map_err(|e| format!("cannot map the shared page: {e}"))?;
        if m.len() < std::mem::size_of::<Page>() {
            return Err(format!("the shared page has {} bytes", m.len()));
        }
        Ok(Shared(m))
    }
    fn page(&self) -> &Page {
        // SAFETY: a live, page-aligned shared mapping of at least size_of::<Page>()
        // bytes (checked in `map`), only ever accessed through atomics.
        unsafe { &*(self.0.ptr() as *const Page) }
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
        futex_wait(w, val, Some(Duration::from_nanos(until - now)));
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

/// A shared page for the two sides: its descriptor, handed to both workers.
pub fn page() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    SharedMemory::create(c"shmring-bench-wakeup", PAGE)?
        .as_fd()
        .try_clone_to_owned()
}
