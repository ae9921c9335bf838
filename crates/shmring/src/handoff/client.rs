//! The peer's side of the hand-off: connect, say hello, receive the reply and its
//! descriptors ([`request`]), and attach (what opening an
//! [`Address::Socket`](crate::Address::Socket) does).

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};

use super::wire::{self, Announced, MAX_DESCRIPTORS};
use super::{display, handoff_err, os_err, Refusal, Role, REPLY_LEN};
use crate::error::{Error, Result};
use crate::layout::{Geometry, FLAG_EVENTFD, FLAG_LOCK_FILE};
use crate::segment::{ReadOnlySegment, Segment};
use crate::sys::unix;

/// The descriptors a consumer handed over, before attaching.
#[derive(Debug)]
pub struct Received {
    /// A producer's: the ring's descriptors in the order of
    /// [`Segment::descriptors`]. An observer's: the read-only memfd alone.
    pub fds: Vec<OwnedFd>,
    /// What the consumer said about the ring.
    pub announced: Announced,
    /// Connections it took: 1 when the first was answered, one more for each time
    /// a busy consumer was asked again.
    pub attempts: u32,
}

/// Connects to a consumer's socket, asks for `role`, and returns the descriptors it
/// hands over (most callers want [`Address::open`](crate::Address::open) or
/// [`Address::open_read_only`](crate::Address::open_read_only) of a socket).
/// Waits at most `timeout` for each step (connect, hello, reply).
///
/// Do not call this in a process that already has the ring attached (the consumer
/// itself, say) and then close what it returns: closing any descriptor of a
/// segment's file drops the process's record locks on it, its liveness signal.
/// Opening a socket's address keeps the descriptors where the segment keeps its
/// own.
///
/// A consumer that is busy (it answers `too-many-pending`, or its backlog is full)
/// is asked again, with a growing pause (10 ms doubling up to 200 ms), until
/// `timeout` has passed since the first try: a peer holding connections open
/// delays an honest one, it does not turn it away.
pub fn request(path: impl AsRef<Path>, role: Role, timeout: Duration) -> Result<Received> {
    let path = path.as_ref();
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    let mut attempts = 1;
    loop {
        let busy = |e: &Error| match e {
            Error::Refused { rule, .. } => *rule == Refusal::Busy.rule(),
            Error::Timeout { waiting_for, .. } => *waiting_for == WAIT_ACCEPT,
            _ => false,
        };
        match request_once(path, role, timeout) {
            Err(e) if busy(&e) && start.elapsed() + pause < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
                attempts += 1;
            }
            r => return r.map(|got| Received { attempts, ..got }),
        }
    }
}

const WAIT_ACCEPT: &str = "the consumer to accept the connection";

fn request_once(path: &Path, role: Role, timeout: Duration) -> Result<Received> {
    let socket = display(path);
    let addr = unix::address(path).map_err(|e| os_err("socket address", &socket, e))?;
    let sock = unix::stream_socket(false).map_err(|e| os_err("socket", &socket, e))?;
    let t = Some(timeout.max(Duration::from_millis(1)));
    for id in [
        rustix::net::sockopt::Timeout::Recv,
        rustix::net::sockopt::Timeout::Send,
    ] {
        rustix::net::sockopt::set_socket_timeout(&sock, id, t)
            .map_err(|e| os_err("set socket timeout", &socket, e))?;
    }
    let timed_out = |what: &'static str| Error::Timeout {
        segment: socket.as_str().into(),
        waiting_for: what,
        after: timeout,
    };
    rustix::net::connect(&sock, &addr).map_err(|e| match e {
        Errno::NOENT => Error::NotFound(crate::error::socket_name(&socket)),
        Errno::CONNREFUSED => Error::NoConsumer(socket.as_str().into()),
        Errno::AGAIN => timed_out(WAIT_ACCEPT),
        e => os_err("connect", &socket, e),
    })?;
    let hello = wire::hello(role, &crate::segment::files::held_keys());
    // A consumer that refuses at once (too many pending) may have closed already:
    // its answer is still readable, so a failed send is not the end.
    let _ = rustix::net::send(&sock, &hello, SendFlags::NOSIGNAL);
    read_reply(&sock, &socket, role, timeout)
}

