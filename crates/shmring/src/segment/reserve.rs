//! A new ring's memory, reserved when the ring is made: every page of the segment
//! is allocated then (`fallocate`), so a ring that does not fit where it lives
//! fails at once with [`Error::NoSpace`], saying how much it needs, how much is
//! free and how to make room, instead of succeeding and failing later, at the
//! first write to a page the kernel cannot provide (SIGBUS on a full `/dev/shm`).
//!
//! A named ring lives in `/dev/shm`, a tmpfs of fixed size (64 MB in a Docker
//! container unless `--shm-size` says otherwise). A memfd ring lives in the
//! kernel's internal tmpfs, which has no size of its own: its pages count
//! against the memory cgroup of the process that allocates them (here, the
//! creator), so a memory limit is checked before the pages are asked for (past
//! the limit the kernel would not refuse them, it would start killing processes).

use std::os::fd::BorrowedFd;

use rustix::fs::FallocateFlags;
use rustix::io::Errno;

use crate::error::{os, Error, Result, Room};

/// Where a ring's pages come from.
#[derive(Clone, Copy)]
pub(super) enum Place {
    /// `/dev/shm` (a named ring).
    ShmDir,
    /// The kernel's internal tmpfs (a memfd ring), charged to this process's memory.
    Memory,
}

/// Allocates every page of the segment `fd` (`len` bytes, its size already set).
pub(super) fn reserve(fd: BorrowedFd<'_>, len: u64, name: &str, place: Place) -> Result<()> {
    if let Place::Memory = place {
        if let Some((limit, used)) = cgroup_limit() {
            let free = limit.saturating_sub(used);
            if free < len {
                let limit = Some(limit);
                return Err(no_space(name, len, Room::Memory { free, limit }, false));
            }
        }
    }
    loop {
        match rustix::fs::fallocate(fd, FallocateFlags::empty(), 0, len) {
            Ok(()) => return Ok(()),
            // A signal arrived while the pages were allocated (the kernel gives back
            // what it took): ask again.
            Err(Errno::INTR) => continue,
            Err(Errno::NOSPC | Errno::NOMEM) => {
                let room = match place {
                    Place::ShmDir => shm_room(fd),
                    Place::Memory => match memory_room() {
                        Some((free, limit)) => Room::Memory { free, limit },
                        None => Room::Memory {
                            free: 0,
                            limit: None,
                        },
                    },
                };
                return Err(no_space(name, len, room, false));
            }
            // A file system that cannot reserve: the pages come when first written.
            Err(Errno::OPNOTSUPP) => return Ok(()),
            Err(e) => return Err(os("fallocate (reserving the ring's memory)", name, e)),
        }
    }
}

pub(super) fn no_space(name: &str, needed: u64, room: Room, later: bool) -> Error {
    Error::NoSpace {
        segment: name.into(),
        needed,
        room,
        later,
    }
}

/// The room left on the tmpfs that holds `fd` (`/dev/shm` for a named ring).
pub(super) fn shm_room(fd: BorrowedFd<'_>) -> Room {
    match rustix::fs::fstatvfs(fd) {
        Ok(s) => Room::ShmDir {
            free: s.f_bavail.saturating_mul(s.f_frsize),
            size: s.f_blocks.saturating_mul(s.f_frsize),
        },
        Err(_) => Room::ShmDir { free: 0, size: 0 },
    }
}

/// The memory this process may still allocate: `(free, Some(limit))` under a
/// memory cgroup's limit, else `(MemAvailable, None)`; `None` if neither can be
/// read.
fn memory_room() -> Option<(u64, Option<u64>)> {
    if let Some((limit, used)) = cgroup_limit() {
        return Some((limit.saturating_sub(used), Some(limit)));
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some((kib * 1024, None))
}

/// This process's memory cgroup limit and usage, if it has a limit (cgroup v2's
/// `memory.max`, or v1's `memory.limit_in_bytes`).
fn cgroup_limit() -> Option<(u64, u64)> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |path: String| -> Option<u64> {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (max, current) = if controllers.is_empty() {
            let dir = format!("/sys/fs/cgroup{path}");
            (format!("{dir}/memory.max"), format!("{dir}/memory.current"))
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = format!("/sys/fs/cgroup/memory{path}");
            (
                format!("{dir}/memory.limit_in_bytes"),
                format!("{dir}/memory.usage_in_bytes"),
            )
        } else {
            continue;
        };
        // "max" (v2) does not parse: no limit. v1 says "no limit" with a number
        // near 2^63.
        if let (Some(limit), Some(used)) = (read(max), read(current)) {
            if limit < 1 << 62 {
                return Some((limit, used));
            }
        }
    }
    None
}
