use super::*;

/// Waiter: announce, fence, and return the value to sleep on.
#[inline]
pub fn arm(f: &Futex) -> u32 {
    f.waiting.fetch_add(1, Ordering::Relaxed);
    // SeqCst: order the announcement before the caller's re-check.
    fence(Ordering::SeqCst);
    f.seq.load(Ordering::Acquire)
}

/// Waiter: done waiting.
#[inline]
pub fn disarm(f: &Futex) {
    f.waiting.fetch_sub(1, Ordering::Relaxed);
}

/// Waker, after its change and a SeqCst fence (one fence may serve several
/// words): should the waiter on `f` be woken? If so `seq` is bumped (Release).
/// `past`: `None` for a word whose `need` is not a wake mark (the space futex).
#[inline]
pub fn signal_fenced(f: &Futex, past: Option<&mut dyn FnMut(u32) -> bool>) -> bool {
    if !wanted(f, past) {
        return false;
    }
    f.seq.fetch_add(1, Ordering::Release);
    true
}

/// Both wakers' first look (after their fence): someone waits on `f`, and its
/// wake mark, if `past` reads one, is reached. Relaxed loads: the caller's fence
/// orders its change before them.
#[inline]
fn wanted(f: &Futex, past: Option<&mut dyn FnMut(u32) -> bool>) -> bool {
    if f.waiting.load(Ordering::Relaxed) == 0 {
        return false;
    }
    match past {
        Some(past) => {
            let mark = f.need.load(Ordering::Relaxed);
            mark == 0 || past(mark)
        }
        None => true,
    }
}

/// Waker: fence, then [`signal_fenced`].
#[inline]
pub fn signal(f: &Futex, past: Option<&mut dyn FnMut(u32) -> bool>) -> bool {
    // SeqCst: order our change (a commit, a release) before reading the flag.
    fence(Ordering::SeqCst);
    signal_fenced(f, past)
}

/// The same handshake for a word with one waiter at most (the ring's consumer
/// on the data futex), whose `waiting` is a flag the first waker takes: of
/// several wakers while the waiter sleeps (producers committing in a burst),
/// one bumps `seq` and makes the system call, the others see the flag clear.
/// Waiter: raise the flag, fence, and return the value to sleep on.
#[inline]
pub fn arm_one(f: &Futex) -> u32 {
    f.waiting.store(1, Ordering::Relaxed);
    // SeqCst: order the flag before the caller's re-check.
    fence(Ordering::SeqCst);
    f.seq.load(Ordering::Acquire)
}

/// Waiter of [`arm_one`]: done waiting (the flag may be clear already).
#[inline]
pub fn disarm_one(f: &Futex) {
    f.waiting.store(0, Ordering::Relaxed);
}

/// Waker of [`arm_one`], after its change and a SeqCst fence: like
/// [`signal_fenced`], but only the waker that takes the flag (a swap to 0)
/// bumps `seq` and returns true.
#[inline]
pub fn signal_one_fenced(f: &Futex, past: Option<&mut dyn FnMut(u32) -> bool>) -> bool {
    if !wanted(f, past) {
        return false;
    }
    // Relaxed: the fence before the load above orders our change; the swap
    // only decides which waker makes the call.
    if f.waiting.swap(0, Ordering::Relaxed) == 0 {
        return false;
    }
    f.seq.fetch_add(1, Ordering::Release);
    true
}

/// Waker of [`arm_one`]: fence, then [`signal_one_fenced`].
#[inline]
pub fn signal_one(f: &Futex, past: Option<&mut dyn FnMut(u32) -> bool>) -> bool {
    // SeqCst: order our change before reading the flag.
    fence(Ordering::SeqCst);
    signal_one_fenced(f, past)
}
