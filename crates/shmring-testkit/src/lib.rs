//! Helpers shared by shmring's test suites and its reliability suite: the test RNG
//! ([`Rng`]), the payload checksum ([`checksum`]), unique `/dev/shm` ring names
//! removed on drop ([`ShmName`]), the hostile peer that writes a ring by field
//! ([`Peer`]), the one-write liveness matrix ([`matrix`]), and the checked record
//! every cross-process test in every language writes and checks ([`record`]; the
//! `ring-peer` program writes it), and a process with a small `/dev/shm` of its own
//! ([`small_shm`]).
//! The child supervisor ([`ChildGuard`]: killed and reaped on drop, even when a test
//! panics) is the tools' own, from `shmring_host`, re-exported here for the suites.
//!
//! Not published: a development dependency of the workspace's crates only.

#[cfg(not(loom))]
pub mod matrix;
#[cfg(not(loom))]
pub mod peer;
pub mod record;
mod rng;
#[cfg(not(loom))]
pub mod small_shm;

#[cfg(not(loom))]
pub use peer::{Peer, Target};
pub use rng::{checksum, mix, Rng};
pub use shmring_host::{pid_gone, ChildGuard};

use std::sync::atomic::{AtomicU32, Ordering};

/// A `/dev/shm` name unique to this process and call, unlinked when dropped (so a
/// failing test leaves nothing behind either).
pub struct ShmName(pub String);

impl ShmName {
    /// `shmring-<suite>-<pid>-<tag>-<n>`.
    pub fn new(suite: &str, tag: &str) -> ShmName {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        ShmName(format!("shmring-{suite}-{}-{tag}-{n}", std::process::id()))
    }

    /// The segment's path under `/dev/shm`.
    pub fn path(&self) -> std::path::PathBuf {
        std::path::Path::new("/dev/shm").join(&self.0)
    }

    /// Does the segment exist?
    pub fn exists(&self) -> bool {
        self.path().exists()
    }
}

impl Drop for ShmName {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_removed_on_drop() {
        let a = ShmName::new("testkit", "x");
        let b = ShmName::new("testkit", "x");
        assert_ne!(a.0, b.0);
        std::fs::write(a.path(), b"").expect("create a file in /dev/shm");
        assert!(a.exists());
        let p = a.path();
        drop(a);
        assert!(!p.exists());
    }
}
