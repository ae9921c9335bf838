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
//!   ([`Segment::descriptors`]: the memfd, its lock file, and the ring's eventfd
//!   if it has one), observers a **read-only** descriptor of the memfd alone,
//!   which the kernel refuses to map writable, and nothing they could lock. Then
//!   the connection is closed: the hand-off is one message each way.
//! * Pending connections are bounded ([`ListenerOptions::max_pending`]) and timed
//!   out ([`ListenerOptions::hello_timeout`]); every outcome is counted
//!   ([`ListenerStats`]), refusals by rule.
//!
//! ```
//! use shmring::handoff::{Listener, ListenerOptions};
//! use shmring::{Config, Segment, Meta};
//! let dir = std::env::temp_dir().join(format!("shmring-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("ring.sock");
//! let seg = Segment::create_memfd("doc", &Config::with_capacity(1 << 20))?;
//! let consumer = seg.consumer()?;
//! let listener = Listener::bind(&seg, &path, ListenerOptions::default())?.spawn()?;
//!
//! let remote = Segment::connect(&path)?;          // normally another process
//! remote.producer()?.send(b"hello", Meta::new(0, 0))?;
//! assert_eq!(consumer.recv()?.payload(), b"hello");
//! assert_eq!(listener.stats().producers, 1);
//! drop(listener);                                 // stops the thread, removes the socket
//! std::fs::remove_dir(&dir).unwrap();
//! # Ok::<(), shmring::Error>(())
//! ```

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::epoll;
use rustix::fs::SealFlags;
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags,
};

use crate::error::{Error, Name, Result};
use crate::layout::{Geometry, FLAG_EVENTFD, FLAG_LOCK_FILE};
use crate::segment::{ReadOnlySegment, Segment};
use crate::sys::unix;

/// The hand-off protocol's version, sent in every hello and reply. A consumer
/// refuses a hello of another version (rule `protocol-version`) and says its own.
pub const PROTOCOL_VERSION: u16 = 2;
/// Most descriptors a reply carries (a producer's: segment, lock file, eventfd).
const MAX_DESCRIPTORS: usize = 3;
/// Bytes of a hello (peer → consumer).
pub const HELLO_LEN: usize = 16;
/// Bytes of a reply (consumer → peer).
pub const REPLY_LEN: usize = 256;
/// Default bound on connections accepted but not yet answered.
pub const DEFAULT_MAX_PENDING: usize = 16;
/// Upper limit of [`ListenerOptions::max_pending`].
pub const MAX_PENDING_LIMIT: usize = 1024;
/// Default time a connected peer has to send its hello.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time [`Segment::connect`] waits for the consumer's reply.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const HELLO_MAGIC: [u8; 4] = *b"SRH?";
const REPLY_MAGIC: [u8; 4] = *b"SRH!";
/// Longest refusal message in a reply.
const MESSAGE_MAX: usize = REPLY_LEN - 52;
/// The listening socket's backlog (connections the kernel queues before accept).
const BACKLOG: i32 = 64;
/// Connections accepted per readiness event, so a flood cannot monopolise a poll.
const ACCEPTS_PER_POLL: usize = 64;
/// After the process runs out of descriptors, accepting pauses this long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Epoll tokens: the listening socket, the stop eventfd, then pending slot i at 2+i.
const TOKEN_LISTEN: u64 = 0;
const TOKEN_STOP: u64 = 1;
const TOKEN_PENDING: u64 = 2;

/// What a peer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Writes records: receives the read-write memfd (and the eventfd).
    Producer,
    /// Reads counters (stat, top, exporters): receives a read-only descriptor.
    Observer,
}

impl Role {
    fn code(self) -> u8 {
        match self {
            Role::Producer => 1,
            Role::Observer => 2,
        }
    }

    fn from_code(c: u8) -> Option<Role> {
        match c {
            1 => Some(Role::Producer),
            2 => Some(Role::Observer),
            _ => None,
        }
    }

    /// "producer" or "observer".
    pub fn name(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Observer => "observer",
        }
    }
}

