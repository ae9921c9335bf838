//! How a command reaches a ring: by name (`/dev/shm`), or over a consumer's socket
//! (`--connect PATH`, the hand-off of `shmring::handoff`).

use std::path::Path;
use std::sync::Arc;

use shmring::handoff::ListenerOptions;
use shmring::{ReadOnlySegment, Segment, Stats, TetherInfo};

/// A ring whose counters a command reads: opened by name, or observed read-only
/// through a consumer's socket.
pub enum Watched {
    Named(Arc<Segment>),
    Observed(ReadOnlySegment),
}

impl Watched {
    /// Opens `name`, or observes the ring served on `socket`.
    pub fn open(name: Option<&str>, socket: Option<&Path>) -> Result<Watched, String> {
        match (name, socket) {
            (_, Some(p)) => Segment::observe(p)
                .map(Watched::Observed)
                .map_err(|e| format!("socket {}: {e}", p.display())),
            (Some(n), None) => Segment::open_named(n)
                .map(Watched::Named)
                .map_err(|e| format!("ring {n:?}: {e}")),
            (None, None) => Err("give a ring name or --connect PATH".into()),
        }
    }

    pub fn stats(&self) -> Stats {
        match self {
            Watched::Named(s) => s.stats(),
            Watched::Observed(s) => s.stats(),
        }
    }

    /// The tethered consumers attached now.
    pub fn tethers(&self) -> Vec<TetherInfo> {
        match self {
            Watched::Named(s) => s.tethers(),
            Watched::Observed(s) => s.tethers(),
        }
    }

    pub fn geometry(&self) -> &shmring::layout::Geometry {
        match self {
            Watched::Named(s) => s.geometry(),
            Watched::Observed(s) => s.geometry(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Watched::Named(s) => s.name(),
            Watched::Observed(s) => s.name(),
        }
    }
}

/// Opens `name` read-only (`/dev/shm/NAME`), or observes the ring served on
/// `socket`: either way a mapping nothing can write through.
pub fn open_read_only(
    name: Option<&str>,
    socket: Option<&Path>,
) -> Result<ReadOnlySegment, String> {
    match (name, socket) {
        (_, Some(p)) => Segment::observe(p).map_err(|e| format!("socket {}: {e}", p.display())),
        (Some(n), None) => ReadOnlySegment::open_named(n).map_err(|e| format!("ring {n:?}: {e}")),
        (None, None) => Err("give a ring name or --connect PATH".into()),
    }
}

/// The core's default hand-off policy (this user only), plus the uids and gids
/// given on the command line.
pub fn listener_options(uids: &[u32], gids: &[u32]) -> ListenerOptions {
    let mut o = ListenerOptions::default();
    for &u in uids {
        o = o.allow_uid(u);
    }
    for &g in gids {
        o = o.allow_gid(g);
    }
    o
}
