//! How a ring is sized: [`Config`] and the geometry it produces.

use crate::error::{Error, Result};
use crate::layout::{Geometry, FLAG_EVENTFD, FLAG_HUGE_PAGES};

/// How a ring is sized. Worst-case shared memory is [`Config::segment_size`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Data ring bytes: a power of two, 64 KiB to 2 GiB. The default, 16 MiB, holds
    /// five 1080p I420 frames and stays within a server's last-level cache; size it
    /// up for consumers that stall for long (`shmring record --capacity-mib`).
    pub capacity: u64,
    /// Largest payload; `None`: a quarter of the capacity. At most capacity/2 − 64.
    pub max_record: Option<u64>,
    /// Records in flight at once (claimed, unread or held); `None`: capacity/4096,
    /// clamped to 64..=65536. A power of two.
    pub log_entries: Option<u32>,
    /// Producer slots, 1..=256.
    pub max_producers: u32,
    /// Producers wake the consumer through an eventfd (for epoll/asyncio/tokio)
    /// instead of the futex.
    pub eventfd: bool,
    /// Ask for transparent huge pages on the ring (`MADV_HUGEPAGE` in every process
    /// that maps it): fewer TLB misses when frames are megabytes. Takes effect only
    /// where the kernel allows huge pages on shared memory
    /// (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `advise` or
    /// `always`); elsewhere the ring works as without it.
    pub huge_pages: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            capacity: Self::DEFAULT_CAPACITY,
            max_record: None,
            log_entries: None,
            max_producers: Self::DEFAULT_MAX_PRODUCERS,
            eventfd: false,
            huge_pages: false,
        }
    }
}

impl Config {
    /// The default ring size, 16 MiB: every binding and command starts from it.
    pub const DEFAULT_CAPACITY: u64 = 16 << 20;
    /// The default number of producer slots.
    pub const DEFAULT_MAX_PRODUCERS: u32 = 64;

    /// A default configuration with `capacity` bytes of ring.
    pub fn with_capacity(capacity: u64) -> Self {
        Config {
            capacity,
            ..Default::default()
        }
    }

    /// A default configuration with `capacity` bytes of ring whose records may be as
    /// large as `largest` bytes: max_record is the default (a quarter of the capacity)
    /// or `largest`, whichever is more. A ring too small for `largest` (more than
    /// capacity/2 − 64) is reported by [`Config::geometry`] and by segment creation.
    ///
    /// ```
    /// use shmring::Config;
    /// let frame = 1920 * 1080 * 3 / 2;
    /// assert_eq!(Config::for_records(8 << 20, frame).max_record, Some(frame));
    /// assert_eq!(Config::for_records(64 << 20, frame).max_record, Some(16 << 20));
    /// assert!(Config::for_records(4 << 20, frame).geometry().is_err());
    /// ```
    pub fn for_records(capacity: u64, largest: u64) -> Self {
        Config {
            max_record: Some((capacity / 4).max(largest)),
            ..Config::with_capacity(capacity)
        }
    }

    /// The layout this configuration produces, or why it is invalid.
    pub fn geometry(&self) -> Result<Geometry> {
        let max_record = self.max_record.unwrap_or(self.capacity / 4);
        let log_entries = self.log_entries.unwrap_or_else(|| {
            ((self.capacity / 4096).clamp(64, 65536) as u32).next_power_of_two()
        });
        let flags = if self.eventfd { FLAG_EVENTFD } else { 0 }
            | if self.huge_pages { FLAG_HUGE_PAGES } else { 0 };
        Geometry::new(
            self.capacity,
            max_record,
            log_entries,
            self.max_producers,
            flags,
        )
        .map_err(Error::Config)
    }

    /// Bytes of shared memory the segment takes: control block, slots, claim log
    /// and data ring. Nothing else in shmring grows with traffic.
    pub fn segment_size(&self) -> Result<u64> {
        Ok(self.geometry()?.total_size)
    }
}
