//! Which of a ring's consumers this is, and what that decides: which read cursor
//! it publishes and where, where it counts what it reads, how it sleeps, and
//! whether it judges producers, supervises tethered consumers and resets the ring.
//! The rest of the consumer asks its role; only here is the role matched.

use std::cell::{Cell, RefCell};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::error::Result;
use crate::layout::{pack_cursor, ConsumerCounters, Futex};
use crate::protocol::ConsumerCursor;
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use crate::tether::{self, Supervisor};
use crate::{slots, wake};

/// Which of a ring's consumers this is.
pub(super) enum Role {
    /// The ring's consumer: it alone writes the ring's read cursor, judges
    /// producers, audits and resets, and supervises the tethered consumers.
    Owner {
        tethers: Box<RefCell<Supervisor>>,
        /// The ring's read cursor as last published (for the audit).
        published: Cell<u64>,
    },
    /// A tethered consumer on this tether line.
    Tethered(u32),
}

impl Role {
    /// The ring's consumer, supervising `tethers`, the ring's read cursor reading
    /// `published`.
    pub(super) fn owner(tethers: Supervisor, published: u64) -> Role {
        Role::Owner {
            tethers: Box::new(RefCell::new(tethers)),
            published: Cell::new(published),
        }
    }

    /// A tethered consumer on tether line `line`.
    pub(super) fn tethered(line: u32) -> Role {
        Role::Tethered(line)
    }

    /// Is this the ring's consumer? It alone judges producers (liveness, forged
    /// and expired claims), keeps the ring's counters and health, and may reset
    /// the ring; a tethered consumer waits for its verdicts.
    pub(super) fn is_owner(&self) -> bool {
        matches!(self, Role::Owner { .. })
    }

    /// A tethered consumer's tether line; `None` for the ring's consumer.
    pub(super) fn line(&self) -> Option<u32> {
        match self {
            Role::Owner { .. } => None,
            Role::Tethered(j) => Some(*j),
        }
    }

    /// Is this consumer still attached? A tethered consumer: [`crate::Error::Detached`]
    /// once the ring's consumer detached it. The ring's consumer always is.
    pub(super) fn check(&self, seg: &Segment) -> Result<()> {
        match self {
            Role::Owner { .. } => Ok(()),
            Role::Tethered(j) => tether::check(seg, *j),
        }
    }

    /// A tethered consumer's line as the ring lists it; `None` for the ring's
    /// consumer.
    pub(super) fn info(&self, seg: &Segment) -> Option<crate::TetherInfo> {
        match self {
            Role::Owner { .. } => None,
            Role::Tethered(j) => tether::info(seg, *j),
        }
    }

