//! Helpers shared by shmring's tests, its reliability suite and its bench: one child
//! supervisor ([`Kid`]: killed and reaped on drop, even when a test panics), the
//! test RNG ([`Rng`]), the payload checksum ([`checksum`]) and unique `/dev/shm`
//! ring names removed on drop ([`ShmName`]), and the one-write liveness matrix
//! ([`matrix`]). (The `/proc` and `getrusage` readers
//! are used at run time by the bench and the CLI too, so they live in
//! `shmring_bench`: `proc_memory`, `rusage`, `cpu_ns`.)
//!
//! Not published: a development dependency of the workspace's crates only.

mod child;
#[cfg(not(loom))]
pub mod matrix;
mod rng;

pub use child::{pid_gone, spawn_cmd, spawn_self, Kid};
pub use rng::{checksum, mix, Rng};

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
