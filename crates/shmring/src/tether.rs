//! Tethered consumers: up to [`MAX_TETHERS`] full consumers beside the ring's own,
//! each with its own cursors, every one of which must release a record before its
//! space is reused.
//!
//! ```text
//!   tethered consumer j                      the ring's consumer (the owner)
//!   -------------------                      -------------------------------
//!   lock byte j, line j: REQUESTED,
//!   line.read = ring read, mask |= bit j,
//!   wake the consumer          ─────────▶    sees bit j: line.read = owner read,
//!                                            line j: ACTIVE (adopted)
//!   reads from line.read on,   ◀─────────    from now on publishes as the ring's read
//!   publishes line.read                      cursor the farthest behind of its own
//!   on release                               and every active line's, and expels
//!                                            a line whose holder died or stopped
//!                                            releasing (DETACHED, bit cleared)
//! ```
//!
//! Only the ring's consumer writes the ring's read cursor, so producers still load
//! one word and the consumer alone decides how far space may be reused: nothing is
//! added to a producer's path, and with no tethered consumer nothing to the
//! consumer's. A tethered consumer's release that frees space producers wait for
//! wakes the consumer, which publishes and wakes them.
//!
//! Liveness is the same as a producer's: a record lock on one byte per line, held
//! for as long as the tethered consumer is attached, dropped by the kernel however
//! its process dies.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::layout::{
    cursor_pos, cursor_seq, pos_diff, seq_diff, TetherLine, MAX_PRODUCERS, MAX_TETHERS,
    TETHER_ACTIVE, TETHER_DETACHED, TETHER_FREE, TETHER_OVERWRITTEN, TETHER_REQUESTED,
};
use crate::segment::Segment;
use crate::sync::Ordering;
use crate::sys::lock::{self, LOCK_BASE};
use crate::wake;

/// The lock byte of tether line `j` (after the consumer's and every producer slot's).
fn tether_byte(j: u32) -> i64 {
    LOCK_BASE + 1 + MAX_PRODUCERS as i64 + j as i64
}

fn line(seg: &Segment, j: u32) -> &TetherLine {
    &seg.control().tether[j as usize].0
}

/// Is the tethered consumer on line `j` alive? A kernel-held fact, as for
/// producers (see [`crate::slots::held`]).
pub(crate) fn is_alive(seg: &Segment, j: u32) -> bool {
    crate::slots::held(
        seg,
        tether_byte(j),
        |l| l.has_tether(j),
        || line(seg, j).state.load(Ordering::Relaxed) != TETHER_FREE,
    )
}

/// The pid holding line `j` (0: unknown or none).
pub(crate) fn holder_pid(seg: &Segment, j: u32) -> u32 {
    crate::slots::holder(seg, tether_byte(j), |l| l.has_tether(j))
}

/// Tethered side: takes a free line and asks the consumer to adopt it (it does at
/// its next look at the ring; see [`joined`]).
pub(crate) fn attach(seg: &Segment) -> Result<u32> {
    if !crate::slots::consumer_alive(seg) {
        return Err(Error::NoConsumer(seg.label()));
    }
    let j = take_line(seg)?;
    let l = line(seg, j);
    let c = seg.control();
    // Until adopted, the line shows the ring's read cursor (what `stat` reports as
    // its lag), not a previous occupant's; only adopted lines count towards the
    // ring's read cursor (`Supervisor::ring_read`), and adoption sets the start.
    l.read
        .store(c.cursors.0.read.load(Ordering::Acquire), Ordering::Relaxed);
    // Release: the line's read cursor before the state and the bit.
    l.state.store(TETHER_REQUESTED, Ordering::Release);
    c.tethers.0.mask.fetch_or(1 << j, Ordering::AcqRel);
    poke_consumer(seg);
    Ok(j)
}

/// Tethered side: has the consumer adopted line `j`? `Some(read cursor to start
/// at)` once it has; `Err(Detached)` if the line is not ours any more, saying why
/// as far as the line tells (the ring's consumer writes why it expelled a line;
/// any other state was written by another process).
pub(crate) fn joined(seg: &Segment, j: u32) -> Result<Option<u64>> {
    let l = line(seg, j);
    // Acquire: pairs with the consumer's Release store of ACTIVE, so the read
    // cursor it wrote before is visible.
    let why = match l.state.load(Ordering::Acquire) {
        TETHER_ACTIVE => return Ok(Some(l.read.load(Ordering::Relaxed))),
        TETHER_REQUESTED => return Ok(None),
        TETHER_DETACHED => {
            "it stopped releasing frames for longer than the ring's consumer allows \
             (its tether stall limit)"
        }
        TETHER_OVERWRITTEN => {
            "its tether line's read cursor moved in a way no release makes: \
             another process wrote it"
        }
        TETHER_FREE => "its tether line was freed by another process",
        _ => "its tether line holds a state no consumer writes: another process wrote it",
    };
    Err(Error::Detached {
        segment: seg.label(),
        why,
    })
}

