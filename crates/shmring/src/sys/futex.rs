//! Shared (not process-private) futex waits and wakes on words in the segment.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::thread::futex::{self, Flags, Timespec};

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// Woken, or the word already differed from `expected`, or a signal: look again.
    Maybe,
    /// The timeout passed.
    TimedOut,
}

/// Sleeps while `*word == expected`, at most `timeout`.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Woken {
    let ts = Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    match futex::wait(word, Flags::empty(), expected, Some(&ts)) {
        Err(rustix::io::Errno::TIMEDOUT) => Woken::TimedOut,
        _ => Woken::Maybe,
    }
}

/// Wakes up to `n` waiters on `word` in any process.
pub fn wake(word: &AtomicU32, n: u32) {
    let _ = futex::wake(word, Flags::empty(), n);
}