fn read_reply(sock: &OwnedFd, socket: &str, role: Role, timeout: Duration) -> Result<Received> {
    let mut reply = [0u8; REPLY_LEN];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < REPLY_LEN {
        let mut space =
            [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_DESCRIPTORS + 1))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut reply[got..])],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC,
        );
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(f) = m {
                fds.extend(f);
            }
        }
        match r {
            Ok(r) if r.bytes == 0 => {
                return Err(handoff_err(
                    socket,
                    format!(
                        "the consumer closed the connection after {got} of {REPLY_LEN} reply bytes"
                    ),
                ))
            }
            Ok(r) => got += r.bytes,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                return Err(Error::Timeout {
                    segment: socket.into(),
                    waiting_for: "the consumer's hand-off reply",
                    after: timeout,
                })
            }
            Err(Errno::CONNRESET) | Err(Errno::PIPE) => {
                return Err(handoff_err(
                    socket,
                    "the consumer reset the connection without a reply",
                ))
            }
            Err(e) => return Err(os_err("recvmsg", socket, e)),
        }
    }
    let announced = wire::parse_reply(&reply, socket, role, fds.len())?;
    Ok(Received {
        fds,
        announced,
        attempts: 1,
    })
}

fn check_geometry(a: &Announced, geo: &Geometry, socket: &str) -> Result<()> {
    if (a.capacity, a.max_record, a.total_size, a.flags)
        != (geo.capacity, geo.max_record, geo.total_size, geo.flags)
    {
        return Err(handoff_err(
            socket,
            format!(
                "the consumer announced capacity {} max_record {} size {} flags {:#x}; the \
                 segment it sent has {} {} {} {:#x}",
                a.capacity,
                a.max_record,
                a.total_size,
                a.flags,
                geo.capacity,
                geo.max_record,
                geo.total_size,
                geo.flags
            ),
        ));
    }
    Ok(())
}

impl Segment {
    /// Connects to a consumer serving its ring on `path` (see
    /// [`Listener`](super::Listener)) as a producer, receives the sealed memfd (and the eventfd of an eventfd ring) and
    /// attaches (an [`Address::Socket`](crate::Address::Socket) opened). Waits at
    /// most `timeout` for each step.
    ///
    /// Errors: [`Error::NotFound`] (no socket there), [`Error::NoConsumer`] (a stale
    /// socket: its consumer is gone), [`Error::Refused`] (names the consumer's
    /// rule), [`Error::Timeout`], [`Error::Handoff`] (not a shmring socket...).
    pub(crate) fn connect_timeout(
        path: impl AsRef<Path>,
        timeout: Duration,
    ) -> Result<Arc<Segment>> {
        let socket = display(path.as_ref());
        let Received { fds, announced, .. } = request(path, Role::Producer, timeout)?;
        if announced.flags & FLAG_EVENTFD != 0
            && fds.len() < 1 + (announced.flags & FLAG_LOCK_FILE != 0) as usize + 1
        {
            return Err(handoff_err(
                &socket,
                "the ring uses eventfd wake-ups but no eventfd came with it",
            ));
        }
        let seg = Segment::from_descriptors(fds)?;
        check_geometry(&announced, seg.geometry(), &socket)?;
        Ok(seg)
    }

    /// Connects to a consumer serving its ring on `path` as an observer: receives a
    /// read-only descriptor and maps it read-only. Counters only: no producer or
    /// consumer can be made from it, and the kernel refuses to map it writable.
    /// Waits at most `timeout` for each step.
    pub(crate) fn observe_timeout(
        path: impl AsRef<Path>,
        timeout: Duration,
    ) -> Result<ReadOnlySegment> {
        let socket = display(path.as_ref());
        let Received { fds, announced, .. } = request(path, Role::Observer, timeout)?;
        let Ok::<[OwnedFd; 1], _>([fd]) = fds.try_into() else {
            return Err(handoff_err(&socket, "an observer gets one descriptor"));
        };
        let ro = ReadOnlySegment::from_fd(fd)?;
        check_geometry(&announced, ro.geometry(), &socket)?;
        Ok(ro)
    }
}
