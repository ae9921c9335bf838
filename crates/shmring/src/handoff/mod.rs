//! The secure hand-off: a consumer serves its sealed memfd over a Unix socket, and
//! producers and observers connect to it instead of opening a named segment.
//!
//! * The consumer binds a [`Listener`] on a socket path (or a Linux abstract name,
//!   written `@name`) and services it with [`Listener::poll`] from its own event
//!   loop, or in one background thread ([`Listener::spawn`]). Never a thread per
//!   connection; nothing here runs on the consumer's frame path.
//! * Each peer is authenticated by the credentials the kernel recorded when it
//!   connected (`SO_PEERCRED`), against an allow-list per role ([`Allow`]; default:
//!   this process's uid only). The socket file's mode is a second fence, not the check.
//! * The peer sends a 16-byte hello (magic, [`PROTOCOL_VERSION`], [`Role`]); the
//!   consumer answers with a 256-byte reply (status, ring geometry, and on refusal a
//!   message naming the [`Refusal`] rule) carrying, on success, the descriptors by
//!   `SCM_RIGHTS`: producers get the ring's descriptors
//!   ([`Segment::descriptors`](crate::Segment::descriptors): the memfd, its lock
//!   file, and the ring's eventfd if it has one), observers a **read-only**
//!   descriptor of the memfd alone, which the kernel refuses to map writable, and
//!   nothing they could lock. Then the connection is closed: the hand-off is one
//!   message each way.
//! * Pending connections are bounded ([`ListenerOptions::max_pending`]) and timed
//!   out ([`ListenerOptions::hello_timeout`]); a hello already there when its
//!   connection is accepted takes no pending entry, and a full table is shared
//!   per uid, the connection that waited longest without a hello giving way
//!   first. Every outcome is counted ([`ListenerStats`]), refusals by rule.
//!
//! ```
//! use shmring::handoff::{Listener, ListenerOptions};
//! use shmring::{Address, Config, Meta};
//! let dir = std::env::temp_dir().join(format!("shmring-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("ring.sock");
//! let seg = Address::memfd("doc", Config::with_capacity(1 << 20)).open()?;
//! let consumer = seg.consumer()?;
//! let listener = Listener::bind(&seg, &path, ListenerOptions::default())?.spawn()?;
//!
//! let remote = Address::socket(&path).open()?;          // normally another process
//! remote.producer()?.send(b"hello", Meta::new(0, 0))?;
//! assert_eq!(consumer.recv()?.payload(), b"hello");
//! assert_eq!(listener.stats().producers, 1);
//! drop(listener);                                 // stops the thread, removes the socket
//! std::fs::remove_dir(&dir).unwrap();
//! # Ok::<(), shmring::Error>(())
//! ```
//!
//! The module by concept: [`wire`] (the hello and the reply, byte for byte),
//! [`policy`] (who may connect, fair shares of the pending connections), `listener`
//! (the consumer's side: accept, read, answer, time out) and `client` (the peer's
//! side: [`request`], and [`Address::open`](crate::Address::open) /
//! [`Address::open_read_only`](crate::Address::open_read_only) of an
//! [`Address::Socket`](crate::Address::Socket)).

use std::path::Path;
use std::time::Duration;

use crate::error::Error;

mod client;
mod listener;
pub mod policy;
pub mod wire;

pub use client::{request, Received};
pub use listener::{Listener, ListenerStats, ListenerThread};
pub use policy::{Allow, ListenerOptions};
pub use wire::{Announced, Refusal, Role, HELLO_LEN, PROTOCOL_VERSION, REPLY_LEN};

/// Default bound on connections accepted but not yet answered.
pub const DEFAULT_MAX_PENDING: usize = 16;
/// Upper limit of [`ListenerOptions::max_pending`].
pub const MAX_PENDING_LIMIT: usize = 1024;
/// Default time a connected peer has to send its hello.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time opening an [`Address::Socket`](crate::Address::Socket) waits for the
/// consumer's reply.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn os_err(op: &'static str, socket: &str, e: impl Into<std::io::Error>) -> Error {
    crate::error::os(op, &crate::error::socket_name(socket), e)
}

fn handoff_err(socket: &str, what: impl Into<String>) -> Error {
    Error::Handoff {
        socket: socket.into(),
        what: what.into(),
    }
}

/// A socket path as messages name it.
fn display(path: &Path) -> String {
    path.display().to_string()
}
