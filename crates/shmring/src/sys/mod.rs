//! Thin wrappers over the system calls shmring makes, one purpose per module.

pub mod fdpass;
pub mod futex;
pub mod lock;
pub mod sigbus;
pub mod unix;

/// Nanoseconds of `CLOCK_MONOTONIC`: the clock record timestamps use by default.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

static FORKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many times this process's ancestry forked into it: 0 in the process that
/// first called this, bumped in a child by a `pthread_atfork` handler. Lets a
/// process tell its own records from ones inherited through `fork` without a
/// system call (after the first call, which registers the handler).
pub fn forks() -> u32 {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add, which is
        // async-signal-safe, as a handler run in a forked child must be.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}