/// Why a consumer refused a peer. Each is a rule with a stable name, sent to the
/// peer in the reply and counted in [`ListenerStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer's uid/gid (`SO_PEERCRED`) is not on the allow-list of its role.
    Credentials,
    /// The hello's protocol version is not this consumer's.
    Version,
    /// The role asked for is unknown or not offered.
    Role,
    /// The first bytes are not a hello, or the peer closed before sending one.
    Malformed,
    /// No complete hello within the hello timeout.
    Timeout,
    /// Too many connections are waiting for an answer.
    Busy,
    /// The consumer failed to answer (a system call failed).
    Internal,
}

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::Credentials => 1,
            Refusal::Version => 2,
            Refusal::Role => 3,
            Refusal::Malformed => 4,
            Refusal::Timeout => 5,
            Refusal::Busy => 6,
            Refusal::Internal => 7,
        }
    }

    fn from_code(c: u8) -> Refusal {
        match c {
            1 => Refusal::Credentials,
            2 => Refusal::Version,
            3 => Refusal::Role,
            4 => Refusal::Malformed,
            5 => Refusal::Timeout,
            6 => Refusal::Busy,
            _ => Refusal::Internal,
        }
    }

    /// The rule's name, as in messages and [`Error::Refused`].
    pub fn rule(self) -> &'static str {
        match self {
            Refusal::Credentials => "peer-credentials",
            Refusal::Version => "protocol-version",
            Refusal::Role => "role",
            Refusal::Malformed => "malformed-hello",
            Refusal::Timeout => "hello-timeout",
            Refusal::Busy => "too-many-pending",
            Refusal::Internal => "internal",
        }
    }
}

/// Who may connect in a role: a peer is allowed when its uid or its gid is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    /// Allowed user ids.
    pub uids: Vec<u32>,
    /// Allowed group ids (the peer's primary gid at connect time).
    pub gids: Vec<u32>,
}

impl Allow {
    /// Only this process's effective uid (the default).
    pub fn same_uid() -> Allow {
        Allow {
            uids: vec![unix::euid()],
            gids: Vec::new(),
        }
    }

    /// Nobody: the role is not offered.
    pub fn nobody() -> Allow {
        Allow {
            uids: Vec::new(),
            gids: Vec::new(),
        }
    }

    /// Also allows user `uid`.
    pub fn uid(mut self, uid: u32) -> Allow {
        if !self.uids.contains(&uid) {
            self.uids.push(uid);
        }
        self
    }

    /// Also allows group `gid`.
    pub fn gid(mut self, gid: u32) -> Allow {
        if !self.gids.contains(&gid) {
            self.gids.push(gid);
        }
        self
    }

    /// Does this list allow a peer with these credentials?
    pub fn permits(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }

    fn only_own_uid(&self) -> bool {
        self.gids.is_empty() && self.uids.iter().all(|&u| u == unix::euid())
    }
}

impl Default for Allow {
    fn default() -> Allow {
        Allow::same_uid()
    }
}

/// How a [`Listener`] decides and bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Who may connect as a producer. Default: this process's uid.
    pub producers: Allow,
    /// Who may connect as an observer. Default: this process's uid.
    pub observers: Allow,
    /// Connections accepted and not yet answered, at most (1 to
    /// [`MAX_PENDING_LIMIT`]); one more is answered `too-many-pending` at once.
    pub max_pending: usize,
    /// Time a peer has to send its hello after the consumer accepted it.
    pub hello_timeout: Duration,
    /// Mode of the socket file; `None`: 0600 when only this uid is allowed, else
    /// 0666 (other uids must be able to connect; the allow-list decides).
    pub socket_mode: Option<u32>,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            producers: Allow::same_uid(),
            observers: Allow::same_uid(),
            max_pending: DEFAULT_MAX_PENDING,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            socket_mode: None,
        }
    }
}

impl ListenerOptions {
    /// Default options that also allow user `uid` in both roles.
    pub fn allow_uid(mut self, uid: u32) -> Self {
        self.producers = self.producers.uid(uid);
        self.observers = self.observers.uid(uid);
        self
    }

    /// Default options that also allow group `gid` in both roles.
    pub fn allow_gid(mut self, gid: u32) -> Self {
        self.producers = self.producers.gid(gid);
        self.observers = self.observers.gid(gid);
        self
    }
}

/// What a listener did so far. Kept by the consumer's process (not in the segment,
/// where a producer could rewrite it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Producers handed the ring.
    pub producers: u64,
    /// Observers handed a read-only descriptor.
    pub observers: u64,
    /// Refused: uid/gid not on the role's allow-list.
    pub refused_credentials: u64,
    /// Refused: another protocol version.
    pub refused_version: u64,
    /// Refused: unknown role, or a role nobody may take.
    pub refused_role: u64,
    /// Refused: not a hello, or closed before a whole hello.
    pub refused_malformed: u64,
    /// Refused: no hello within the timeout.
    pub timed_out: u64,
    /// Refused at once: too many connections pending.
    pub refused_busy: u64,
    /// Answers that could not be sent, accepts that failed.
    pub failed: u64,
    /// Connections accepted and not answered yet (now).
    pub pending: u64,
}

