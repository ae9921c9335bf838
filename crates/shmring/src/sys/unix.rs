//! Unix-domain socket helpers for the hand-off (`crate::handoff`): socket addresses
//! (file system paths and Linux abstract names) and the peer's credentials.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// Is `path` a Linux abstract socket name (written with a leading `@`)?
pub fn is_abstract(path: &Path) -> bool {
    path.as_os_str().as_bytes().first() == Some(&b'@')
}

/// The address of `path`: an abstract name for `@name`, else a file system path.
pub fn address(path: &Path) -> std::io::Result<SocketAddrUnix> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty socket path",
        ));
    }
    let addr = if is_abstract(path) {
        SocketAddrUnix::new_abstract_name(&bytes[1..])
    } else {
        SocketAddrUnix::new(path)
    };
    addr.map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a valid Unix socket address ({e}; at most 107 bytes)"),
        )
    })
}

/// A new stream socket, close-on-exec, optionally non-blocking.
pub fn stream_socket(nonblocking: bool) -> std::io::Result<OwnedFd> {
    let mut flags = SocketFlags::CLOEXEC;
    if nonblocking {
        flags |= SocketFlags::NONBLOCK;
    }
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        flags,
        None,
    )?)
}

/// The credentials of the process that connected `sock`, as the kernel recorded
/// them at `connect` (`SO_PEERCRED`): (uid, gid), translated into this process's
/// user namespace (an unmapped id reads as the overflow id, 65534).
pub fn peer_credentials(sock: impl AsFd) -> std::io::Result<(u32, u32)> {
    let c = rustix::net::sockopt::socket_peercred(sock)?;
    Ok((c.uid.as_raw(), c.gid.as_raw()))
}

/// This process's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}
