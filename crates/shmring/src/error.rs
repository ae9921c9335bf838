//! Errors. Each says what failed and in which object.

use std::sync::Arc;
use std::time::Duration;

/// A segment's name in errors: shared, so building an error on a hot path (a full
/// ring, a timeout) allocates nothing.
pub type Name = Arc<str>;

/// Everything that can go wrong in shmring.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed. `segment` names the segment, or the socket of a
    /// hand-off (its path, marked as a socket): the message says which.
    #[error("{op} failed for {}: {source}", Subject(segment))]
    Os {
        op: &'static str,
        segment: Name,
        #[source]
        source: std::io::Error,
    },
    /// The configuration is not valid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A named segment already exists. `occupant` says what it turned out to be
    /// when creating through [`crate::Address`] looked (a ring whose consumer is
    /// alive, one whose consumer is gone, a file that is no ring).
    #[error("segment {segment} already exists{}", occupant.words())]
    Exists { segment: Name, occupant: Occupant },
    /// A named segment does not exist, or no socket is at a hand-off's path
    /// (named by that path, marked as a socket).
    #[error("{} does not exist", Subject(.0))]
    NotFound(Name),
    /// The segment is not one of ours, or of another layout. `field` names what
    /// did not match (`magic`, `file size`, `layout version`, `segment size`, ...).
    #[error("segment {segment}: {}", layout_words(.field, .expected, .found))]
    LayoutMismatch {
        segment: Name,
        field: &'static str,
        expected: String,
        found: String,
    },
    /// A memfd segment can still be resized by a peer (would allow SIGBUS).
    #[error("segment {0}: memfd is not sealed against shrinking and growing")]
    Unsealed(Name),
    /// The ring is full and the producer's policy is to fail at once.
    #[error("ring {segment} is full ({why}); the record was dropped and counted")]
    Full { segment: Name, why: &'static str },
    /// A wait ran out.
    #[error("ring {segment}: timed out after {after:?} waiting for {waiting_for}")]
    Timeout {
        segment: Name,
        waiting_for: &'static str,
        after: Duration,
    },
    /// The payload is larger than the ring's configured maximum.
    #[error("ring {segment}: record of {len} bytes exceeds max_record {max}")]
    TooLarge { segment: Name, len: u64, max: u64 },
    /// Every producer slot is taken.
    #[error("ring {segment}: all {max} producer slots are in use")]
    NoSlot { segment: Name, max: u32 },
    /// Another consumer is attached and alive.
    #[error("ring {0}: another consumer is attached")]
    ConsumerBusy(Name),
    /// No consumer is attached (it died, or never came).
    #[error("ring {0}: no live consumer is attached")]
    NoConsumer(Name),
    /// A tethered consumer was expelled by the ring's consumer (it stopped releasing
    /// frames for longer than the consumer allows); frames it still holds are no
    /// longer protected. Attach again to carry on from the newest records.
    #[error("ring {segment}: this tethered consumer was detached: {why}")]
    Detached { segment: Name, why: &'static str },
    /// Every tether line is taken.
    #[error("ring {segment}: all {max} tethered consumer lines are in use")]
    NoTetherLine { segment: Name, max: u32 },
    /// Something in shared memory cannot have been written by an honest peer.
    #[error("ring {segment}: corruption detected at claim {seq}: {what}; reset the ring")]
    Corrupt {
        segment: Name,
        seq: u64,
        what: &'static str,
    },
    /// A peer truncated this named segment: the mapping now reads zeros and is no
    /// longer shared (see `shmring::sys::sigbus`). A reset cannot help.
    #[error(
        "segment {0} was truncated by a peer; its mapping now reads zeros: create a new segment"
    )]
    Truncated(Name),
    /// There is no room for the ring's memory where it lives ([`Room`]: `/dev/shm`
    /// for a named ring; the memory this process may use for a memfd ring). A ring
    /// reserves every page when it is created, so this comes at once from the call
    /// that creates it, with the size needed, the room free and how to make more.
    /// `later`: a page of a named ring that was not reserved (made by an older
    /// release, or a peer gave pages back) could not be provided when it was
    /// first touched; the mapping then reads zeros, as after [`Error::Truncated`].
    #[error("ring {segment}: {}", no_space_words(*.needed, .room, *.later))]
    NoSpace {
        segment: Name,
        needed: u64,
        room: Room,
        later: bool,
    },
    /// A claim was taken from its producer (judged dead, or the ring was reset).
    #[error("ring {segment}: claim {seq} was abandoned (the ring was reset or this producer was judged dead)")]
    Abandoned { segment: Name, seq: u64 },
    /// The consumer holds as many records as the claim log tracks.
    #[error(
        "ring {segment}: the consumer holds {held} records, the claim log's limit; release some"
    )]
    TooManyHeld { segment: Name, held: u64 },
    /// A shared consumer was closed (see `SharedConsumer::close`).
    #[error("ring {0}: the consumer is closed")]
    Closed(Name),
    /// A frame handle that is not held by this consumer.
    #[error("ring {segment}: record {seq} is not held (released twice, or not from this ring)")]
    NotHeld { segment: Name, seq: u64 },
    /// `reserve_raw` while the producer already holds an open reservation.
    #[error("ring {0}: this producer already holds an open reservation; commit or abort it first")]
    ReservationOpen(Name),
    /// `commit_raw` with no open reservation.
    #[error("ring {0}: this producer holds no open reservation")]
    NoReservation(Name),
    /// The descriptors given for a ring are not the ones it has: its lock file is
    /// missing (a memfd ring's producers need every descriptor of
    /// `Segment::descriptors`), or there are too many, or one is of the wrong kind.
    #[error("ring {segment}: {what}")]
    Descriptors { segment: Name, what: String },
    /// The ring requires producers to signal through its eventfd.
    #[error(
        "ring {0} was created with eventfd wake-ups: attach the producer with the ring's eventfd"
    )]
    EventfdRequired(Name),
    /// A consumer serving its ring over a socket refused this peer; `rule` names the
    /// check that failed (see `shmring::handoff::Refusal`).
    #[error("consumer at {socket} refused the connection (rule: {rule}): {message}")]
    Refused {
        socket: Name,
        rule: &'static str,
        message: String,
    },
    /// The hand-off over a socket broke: the peer closed early, sent something that
    /// is not the hand-off protocol, or a wait ran out.
    #[error("hand-off over {socket}: {what}")]
    Handoff { socket: Name, what: String },
}