/// Tethered side: its line's read cursor is not the one it published, so another
/// process wrote it (the ring's consumer writes it only at adoption). It expels
/// itself (the ring's consumer stops holding space for it at its next look; the
/// line is freed when it is dropped) and the caller reports this error.
pub(crate) fn overwritten(seg: &Segment, j: u32) -> Error {
    // Release: as the consumer's own expelling store.
    line(seg, j)
        .state
        .store(TETHER_OVERWRITTEN, Ordering::Release);
    poke_consumer(seg);
    Error::Detached {
        segment: seg.label(),
        why: "its tether line's read cursor was written by another process",
    }
}

fn take_line(seg: &Segment) -> Result<u32> {
    let _g = crate::segment::files::attach_guard();
    let locks = seg.lock_file();
    for j in 0..MAX_TETHERS {
        let l = line(seg, j);
        if l.state.load(Ordering::Acquire) != TETHER_FREE || locks.local().has_tether(j) {
            continue;
        }
        if !matches!(lock::try_lock(locks.fd(), tether_byte(j)), Ok(true)) {
            continue;
        }
        if l.state.load(Ordering::Acquire) != TETHER_FREE {
            lock::unlock(locks.fd(), tether_byte(j));
            continue;
        }
        locks.local().set_tether(j, true);
        for c in [
            &l.records_consumed,
            &l.bytes_consumed,
            &l.lost,
            &l.records_filtered,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        return Ok(j);
    }
    Err(Error::NoTetherLine {
        segment: seg.label(),
        max: MAX_TETHERS,
    })
}

/// Tethered side: gives line `j` back and wakes the consumer, which then stops
/// holding space for it.
pub(crate) fn leave(seg: &Segment, j: u32) {
    let _g = crate::segment::files::attach_guard();
    let c = seg.control();
    // Release: our last cursor and counters before the line reads FREE. FREE before
    // unlock, as for producer slots.
    let locks = seg.lock_file();
    line(seg, j).state.store(TETHER_FREE, Ordering::Release);
    c.tethers.0.mask.fetch_and(!(1 << j), Ordering::AcqRel);
    locks.local().set_tether(j, false);
    lock::unlock(locks.fd(), tether_byte(j));
    locks.close_extras_if_idle();
    poke_consumer(seg);
}

/// Tethered side: wakes the consumer if it sleeps (so it publishes the space a
/// tethered consumer freed, or adopts one).
pub(crate) fn poke_consumer(seg: &Segment) {
    wake::notify_one(&seg.control().data.0, seg.eventfd());
}

/// Tethered side: is line `j` still ours (asked for or adopted)? `Err(Detached)`
/// once the consumer expelled it.
pub(crate) fn check(seg: &Segment, j: u32) -> Result<()> {
    joined(seg, j).map(|_| ())
}

/// Tethered side: does line `j` read expelled as stalled (DETACHED)? Only the
/// ring's consumer writes that honestly; a tethered consumer waits for it to
/// confirm (it writes a peer's DETACHED back at its next audit) before it ends.
pub(crate) fn reads_expelled(seg: &Segment, j: u32) -> bool {
    // Relaxed: a state check repeated until confirmed.
    line(seg, j).state.load(Ordering::Relaxed) == TETHER_DETACHED
}

/// Tethered side: publishes its cursors (Release: it is done with every byte
/// before its read cursor).
pub(crate) fn publish(seg: &Segment, j: u32, read: u64, peek: u64) {
    let l = line(seg, j);
    l.read.store(read, Ordering::Release);
    l.peek.store(peek, Ordering::Relaxed);
}

pub(crate) fn counters(seg: &Segment, j: u32) -> &TetherLine {
    line(seg, j)
}

/// What the ring's consumer keeps about the tethered consumers (private memory).
pub(crate) struct Supervisor {
    /// Lines adopted and not yet seen gone: while any, the ring's read cursor is
    /// the farthest behind of all, and costs a look at each line per publish.
    adopted: u32,
    /// Lines asking that could not be adopted (holder dead, state not REQUESTED):
    /// not looked at again until the next audit, so a stale bit costs nothing.
    ignored: u32,
    /// Per line: the read cursor last seen and since when it has not moved.
    watch: [(u64, Option<Instant>); MAX_TETHERS as usize],
    /// Lines we expelled as stalled (DETACHED), until their holder leaves: a
    /// DETACHED we did not write on a line we hold space for is a peer's, and
    /// is written back.
    expelled: u32,
}

impl Supervisor {
    pub(crate) fn new() -> Self {
        Supervisor {
            adopted: 0,
            ignored: 0,
            watch: [(0, None); MAX_TETHERS as usize],
            expelled: 0,
        }
    }

    /// A consumer taking over the ring: holds space for every tethered consumer
    /// still attached (adopted by its predecessor, holder alive). Returns whether any.
    pub(crate) fn take_over(&mut self, seg: &Segment) -> bool {
        for j in 0..MAX_TETHERS {
            let l = line(seg, j);
            if l.state.load(Ordering::Acquire) == TETHER_ACTIVE && is_alive(seg, j) {
                self.adopted |= 1 << j;
                self.watch[j as usize] = (l.read.load(Ordering::Relaxed), None);
            }
        }
        self.any()
    }

    /// Any tethered consumer to hold space for?
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.adopted != 0
    }

    /// Has a line asked to be adopted since we last looked? One load.
    #[inline]
    pub(crate) fn asked(&self, seg: &Segment) -> bool {
        seg.control().tethers.0.mask.load(Ordering::Relaxed) & !(self.adopted | self.ignored) != 0
    }

    /// Adopts the lines that asked (their holder alive): each starts at `own_read`,
    /// the consumer's read cursor (a gap-free one: see the caller), which is at or
    /// ahead of the ring's read cursor, so the space it reads from is held.
    pub(crate) fn adopt(&mut self, seg: &Segment, own_read: u64) -> bool {
        // Acquire: see the line's REQUESTED state stored before the bit.
        let mask = seg.control().tethers.0.mask.load(Ordering::Acquire);
        let mut fresh = mask & !(self.adopted | self.ignored);
        let mut any = false;
        while fresh != 0 {
            let j = fresh.trailing_zeros();
            fresh &= fresh - 1;
            if j >= MAX_TETHERS {
                continue;
            }
            let l = line(seg, j);
            if l.state.load(Ordering::Acquire) != TETHER_REQUESTED || !is_alive(seg, j) {
                self.ignored |= 1 << j;
                continue;
            }
            // Counted before it is told, so every publish from now on includes it.
            self.adopted |= 1 << j;
            self.expelled &= !(1 << j);
            self.watch[j as usize] = (own_read, None);
            l.read.store(own_read, Ordering::Relaxed);
            l.peek.store(own_read, Ordering::Relaxed);
            l.pid.store(holder_pid(seg, j), Ordering::Relaxed);
            // Release: its start cursor before it reads ACTIVE.
            l.state.store(TETHER_ACTIVE, Ordering::Release);
            any = true;
        }
        any
    }

    /// The ring's read cursor: the farthest behind of `own` (the consumer's) and
    /// every adopted line's, each part (claims, bytes) on its own, ignoring cursors
    /// that cannot be behind the write cursor (a line from before a reset, or
    /// scribbled). Cursors are loaded before the write cursor they are judged by.
    pub(crate) fn ring_read(&self, seg: &Segment, own: u64) -> u64 {
        let mut others = [0u64; MAX_TETHERS as usize];
        let mut k = 0;
        let mut m = self.adopted;
        while m != 0 {
            let j = m.trailing_zeros();
            m &= m - 1;
            // Acquire: pairs with the line holder's Release store after it is done
            // with the bytes before it.
            others[k] = line(seg, j).read.load(Ordering::Acquire);
            k += 1;
        }
        let sh = seg.shared();
        // Acquire, after the cursors: every cursor loaded is at or behind it.
        let w = sh.write.load(Ordering::Acquire);
        crate::protocol::farthest_behind(
            own,
            &others[..k],
            w,
            seg.geometry().log_entries as u64,
            sh.cap_units,
        )
    }

    /// The farthest-behind byte position of `own_pos` and the adopted lines', for a
    /// reset's choice of where the new generation starts.
    pub(crate) fn floor_pos(&self, seg: &Segment, own_pos: u64) -> u64 {
        let own = crate::layout::pack_cursor(0, own_pos);
        cursor_pos(self.ring_read(seg, own))
    }

    /// Every liveness interval: expels lines whose holder died (freed at once) or
    /// whose read cursor stayed behind ours without moving for `limit` (DETACHED:
    /// its holder is told); forgets lines their holder left; repairs the mask
    /// (its bits past the last line too) and a DETACHED we did not write on a
    /// line we hold space for. Returns how many were expelled, and how many
    /// words it repaired.
    pub(crate) fn audit(&mut self, seg: &Segment, own_read: u64, limit: Duration) -> (u32, u32) {
        let c = seg.control();
        let mut mask = c.tethers.0.mask.load(Ordering::Acquire);
        let now = Instant::now();
        let mut detached = 0;
        let mut repaired = 0;
        self.ignored = 0;
        let lines = (1u32 << MAX_TETHERS) - 1;
        if mask & !lines != 0 {
            // Bits no tethered consumer sets: a peer's.
            c.tethers.0.mask.fetch_and(lines, Ordering::AcqRel);
            mask &= lines;
            repaired += 1;
        }
        for j in 0..MAX_TETHERS {
            let l = line(seg, j);
            let state = l.state.load(Ordering::Acquire);
            let bit = 1u32 << j;
            let adopted = self.adopted & bit != 0;
            if state == TETHER_FREE && mask & bit == 0 && !adopted {
                // Unused: nothing below would change, alive or not, so no lock
                // probe (a system call per line and audit).
                continue;
            }
            let alive = is_alive(seg, j);
            if state == TETHER_FREE || !alive {
                self.expelled &= !bit;
            }
            if state == TETHER_FREE && !alive {
                self.adopted &= !bit;
                if mask & bit != 0 {
                    c.tethers.0.mask.fetch_and(!bit, Ordering::AcqRel);
                }
                continue;
            }
            if !alive {
                // Its holder died (or the line was scribbled): free it.
                l.state.store(TETHER_FREE, Ordering::Release);
                c.tethers.0.mask.fetch_and(!bit, Ordering::AcqRel);
                if adopted && state == TETHER_ACTIVE {
                    detached += 1;
                }
                self.adopted &= !bit;
                continue;
            }
            if !adopted {
                // A live holder asking (or one whose bit a peer cleared): make sure the
                // next adoption sees it.
                if state == TETHER_REQUESTED && mask & bit == 0 {
                    c.tethers.0.mask.fetch_or(bit, Ordering::AcqRel);
                }
                continue;
            }
            if state == TETHER_DETACHED && self.expelled & bit == 0 {
                // We did not expel it: another process wrote DETACHED. Its holder,
                // alive, waits for us to confirm (see `Consumer::check_role`):
                // written back, it carries on, its frames still held for it.
                l.state.store(TETHER_ACTIVE, Ordering::Release);
                repaired += 1;
            } else if state != TETHER_ACTIVE {
                // Expelled (by us, its holder not told yet) or left: hold nothing.
                self.adopted &= !bit;
                continue;
            }
            if mask & bit == 0 {
                c.tethers.0.mask.fetch_or(bit, Ordering::AcqRel);
            }
            let read = l.read.load(Ordering::Acquire);
            let (seen, since) = self.watch[j as usize];
            let cap = seg.shared().cap_units;
            if read != seen {
                // Acquire, after the line: the cursor loaded is at or behind it.
                let w = seg.shared().write.load(Ordering::Acquire);
                let n = seg.geometry().log_entries as u64;
                if !moved_by_release(seen, read, w, n, cap) {
                    l.state.store(TETHER_OVERWRITTEN, Ordering::Release);
                    c.tethers.0.mask.fetch_and(!bit, Ordering::AcqRel);
                    self.adopted &= !bit;
                    detached += 1;
                    continue;
                }
                // It gave space back: its stall clock starts again.
                self.watch[j as usize] = (read, None);
                continue;
            }
            let behind = pos_diff(cursor_pos(own_read), cursor_pos(read)) != 0
                && pos_diff(cursor_pos(own_read), cursor_pos(read)) <= cap;
            if !behind {
                self.watch[j as usize] = (read, None);
                continue;
            }
            let since = match since {
                Some(t) => t,
                None => {
                    self.watch[j as usize].1 = Some(now);
                    now
                }
            };
            if now.duration_since(since) >= limit {
                l.state.store(TETHER_DETACHED, Ordering::Release);
                c.tethers.0.mask.fetch_and(!bit, Ordering::AcqRel);
                self.adopted &= !bit;
                self.expelled |= bit;
                detached += 1;
            }
        }
        if detached > 0 {
            crate::producer::bump(&c.tethers.0.detached, detached as u64);
        }
        (detached, repaired)
    }
}

