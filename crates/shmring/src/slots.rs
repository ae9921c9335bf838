//! Producer slots and the consumer role: who is attached, and who is alive.
//!
//! A slot moves FREE → ATTACHING (CAS: arbitrates between everyone, including
//! producers of one process, which share record locks) → lock byte taken → ACTIVE.
//! A clean detach goes ACTIVE → RELEASING → unlock → FREE. A slot whose owner died
//! stays ACTIVE with its lock gone until [`reap`] frees it, which it does only once
//! no claim of that slot is outstanding, so a dead producer's claim can always be
//! attributed to a dead owner.

use crate::error::{Error, Result};
use crate::layout::{
    cursor_seq, seq_diff, ClaimState, LogEntry, SEQ_MASK, SLOT_ACTIVE, SLOT_ATTACHING, SLOT_FREE,
    SLOT_RELEASING,
};
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::sys::lock::{self, LOCK_BASE};

pub(crate) fn slot_byte(slot: u32) -> i64 {
    LOCK_BASE + 1 + slot as i64
}

/// Takes a free slot for a producer of this process.
pub(crate) fn acquire(seg: &Segment, token: u64) -> Result<u32> {
    for pass in 0..2 {
        for i in 0..seg.geometry().max_producers {
            let s = seg.slot(i);
            // Relaxed: a hint; the CAS below decides.
            if s.state.load(Ordering::Relaxed) != SLOT_FREE {
                continue;
            }
            // Acquire: see the previous owner's last writes (its counters).
            if s.state
                .compare_exchange(
                    SLOT_FREE,
                    SLOT_ATTACHING,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            match lock::try_lock(seg.lock_fd(), slot_byte(i)) {
                Ok(true) => {}
                Ok(false) | Err(_) => {
                    // Another process holds this byte (it cannot be a live owner of a
                    // FREE slot, but do not fight it): give the slot back.
                    s.state.store(SLOT_FREE, Ordering::Release);
                    continue;
                }
            }
            s.owner_token.store(token, Ordering::Relaxed);
            s.generation.fetch_add(1, Ordering::Relaxed);
            s.counters.attaches.fetch_add(1, Ordering::Relaxed);
            // Release: the token is visible before the slot reads ACTIVE.
            s.state.store(SLOT_ACTIVE, Ordering::Release);
            return Ok(i);
        }
        if pass == 0 && reap(seg, token) == 0 {
            break;
        }
    }
    Err(Error::NoSlot {
        segment: seg.name().to_string(),
        max: seg.geometry().max_producers,
    })
}

/// Gives a slot back (its claims must be finished).
pub(crate) fn release(seg: &Segment, slot: u32) {
    let s = seg.slot(slot);
    if s.state
        .compare_exchange(
            SLOT_ACTIVE,
            SLOT_RELEASING,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    {
        lock::unlock(seg.lock_fd(), slot_byte(slot));
        s.owner_token.store(0, Ordering::Relaxed);
        // Release: our counters are visible to the next owner.
        s.state.store(SLOT_FREE, Ordering::Release);
    }
}

/// Is the producer that owns `slot` alive? Used for a slot that owns a pending claim.
pub(crate) fn is_alive(seg: &Segment, slot: u32, my_token: u64) -> bool {
    let s = seg.slot(slot);
    if s.owner_token.load(Ordering::Acquire) == my_token {
        return true; // a producer of this very process
    }
    lock::held_by_other(seg.lock_fd(), slot_byte(slot))
}

/// Frees the slots of dead producers that have no outstanding claim. Returns how
/// many were freed.
pub(crate) fn reap(seg: &Segment, my_token: u64) -> u32 {
    let sh = seg.shared();
    let n = seg.geometry().log_entries as u64;
    let read = cursor_seq(sh.read.load(Ordering::Acquire));
    let write = cursor_seq(sh.write.load(Ordering::Acquire));
    let span = seq_diff(write, read).min(n - 1);
    let mut freed = 0;
    for i in 0..seg.geometry().max_producers {
        let s = seg.slot(i);
        if s.state.load(Ordering::Acquire) != SLOT_ACTIVE || is_alive(seg, i, my_token) {
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
            .compare_exchange(SLOT_ACTIVE, SLOT_FREE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
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

/// Serialises consumer attach/detach within this process (record locks cannot).
static CONSUMER_ATTACH: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Becomes the ring's consumer, taking over from a dead one.
pub(crate) fn take_consumer(seg: &Segment, token: u64) -> Result<()> {
    let _g = CONSUMER_ATTACH.lock().unwrap_or_else(|p| p.into_inner());
    let role = &seg.control().consumer.0;
    if role.state.load(Ordering::Acquire) == CONSUMER_ATTACHED
        && role.token.load(Ordering::Acquire) == token
    {
        return Err(Error::ConsumerBusy(seg.name().to_string()));
    }
    match lock::try_lock(seg.lock_fd(), LOCK_BASE) {
        Ok(true) => {}
        _ => return Err(Error::ConsumerBusy(seg.name().to_string())),
    }
    role.token.store(token, Ordering::Release);
    role.state.store(CONSUMER_ATTACHED, Ordering::Release);
    Ok(())
}

pub(crate) fn drop_consumer(seg: &Segment) {
    let _g = CONSUMER_ATTACH.lock().unwrap_or_else(|p| p.into_inner());
    let role = &seg.control().consumer.0;
    role.state.store(CONSUMER_NONE, Ordering::Release);
    role.token.store(0, Ordering::Release);
    lock::unlock(seg.lock_fd(), LOCK_BASE);
}

/// Is a consumer attached and alive?
pub(crate) fn consumer_alive(seg: &Segment, my_token: u64) -> bool {
    let role = &seg.control().consumer.0;
    if role.state.load(Ordering::Acquire) != CONSUMER_ATTACHED {
        return false;
    }
    role.token.load(Ordering::Acquire) == my_token || lock::held_by_other(seg.lock_fd(), LOCK_BASE)
}

/// Number of ACTIVE slots (live or not yet reaped).
pub(crate) fn active_count(seg: &Segment) -> u32 {
    (0..seg.geometry().max_producers)
        .filter(|&i| seg.slot(i).state.load(Ordering::Relaxed) == SLOT_ACTIVE)
        .count() as u32
}
