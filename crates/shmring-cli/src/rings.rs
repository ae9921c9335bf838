//! Finding rings and reading their counters, for `shmring top`, `shmring stat
//! --prometheus` and `shmring exporter`.
//!
//! Rings come from [`RingSource`]s. Named rings in `/dev/shm` are one source
//! ([`NamedRings`]); every ring is opened, validated by the core like any other open,
//! read once, and closed again on each scan, so a ring that is replaced, truncated or
//! removed between two scans is seen as it is now. One ring's failure is that ring's
//! [`Reading::result`]; it never stops the scan.
//!
//! Rings served on Unix sockets (`shmring record --listen`) are the other source
//! ([`SocketRings`]): every socket in the given directories is observed read-only
//! ([`Address::open_read_only`] of a socket). Connections are made in the
//! background and kept between scans, so a consumer that does not answer never
//! holds up a scan; a socket whose file was replaced, or whose consumer is gone, is
//! connected to afresh.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use shmring::{Address, ReadOnlySegment, Segment, Stats, TetherInfo};

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
    /// The tethered consumers attached.
    pub tethers: Vec<TetherInfo>,
}

/// One ring found by a source: its name and its counters, or why they could not be
/// read.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The ring's name as the user gives it to other commands (`cam0`).
    pub ring: String,
    /// Which source found it (`shm`, `socket`).
    pub source: &'static str,
    /// What was read, or why nothing could be.
    pub result: Result<RingInfo, String>,
}

/// A place rings are found. Each scan lists the rings there now and reads each one.
pub trait RingSource {
    /// Short name of the source, shown with each ring (`shm`).
    fn kind(&self) -> &'static str;
    /// Every ring of this source, each read once; sorted by name. Never waits on
    /// another process.
    fn scan(&mut self) -> Vec<Reading>;
    /// Waits until every ring of this source found now has been reached or has
    /// failed (for one-shot reports; bounded by the core's connect timeout). Named
    /// rings are read at once, so by default there is nothing to wait for.
    fn settle(&mut self) {}
}

/// Named rings in `/dev/shm` owned by this user, optionally only those whose name
/// starts with a prefix. Other programs' files there are not rings: hidden files,
/// POSIX semaphores (`sem.*`) and every file the core finds is not a shmring ring
/// (no shmring magic, or smaller than a control block) are skipped, so they are never
/// shown or exported as unreadable rings. A ring the core refuses for another reason
/// (another layout version, a header that contradicts the file) is shown with why.
/// Rings named with [`NamedRings::only`] are always read, and say why when they fail.
#[derive(Debug, Clone, Default)]
pub struct NamedRings {
    /// Only names starting with this.
    pub prefix: Option<String>,
    /// Read only these rings (by name), whether or not they exist.
    pub only: Vec<String>,
}

impl From<&crate::cli::RingSelection> for NamedRings {
    fn from(s: &crate::cli::RingSelection) -> NamedRings {
        NamedRings {
            prefix: s.prefix.clone(),
            only: s.ring.clone(),
        }
    }
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

    fn scan(&mut self) -> Vec<Reading> {
        let listed = self.only.is_empty();
        self.names()
            .into_iter()
            .filter_map(|ring| {
                let result = match Address::Named(ring.clone()).open() {
                    Err(e) if listed && not_a_ring(&e) => return None,
                    r => r
                        .map_err(|e| named_error(e, &ring, listed))
                        .and_then(|seg| read(&seg)),
                };
                Some(Reading {
                    result,
                    source: self.kind(),
                    ring,
                })
            })
            .collect()
    }
}

/// Does the core's error say the file is no shmring ring at all (rather than a
/// ring it cannot use)?
fn not_a_ring(e: &shmring::Error) -> bool {
    matches!(
        e,
        shmring::Error::LayoutMismatch {
            field: "magic" | "file size",
            ..
        }
    )
}

/// An open's error, in words for a row (the ring is named by the row): a ring
/// that was `listed` in /dev/shm and is gone now vanished; one named on the
/// command line that is not there was not found.
fn named_error(e: shmring::Error, ring: &str, listed: bool) -> String {
    match e {
        shmring::Error::NotFound(_) if listed => "vanished (removed while being read)".into(),
        shmring::Error::NotFound(_) => {
            format!("not found (no {SHM_DIR}/{})", ring.trim_start_matches('/'))
        }
        e => crate::ringref::with_hint(e.to_string(), &e),
    }
}

/// The counters and geometry of an open ring, read once.
pub fn read(seg: &Segment) -> Result<RingInfo, String> {
    let info = RingInfo {
        stats: seg.stats(),
        max_record: seg.geometry().max_record,
        max_producers: seg.geometry().max_producers,
        tethers: seg.tethers(),
    };
    // A mapping that faulted says why: a peer truncated the file, or /dev/shm
    // could not provide a page.
    seg.check_size().map_err(|e| e.to_string())?;
    Ok(info)
}