/// Could a tethered consumer's read cursor have gone from `seen` to `read` by
/// releasing frames, with `w` the write cursor loaded after `read`? Releases only
/// move it forward and give bytes back; the one move that gives none is joining a
/// new generation after a reset (a claim number from before the reset, which
/// cannot be behind `w`, becomes one that is). A cursor that holds no bytes
/// (more than a ring behind `w`) is not judged: it holds nothing.
fn moved_by_release(seen: u64, read: u64, w: u64, n: u64, cap: u64) -> bool {
    let (ws, wp) = (cursor_seq(w), cursor_pos(w));
    let holds = |c: u64| pos_diff(wp, cursor_pos(c)) <= cap;
    let seq_in = |c: u64| seq_diff(ws, cursor_seq(c)) <= n;
    if !holds(read) || !holds(seen) {
        return true;
    }
    let forward = pos_diff(cursor_pos(read), cursor_pos(seen));
    if forward > cap {
        return false; // backwards
    }
    if seq_in(read) && seq_in(seen) && seq_diff(cursor_seq(read), cursor_seq(seen)) > n {
        return false; // claim number backwards
    }
    forward > 0 || (!seq_in(seen) && seq_in(read))
}

/// One tethered consumer as `shmring stat` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TetherInfo {
    /// Its line.
    pub line: u32,
    /// Asked to attach and not adopted yet.
    pub requested: bool,
    /// The pid holding the line, as the kernel reports it (0: unknown); for a
    /// read-only view, as the ring's consumer reported it when it adopted the line.
    pub pid: u32,
    pub records_consumed: u64,
    pub bytes_consumed: u64,
    /// Records it lost when the ring was reset under it.
    pub lost: u64,
    /// How far its read cursor is behind the write cursor, in records and bytes.
    pub lag_records: u64,
    pub lag_bytes: u64,
    /// Records its filter refused (released unread; see
    /// [`crate::ConsumerOptions::filter`]).
    pub records_filtered: u64,
}

