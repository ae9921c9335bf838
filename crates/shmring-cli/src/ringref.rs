//! How a command reaches a ring: by name (`/dev/shm`), or over a consumer's socket
//! (`--connect PATH`, the hand-off of `shmring::handoff`).

use std::os::unix::fs::FileTypeExt;
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
                .map_err(|e| socket_error(p, e)),
            (Some(n), None) => Segment::open_named(n)
                .map(Watched::Named)
                .map_err(|e| named_error(n, e)),
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
        (_, Some(p)) => Segment::observe(p).map_err(|e| socket_error(p, e)),
        (Some(n), None) => ReadOnlySegment::open_named(n).map_err(|e| named_error(n, e)),
        (None, None) => Err("give a ring name or --connect PATH".into()),
    }
}

/// Why the ring served on the socket `path` (`--connect PATH`) could not be reached,
/// in the words of the command line: what the user gave is a socket, and a consumer
/// serves one with `shmring record --listen PATH`.
pub fn socket_error(path: &Path, e: shmring::Error) -> String {
    let p = path.display();
    let listen = format!("start the consumer first (`shmring record --listen {p}`)");
    let file = path.symlink_metadata().ok().map(|m| m.file_type());
    match e {
        _ if file.is_some_and(|t| !t.is_socket()) => format!(
            "{p} is not a socket: --connect takes the Unix socket a consumer serves its ring on \
             (`shmring record --listen PATH`); a named ring in /dev/shm is given by its name"
        ),
        shmring::Error::NotFound(_) => format!(
            "socket {p} does not exist: {listen}, or give a named ring by its name instead of \
             --connect"
        ),
        shmring::Error::NoConsumer(_) => format!(
            "socket {p}: no consumer accepts connections on it (it was left by a consumer that \
             exited): {listen}"
        ),
        e => format!("socket {p}: {e}"),
    }
}

/// Why the named ring `name` could not be opened; a ring that does not exist says
/// how one is made, and that a ring served on a socket is reached with --connect.
pub fn named_error(name: &str, e: shmring::Error) -> String {
    match e {
        shmring::Error::NotFound(_) => format!(
            "ring {name:?} does not exist (no /dev/shm/{}): create it with `shmring record \
             --create {name}`, or reach a ring served on a socket with --connect PATH",
            name.trim_start_matches('/')
        ),
        e => format!("ring {name:?}: {e}"),
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
