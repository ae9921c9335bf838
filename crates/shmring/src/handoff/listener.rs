//! The consumer's side of the hand-off: a [`Listener`] accepts connections on its
//! socket, reads each peer's hello, answers it by the [`policy`](super::policy), and
//! times out the slow; one epoll descriptor, bounded work per poll, no thread per
//! connection.

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
use rustix::net::SocketFlags;

use super::policy::{self, Held};
use super::wire::{self, parse_hello, refuse};
use super::{display, handoff_err, os_err, ListenerOptions, Refusal, Role, HELLO_LEN};
use crate::error::{Error, Name, Result};
use crate::segment::files;
use crate::segment::Segment;
use crate::sys::unix;

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
    /// Refused: too many connections pending (a newcomer refused at once, or a
    /// pending connection that gave way to one).
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
    refused: [AtomicU64; Refusal::ALL.len()],
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
    since: Instant,
}

/// Where reading a hello got to.
enum Hello {
    /// All of it is here.
    Complete,
    /// Not all of it yet (the peer may send the rest).
    Waiting,
    /// The peer closed before a whole hello.
    Closed,
    /// The read failed.
    Failed,
}

/// Reads what there is of a hello into `buf` after the `got` bytes already there.
/// Bytes that already break the hello's rules (not its magic, another protocol
/// version: a peer of version 2 sends 16 bytes) make it complete: the answer is
/// the refusal, without waiting for bytes that will not come.
fn read_hello(sock: &OwnedFd, buf: &mut [u8; HELLO_LEN], got: &mut usize) -> Hello {
    while *got < HELLO_LEN {
        if wire::hello_refused_early(&buf[..*got]) {
            return Hello::Complete;
        }
        match rustix::io::read(sock, &mut buf[*got..]) {
            Ok(0) => return Hello::Closed,
            Ok(n) => *got += n,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => return Hello::Waiting,
            Err(_) => return Hello::Failed,
        }
    }
    Hello::Complete
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
    /// The fair share's working space, allocated once at bind.
    held: Vec<Held>,
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
    /// serves `seg`, which must be a sealed memfd ([`Address::Memfd`](crate::Address::Memfd)). A stale
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
        opts.check(&socket)?;
        match rustix::fs::fcntl_get_seals(seg.fd()) {
            Ok(s) if s.contains(SealFlags::SHRINK | SealFlags::GROW) => {}
            _ => {
                return Err(Error::Config(format!(
                    "listener {socket}: ring {} is not a sealed memfd; serve a memfd ring \
                     (Address::Memfd, `memfd:`; a named segment can be opened by name instead)",
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
            let mode = opts.socket_mode();
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
        let held = Vec::with_capacity(opts.max_pending);
        Ok(Listener {
            seg: seg.clone(),
            sock,
            epoll: ep,
            socket: socket.as_str().into(),
            file,
            opts,
            pending,
            held,
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
            // An honest peer sends its hello as soon as it is connected: it is
            // usually here already, and then is answered without taking an entry.
            let mut hello = [0u8; HELLO_LEN];
            let mut got = 0;
            match read_hello(&conn, &mut hello, &mut got) {
                Hello::Complete => {
                    self.answer(&conn, &hello, uid, gid);
                    continue;
                }
                Hello::Closed => {
                    self.counters.refuse(Refusal::Malformed);
                    continue;
                }
                Hello::Failed => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Hello::Waiting => {}
            }
            let Some(slot) = self.make_room(uid) else {
                self.counters.refuse(Refusal::Busy);
                let msg = format!(
                    "{} connections are waiting for an answer, at most one from any uid; \
                     send the hello at once after connecting, and try again",
                    self.opts.max_pending
                );
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
            let now = Instant::now();
            self.pending[slot] = Some(Pending {
                sock: conn,
                deadline: now + self.opts.hello_timeout,
                hello,
                got,
                uid,
                gid,
                since: now,
            });
            self.counters.pending.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A free pending entry for a new connection from `uid`; when all are taken,
    /// the [fair share](policy::make_room) picks one to give up (or refuses the
    /// newcomer: `None`). The one picked is read a last time first: a hello that
    /// has arrived meanwhile is answered, and only a connection still without one
    /// is refused `too-many-pending`.
    fn make_room(&mut self, uid: u32) -> Option<usize> {
        if let Some(free) = self.pending.iter().position(Option::is_none) {
            return Some(free);
        }
        self.held.clear();
        let pending = self.pending.iter().enumerate();
        self.held
            .extend(pending.filter_map(|(i, p)| p.as_ref().map(|p| (i, p.uid, p.since))));
        let victim = policy::make_room(&mut self.held, uid)?;
        self.service(victim);
        if let Some(p) = self.finish(victim) {
            self.counters.refuse(Refusal::Busy);
            refuse(
                &p.sock,
                Refusal::Busy,
                "every pending entry was taken, and of its uid's connections this one had \
                 waited longest without a hello: it was dropped to make room; send the \
                 hello at once after connecting",
            );
        }
        Some(victim)
    }

    fn finish(&mut self, slot: usize) -> Option<Pending> {
        let p = self.pending.get_mut(slot)?.take()?;
        let _ = epoll::delete(&self.epoll, &p.sock);
        self.counters.pending.fetch_sub(1, Ordering::Relaxed);
        Some(p)
    }

    /// Reads what a pending connection sent; answers it once its hello is whole.
    fn service(&mut self, slot: usize) {
        let Some(Some(p)) = self.pending.get_mut(slot) else {
            return;
        };
        match read_hello(&p.sock, &mut p.hello, &mut p.got) {
            Hello::Waiting => {}
            Hello::Complete => {
                if let Some(p) = self.finish(slot) {
                    self.answer(&p.sock, &p.hello, p.uid, p.gid);
                }
            }
            Hello::Closed => {
                let _ = self.finish(slot);
                self.counters.refuse(Refusal::Malformed);
            }
            Hello::Failed => {
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

    /// Decides on a complete hello from a peer with these credentials and answers it.
    fn answer(&self, sock: &OwnedFd, hello: &[u8; HELLO_LEN], uid: u32, gid: u32) {
        let decided = parse_hello(hello).and_then(|h| {
            self.opts.decide(h.role, uid, gid)?;
            Ok(h)
        });
        match decided {
            Ok(hello) => {
                let role = hello.role;
                // Counted before the reply goes out, so that a peer that has its
                // descriptors also finds itself counted.
                let c = match role {
                    Role::Producer => &self.counters.producers,
                    Role::Observer => &self.counters.observers,
                };
                c.fetch_add(1, Ordering::Relaxed);
                if self.grant(sock, &hello).is_err() {
                    c.fetch_sub(1, Ordering::Relaxed);
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err((why, msg)) => {
                self.counters.refuse(why);
                refuse(sock, why, &msg);
            }
        }
    }

    /// Producers get the ring's descriptors, observers the read-only one alone. A
    /// file the producer says it holds a role on goes as an `O_PATH` descriptor
    /// (see [`wire`]): it adds no descriptor of a file it holds locks on.
    fn grant(&self, sock: &OwnedFd, hello: &wire::Hello) -> std::io::Result<()> {
        let role = hello.role;
        let list: Vec<BorrowedFd<'_>> = match role {
            Role::Producer => self.seg.descriptors(),
            Role::Observer => vec![self.seg.read_only_fd().map_err(std::io::Error::other)?],
        };
        let named: Vec<Option<OwnedFd>> = list
            .iter()
            .map(|&fd| match (role, files::key_of(fd, "")) {
                (Role::Producer, Ok(key)) if hello.holds(key) => files::path_only(fd),
                _ => None,
            })
            .collect();
        let list: Vec<BorrowedFd<'_>> = list
            .iter()
            .zip(&named)
            .map(|(&fd, p)| p.as_ref().map_or(fd, |p| p.as_fd()))
            .collect();
        wire::grant(sock, role, self.seg.geometry(), &list)
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