impl ListenerStats {
    /// Every refusal, all rules together.
    pub fn refused(&self) -> u64 {
        self.refused_credentials
            + self.refused_version
            + self.refused_role
            + self.refused_malformed
            + self.timed_out
            + self.refused_busy
    }
}

#[derive(Default)]
struct Counters {
    producers: AtomicU64,
    observers: AtomicU64,
    refused: [AtomicU64; 7],
    failed: AtomicU64,
    pending: AtomicUsize,
}

impl Counters {
    fn snapshot(&self) -> ListenerStats {
        let r = |x: Refusal| self.refused[x.code() as usize - 1].load(Ordering::Relaxed);
        ListenerStats {
            producers: self.producers.load(Ordering::Relaxed),
            observers: self.observers.load(Ordering::Relaxed),
            refused_credentials: r(Refusal::Credentials),
            refused_version: r(Refusal::Version),
            refused_role: r(Refusal::Role),
            refused_malformed: r(Refusal::Malformed),
            timed_out: r(Refusal::Timeout),
            refused_busy: r(Refusal::Busy),
            failed: self.failed.load(Ordering::Relaxed) + r(Refusal::Internal),
            pending: self.pending.load(Ordering::Relaxed) as u64,
        }
    }

    fn refuse(&self, why: Refusal) {
        self.refused[why.code() as usize - 1].fetch_add(1, Ordering::Relaxed);
    }
}

struct Pending {
    sock: OwnedFd,
    deadline: Instant,
    hello: [u8; HELLO_LEN],
    got: usize,
    uid: u32,
    gid: u32,
    /// The peer's pid (0: not visible from here), for fair shares.
    pid: u32,
    since: Instant,
}

/// Serves a ring's memfd on a Unix socket. Create with [`Listener::bind`]; drive it
/// with [`Listener::poll`] (its descriptor, [`AsFd`], is readable when there is
/// work: add it to your own epoll/poll loop) or hand it to one background thread
/// with [`Listener::spawn`]. Dropping it removes the socket file.
pub struct Listener {
    seg: Arc<Segment>,
    sock: OwnedFd,
    epoll: OwnedFd,
    socket: Name,
    /// The socket file and its identity, to remove it on drop only if still ours.
    file: Option<(PathBuf, u64, u64)>,
    opts: ListenerOptions,
    pending: Vec<Option<Pending>>,
    counters: Arc<Counters>,
    accept_paused_until: Option<Instant>,
    stopped: bool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("socket", &self.socket)
            .field("segment", &self.seg.name())
            .field("stats", &self.stats())
            .finish()
    }
}

fn os_err(op: &'static str, socket: &str, e: impl Into<std::io::Error>) -> Error {
    crate::error::os(op, socket, e)
}

fn handoff_err(socket: &str, what: impl Into<String>) -> Error {
    Error::Handoff {
        socket: socket.into(),
        what: what.into(),
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Removes a socket file left by a consumer that is gone (nobody accepts on it);
/// refuses to touch anything else.
fn remove_stale(path: &Path, socket: &str) -> Result<()> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(os_err("stat", socket, e)),
    };
    if !md.file_type().is_socket() {
        return Err(handoff_err(
            socket,
            "the path exists and is not a socket; remove it or choose another path",
        ));
    }
    let probe = unix::stream_socket(true).map_err(|e| os_err("socket", socket, e))?;
    let addr = unix::address(path).map_err(|e| os_err("socket address", socket, e))?;
    match rustix::net::connect(&probe, &addr) {
        // Accepting, or its backlog is full: a live consumer.
        Ok(()) | Err(Errno::AGAIN) | Err(Errno::INPROGRESS) => Err(handoff_err(
            socket,
            "a live consumer is already listening on it",
        )),
        Err(Errno::CONNREFUSED) => {
            std::fs::remove_file(path).map_err(|e| os_err("remove stale socket", socket, e))
        }
        Err(e) => Err(os_err("connect (stale socket check)", socket, e)),
    }
}

