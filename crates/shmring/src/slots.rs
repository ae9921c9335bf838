//! Producer slots and the consumer role: who is attached, and who is alive.
//!
//! Liveness is a POSIX record lock on one byte per slot (see [`crate::sys::lock`]).
//! The lock comes first: a producer takes slot `i` by taking lock byte `i` and only
//! then, holding it, moving the slot FREE → ACTIVE. Detaching stores FREE, then
//! unlocks. So a slot that is not FREE while nobody holds its byte has a dead holder
//! (or was scribbled), and [`reap`] frees it once no claim of that slot is
//! outstanding, so a dead producer's claim is always attributed to a dead holder.
//! Record locks cannot arbitrate between producers of one process; a process-wide
//! mutex does that, and the process remembers the roles it holds in private memory
//! ([`crate::segment::LocalRoles`]), never in the segment, where a peer could
//! forge them.

use crate::error::{Error, Result};
use crate::layout::{cursor_seq, seq_diff, ClaimState, LogEntry, SEQ_MASK, SLOT_ACTIVE, SLOT_FREE};
use crate::segment::files::{attach_guard, LocalRoles};
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::sys::lock::{self, LOCK_BASE};

pub(crate) fn slot_byte(slot: u32) -> i64 {
    LOCK_BASE + 1 + slot as i64
}

/// Is the role whose lock byte is `byte` held by a live process? A kernel-held
/// fact: this process's own record of its roles (`mine`), or a write lock another
/// process holds on the ring's lock file (read locks, which a read-only descriptor
/// could take, are not looked at: see [`lock::held_by_other`]). A read-only view of
/// a memfd ring has no lock file and answers what the ring `reported` instead.
pub(crate) fn held(
    seg: &Segment,
    byte: i64,
    mine: impl FnOnce(&LocalRoles) -> bool,
    reported: impl FnOnce() -> bool,
) -> bool {
    match seg.locks() {
        Some(l) => mine(l.local()) || lock::held_by_other(l.fd(), byte),
        None => reported(),
    }
}

/// The pid the kernel reports for the holder of lock byte `byte` (this process's
/// own when `mine`), 0 when unknown or none.
pub(crate) fn holder(seg: &Segment, byte: i64, mine: impl FnOnce(&LocalRoles) -> bool) -> u32 {
    match seg.locks() {
        Some(l) if mine(l.local()) => rustix::process::getpid().as_raw_nonzero().get() as u32,
        Some(l) => lock::holder_pid(l.fd(), byte).unwrap_or(0),
        None => 0,
    }
}

/// Takes a free slot for a producer of this process.
pub(crate) fn acquire(seg: &Segment) -> Result<u32> {
    let _g = attach_guard();
    let locks = seg.lock_file();
    for pass in 0..2 {
        for i in 0..seg.geometry().max_producers {
            let s = seg.slot(i);
            // Acquire: see the previous holder's last writes (its counters).
            if s.state.load(Ordering::Acquire) != SLOT_FREE {
                continue;
            }
            // A live process holding the byte of a FREE slot is attaching or
            // detaching: leave it alone. Our own process holds no byte of a FREE slot
            // (we detach under the same mutex, FREE before unlock).
            match lock::try_lock(locks.fd(), slot_byte(i)) {
                Ok(true) => {}
                _ => continue,
            }
            // Holding the byte, nobody else can take this slot; check it is still FREE
            // (a reaper in another process may have just freed... it stays FREE).
            if s.state.load(Ordering::Acquire) != SLOT_FREE {
                lock::unlock(locks.fd(), slot_byte(i));
                continue;
            }
            locks.local().set_slot(i, true);
            s.open_claim.store(0, Ordering::Relaxed);
            s.space_waiting.store(0, Ordering::Relaxed);
            // Release: the token is visible before the slot reads ACTIVE.
            s.state.store(SLOT_ACTIVE, Ordering::Release);
            return Ok(i);
        }
        if pass == 0 && reap_locked(seg) == 0 {
            break;
        }
    }
    Err(Error::NoSlot {
        segment: seg.label(),
        max: seg.geometry().max_producers,
    })
}

/// Gives a slot back (its claims must be finished).
pub(crate) fn detach(seg: &Segment, slot: u32) {
    let _g = attach_guard();
    let s = seg.slot(slot);
    let locks = seg.lock_file();
    s.open_claim.store(0, Ordering::Relaxed);
    locks.local().set_slot(slot, false);
    // Release: our counters are visible to the next holder. FREE before unlock, so
    // nobody can see this slot non-FREE and unlocked while we are alive.
    s.state.store(SLOT_FREE, Ordering::Release);
    lock::unlock(locks.fd(), slot_byte(slot));
    locks.close_extras_if_idle();
}

