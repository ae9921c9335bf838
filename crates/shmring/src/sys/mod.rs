//! Thin wrappers over the system calls shmring makes, one purpose per module.

pub mod fdpass;
pub mod futex;
pub mod lock;
pub mod sigbus;
pub mod unix;

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds of `CLOCK_MONOTONIC`: the clock record timestamps use by default.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

static TOKEN: AtomicU64 = AtomicU64::new(0);
static TOKEN_PID: AtomicU64 = AtomicU64::new(0);

/// A random number naming this process in slot and consumer records, renewed after
/// `fork`. Record locks are per process, so a process cannot see its own locks with
/// `F_GETLK`; it recognises its own slots by this token instead.
pub fn process_token() -> u64 {
    let pid = rustix::process::getpid().as_raw_nonzero().get() as u64;
    if TOKEN_PID.load(Ordering::Acquire) == pid {
        let t = TOKEN.load(Ordering::Acquire);
        if t != 0 {
            return t;
        }
    }
    let mut buf = [0u8; 8];
    let t = match rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_le_bytes(buf) | 1,
        _ => (pid << 32) ^ now_ns() | 1,
    };
    TOKEN.store(t, Ordering::Release);
    TOKEN_PID.store(pid, Ordering::Release);
    t
}