/// Device, inode and change time (s, ns) of a socket file: a consumer that restarts
/// binds a new file, which may reuse the inode number.
type FileId = (u64, u64, i64, i64);

type Connecting = JoinHandle<shmring::Result<ReadOnlySegment>>;

/// One socket of a [`SocketRings`]: the file it was found as, the ring observed
/// through it, and the connection attempt under way.
struct Observed {
    /// Which socket file it was found as.
    file: FileId,
    seg: Option<ReadOnlySegment>,
    error: Option<String>,
    /// The attempt under way, and when it started.
    pending: Option<(Connecting, Instant)>,
}

impl Observed {
    /// Collects a finished attempt; starts one when there is no usable ring and
    /// none is under way.
    fn advance(&mut self, path: &Path) {
        if self.pending.as_ref().is_some_and(|(h, _)| h.is_finished()) {
            let (h, _) = self.pending.take().expect("checked above");
            self.finish(h);
        }
        // A ring whose consumer is gone is dropped: the consumer may be back (a new
        // ring on the same socket), or the socket is stale.
        if self
            .seg
            .as_ref()
            .is_some_and(|s| !s.stats().consumer_attached)
        {
            self.seg = None;
            self.error = Some("consumer gone (the ring's consumer exited)".into());
        }
        if self.seg.is_none() && self.pending.is_none() {
            let p = path.to_path_buf();
            match std::thread::Builder::new()
                .name("shmring-observe".into())
                .spawn(move || Address::Socket(p).open_read_only())
            {
                Ok(h) => self.pending = Some((h, Instant::now())),
                // Tried again on the next scan.
                Err(e) => self.error = Some(format!("cannot start connecting: {e}")),
            }
        }
    }

    /// Takes the result of a connection attempt (waits for it if it is under way:
    /// at most the core's connect timeout).
    fn finish(&mut self, h: Connecting) {
        match h.join() {
            Ok(Ok(seg)) => {
                self.seg = Some(seg);
                self.error = None;
            }
            Ok(Err(e)) => {
                self.seg = None;
                self.error = Some(observe_error(e));
            }
            Err(_) => self.error = Some("connecting failed (the attempt panicked)".into()),
        }
    }

    fn reading(&self) -> Result<RingInfo, String> {
        match (&self.seg, &self.error) {
            (Some(seg), _) => {
                let g = seg.geometry();
                Ok(RingInfo {
                    stats: seg.stats(),
                    max_record: g.max_record,
                    max_producers: g.max_producers,
                    tethers: seg.tethers(),
                })
            }
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err("connecting (no answer from the consumer yet)".into()),
        }
    }
}

/// The error of an observe, in words for a row (the socket is named by the row).
fn observe_error(e: shmring::Error) -> String {
    match e {
        shmring::Error::NotFound(_) => "vanished (removed while being read)".to_string(),
        shmring::Error::NoConsumer(_) => {
            "consumer gone (nothing accepts connections on the socket: a stale socket)".into()
        }
        e => e.to_string(),
    }
}

/// Rings served on Unix sockets in some directories (`shmring record --listen
/// DIR/NAME.sock`), each observed read-only through its socket and kept between
/// scans. Every socket in a directory is shown; one that is not a shmring socket,
/// refuses this user, or whose consumer is gone shows why on its row.
#[derive(Default)]
pub struct SocketRings {
    dirs: Vec<PathBuf>,
    seen: HashMap<PathBuf, Observed>,
}

impl SocketRings {
    /// Every socket in each of `dirs`.
    pub fn new(dirs: Vec<PathBuf>) -> SocketRings {
        SocketRings {
            dirs,
            seen: HashMap::new(),
        }
    }

    /// The sockets there now, with their device and inode; a directory that
    /// cannot be listed is reported as a row of its own.
    fn list(&self) -> (Vec<(PathBuf, FileId)>, Vec<Reading>) {
        let mut socks = Vec::new();
        let mut errors = Vec::new();
        for d in &self.dirs {
            let entries = match std::fs::read_dir(d) {
                Ok(e) => e,
                Err(e) => {
                    errors.push(Reading {
                        ring: d.display().to_string(),
                        source: "socket",
                        result: Err(format!("cannot list the socket directory: {e}")),
                    });
                    continue;
                }
            };
            for e in entries.filter_map(Result::ok) {
                // A socket that vanished since the listing is left to the next scan.
                let Ok(md) = e.path().symlink_metadata() else {
                    continue;
                };
                if md.file_type().is_socket() {
                    let id = (md.dev(), md.ino(), md.ctime(), md.ctime_nsec());
                    socks.push((e.path(), id));
                }
            }
        }
        socks.sort();
        (socks, errors)
    }