/// What holds the name of a named ring that could not be created (see
/// [`Error::Exists`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occupant {
    /// Not looked at (creating with `replace_stale` off only says the name is taken).
    Unknown,
    /// A ring whose consumer is alive: in use, never replaced.
    Live,
    /// A ring whose consumer is gone (its process was killed or crashed), kept
    /// because replacing it was not asked for.
    Stale,
    /// A file that is no ring this library can use (the reason): left alone.
    Foreign(String),
}

impl Occupant {
    fn words(&self) -> String {
        match self {
            Occupant::Unknown => String::new(),
            Occupant::Live => " and its consumer is alive (another process consumes it)".into(),
            Occupant::Stale => " but its consumer is gone (the process that made it ended \
                                without removing it: it was killed, or crashed)"
                .into(),
            Occupant::Foreign(why) => {
                format!(" and is not a ring this library can use ({why}); it is left alone")
            }
        }
    }
}

/// Where a ring's memory comes from, and how much of it is left (see
/// [`Error::NoSpace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Room {
    /// `/dev/shm`, the tmpfs of named rings: `free` of `size` bytes.
    ShmDir { free: u64, size: u64 },
    /// The memory a memfd ring's pages are charged to: `free` bytes left under the
    /// process's memory cgroup `limit`, or available on the system (no limit).
    Memory { free: u64, limit: Option<u64> },
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// [`Error::NoSpace`] in words: what is missing, where, and how to make room.
fn no_space_words(needed: u64, room: &Room, later: bool) -> String {
    match (room, later) {
        (Room::ShmDir { free, size }, false) => format!(
            "not enough room in /dev/shm: the ring needs {}, /dev/shm has {} free of {}; \
             make /dev/shm larger (Docker: `docker run --shm-size=...`, Compose: `shm_size`; \
             Kubernetes: an emptyDir with `medium: Memory` and a `sizeLimit`, mounted at \
             /dev/shm), or make the ring smaller",
            mib(needed),
            mib(*free),
            mib(*size)
        ),
        (Room::ShmDir { free, size }, true) => format!(
            "/dev/shm is full ({} free of {}): the kernel could not provide a page of this \
             {} ring, which was not reserved when it was made (an older release made it, \
             or a peer gave its pages back); its mapping now reads zeros: make room in \
             /dev/shm (or make it larger) and create a new ring",
            mib(*free),
            mib(*size),
            mib(needed)
        ),
        (Room::Memory { free, limit }, _) => format!(
            "not enough memory for the ring: it needs {}, and {}; a memfd ring's pages \
             count against the memory of the process that creates it (not /dev/shm, so \
             Docker's --shm-size does not apply): raise its memory limit (Docker: \
             `--memory`; Kubernetes: `resources.limits.memory`), or make the ring smaller",
            mib(needed),
            match limit {
                Some(l) => format!(
                    "this process's memory cgroup has {} left of its {} limit",
                    mib(*free),
                    mib(*l)
                ),
                None => format!("the system has {} available", mib(*free)),
            }
        ),
    }
}

