//! Shared (not process-private) futex waits and wakes on words in the segment.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::thread::futex::{self, Flags, Timespec};

/// Sleeps while `*word == expected`, at most `timeout`. However it ends (woken, the
/// word already differed, a signal, the timeout), the caller looks again.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    let _ = futex::wait(word, Flags::empty(), expected, Some(&ts));
}

/// Wakes up to `n` waiters on `word` in any process.
pub fn wake(word: &AtomicU32, n: u32) {
    let _ = futex::wake(word, Flags::empty(), n);
}
