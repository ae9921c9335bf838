//! A ring mapped read-only: what taps and observers read.

use std::os::fd::BorrowedFd;

use super::{Backing, Segment};
use crate::error::{os, Result};
use crate::layout::Geometry;

/// A ring mapped read-only (`PROT_READ`), from [`Address::open_read_only`](crate::Address::open_read_only): its counters
/// and geometry. Nothing here writes to the segment, and the kernel refuses a
/// writable mapping of its descriptor (`EACCES`).
pub struct ReadOnlySegment {
    seg: Segment,
}

impl ReadOnlySegment {
    /// Opens a named ring (`/dev/shm/NAME`) read-only: `O_RDONLY` and `PROT_READ`.
    pub(crate) fn open_named(name: &str) -> Result<ReadOnlySegment> {
        Ok(ReadOnlySegment {
            seg: Segment::open_named_read_only(name)?,
        })
    }

    /// Maps a ring read-only from a descriptor (a sealed memfd, e.g. one received
    /// from [`Segment::read_only_fd`] of the ring's owner).
    pub(crate) fn from_fd(fd: std::os::fd::OwnedFd) -> Result<ReadOnlySegment> {
        Ok(ReadOnlySegment {
            seg: Segment::attach_read_only(fd)?,
        })
    }

    /// A read-only view of a ring this process has, for a tap here: a memfd
    /// ring's read-only descriptor mapped `PROT_READ` (as a read-only open of its
    /// [`Segment::read_only_fd`] as [`Address::Descriptors`](crate::Address::Descriptors)), a named ring's file mapped `PROT_READ`, an
    /// in-process ring's own block ([`Segment::create_in_process`]).
    pub fn of(seg: &Segment) -> Result<ReadOnlySegment> {
        if let Some(seg) = seg.in_process_view()? {
            return Ok(ReadOnlySegment { seg });
        }
        if let (Backing::Named { .. }, Some(locks)) = (&seg.backing, &seg.locks) {
            let seg = Segment::attach(
                locks.clone(),
                None,
                seg.name.clone(),
                Backing::Named { created: false },
                true,
            )?;
            return Ok(ReadOnlySegment { seg });
        }
        let fd = seg
            .read_only_fd()?
            .try_clone_to_owned()
            .map_err(|e| os("dup", seg.name(), e))?;
        ReadOnlySegment::from_fd(fd)
    }

    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }

    /// The validated layout.
    pub fn geometry(&self) -> &Geometry {
        self.seg.geometry()
    }

    /// The tethered consumers attached (see [`Segment::tethers`]).
    pub fn tethers(&self) -> Vec<crate::TetherInfo> {
        self.seg.tethers()
    }

    /// The segment's name, for messages.
    pub fn name(&self) -> &str {
        self.seg.name()
    }

    /// The read-only mapping's address range.
    pub fn mapping(&self) -> (*const u8, usize) {
        self.seg.mapping()
    }

    /// The descriptor the mapping was made from: the read-only one received (or,
    /// for a named ring this process already had open, the one it holds). The
    /// mapping is read-only either way.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.seg.fd()
    }
}

impl std::fmt::Debug for ReadOnlySegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlySegment")
            .field("name", &self.seg.name())
            .field("geometry", self.seg.geometry())
            .finish()
    }
}