/// Is the producer that owns `slot` alive? Used for a slot that owns a pending
/// claim (see [`held`]).
pub(crate) fn is_alive(seg: &Segment, slot: u32) -> bool {
    held(
        seg,
        slot_byte(slot),
        |l| l.has_slot(slot),
        || seg.slot(slot).state.load(Ordering::Relaxed) != SLOT_FREE,
    )
}

/// The pid holding `slot`'s lock, as the kernel reports it (0: unknown or none).
pub(crate) fn holder_pid(seg: &Segment, slot: u32) -> u32 {
    holder(seg, slot_byte(slot), |l| l.has_slot(slot))
}

/// Frees the slots of dead producers that have no outstanding claim, and takes
/// back their share of the space futex's waiting count. Returns how many.
pub(crate) fn reap(seg: &Segment) -> u32 {
    let _g = attach_guard();
    reap_locked(seg)
}

fn reap_locked(seg: &Segment) -> u32 {
    let sh = seg.shared();
    let n = seg.geometry().log_entries as u64;
    let read = cursor_seq(sh.read.load(Ordering::Acquire));
    let write = cursor_seq(sh.write.load(Ordering::Acquire));
    let span = seq_diff(write, read).min(n - 1);
    let mut freed = 0;
    for i in 0..seg.geometry().max_producers {
        let s = seg.slot(i);
        let state = s.state.load(Ordering::Acquire);
        if state == SLOT_FREE || is_alive(seg, i) {
            continue;
        }
        let outstanding = (0..=span).any(|d| {
            let k = (read + d) & SEQ_MASK;
            let e = LogEntry::unpack(sh.entry(k).load(Ordering::Acquire));
            e.stamp == k && e.slot == i && e.state == ClaimState::Claimed
        });
        if outstanding {
            continue;
        }
        if s.state
            .compare_exchange(state, SLOT_FREE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            if s.space_waiting.swap(0, Ordering::AcqRel) != 0 {
                let w = &seg.control().space.0.waiting;
                let _ = w.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
            }
            freed += 1;
            seg.control()
                .counters
                .0
                .reaped_slots
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    freed
}

/// Consumer role states.
pub(crate) const CONSUMER_NONE: u32 = 0;
pub(crate) const CONSUMER_ATTACHED: u32 = 1;

/// Becomes the ring's consumer, taking over from a dead one.
pub(crate) fn take_consumer(seg: &Segment) -> Result<()> {
    let _g = attach_guard();
    let role = &seg.control().consumer.0;
    let locks = seg.lock_file();
    if locks.local().is_consumer() {
        return Err(Error::ConsumerBusy(seg.label()));
    }
    match lock::try_lock(locks.fd(), LOCK_BASE) {
        Ok(true) => {}
        _ => return Err(Error::ConsumerBusy(seg.label())),
    }
    // Only the consumer waits on the data futex, and no consumer is waiting now: a
    // predecessor killed while asleep left its mark, which would make producers
    // send a wake-up with every commit from now on.
    seg.control().data.0.waiting.store(0, Ordering::Relaxed);
    locks.local().set_consumer(true);
    role.state.store(CONSUMER_ATTACHED, Ordering::Release);
    Ok(())
}

pub(crate) fn drop_consumer(seg: &Segment) {
    let _g = attach_guard();
    let role = &seg.control().consumer.0;
    let locks = seg.lock_file();
    role.state.store(CONSUMER_NONE, Ordering::Release);
    locks.local().set_consumer(false);
    lock::unlock(locks.fd(), LOCK_BASE);
    locks.close_extras_if_idle();
}

/// Is a consumer attached and alive? Its lock (or our own record) says; the role
/// word in the segment is consulted only by a read-only view of a memfd ring, which
/// has no lock file to look at (see [`held`]).
pub(crate) fn consumer_alive(seg: &Segment) -> bool {
    held(
        seg,
        LOCK_BASE,
        |l| l.is_consumer(),
        || seg.control().consumer.0.state.load(Ordering::Relaxed) == CONSUMER_ATTACHED,
    )
}

/// Number of live producers: slots in use whose producer is alive (dead ones not
/// reaped yet are not counted).
pub(crate) fn live_count(seg: &Segment) -> u32 {
    (0..seg.geometry().max_producers)
        .filter(|&i| seg.slot(i).state.load(Ordering::Relaxed) != SLOT_FREE && is_alive(seg, i))
        .count() as u32
}

impl Segment {
    /// Is a consumer attached and alive (in any process)? One `fcntl` call; a
    /// producer asks before counting a record as delivered, and `shmring rm` before
    /// removing a ring. A ring whose creator died has no live consumer.
    pub fn consumer_alive(&self) -> bool {
        consumer_alive(self)
    }
}
