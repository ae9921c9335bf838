//! Wake-ups: "data ready" (producers → consumer) and "space free" (consumer →
//! producers), each a futex word in the segment plus a waiting flag, so that no side
//! makes a system call while the other is awake.
//!
//! The waiter sets `waiting`, issues a SeqCst fence, reads `seq`, re-checks its
//! condition, then sleeps on `seq`. The waker makes its change, issues a SeqCst
//! fence, and reads `waiting`; only if set does it bump `seq` and wake. The two
//! fences order the flag store before the condition load on one side and the change
//! before the flag load on the other, so at least one side sees the other: either
//! the waiter sees the change and does not sleep, or the waker sees the flag, and
//! its bump of `seq` makes the sleep return at once (or wakes it).
//!
//! With an eventfd ring ([`crate::Config::eventfd`]) producers also write to the
//! eventfd, so a consumer can sleep in epoll/asyncio/tokio instead of the futex.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use crate::layout::Futex;
use crate::protocol::handshake;
use crate::sync::{fence, Ordering};
use crate::sys::futex;

/// Signals a waiter on `f`, if any; `eventfd` too when given. Returns whether a
/// wake-up was sent. (The handshake itself: [`handshake`].)
#[inline]
pub(crate) fn notify(f: &Futex, all: bool, eventfd: Option<BorrowedFd<'_>>) -> bool {
    if !handshake::signal(f, None) {
        return false;
    }
    wake(f, if all { i32::MAX as u32 } else { 1 }, eventfd);
    true
}

/// Signals the ring's consumer (the one waiter of the data futex) if it sleeps,
/// through `eventfd` when given: see [`handshake::signal_one`].
#[inline]
pub(crate) fn notify_one(f: &Futex, eventfd: Option<BorrowedFd<'_>>) -> bool {
    if !handshake::signal_one(f, None) {
        return false;
    }
    wake(f, 1, eventfd);
    true
}

fn wake(f: &Futex, n: u32, eventfd: Option<BorrowedFd<'_>>) {
    match eventfd {
        Some(fd) => {
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
        None => futex::wake(&f.seq, n),
    }
}

/// After a commit: signals the ring's consumer (on `data`, and `eventfd` when
/// given) and every tethered consumer (on `tethers`) that sleeps, with one fence.
/// A consumer sleeping under a latency budget set a wake mark (`data.need`, in
/// units): it is woken only when `past(mark)` says the ring is filled past it (it
/// wakes on its own timer otherwise). Returns whether a wake-up was sent. With no
/// tethered consumer asleep this costs what [`notify`] costs, plus one load from a
/// line nobody writes.
#[inline]
pub(crate) fn notify_consumers(
    data: &Futex,
    tethers: &Futex,
    eventfd: Option<BorrowedFd<'_>>,
    mut past: impl FnMut(u32) -> bool,
) -> bool {
    // SeqCst: order our commit before reading the flags (see the module doc).
    fence(Ordering::SeqCst);
    let mut sent = false;
    if handshake::signal_one_fenced(data, Some(&mut past)) {
        wake(data, 1, eventfd);
        sent = true;
    }
    if handshake::signal_fenced(tethers, None) {
        wake(tethers, i32::MAX as u32, None);
        sent = true;
    }
    sent
}

/// Announces a waiter on `f` and returns the value to sleep on. Call [`disarm`]
/// after the wait (or when the re-check succeeds).
#[inline]
pub(crate) fn arm(f: &Futex) -> u32 {
    handshake::arm(f)
}

#[inline]
pub(crate) fn disarm(f: &Futex) {
    handshake::disarm(f)
}

/// [`arm`] for the data futex, whose one waiter is the ring's consumer (see
/// [`handshake::arm_one`]); [`disarm_one`] after the wait.
#[inline]
pub(crate) fn arm_one(f: &Futex) -> u32 {
    handshake::arm_one(f)
}

#[inline]
pub(crate) fn disarm_one(f: &Futex) {
    handshake::disarm_one(f)
}

/// Sleeps on `f` while its value is `seen`, at most `timeout`; the caller then looks
/// again.
pub(crate) fn sleep(f: &Futex, seen: u32, timeout: Duration) {
    futex::wait(&f.seq, seen, timeout);
}

/// Sleeps until `fd` (an eventfd) is readable, at most `timeout`, and drains it.
pub(crate) fn sleep_eventfd(fd: impl AsFd, timeout: Duration) {
    use rustix::event::{poll, PollFd, PollFlags};
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    if !matches!(poll(&mut fds, Some(&ts)), Ok(0)) {
        drain_eventfd(fd);
    }
}

/// Reads an eventfd's counter to zero without blocking (it must be non-blocking).
pub(crate) fn drain_eventfd(fd: impl AsFd) {
    let mut buf = [0u8; 8];
    let _ = rustix::io::read(fd, &mut buf);
}