    /// Lists the sockets, forgets those gone, and moves each connection along.
    fn refresh(&mut self) -> (Vec<(PathBuf, FileId)>, Vec<Reading>) {
        let (socks, errors) = self.list();
        let mut seen = std::mem::take(&mut self.seen);
        for (path, file) in &socks {
            let mut o = match seen.remove(path) {
                Some(o) if o.file == *file => o,
                // New, or a new socket file at the same path: connect afresh. A
                // connection still under way for the old file finishes by itself.
                _ => Observed {
                    file: *file,
                    seg: None,
                    error: None,
                    pending: None,
                },
            };
            o.advance(path);
            self.seen.insert(path.clone(), o);
        }
        (socks, errors)
    }
}

impl RingSource for SocketRings {
    fn kind(&self) -> &'static str {
        "socket"
    }

    fn scan(&mut self) -> Vec<Reading> {
        let (socks, mut rows) = self.refresh();
        for (path, _) in socks {
            let o = &self.seen[&path];
            rows.push(Reading {
                ring: path.display().to_string(),
                source: "socket",
                result: o.reading(),
            });
        }
        rows
    }

    fn settle(&mut self) {
        let since = Instant::now();
        self.refresh();
        for (path, o) in &mut self.seen {
            // An attempt started before now may have met a consumer since replaced:
            // if it failed, the one started after it is waited for too.
            while let Some((h, started)) = o.pending.take() {
                o.finish(h);
                o.advance(path);
                if started >= since {
                    break;
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::handoff::{Listener, ListenerOptions};
    use shmring::Config;

    fn serve(path: &Path, capacity: u64) -> (shmring::Consumer, shmring::handoff::ListenerThread) {
        let seg = Address::memfd("rings-test", Config::with_capacity(capacity))
            .open()
            .unwrap();
        let consumer = seg.consumer().unwrap();
        let l = Listener::bind(&seg, path, ListenerOptions::default())
            .unwrap()
            .spawn()
            .unwrap();
        (consumer, l)
    }

    fn capacity(rows: &[Reading]) -> Result<u64, String> {
        assert_eq!(rows.len(), 1, "{rows:?}");
        rows[0]
            .result
            .as_ref()
            .map(|i| i.stats.capacity)
            .map_err(Clone::clone)
    }

    #[test]
    fn a_socket_is_observed_once_and_again_when_its_consumer_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cam.sock");
        let (consumer, listener) = serve(&path, 1 << 20);
        let mut src = SocketRings::new(vec![dir.path().to_path_buf()]);
        src.settle();
        let rows = src.scan();
        assert_eq!(rows[0].ring, path.display().to_string());
        assert_eq!(rows[0].source, "socket");
        assert_eq!(capacity(&rows), Ok(1 << 20));
        // The ring is kept: further scans read it without connecting again.
        assert_eq!(capacity(&src.scan()), Ok(1 << 20));
        assert_eq!(listener.stats().observers, 1);

        // The consumer leaves but its socket still answers: the row says so.
        drop(consumer);
        src.settle();
        let e = capacity(&src.scan()).unwrap_err();
        assert!(e.starts_with("consumer gone"), "{e}");

        // A new consumer on the same path (a restart): its ring is observed.
        drop(listener);
        let (_consumer, _listener) = serve(&path, 1 << 21);
        src.settle();
        assert_eq!(capacity(&src.scan()), Ok(1 << 21));

        // The socket removed: its row goes.
        drop(_listener);
        assert!(src.scan().is_empty());
    }

    #[test]
    fn a_consumer_that_does_not_answer_does_not_hold_up_a_scan() {
        // Connections are queued by the kernel but never accepted, so no reply
        // comes until the core's connect timeout: the scan shows the attempt under
        // way instead of waiting for it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("silent.sock");
        let silent = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let mut src = SocketRings::new(vec![dir.path().to_path_buf()]);
        for _ in 0..3 {
            let e = capacity(&src.scan()).unwrap_err();
            assert!(e.starts_with("connecting (no answer"), "{e}");
        }
        drop(silent);
    }

    #[test]
    fn a_directory_that_cannot_be_listed_is_a_row_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let mut src = SocketRings::new(vec![missing.clone()]);
        let rows = src.scan();
        assert_eq!(rows[0].ring, missing.display().to_string());
        let e = rows[0].result.as_ref().unwrap_err();
        assert!(e.starts_with("cannot list the socket directory"), "{e}");
    }
}
