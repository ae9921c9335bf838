//! Thin wrappers over the system calls shmring makes, one purpose per module.

pub mod fdpass;
pub mod futex;
pub mod lock;
pub mod sigbus;
pub mod unix;

/// Nanoseconds of `CLOCK_MONOTONIC`: the clock record timestamps use by default.
///
/// Read through the C library, whose vDSO entry the dynamic loader resolved at
/// start-up: no system call, and none on the first read either. (rustix finds the
/// vDSO itself on its first clock read, with `prctl(PR_GET_AUXV)`, which a
/// browser renderer's seccomp policy answers with SIGSYS: a producer attaching
/// inside such a sandbox died there.)
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