impl Listener {
    /// Binds `path` (a file system path, or `@name` for a Linux abstract socket) and
    /// serves `seg`, which must be a sealed memfd ([`Segment::create_memfd`]). A stale
    /// socket file left by a consumer that died is replaced; one a live consumer
    /// listens on is an error. The memfd's mode becomes 0400, so that a peer holding
    /// the read-only descriptor cannot re-open it for writing through `/proc`.
    pub fn bind(
        seg: &Arc<Segment>,
        path: impl AsRef<Path>,
        opts: ListenerOptions,
    ) -> Result<Listener> {
        let path = path.as_ref();
        let socket = display(path);
        if opts.max_pending == 0 || opts.max_pending > MAX_PENDING_LIMIT {
            return Err(Error::Config(format!(
                "listener {socket}: max_pending {} is not in 1..={MAX_PENDING_LIMIT}",
                opts.max_pending
            )));
        }
        if opts.hello_timeout.is_zero() {
            return Err(Error::Config(format!(
                "listener {socket}: hello_timeout must be more than zero"
            )));
        }
        match rustix::fs::fcntl_get_seals(seg.fd()) {
            Ok(s) if s.contains(SealFlags::SHRINK | SealFlags::GROW) => {}
            _ => {
                return Err(Error::Config(format!(
                    "listener {socket}: ring {} is not a sealed memfd; serve a ring made by \
                     Segment::create_memfd (a named segment can be opened by name instead)",
                    seg.name()
                )))
            }
        }
        // Open the observers' read-only descriptor now: it stays open as long as the
        // segment, so serving observers opens nothing later.
        seg.read_only_fd()?;
        rustix::fs::fchmod(seg.fd(), rustix::fs::Mode::from_raw_mode(0o400))
            .map_err(|e| os_err("fchmod memfd 0400", seg.name(), e))?;
        let addr = unix::address(path).map_err(|e| os_err("socket address", &socket, e))?;
        let sock = unix::stream_socket(true).map_err(|e| os_err("socket", &socket, e))?;
        if !unix::is_abstract(path) {
            remove_stale(path, &socket)?;
        }
        rustix::net::bind(&sock, &addr).map_err(|e| match e {
            Errno::ADDRINUSE => handoff_err(&socket, "another process is listening on it"),
            e => os_err("bind", &socket, e),
        })?;
        let file = if unix::is_abstract(path) {
            None
        } else {
            let md = std::fs::symlink_metadata(path).map_err(|e| os_err("stat", &socket, e))?;
            let mode = opts.socket_mode.unwrap_or(
                if opts.producers.only_own_uid() && opts.observers.only_own_uid() {
                    0o600
                } else {
                    0o666
                },
            );
            let f = (path.to_owned(), md.dev(), md.ino());
            if let Err(e) = rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(mode)) {
                let _ = std::fs::remove_file(path);
                return Err(os_err("chmod", &socket, e));
            }
            Some(f)
        };
        let unlink = |e: Error| {
            if let Some((p, ..)) = &file {
                let _ = std::fs::remove_file(p);
            }
            e
        };
        rustix::net::listen(&sock, BACKLOG).map_err(|e| unlink(os_err("listen", &socket, e)))?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| unlink(os_err("epoll_create", &socket, e)))?;
        epoll::add(
            &ep,
            &sock,
            epoll::EventData::new_u64(TOKEN_LISTEN),
            epoll::EventFlags::IN,
        )
        .map_err(|e| unlink(os_err("epoll_ctl", &socket, e)))?;
        let mut pending = Vec::with_capacity(opts.max_pending);
        pending.resize_with(opts.max_pending, || None);
        Ok(Listener {
            seg: seg.clone(),
            sock,
            epoll: ep,
            socket: socket.as_str().into(),
            file,
            opts,
            pending,
            counters: Arc::new(Counters::default()),
            accept_paused_until: None,
            stopped: false,
        })
    }

    /// The socket's path or `@name`.
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// The ring served.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// What the listener did so far.
    pub fn stats(&self) -> ListenerStats {
        self.counters.snapshot()
    }

    /// Accepts, reads hellos, answers and times out, waiting at most `timeout` for
    /// something to do (`Some(ZERO)`: never waits; `None`: until something happens).
    /// Bounded work per call; never blocks on a peer.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<()> {
        let now = Instant::now();
        let mut wait = timeout;
        if let Some(d) = self.next_deadline() {
            let left = d.saturating_duration_since(now);
            wait = Some(wait.map_or(left, |w| w.min(left)));
        }
        let ts = wait.map(|w| rustix::time::Timespec {
            tv_sec: w.as_secs().min(i64::MAX as u64) as _,
            tv_nsec: w.subsec_nanos() as _,
        });
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 32];
        // Copy the tokens out first: handling them needs `&mut self`.
        let mut tokens = [0u64; 32];
        let n = match epoll::wait(&self.epoll, &mut events, ts.as_ref()) {
            Ok((ev, _)) => {
                for (t, e) in tokens.iter_mut().zip(ev.iter()) {
                    *t = e.data.u64();
                }
                ev.len()
            }
            Err(Errno::INTR) => 0,
            Err(e) => return Err(os_err("epoll_wait", &self.socket, e)),
        };
        for &t in &tokens[..n] {
            match t {
                TOKEN_LISTEN => self.accept_some(),
                TOKEN_STOP => self.stopped = true,
                t => self.service((t - TOKEN_PENDING) as usize),
            }
        }
        self.expire(Instant::now());
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let d = self.pending.iter().flatten().map(|p| p.deadline).min();
        match (d, self.accept_paused_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn accept_some(&mut self) {
        for _ in 0..ACCEPTS_PER_POLL {
            let conn = match rustix::net::accept_with(
                &self.sock,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(c) => c,
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR) | Err(Errno::CONNABORTED) => continue,
                Err(_) => {
                    // Out of descriptors or memory: stop accepting for a while
                    // (level-triggered readiness would otherwise spin).
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    let _ = epoll::modify(
                        &self.epoll,
                        &self.sock,
                        epoll::EventData::new_u64(TOKEN_LISTEN),
                        epoll::EventFlags::empty(),
                    );
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
            };
            let (uid, gid) = match unix::peer_credentials(&conn) {
                Ok(c) => c,
                Err(_) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    refuse(
                        &conn,
                        Refusal::Internal,
                        "cannot read the peer's credentials",
                    );
                    continue;
                }
            };
            let pid = unix::peer_pid(&conn).unwrap_or(0);
            let Some(slot) = self.make_room(uid, pid) else {
                self.counters.refuse(Refusal::Busy);
                let msg = format!(
                    "{} connections are already waiting for an answer, as many of them \
                     from this peer as from any; try again",
                    self.opts.max_pending
                );
                let mut junk = [0u8; HELLO_LEN];
                let _ = rustix::io::read(&conn, &mut junk);
                refuse(&conn, Refusal::Busy, &msg);
                continue;
            };
            if epoll::add(
                &self.epoll,
                &conn,
                epoll::EventData::new_u64(TOKEN_PENDING + slot as u64),
                epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            )
            .is_err()
            {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.pending[slot] = Some(Pending {
                sock: conn,
                deadline: Instant::now() + self.opts.hello_timeout,
                hello: [0; HELLO_LEN],
                got: 0,
                uid,
                gid,
                pid,
                since: Instant::now(),
            });
            self.counters.pending.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A free pending entry for a new connection from (`uid`, `pid`). When all are
    /// taken, each peer gets a fair share: the oldest pending connection of the
    /// peer holding the most is refused (`too-many-pending`) to make room, unless
    /// the newcomer holds as many itself (then it is the one refused: `None`). So
    /// peers that hold connections open without a hello cannot lock out others,
    /// however many they open.
    fn make_room(&mut self, uid: u32, pid: u32) -> Option<usize> {
        if let Some(free) = self.pending.iter().position(Option::is_none) {
            return Some(free);
        }
        let held = |who: (u32, u32)| {
            self.pending
                .iter()
                .flatten()
                .filter(|p| (p.uid, p.pid) == who)
                .count()
        };
        let hog = self
            .pending
            .iter()
            .flatten()
            .map(|p| ((p.uid, p.pid), held((p.uid, p.pid))))
            .max_by_key(|&(_, n)| n)?;
        if held((uid, pid)) >= hog.1 {
            return None;
        }
        let victim = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
            .filter(|(_, p)| (p.uid, p.pid) == hog.0)
            .min_by_key(|(_, p)| p.since)
            .map(|(i, _)| i)?;
        let p = self.finish(victim)?;
        self.counters.refuse(Refusal::Busy);
        refuse(
            &p.sock,
            Refusal::Busy,
            "this peer holds more connections waiting for an answer than any other; \
             its oldest was dropped to serve another peer",
        );
        Some(victim)
    }

    fn finish(&mut self, slot: usize) -> Option<Pending> {
        let p = self.pending.get_mut(slot)?.take()?;
        let _ = epoll::delete(&self.epoll, &p.sock);
        self.counters.pending.fetch_sub(1, Ordering::Relaxed);
        Some(p)
    }

    fn service(&mut self, slot: usize) {
        let Some(Some(p)) = self.pending.get_mut(slot) else {
            return;
        };
        let got = p.got;
        match rustix::io::read(&p.sock, &mut p.hello[got..]) {
            Ok(0) => {
                // Closed before a whole hello.
                let _ = self.finish(slot);
                self.counters.refuse(Refusal::Malformed);
            }
            Ok(n) => {
                p.got += n;
                if p.got == HELLO_LEN {
                    if let Some(p) = self.finish(slot) {
                        self.answer(p);
                    }
                }
            }
            Err(Errno::AGAIN) | Err(Errno::INTR) => {}
            Err(_) => {
                let _ = self.finish(slot);
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        if self.accept_paused_until.is_some_and(|t| now >= t) {
            self.accept_paused_until = None;
            let _ = epoll::modify(
                &self.epoll,
                &self.sock,
                epoll::EventData::new_u64(TOKEN_LISTEN),
                epoll::EventFlags::IN,
            );
        }
        for i in 0..self.pending.len() {
            if self.pending[i].as_ref().is_some_and(|p| now >= p.deadline) {
                if let Some(p) = self.finish(i) {
                    self.counters.refuse(Refusal::Timeout);
                    let msg = format!(
                        "no complete hello within {} ms",
                        self.opts.hello_timeout.as_millis()
                    );
                    refuse(&p.sock, Refusal::Timeout, &msg);
                }
            }
        }
    }

    /// Decides on a complete hello and answers it.
    fn answer(&self, p: Pending) {
        let h = &p.hello;
        let refusal = if h[0..4] != HELLO_MAGIC {
            Some((
                Refusal::Malformed,
                "the first bytes are not a shmring hand-off hello".to_string(),
            ))
        } else if u16::from_le_bytes([h[4], h[5]]) != PROTOCOL_VERSION {
            Some((
                Refusal::Version,
                format!(
                    "protocol version {} is not supported; this consumer speaks version \
                     {PROTOCOL_VERSION}",
                    u16::from_le_bytes([h[4], h[5]])
                ),
            ))
        } else {
            match Role::from_code(h[6]) {
                None => Some((Refusal::Role, format!("unknown role {}", h[6]))),
                Some(role) => {
                    let allow = match role {
                        Role::Producer => &self.opts.producers,
                        Role::Observer => &self.opts.observers,
                    };
                    if allow.uids.is_empty() && allow.gids.is_empty() {
                        Some((
                            Refusal::Role,
                            format!("this consumer takes no {}s", role.name()),
                        ))
                    } else if !allow.permits(p.uid, p.gid) {
                        Some((
                            Refusal::Credentials,
                            format!(
                                "peer uid {} gid {} is not on this consumer's {} allow-list",
                                p.uid,
                                p.gid,
                                role.name()
                            ),
                        ))
                    } else {
                        // Counted before the reply goes out, so that a peer that
                        // has its descriptors also finds itself counted.
                        let c = match role {
                            Role::Producer => &self.counters.producers,
                            Role::Observer => &self.counters.observers,
                        };
                        c.fetch_add(1, Ordering::Relaxed);
                        if self.grant(&p.sock, role).is_err() {
                            c.fetch_sub(1, Ordering::Relaxed);
                            self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        }
                        None
                    }
                }
            }
        };
        if let Some((why, msg)) = refusal {
            self.counters.refuse(why);
            refuse(&p.sock, why, &msg);
        }
    }

    fn grant(&self, sock: &OwnedFd, role: Role) -> std::io::Result<()> {
        let list: Vec<BorrowedFd<'_>> = match role {
            Role::Producer => self.seg.descriptors(),
            Role::Observer => vec![self.seg.read_only_fd().map_err(std::io::Error::other)?],
        };
        let list = &list[..];
        let reply = encode_reply(
            0,
            role.code(),
            Some(self.seg.geometry()),
            list.len() as u32,
            "",
        );
        send_reply(sock, &reply, list)
    }

    /// Hands the listener to one background thread (epoll, one thread for all
    /// connections). The returned handle reads the counters; dropping it stops the
    /// thread and removes the socket.
    pub fn spawn(mut self) -> Result<ListenerThread> {
        let stop = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| os_err("eventfd", &self.socket, e))?;
        epoll::add(
            &self.epoll,
            &stop,
            epoll::EventData::new_u64(TOKEN_STOP),
            epoll::EventFlags::IN,
        )
        .map_err(|e| os_err("epoll_ctl", &self.socket, e))?;
        let counters = self.counters.clone();
        let socket = self.socket.clone();
        let join = std::thread::Builder::new()
            .name("shmring-listen".into())
            .spawn(move || {
                while !self.stopped {
                    if self.poll(None).is_err() {
                        // epoll_wait itself failed (it does not, short of a bug):
                        // do not spin.
                        std::thread::sleep(ACCEPT_BACKOFF);
                    }
                }
                self
            })
            .map_err(|e| os_err("spawn listener thread", &socket, e))?;
        Ok(ListenerThread {
            stop,
            join: Some(join),
            counters,
            socket,
        })
    }
}

impl AsFd for Listener {
    /// An epoll descriptor, readable when [`Listener::poll`] has something to do
    /// (mind the pending timeouts: poll at least every hello timeout).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some((path, dev, ino)) = &self.file {
            // Remove the socket file only if it is still the one we bound (a newer
            // consumer may have replaced it).
            if let Ok(md) = std::fs::symlink_metadata(path) {
                if md.dev() == *dev && md.ino() == *ino {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

/// A [`Listener`] running in its own thread. Dropping it stops the thread (at once:
/// the thread sleeps in epoll on a stop eventfd too) and removes the socket.
pub struct ListenerThread {
    stop: OwnedFd,
    join: Option<JoinHandle<Listener>>,
    counters: Arc<Counters>,
    socket: Name,
}

impl std::fmt::Debug for ListenerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerThread")
            .field("socket", &self.socket)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ListenerThread {
    /// What the listener did so far.
    pub fn stats(&self) -> ListenerStats {
        self.counters.snapshot()
    }

    /// The socket's path or `@name`.
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// Stops the thread and returns the listener (still bound; drop it to remove
    /// the socket).
    pub fn stop(mut self) -> Option<Listener> {
        self.stop_join()
    }

    fn stop_join(&mut self) -> Option<Listener> {
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
        let l = self.join.take()?.join().ok();
        l.map(|mut l| {
            l.stopped = false;
            l
        })
    }
}

impl Drop for ListenerThread {
    fn drop(&mut self) {
        drop(self.stop_join());
    }
}

fn encode_reply(
    status: u8,
    role: u8,
    geo: Option<&Geometry>,
    nfds: u32,
    msg: &str,
) -> [u8; REPLY_LEN] {
    let mut r = [0u8; REPLY_LEN];
    r[0..4].copy_from_slice(&REPLY_MAGIC);
    r[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    r[6] = status;
    r[7] = role;
    if let Some(g) = geo {
        r[8..16].copy_from_slice(&g.capacity.to_le_bytes());
        r[16..24].copy_from_slice(&g.max_record.to_le_bytes());
        r[24..28].copy_from_slice(&g.log_entries.to_le_bytes());
        r[28..32].copy_from_slice(&g.max_producers.to_le_bytes());
        r[32..36].copy_from_slice(&g.flags.to_le_bytes());
        r[40..48].copy_from_slice(&g.total_size.to_le_bytes());
    }
    r[36..40].copy_from_slice(&nfds.to_le_bytes());
    let mut take = msg.len().min(MESSAGE_MAX);
    while !msg.is_char_boundary(take) {
        take -= 1;
    }
    r[48..50].copy_from_slice(&(take as u16).to_le_bytes());
    r[52..52 + take].copy_from_slice(&msg.as_bytes()[..take]);
    r
}

fn send_reply(
    sock: &OwnedFd,
    reply: &[u8; REPLY_LEN],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_DESCRIPTORS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("ancillary buffer too small"));
    }
    // A fresh connection's send buffer holds far more than one reply: a short or
    // refused write means the peer is gone or misbehaves; it is not retried.
    let n = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(reply)],
        &mut cmsg,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    if n != REPLY_LEN {
        return Err(std::io::Error::other("short write of the reply"));
    }
    Ok(())
}

fn refuse(sock: &OwnedFd, why: Refusal, msg: &str) {
    let reply = encode_reply(why.code(), 0, None, 0, msg);
    let _ = send_reply(sock, &reply, &[]);
}

/// The descriptors a consumer handed over, before attaching.
#[derive(Debug)]
pub struct Received {
    /// A producer's: the ring's descriptors in the order of
    /// [`Segment::descriptors`]. An observer's: the read-only memfd alone.
    pub fds: Vec<OwnedFd>,
    /// What the consumer said about the ring.
    pub announced: Announced,
}

/// The role and geometry in a consumer's reply (checked against the segment's own
/// validated geometry on attach).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announced {
    /// The role granted.
    pub role: Role,
    /// Data ring bytes.
    pub capacity: u64,
    /// Largest record.
    pub max_record: u64,
    /// Bytes of the whole segment.
    pub total_size: u64,
    /// The ring's flags (`layout::FLAG_EVENTFD`).
    pub flags: u32,
}

/// Connects to a consumer's socket, asks for `role`, and returns the descriptors it
/// hands over (most callers want [`Segment::connect`] or [`Segment::observe`]).
/// Waits at most `timeout` for each step (connect, hello, reply).
///
/// Do not call this in a process that already has the ring attached (the consumer
/// itself, say) and then close what it returns: closing any descriptor of a
/// segment's file drops the process's record locks on it, its liveness signal.
/// `Segment::connect` / `observe` keep the descriptors where the segment keeps its
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
            }
            r => return r,
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
        Errno::NOENT => Error::NotFound(socket.as_str().into()),
        Errno::CONNREFUSED => Error::NoConsumer(socket.as_str().into()),
        Errno::AGAIN => timed_out(WAIT_ACCEPT),
        e => os_err("connect", &socket, e),
    })?;
    let mut hello = [0u8; HELLO_LEN];
    hello[0..4].copy_from_slice(&HELLO_MAGIC);
    hello[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello[6] = role.code();
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
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
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
    if reply[0..4] != REPLY_MAGIC {
        return Err(handoff_err(
            socket,
            "the reply is not a shmring hand-off reply (is this a shmring socket?)",
        ));
    }
    let version = u16::from_le_bytes([reply[4], reply[5]]);
    let u32_at = |i: usize| u32::from_le_bytes(reply[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(reply[i..i + 8].try_into().expect("8 bytes"));
    let status = reply[6];
    if status != 0 {
        let len = (u16::from_le_bytes([reply[48], reply[49]]) as usize).min(MESSAGE_MAX);
        let message = String::from_utf8_lossy(&reply[52..52 + len]).into_owned();
        let why = Refusal::from_code(status);
        return Err(Error::Refused {
            socket: socket.into(),
            rule: why.rule(),
            message,
        });
    }
    if version != PROTOCOL_VERSION {
        return Err(handoff_err(
            socket,
            format!(
                "the consumer speaks protocol version {version}, this library {PROTOCOL_VERSION}"
            ),
        ));
    }
    if Role::from_code(reply[7]) != Some(role) {
        return Err(handoff_err(
            socket,
            format!(
                "asked for the {} role, granted role {}",
                role.name(),
                reply[7]
            ),
        ));
    }
    let nfds = u32_at(36) as usize;
    if nfds == 0 || nfds != fds.len() || nfds > MAX_DESCRIPTORS {
        return Err(handoff_err(
            socket,
            format!(
                "the reply announces {nfds} descriptors and carried {}",
                fds.len()
            ),
        ));
    }
    Ok(Received {
        fds,
        announced: Announced {
            role,
            capacity: u64_at(8),
            max_record: u64_at(16),
            total_size: u64_at(40),
            flags: u32_at(32),
        },
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
    /// Connects to a consumer serving its ring on `path` (see [`Listener`]) as a
    /// producer, receives the sealed memfd (and the eventfd of an eventfd ring) and
    /// attaches. Waits at most [`DEFAULT_CONNECT_TIMEOUT`] for each step.
    ///
    /// Errors: [`Error::NotFound`] (no socket there), [`Error::NoConsumer`] (a stale
    /// socket: its consumer is gone), [`Error::Refused`] (names the consumer's
    /// rule), [`Error::Timeout`], [`Error::Handoff`] (not a shmring socket...).
    pub fn connect(path: impl AsRef<Path>) -> Result<Arc<Segment>> {
        Self::connect_timeout(path, DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Segment::connect`] with a timeout for each step.
    pub fn connect_timeout(path: impl AsRef<Path>, timeout: Duration) -> Result<Arc<Segment>> {
        let socket = display(path.as_ref());
        let Received { fds, announced } = request(path, Role::Producer, timeout)?;
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
    pub fn observe(path: impl AsRef<Path>) -> Result<ReadOnlySegment> {
        Self::observe_timeout(path, DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Segment::observe`] with a timeout for each step.
    pub fn observe_timeout(path: impl AsRef<Path>, timeout: Duration) -> Result<ReadOnlySegment> {
        let socket = display(path.as_ref());
        let Received { fds, announced } = request(path, Role::Observer, timeout)?;
        let Ok::<[OwnedFd; 1], _>([fd]) = fds.try_into() else {
            return Err(handoff_err(&socket, "an observer gets one descriptor"));
        };
        let ro = ReadOnlySegment::from_fd(fd)?;
        check_geometry(&announced, ro.geometry(), &socket)?;
        Ok(ro)
    }
}
