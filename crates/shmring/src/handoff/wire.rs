//! The hand-off's two messages, byte for byte (little-endian; docs/DESIGN.md §9
//! shows these same diagrams, checked by a test). A peer's hello:
//!
//! ```text
//!  0 magic "SRH?" | 4 protocol version u16 | 6 role u8 (1 producer, 2 observer)
//!  7 lock files held u8 (0..=4) | 8..16 zero
//! 16 device u64 | 24 inode u64    (a lock file the peer holds a role on; 4 times)
//! ```
//!
//! A producer names the lock files it holds roles on: a ring's file it holds is
//! sent as an `O_PATH` descriptor that names the file without opening it, so
//! the peer adds no descriptor of a file it holds record locks on (it could never
//! close one: the kernel drops every record lock of a process on a file when any
//! descriptor of it is closed).
//!
//! The consumer's reply, with the descriptors (`SCM_RIGHTS`) on success:
//!
//! ```text
//!  0 magic "SRH!" | 4 protocol version u16 | 6 status u8 (0 granted, else the rule) | 7 role u8
//!  8 capacity u64 | 16 max_record u64 | 24 log_entries u32 | 28 max_producers u32
//! 32 flags u32 | 36 descriptors sent u32 | 40 segment size u64 | 48 message length u16
//! 52..256 message (UTF-8): on refusal, what failed
//! ```

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use super::handoff_err;
use crate::error::{Error, Result};
use crate::layout::Geometry;
use crate::segment::files::FileKey;

/// The hand-off protocol's version, sent in every hello and reply. A consumer
/// refuses a hello of another version (rule `protocol-version`) and says its own.
pub const PROTOCOL_VERSION: u16 = 3;
/// Most descriptors a reply carries (a producer's: segment, lock file, eventfd).
pub(super) const MAX_DESCRIPTORS: usize = 3;
/// Most lock files a hello names (see the module's diagram).
pub const MAX_HELD: usize = 4;
/// Bytes of a hello (peer → consumer).
pub const HELLO_LEN: usize = 16 + 16 * MAX_HELD;
/// Bytes of a reply (consumer → peer).
pub const REPLY_LEN: usize = 256;

