//! How a command reaches a ring: a ring address (the core's [`Address`]: a name in
//! /dev/shm, `unix:PATH`, `fd:SEG[,LOCK][,EVENTFD]`, ...), or `--connect PATH` (a
//! consumer's socket, the hand-off of `shmring::handoff`). The core opens it; the
//! errors are said here in the words of the command line.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shmring::handoff::ListenerOptions;
use shmring::{Address, ReadOnlySegment, Segment, Stats, TetherInfo};

/// The ring a command names: the address `ring` (its text form), or the consumer's
/// socket `--connect PATH`. Errors say what is wrong with the text.
pub fn address(ring: Option<&str>, socket: Option<&Path>) -> Result<Address, String> {
    match (ring, socket) {
        (_, Some(p)) => Ok(Address::Socket(p.to_path_buf())),
        (Some(r), None) => r.parse().map_err(|e: shmring::Error| {
            format!(
                "{}; a ring is given by its name, unix:PATH (a consumer's socket) or \
                 fd:SEG[,LOCK][,EVENTFD] (inherited descriptors)",
                e.to_string().trim_start_matches("invalid configuration: ")
            )
        }),
        (None, None) => Err("give a ring name (or address) or --connect PATH".into()),
    }
}

/// What an open's error is said about: the address as the user gave it.
pub enum Reached {
    Socket(PathBuf),
    Named(String),
    Other(String),
}

impl Reached {
    pub fn of(a: &Address) -> Reached {
        match a {
            Address::Socket(p) => Reached::Socket(p.clone()),
            Address::Named(n) | Address::Create { name: n, .. } => Reached::Named(n.clone()),
            a => Reached::Other(a.to_string()),
        }
    }

    /// The error of opening the ring, in the words of the command line.
    pub fn error(&self, e: shmring::Error) -> String {
        match self {
            Reached::Socket(p) => socket_error(p, e),
            Reached::Named(n) => named_error(n, e),
            Reached::Other(a) => format!("ring {a}: {e}"),
        }
    }

    /// The ring as output names it: the socket's path, the name, or the address.
    pub fn label(&self) -> String {
        match self {
            Reached::Socket(p) => p.display().to_string(),
            Reached::Named(n) | Reached::Other(n) => n.clone(),
        }
    }
}

/// Opens the ring `a` writable (producers, consumers); errors in the command
/// line's words.
pub fn open(a: Address) -> Result<Arc<Segment>, String> {
    let reached = Reached::of(&a);
    a.open().map_err(|e| reached.error(e))
}

/// A ring whose counters a command reads: opened by name or descriptors, or
/// observed read-only through a consumer's socket.
pub enum Watched {
    Named(Arc<Segment>),
    Observed(ReadOnlySegment),
}

impl Watched {
    /// Opens the ring `ring` names (its address), or observes the ring served on
    /// `socket`.
    pub fn open(ring: Option<&str>, socket: Option<&Path>) -> Result<Watched, String> {
        let a = address(ring, socket)?;
        let reached = Reached::of(&a);
        match a {
            a @ Address::Socket(_) => a.open_read_only().map(Watched::Observed),
            a @ (Address::Create { .. } | Address::Memfd { .. }) => {
                return Err(format!(
                    "ring {a}: this command reads an existing ring; `shmring record` creates one"
                ))
            }
            a => a.open().map(Watched::Named),
        }
        .map_err(|e| reached.error(e))
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

/// Opens the ring `ring` names read-only (`/dev/shm/NAME` with `O_RDONLY`, or the
/// first of its descriptors), or observes the ring served on `socket`: either way a
/// mapping nothing can write through.
pub fn open_read_only(
    ring: Option<&str>,
    socket: Option<&Path>,
) -> Result<ReadOnlySegment, String> {
    let a = address(ring, socket)?;
    let reached = Reached::of(&a);
    a.open_read_only().map_err(|e| reached.error(e))
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
             --create {name}`, or reach a ring served on a socket with unix:PATH (or \
             --connect PATH)",
            name.trim_start_matches('/')
        ),
        e => with_hint(format!("ring {name:?}: {e}"), &e),
    }
}

/// `msg` (an error about a named ring), with what to do when the error is a
/// refused permission: named rings belong to the user who made them (mode 0600).
pub fn with_hint(msg: String, e: &shmring::Error) -> String {
    match e {
        shmring::Error::Os { source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            format!(
                "{msg} (a named ring in /dev/shm can be opened only by the user who \
                 created it; to share a ring with other users, the consumer serves it on \
                 a socket: `shmring record --listen PATH --allow-uid UID`, and producers \
                 `--connect PATH`)"
            )
        }
        _ => msg,
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
