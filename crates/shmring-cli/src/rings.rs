//! Finding rings and reading their counters, for `shmring top`, `shmring stat
//! --prometheus` and `shmring exporter`.
//!
//! Rings come from [`RingSource`]s. Named rings in `/dev/shm` are one source
//! ([`NamedRings`]); every ring is opened, validated by the core like any other open,
//! read once, and closed again on each scan, so a ring that is replaced, truncated or
//! removed between two scans is seen as it is now. One ring's failure is that ring's
//! [`Reading::result`]; it never stops the scan.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use shmring::{Segment, Stats};

/// Where named rings live (`shm_open(3)` names map to files in this directory).
pub const SHM_DIR: &str = "/dev/shm";

/// What one ring looked like when it was read.
#[derive(Debug, Clone)]
pub struct RingInfo {
    /// Its counters.
    pub stats: Stats,
    /// Largest record it takes, in bytes.
    pub max_record: u64,
    /// Producer slots.
    pub max_producers: u32,
}

/// One ring found by a source: its name and its counters, or why they could not be
/// read.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The ring's name as the user gives it to other commands (`cam0`).
    pub ring: String,
    /// Which source found it (`shm`).
    pub source: &'static str,
    /// What was read, or why nothing could be.
    pub result: Result<RingInfo, String>,
}

/// A place rings are found. Each scan lists the rings there now and reads each one.
pub trait RingSource {
    /// Short name of the source, shown with each ring (`shm`).
    fn kind(&self) -> &'static str;
    /// Every ring of this source, each read once; sorted by name.
    fn scan(&self) -> Vec<Reading>;
}

/// Named rings in `/dev/shm` owned by this user, optionally only those whose name
/// starts with a prefix. Hidden files and POSIX semaphores (`sem.*`) are not rings
/// and are skipped; any other file is shown, and one that is not a ring says so.
#[derive(Debug, Clone, Default)]
pub struct NamedRings {
    /// Only names starting with this.
    pub prefix: Option<String>,
    /// Read only these rings (by name), whether or not they exist.
    pub only: Vec<String>,
}

impl NamedRings {
    fn names(&self) -> Vec<String> {
        if !self.only.is_empty() {
            return self.only.clone();
        }
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                if name.starts_with('.') || name.starts_with("sem.") {
                    return None;
                }
                if self.prefix.as_ref().is_some_and(|p| !name.starts_with(p)) {
                    return None;
                }
                // A file that vanished since the listing is left to the next scan.
                let md = e.metadata().ok()?;
                let ft = md.file_type();
                if ft.is_dir() || ft.is_socket() || ft.is_fifo() || md.uid() != uid {
                    return None;
                }
                Some(name)
            })
            .collect();
        names.sort();
        names
    }
}

impl RingSource for NamedRings {
    fn kind(&self) -> &'static str {
        "shm"
    }

    fn scan(&self) -> Vec<Reading> {
        self.names()
            .into_iter()
            .map(|ring| Reading {
                result: read_named(&ring),
                source: self.kind(),
                ring,
            })
            .collect()
    }
}

/// Opens the named ring `name` (validated like every open), reads its counters once
/// and closes it. A ring removed between listing and opening says it vanished.
pub fn read_named(name: &str) -> Result<RingInfo, String> {
    let seg = Segment::open_named(name).map_err(|e| match e {
        shmring::Error::NotFound(_) => "vanished (removed while being read)".to_string(),
        e => e.to_string(),
    })?;
    let info = RingInfo {
        stats: seg.stats(),
        max_record: seg.geometry().max_record,
        max_producers: seg.geometry().max_producers,
    };
    if seg.truncated() {
        return Err(shmring::Error::Truncated(seg.label()).to_string());
    }
    Ok(info)
}

/// Why the named ring `name` cannot be created because something of that name
/// exists: a ring in use, a stale ring whose owner is gone, or a file that is no
/// ring. Returns the message and whether the existing ring is stale.
pub fn why_exists(name: &str) -> (String, bool) {
    let path = Path::new(SHM_DIR).join(name.trim_start_matches('/'));
    match Segment::open_named(name) {
        Ok(seg) if seg.consumer_alive() => (
            format!(
                "ring {name:?} already exists and its consumer is alive (another recorder uses it)"
            ),
            false,
        ),
        Ok(_) => (
            format!(
                "ring {name:?} already exists but its owner is gone (no live consumer: the \
                 process that created it was killed, or has not attached yet): remove it with \
                 `shmring rm {name}`, or pass --replace-stale"
            ),
            true,
        ),
        Err(shmring::Error::NotFound(_)) => (
            format!("ring {name:?} already exists (and vanished again: try once more)"),
            false,
        ),
        Err(e) => (
            format!(
                "ring {name:?} already exists ({}): {e}; it was not made by shmring, so it is \
                 left alone",
                path.display()
            ),
            false,
        ),
    }
}

/// Megabytes per second and records per second between two snapshots `dt` seconds
/// apart (0 when a counter went backwards: a new ring of the same name).
pub fn rates(prev: &Stats, now: &Stats, dt: f64) -> (f64, f64) {
    if dt <= 0.0 {
        return (0.0, 0.0);
    }
    let d = |a: u64, b: u64| b.saturating_sub(a) as f64 / dt;
    (
        d(prev.records_committed, now.records_committed),
        d(prev.bytes_committed, now.bytes_committed) / 1e6,
    )
}