const HELLO_MAGIC: [u8; 4] = *b"SRH?";
const REPLY_MAGIC: [u8; 4] = *b"SRH!";
/// Where a reply's message starts.
const MESSAGE_AT: usize = 52;
/// Longest refusal message in a reply.
const MESSAGE_MAX: usize = REPLY_LEN - MESSAGE_AT;

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
/// peer in the reply and counted in [`ListenerStats`](super::ListenerStats).
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
    /// Every rule, in the order of their codes (1, 2, ...).
    pub(super) const ALL: [Refusal; 7] = [
        Refusal::Credentials,
        Refusal::Version,
        Refusal::Role,
        Refusal::Malformed,
        Refusal::Timeout,
        Refusal::Busy,
        Refusal::Internal,
    ];

    /// The rule's code in a reply: 1 to 7 (0 is success).
    pub(super) fn code(self) -> u8 {
        Refusal::ALL
            .iter()
            .position(|&r| r == self)
            .expect("every refusal is listed") as u8
            + 1
    }

    fn from_code(c: u8) -> Refusal {
        match c {
            1..=7 => Refusal::ALL[c as usize - 1],
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

/// A peer's hello asking for `role`, naming the lock files it holds roles on
/// (the first [`MAX_HELD`]).
pub(super) fn hello(role: Role, held: &[FileKey]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[0..4].copy_from_slice(&HELLO_MAGIC);
    h[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    h[6] = role.code();
    let held = &held[..held.len().min(MAX_HELD)];
    h[7] = held.len() as u8;
    for (i, (dev, ino)) in held.iter().enumerate() {
        let at = 16 + 16 * i;
        h[at..at + 8].copy_from_slice(&dev.to_le_bytes());
        h[at + 8..at + 16].copy_from_slice(&ino.to_le_bytes());
    }
    h
}

/// Do the first bytes of a hello already break its rules (its magic, then its
/// protocol version)? Then [`parse_hello`] refuses it whatever follows.
pub(super) fn hello_refused_early(prefix: &[u8]) -> bool {
    (prefix.len() >= 4 && prefix[0..4] != HELLO_MAGIC)
        || (prefix.len() >= 6 && prefix[4..6] != PROTOCOL_VERSION.to_le_bytes())
}

/// What a complete hello asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    pub role: Role,
    /// The lock files the peer holds roles on (the first `n` entries).
    held: [FileKey; MAX_HELD],
    n: usize,
}

impl Hello {
    /// Does the peer hold a role on the file `key`?
    pub fn holds(&self, key: FileKey) -> bool {
        self.held[..self.n].contains(&key)
    }
}

/// What a complete hello asks for, or the rule it breaks and why.
pub(super) fn parse_hello(h: &[u8; HELLO_LEN]) -> std::result::Result<Hello, (Refusal, String)> {
    if h[0..4] != HELLO_MAGIC {
        return Err((
            Refusal::Malformed,
            "the first bytes are not a shmring hand-off hello".to_string(),
        ));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != PROTOCOL_VERSION {
        return Err((
            Refusal::Version,
            format!(
                "protocol version {version} is not supported; this consumer speaks version \
                 {PROTOCOL_VERSION}"
            ),
        ));
    }
    let role =
        Role::from_code(h[6]).ok_or_else(|| (Refusal::Role, format!("unknown role {}", h[6])))?;
    let n = h[7] as usize;
    if n > MAX_HELD {
        return Err((
            Refusal::Malformed,
            format!("the hello names {n} lock files; at most {MAX_HELD}"),
        ));
    }
    let mut held = [(0, 0); MAX_HELD];
    for (i, k) in held.iter_mut().enumerate().take(n) {
        let at = 16 + 16 * i;
        let word = |a: usize| u64::from_le_bytes(h[a..a + 8].try_into().expect("8 bytes"));
        *k = (word(at), word(at + 8));
    }
    Ok(Hello { role, held, n })
}

/// A reply: success (`why` None) granting `role` with the ring's geometry and
/// `nfds` descriptors, or a refusal with its message (cut to what fits).
fn encode_reply(
    why: Option<Refusal>,
    role: Option<Role>,
    geo: Option<&Geometry>,
    nfds: u32,
    msg: &str,
) -> [u8; REPLY_LEN] {
    let mut r = [0u8; REPLY_LEN];
    r[0..4].copy_from_slice(&REPLY_MAGIC);
    r[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    r[6] = why.map_or(0, Refusal::code);
    r[7] = role.map_or(0, Role::code);
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
    r[MESSAGE_AT..MESSAGE_AT + take].copy_from_slice(&msg.as_bytes()[..take]);
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

/// Grants `role`: the reply with the ring's geometry, and `fds` with it.
pub(super) fn grant(
    sock: &OwnedFd,
    role: Role,
    geo: &Geometry,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let reply = encode_reply(None, Some(role), Some(geo), fds.len() as u32, "");
    send_reply(sock, &reply, fds)
}

/// Refuses a peer, saying the rule and why (best effort: the peer may be gone).
pub(super) fn refuse(sock: &OwnedFd, why: Refusal, msg: &str) {
    let reply = encode_reply(Some(why), None, None, 0, msg);
    let _ = send_reply(sock, &reply, &[]);
}

/// What a complete reply says, for a peer that asked for `role` and received
/// `nfds` descriptors with it: the ring announced, or the consumer's refusal
/// ([`Error::Refused`]), or why the reply cannot be trusted ([`Error::Handoff`]).
pub(super) fn parse_reply(
    reply: &[u8; REPLY_LEN],
    socket: &str,
    role: Role,
    nfds: usize,
) -> Result<Announced> {
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
        let message = String::from_utf8_lossy(&reply[MESSAGE_AT..MESSAGE_AT + len]).into_owned();
        return Err(Error::Refused {
            socket: socket.into(),
            rule: Refusal::from_code(status).rule(),
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
    let announced = u32_at(36) as usize;
    if announced == 0 || announced != nfds || announced > MAX_DESCRIPTORS {
        return Err(handoff_err(
            socket,
            format!("the reply announces {announced} descriptors and carried {nfds}"),
        ));
    }
    Ok(Announced {
        role,
        capacity: u64_at(8),
        max_record: u64_at(16),
        total_size: u64_at(40),
        flags: u32_at(32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_zero_is_success() {
        for r in Refusal::ALL {
            assert_eq!(Refusal::from_code(r.code()), r);
            assert_ne!(r.code(), 0);
        }
        for role in [Role::Producer, Role::Observer] {
            let h = parse_hello(&hello(role, &[])).unwrap();
            assert_eq!((h.role, h.n), (role, 0));
        }
        let keys: Vec<FileKey> = (1..=6).map(|i| (i, u64::MAX - i)).collect();
        let h = parse_hello(&hello(Role::Producer, &keys)).unwrap();
        assert_eq!(h.n, MAX_HELD);
        assert!(h.holds((1, u64::MAX - 1)) && h.holds((4, u64::MAX - 4)));
        assert!(!h.holds((5, u64::MAX - 5)) && !h.holds((0, 0)));
        let mut bad = hello(Role::Producer, &[]);
        bad[7] = MAX_HELD as u8 + 1;
        assert!(matches!(parse_hello(&bad), Err((Refusal::Malformed, _))));
    }

    #[test]
    fn a_refusal_survives_the_wire_cut_on_a_character() {
        let long = "é".repeat(REPLY_LEN);
        let r = encode_reply(Some(Refusal::Busy), None, None, 0, &long);
        match parse_reply(&r, "s", Role::Producer, 0) {
            Err(Error::Refused { rule, message, .. }) => {
                assert_eq!(rule, "too-many-pending");
                assert!(message.len() <= MESSAGE_MAX && message.chars().all(|c| c == 'é'));
            }
            other => panic!("{other:?}"),
        }
    }
}