/// The tethered consumers attached to `seg` (live lines only).
pub(crate) fn infos(seg: &Segment) -> Vec<TetherInfo> {
    (0..MAX_TETHERS).filter_map(|j| info(seg, j)).collect()
}

/// Line `j` if a live tethered consumer holds it (asking or adopted).
pub(crate) fn info(seg: &Segment, j: u32) -> Option<TetherInfo> {
    let l = line(seg, j);
    let state = l.state.load(Ordering::Relaxed);
    if !(state == TETHER_ACTIVE || state == TETHER_REQUESTED) || !is_alive(seg, j) {
        return None;
    }
    let sh = seg.shared();
    let w = sh.write.load(Ordering::Relaxed);
    let read = l.read.load(Ordering::Relaxed);
    let n = seg.geometry().log_entries as u64;
    Some(TetherInfo {
        line: j,
        requested: state == TETHER_REQUESTED,
        pid: match seg.locks() {
            Some(_) => holder_pid(seg, j),
            // A read-only view has no lock file: what the ring's consumer reported.
            None => l.pid.load(Ordering::Relaxed),
        },
        records_consumed: l.records_consumed.load(Ordering::Relaxed),
        bytes_consumed: l.bytes_consumed.load(Ordering::Relaxed),
        lost: l.lost.load(Ordering::Relaxed),
        records_filtered: l.records_filtered.load(Ordering::Relaxed),
        lag_records: crate::layout::seq_diff(
            crate::layout::cursor_seq(w),
            crate::layout::cursor_seq(read),
        )
        .min(n),
        lag_bytes: (pos_diff(cursor_pos(w), cursor_pos(read)).min(sh.cap_units))
            * crate::layout::UNIT,
    })
}

impl Segment {
    /// The tethered consumers attached, each with its lag behind the write cursor.
    pub fn tethers(&self) -> Vec<TetherInfo> {
        infos(self)
    }
}
