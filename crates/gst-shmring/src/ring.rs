//! Opening a ring from element properties.

use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;

use shmring::{Config, Segment};

/// Where an element finds its ring.
#[derive(Debug, Clone, Default)]
pub struct Location {
    /// `/dev/shm/NAME`.
    pub name: Option<String>,
    /// An inherited descriptor (a memfd); -1: none.
    pub fd: RawFd,
    /// Create the named ring (source only).
    pub create: bool,
    /// Ring bytes when creating; 0: the core's default.
    pub capacity: u64,
}

impl Location {
    /// The ring, or an error naming it and the cause.
    pub fn open(&self) -> Result<Arc<Segment>, String> {
        if self.fd >= 0 {
            // SAFETY: the descriptor is only borrowed for the duplication below, which
            // the kernel checks: a descriptor that is not open fails with EBADF and
            // is reported, never used.
            let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
            let owned = fd
                .try_clone_to_owned()
                .map_err(|e| format!("descriptor {}: {e}", self.fd))?;
            return Segment::from_fd(owned).map_err(|e| format!("descriptor {}: {e}", self.fd));
        }
        let Some(name) = self.name.as_deref().filter(|n| !n.is_empty()) else {
            return Err("no ring: set the ring property (a name) or fd".into());
        };
        if self.create {
            let cfg = if self.capacity == 0 {
                Config::default()
            } else {
                Config::with_capacity(self.capacity)
            };
            Segment::create_named(name, &cfg).map_err(|e| e.to_string())
        } else {
            Segment::open_named(name).map_err(|e| e.to_string())
        }
    }
}