/// A layout mismatch in words: a file that is no ring at all says so first.
fn layout_words(field: &str, expected: &str, found: &str) -> String {
    match field {
        "magic" => format!("not a shmring ring (bad magic: found {found}, expected {expected})"),
        "file size" if found.parse::<u64>().is_ok() => format!(
            "not a shmring ring (the file is {found} bytes, smaller than the \
             {expected}-byte control block every ring starts with)"
        ),
        "segment size" => found.to_string(),
        _ => format!("{field} mismatch: expected {expected}, found {found}"),
    }
}

/// How an error names a consumer's hand-off socket: `unix:PATH`, the socket's
/// address, so that its message says "socket PATH" where a segment's says
/// "segment NAME" (a segment's name never starts with `unix:`).
pub(crate) fn socket_name(path: &str) -> Name {
    format!("{SOCKET}{path}").into()
}

const SOCKET: &str = "unix:";

/// A segment or a socket, by its name in an error, as a message calls it.
struct Subject<'a>(&'a str);

impl std::fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.strip_prefix(SOCKET) {
            Some(path) => write!(f, "socket {path}"),
            None => write!(f, "segment {}", self.0),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn os(op: &'static str, segment: &str, source: impl Into<std::io::Error>) -> Error {
    Error::Os {
        op,
        segment: segment.into(),
        source: source.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_called_a_socket_and_a_segment_a_segment() {
        let sock = socket_name("/run/cam0.sock");
        let e = os("bind", &sock, std::io::Error::from_raw_os_error(98));
        assert!(
            e.to_string()
                .starts_with("bind failed for socket /run/cam0.sock: "),
            "{e}"
        );
        let e = Error::NotFound(socket_name("ring.sock"));
        assert_eq!(e.to_string(), "socket ring.sock does not exist");
        let e = Error::NotFound("/cam0".into());
        assert_eq!(e.to_string(), "segment /cam0 does not exist");
        let e = os("mmap", "memfd:cam0", std::io::Error::from_raw_os_error(12));
        assert!(
            e.to_string()
                .starts_with("mmap failed for segment memfd:cam0: "),
            "{e}"
        );
    }
}