    /// The ring's consumer's counters; `None` for a tethered consumer (it keeps
    /// its own in its tether line).
    pub(super) fn counters<'s>(&self, seg: &'s Segment) -> Option<&'s ConsumerCounters> {
        match self {
            Role::Owner { .. } => Some(&seg.control().counters.0),
            Role::Tethered(_) => None,
        }
    }

    /// Where a record handed out is counted: records and bytes consumed, in the
    /// ring's counters or in the tether line.
    pub(super) fn consumed<'s>(&self, seg: &'s Segment) -> (&'s AtomicU64, &'s AtomicU64) {
        match self {
            Role::Owner { .. } => {
                let cc = &seg.control().counters.0;
                (&cc.records_consumed, &cc.bytes_consumed)
            }
            Role::Tethered(j) => {
                let l = tether::counters(seg, *j);
                (&l.records_consumed, &l.bytes_consumed)
            }
        }
    }

    /// Where a record the filter refused is counted: in the ring's counters or in
    /// the tether line.
    pub(super) fn filtered<'s>(&self, seg: &'s Segment) -> &'s AtomicU64 {
        match self {
            Role::Owner { .. } => &seg.control().counters.0.filtered,
            Role::Tethered(j) => &tether::counters(seg, *j).records_filtered,
        }
    }

    /// Has the ring's consumer adopted us (or detached us: then there is an error
    /// to report)? Always true for the ring's consumer.
    pub(super) fn adoption_seen(&self, seg: &Segment) -> bool {
        match self {
            Role::Owner { .. } => true,
            Role::Tethered(j) => !matches!(tether::joined(seg, *j), Ok(None)),
        }
    }

    /// The ring's consumer: does it supervise tethered consumers now? Always false
    /// for a tethered consumer.
    pub(super) fn has_tethers(&self) -> bool {
        match self {
            Role::Owner { tethers, .. } => tethers.borrow().any(),
            Role::Tethered(_) => false,
        }
    }

    /// The ring's consumer: adopts the tethered consumers that asked (one load
    /// when none did), their cursors starting at `cur`'s read cursor. True if one
    /// was adopted (the ring's read cursor is then to be published again). Never
    /// for a tethered consumer.
    pub(super) fn adopt_asked(&self, seg: &Segment, cur: &RefCell<ConsumerCursor>) -> bool {
        let Role::Owner { tethers, .. } = self else {
            return false;
        };
        if !tethers.borrow().asked(seg) {
            return false;
        }
        let cur = cur.borrow();
        // With a reset's gap open, our read cursor is two cursors: adopt once it is
        // one again. With pinned records after our read cursor, the ring's read
        // cursor is past bytes producers reuse around them: adopt once it is not
        // (a tethered consumer starts at a cursor whose claim and position agree).
        cur.can_reset()
            && cur.front_pos() == cur.read_pos
            && tethers.borrow_mut().adopt(seg, cur.published())
    }

    /// What the ring's read cursor should read for our own read cursor `own`: the
    /// farthest behind of ours and the tethered consumers', or ours alone.
    pub(super) fn ring_read(&self, seg: &Segment, own: u64) -> u64 {
        match self {
            Role::Owner { tethers, .. } if tethers.borrow().any() => {
                tethers.borrow().ring_read(seg, own)
            }
            _ => own,
        }
    }

    /// The ring's read cursor as the ring's consumer last published it; `None`
    /// for a tethered consumer.
    pub(super) fn published(&self) -> Option<u64> {
        match self {
            Role::Owner { published, .. } => Some(published.get()),
            Role::Tethered(_) => None,
        }
    }

    /// The ring's consumer: notes that the ring's read cursor now reads `ring`.
    pub(super) fn note_published(&self, ring: u64) {
        if let Role::Owner { published, .. } = self {
            published.set(ring);
        }
    }

    /// Publishes our read cursor: a tethered consumer in its line; the ring's
    /// consumer as the ring's read cursor, or, with tethered consumers, the
    /// farthest behind of theirs and its own.
    pub(super) fn publish(&self, seg: &Segment, cur: &ConsumerCursor) {
        let own = cur.published();
        let c = seg.control();
        match self {
            Role::Tethered(j) => {
                tether::publish(seg, *j, own, pack_cursor(cur.peek_seq, cur.peek_pos))
            }
            Role::Owner { tethers, published } => {
                // Release: tethered consumers adopted from now on start here.
                c.cursors.0.owner_read.store(own, Ordering::Release);
                let t = tethers.borrow();
                let ring = if t.any() { t.ring_read(seg, own) } else { own };
                // Release: everything we (and the tethered consumers whose cursors we
                // loaded with Acquire) did with the released bytes comes first.
                c.cursors.0.read.store(ring, Ordering::Release);
                published.set(ring);
            }
        }
    }

    /// The ring's consumer's audit of the tethered consumers (see
    /// `Supervisor::audit`): how many it detached, and how many words it
    /// repaired. None for a tethered consumer.
    pub(super) fn audit_tethers(&self, seg: &Segment, own: u64, limit: Duration) -> (u32, u32) {
        match self {
            Role::Owner { tethers, .. } => tethers.borrow_mut().audit(seg, own, limit),
            Role::Tethered(_) => (0, 0),
        }
    }

    /// At a reset: the farthest-behind position the tethered consumers still hold
    /// (our read position `own_pos` counting), if there are any.
    pub(super) fn tethers_floor_pos(&self, seg: &Segment, own_pos: u64) -> Option<u64> {
        match self {
            Role::Owner { tethers, .. } if tethers.borrow().any() => {
                Some(tethers.borrow().floor_pos(seg, own_pos))
            }
            _ => None,
        }
    }

    /// The futex this consumer sleeps on for data: the data futex (the ring's
    /// consumer, its one waiter) or the tether futex (every tethered consumer).
    pub(super) fn data_futex<'s>(&self, seg: &'s Segment) -> &'s Futex {
        match self {
            Role::Owner { .. } => &seg.control().data.0,
            Role::Tethered(_) => &seg.control().tether_data.0,
        }
    }

    /// Announces us on `f` (our [`Role::data_futex`]) and returns the value to
    /// sleep on. The data futex has one waiter (the ring's consumer): its flag is
    /// taken by the first producer that wakes it. The tether futex counts its
    /// waiters.
    pub(super) fn arm(&self, f: &Futex) -> u32 {
        match self {
            Role::Owner { .. } => wake::arm_one(f),
            Role::Tethered(_) => wake::arm(f),
        }
    }

    /// Undoes [`Role::arm`].
    pub(super) fn disarm(&self, f: &Futex) {
        match self {
            Role::Owner { .. } => wake::disarm_one(f),
            Role::Tethered(_) => wake::disarm(f),
        }
    }

    /// The eventfd this consumer sleeps on, if the ring has one: the ring's
    /// consumer only (producers signal it for the ring's consumer alone).
    pub(super) fn eventfd<'s>(&self, seg: &'s Segment) -> Option<BorrowedFd<'s>> {
        match self {
            Role::Owner { .. } => seg.eventfd(),
            Role::Tethered(_) => None,
        }
    }

    /// Gives the role up: the consumer role, or the tether line.
    pub(super) fn leave(&self, seg: &Segment) {
        match self {
            Role::Owner { .. } => slots::drop_consumer(seg),
            Role::Tethered(j) => tether::leave(seg, *j),
        }
    }
}
