//! How to reach a ring: [`Address`] and the one `open` (its text form: `text.rs`;
//! a binding's keyword arguments: `args.rs`); the stale-ring rule ([`remove_stale`]).
//! Above the segment and the hand-off, which it uses; neither uses it.

use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Occupant, Result};
use crate::handoff::DEFAULT_CONNECT_TIMEOUT;
use crate::layout::FLAG_LOCK_FILE;
use crate::segment::{files, Config, ReadOnlySegment, Segment};

mod args;
mod text;

pub use args::{AddressArgs, ArgNames};

/// How to reach a ring: by name, by inherited descriptors, through a consumer's
/// socket, or by creating it. Every binding and the `shmring` command take the same
/// text form ([`FromStr`], written back by [`Display`](fmt::Display)):
///
/// | text | the ring |
/// | --- | --- |
/// | `NAME`, `/NAME`, `shm:NAME`, `/dev/shm/NAME` | the named ring `/dev/shm/NAME` ([`Address::Named`]); a name that contains `:` is written `shm:NAME` |
/// | `NAME,eventfd=FD` (any of the forms above, then `,eventfd=FD`) | a named ring made with [`Config::eventfd`], with its eventfd, which this process holds as descriptor `FD` ([`Address::NamedEventfd`]) |
/// | `unix:PATH`, or a path with a `/` after its first character (`./ring.sock`, `/run/cam0.sock`) | the ring a consumer serves on the Unix socket `PATH` (the hand-off of [`crate::handoff`]; `unix:@NAME`: an abstract socket) ([`Address::Socket`]) |
/// | `fd:SEG[,LOCK][,EVENTFD]` | descriptors this process holds, in the order of [`Segment::descriptors`]: the segment; a memfd ring's lock file; an eventfd ring's eventfd ([`Address::Descriptors`]) |
/// | `create:NAME[,OPTION...]` | create the named ring ([`Address::Create`]): one of that name whose consumer is gone (left by a crash) is replaced, one whose consumer is alive is an error saying so (option `stale=refuse`: a stale one is an error too) |
/// | `memfd:[LABEL][,OPTION...]` | create an anonymous ring, a sealed memfd labelled `LABEL` (default `shmring`) ([`Address::Memfd`]) |
///
/// Options of `create:` and `memfd:`, the [`Config`] fields: `capacity=SIZE`,
/// `max_record=SIZE`, `log_entries=N`, `max_producers=N`, `eventfd`, `huge_pages`
/// (a `SIZE` is bytes, or a number with `K`, `M` or `G`: KiB, MiB, GiB). A name is
/// 1 to 200 bytes, no `/` except a leading one, no white space or control characters;
/// text with a `/` further on is a path, so a socket in the current directory is
/// `./ring.sock` or `unix:ring.sock`, while `ring.sock` is a named ring. A path is
/// taken as written: nothing is looked up while parsing.
///
/// A named ring created with [`Config::eventfd`] wants its eventfd in every
/// producer: reach it by name with its eventfd (`NAME,eventfd=FD`) or by
/// descriptors (`fd:SEG,EVENTFD`); by name alone, a producer is refused
/// ([`Error::EventfdRequired`]).
///
/// Parsed with `FromStr`, `fd:` and `eventfd=` take *copies* of the descriptors it names
/// (`F_DUPFD_CLOEXEC`): the numbered ones stay the caller's, and must stay open
/// while this process uses the ring (closing any descriptor of a ring's file drops
/// the process's record locks on it, its liveness signal). The C, Python and Node
/// bindings hand them over instead ([`Address::parse_taking`]), as their other
/// descriptor calls do.
///
/// [`Address::open`] gives a writable ring (producers, consumers);
/// [`Address::open_read_only`] a read-only mapping (taps, observers).
///
/// ```
/// use shmring::{Address, Meta};
/// let name = format!("doc-address-{}", std::process::id());
/// // A consumer creates the ring; a producer reaches it by name.
/// let created: Address = format!("create:{name},capacity=1M").parse()?;
/// assert_eq!(created.to_string(), format!("create:{name},capacity=1M"));
/// let seg = created.open()?;
/// let consumer = seg.consumer()?;
/// let remote = name.parse::<Address>()?.open()?;
/// remote.producer()?.send(b"hello", Meta::new(0, 0))?;
/// assert_eq!(consumer.try_next()?.unwrap().payload(), b"hello");
/// // Taps and observers map it read-only.
/// let ro = Address::Named(name.clone()).open_read_only()?;
/// assert_eq!(ro.geometry().capacity, 1 << 20);
/// // Bad text says what is wrong.
/// let e = "fd:3,x".parse::<Address>().unwrap_err().to_string();
/// assert!(e.contains("\"x\" is not a descriptor number"), "{e}");
/// # Ok::<(), shmring::Error>(())
/// ```
#[derive(Debug)]
pub enum Address {
    /// The named ring `/dev/shm/NAME` (a leading `/` is allowed).
    Named(String),
    /// The named ring `/dev/shm/NAME`, made with [`Config::eventfd`], and its
    /// eventfd (received from the ring's consumer). A read-only open uses the name
    /// alone.
    NamedEventfd { name: String, eventfd: OwnedFd },
    /// A ring's descriptors (inherited or received), in the one order of
    /// [`Segment::descriptors`]: the segment, then a memfd ring's lock file, then an
    /// eventfd ring's eventfd. A read-only open uses the first alone.
    Descriptors(Vec<OwnedFd>),
    /// The Unix socket a consumer serves its ring on (see [`crate::Listener`];
    /// `@NAME`: a Linux abstract socket). Producers get the ring's descriptors
    /// ([`Address::open`]), observers a read-only one ([`Address::open_read_only`]).
    Socket(PathBuf),
    /// Create the named ring `/dev/shm/NAME`. One of that name whose consumer is
    /// gone (its process was killed or crashed) is replaced when `replace_stale`,
    /// which is what "create" means in every binding and element unless told
    /// otherwise (text `stale=refuse`); one whose consumer is alive, or a file that
    /// is no ring, is never touched: [`Error::Exists`] says which ([`Occupant`]).
    /// A ring counts as stale from its creation until its consumer attaches (for
    /// a ring created by a producer, until a consumer ever does): two processes
    /// that create one name at the same moment can leave the first with a ring
    /// no one else reaches. Give each creator a name of its own.
    Create {
        name: String,
        config: Config,
        replace_stale: bool,
    },
    /// Create an anonymous ring: a sealed memfd, labelled `label` (no file is made).
    /// Hand its [`Segment::descriptors`] to producers, or serve it on a socket.
    Memfd { label: String, config: Config },
}

/// What [`Address::open_detailed`] did besides opening.
#[derive(Debug)]
pub struct Opened {
    /// The ring.
    pub segment: Arc<Segment>,
    /// Creating a named ring replaced one of that name whose consumer was gone.
    pub replaced_stale: bool,
}

/// The label of a memfd ring whose address names none.
const DEFAULT_LABEL: &str = "shmring";

/// The text forms, for messages.
const FORMS: &str = "NAME, shm:NAME, NAME,eventfd=FD, unix:PATH, fd:SEG[,LOCK][,EVENTFD], \
                     create:NAME[,OPTION...] or memfd:[LABEL][,OPTION...]";

impl Address {
    /// The named ring `/dev/shm/NAME`, created: a stale one of that name (its
    /// consumer gone) is replaced.
    pub fn create(name: impl Into<String>, config: Config) -> Address {
        Address::Create {
            name: name.into(),
            config,
            replace_stale: true,
        }
    }

    /// The named ring `/dev/shm/NAME`, existing ([`Address::Named`]).
    ///
    /// ```
    /// use shmring::{Address, Config};
    /// let name = format!("doc-address-named-{}", std::process::id());
    /// let created = Address::create(name.clone(), Config::with_capacity(1 << 16)).open()?;
    /// let consumer = created.consumer()?;
    /// let opened = Address::named(name.clone()).open()?;
    /// assert_eq!(opened.name(), created.name());
    /// assert_eq!(Address::named(name.clone()).to_string(), name);
    /// # drop((consumer, created, opened));
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn named(name: impl Into<String>) -> Address {
        Address::Named(name.into())
    }

    /// An anonymous ring to create: a sealed memfd labelled `label`
    /// ([`Address::Memfd`]).
    ///
    /// ```
    /// use shmring::{Address, Config};
    /// let seg = Address::memfd("cam0", Config::with_capacity(1 << 16)).open()?;
    /// assert_eq!(seg.descriptors().len(), 2); // the memfd and its lock file
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn memfd(label: impl Into<String>, config: Config) -> Address {
        Address::Memfd {
            label: label.into(),
            config,
        }
    }

    /// The ring a consumer serves on the Unix socket `path` ([`Address::Socket`]).
    pub fn socket(path: impl Into<PathBuf>) -> Address {
        Address::Socket(path.into())
    }

    /// Opens the ring writable, for producers and consumers (a socket's consumer
    /// gets [`DEFAULT_CONNECT_TIMEOUT`] for each step of the hand-off).
    pub fn open(self) -> Result<Arc<Segment>> {
        self.open_timeout(DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Address::open`] with a timeout for each step of a socket's hand-off
    /// (a consumer answers within it, or the open fails with [`Error::Timeout`]); other
    /// addresses do not wait.
    pub fn open_timeout(self, timeout: Duration) -> Result<Arc<Segment>> {
        self.open_detailed(timeout).map(|o| o.segment)
    }

    /// [`Address::open_timeout`], also saying whether creating replaced a stale ring.
    pub fn open_detailed(self, timeout: Duration) -> Result<Opened> {
        let segment = match self {
            Address::Named(name) => Segment::open_named(&name)?,
            Address::NamedEventfd { name, eventfd } => {
                Segment::open_named_with_eventfd(&name, eventfd)?
            }
            Address::Descriptors(fds) => Segment::from_descriptors(fds)?,
            Address::Socket(path) => Segment::connect_timeout(path, timeout)?,
            Address::Memfd { label, config } => Segment::create_memfd(&label, &config)?,
            Address::Create {
                name,
                config,
                replace_stale,
            } => return create_named(&name, &config, replace_stale),
        };
        Ok(Opened {
            segment,
            replaced_stale: false,
        })
    }

    /// Maps the ring read-only, for taps and observers: a named ring opened
    /// `O_RDONLY`, a socket's ring observed (the consumer hands over a read-only
    /// descriptor; [`DEFAULT_CONNECT_TIMEOUT`] for each step), the first of the
    /// descriptors (a sealed memfd, or a named ring's file). Creating
    /// addresses are refused ([`Error::Config`]).
    pub fn open_read_only(self) -> Result<ReadOnlySegment> {
        self.open_read_only_timeout(DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Address::open_read_only`] with a timeout for each step of a socket's
    /// hand-off.
    pub fn open_read_only_timeout(self, timeout: Duration) -> Result<ReadOnlySegment> {
        match self {
            Address::Named(name) | Address::NamedEventfd { name, .. } => {
                ReadOnlySegment::open_named(&name)
            }
            Address::Socket(path) => Segment::observe_timeout(path, timeout),
            Address::Descriptors(fds) => read_only_from(fds),
            a @ (Address::Create { .. } | Address::Memfd { .. }) => Err(Error::Config(format!(
                "ring address {a}: a read-only open reaches an existing ring; creating one \
                 needs a writable open"
            ))),
        }
    }

    /// Parses the text form like [`FromStr`], except that `fd:` takes over the
    /// descriptors it names instead of copying them: the address owns them (and
    /// closes them when dropped). Malformed text, or a descriptor named that is not
    /// open, takes none of them; otherwise every one is taken, whether opening the
    /// ring later succeeds or not.
    ///
    /// # Safety
    /// Every descriptor an `fd:` text names must be one the caller owns and hands
    /// over: nothing else in the process may use or close it afterwards.
    pub unsafe fn parse_taking(text: &str) -> Result<Address> {
        // SAFETY: the caller hands the descriptors over.
        text::parse(text, |fd| unsafe { take(fd) })
    }

    /// Does opening this address make a new ring ([`Address::Create`],
    /// [`Address::Memfd`])?
    pub fn creates(&self) -> bool {
        matches!(self, Address::Create { .. } | Address::Memfd { .. })
    }

    /// The named ring's name (one to open or to create), or what a message calls
    /// the ring otherwise (the text form).
    pub fn describe(&self) -> String {
        match self {
            Address::Named(name)
            | Address::NamedEventfd { name, .. }
            | Address::Create { name, .. } => name.clone(),
            a => a.to_string(),
        }
    }
}

/// Creates the named ring `name`; one of that name whose consumer is gone is
/// replaced when `replace_stale` (by [`remove_stale`]). The one place this is
/// decided.
fn create_named(name: &str, config: &Config, replace_stale: bool) -> Result<Opened> {
    let mut replaced = false;
    loop {
        let segment = match Segment::create_named(name, config) {
            Err(Error::Exists { segment, .. }) => segment,
            r => {
                return r.map(|segment| Opened {
                    segment,
                    replaced_stale: replaced,
                })
            }
        };
        let occupant = match occupant(name) {
            Ok((Occupant::Stale, _)) if replace_stale && !replaced => {
                // Another process may replace it at the same moment: one of the two
                // then finds the other's ring, with a live consumer or not yet, and
                // says so.
                let _ = Segment::unlink_named(name);
                replaced = true;
                continue;
            }
            Ok((occupant, _)) => occupant,
            // Gone again since: try once more.
            Err(Error::NotFound(_)) if !replaced => {
                replaced = true;
                continue;
            }
            Err(e) => Occupant::Foreign(e.to_string()),
        };
        return Err(Error::Exists { segment, occupant });
    }
}

/// A named ring [`remove_stale`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedRing {
    /// Producer slots still taken when it was removed (producers that had not yet
    /// learned that the consumer was gone).
    pub producers: u32,
}

/// Removes the named ring `/dev/shm/NAME` if its consumer is gone (its process
/// was killed or crashed): the rule by which creating ([`Address::Create`])
/// replaces a stale ring. A ring whose consumer is alive, and a file that is no
/// ring, are left alone: [`Error::Exists`] says which ([`Occupant::Live`],
/// [`Occupant::Foreign`]); no file of that name is [`Error::NotFound`].
///
/// ```
/// use shmring::{Address, Config, Error, Occupant};
/// let name = format!("doc-remove-stale-{}", std::process::id());
/// let seg = Address::create(name.clone(), Config::with_capacity(1 << 16)).open()?;
/// let consumer = seg.consumer()?;
/// // Its consumer is alive: left alone.
/// let e = shmring::remove_stale(&name).unwrap_err();
/// assert!(matches!(e, Error::Exists { occupant: Occupant::Live, .. }), "{e}");
/// # drop((consumer, seg));
/// # Ok::<(), shmring::Error>(())
/// ```
pub fn remove_stale(name: &str) -> Result<RemovedRing> {
    match occupant(name)? {
        (Occupant::Stale, producers) => {
            Segment::unlink_named(name)?;
            Ok(RemovedRing { producers })
        }
        (occupant, _) => Err(Error::Exists {
            segment: name.into(),
            occupant,
        }),
    }
}

/// Who is at the name `name`: a ring whose consumer is alive, one whose consumer
/// is gone (with its producer slots taken), or a file that is no ring.
/// [`Error::NotFound`] when there is none.
fn occupant(name: &str) -> Result<(Occupant, u32)> {
    match Segment::open_named(name) {
        Ok(seg) if seg.consumer_alive() => Ok((Occupant::Live, 0)),
        Ok(seg) => Ok((Occupant::Stale, seg.stats().producers)),
        Err(e @ Error::NotFound(_)) => Err(e),
        Err(e) => Ok((Occupant::Foreign(e.to_string()), 0)),
    }
}

/// A read-only mapping of the first descriptor; a memfd ring's lock file among the
/// others goes through this process's lock file entries (closing it outright could
/// drop this process's record locks on it).
fn read_only_from(fds: Vec<OwnedFd>) -> Result<ReadOnlySegment> {
    let mut fds = fds.into_iter();
    let Some(first) = fds.next() else {
        return Err(Error::Descriptors {
            segment: "(none)".into(),
            what: "no descriptor given".into(),
        });
    };
    let ro = ReadOnlySegment::from_fd(first)?;
    if ro.geometry().flags & FLAG_LOCK_FILE != 0 {
        if let Some(lock) = fds.next() {
            let label = ro.name().to_string();
            drop(files::register(lock, true, &label)?);
        }
    }
    Ok(ro)
}

/// A copy of descriptor `fd` (close-on-exec); the original stays the caller's. A
/// ring file this process already holds as a lock file gets an `O_PATH` copy
/// instead, which the open resolves to the file it holds: no descriptor of it is
/// added, and dropping the copy unopened drops none of the process's locks.
fn copy(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: `fd` is open (checked by the parser) for the length of this call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if files::held_here(borrowed) {
        if let Some(path) = files::path_only(borrowed) {
            return Ok(path);
        }
    }
    // SAFETY: F_DUPFD_CLOEXEC only reads the descriptor table; a number that is not
    // open fails with EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just made by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Descriptor `fd`, taken over (checked to be open first, by [`descriptors`]).
///
/// # Safety
/// The caller hands `fd` over (see [`Address::parse_taking`]).
unsafe fn take(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: open (checked), and handed over per the caller.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Is `fd` open in this process? (`F_GETFD` only reads the descriptor table.)
fn is_open(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: F_GETFD only reads the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl PartialEq for Address {
    /// The same address: descriptors compare by number (in one process, the same
    /// descriptor).
    fn eq(&self, other: &Address) -> bool {
        use Address::*;
        match (self, other) {
            (Named(a), Named(b)) => a == b,
            (
                NamedEventfd {
                    name: a,
                    eventfd: ea,
                },
                NamedEventfd {
                    name: b,
                    eventfd: eb,
                },
            ) => a == b && ea.as_raw_fd() == eb.as_raw_fd(),
            (Descriptors(a), Descriptors(b)) => a
                .iter()
                .map(|f| f.as_raw_fd())
                .eq(b.iter().map(|f| f.as_raw_fd())),
            (Socket(a), Socket(b)) => a == b,
            (
                Create {
                    name: a,
                    config: ca,
                    replace_stale: ra,
                },
                Create {
                    name: b,
                    config: cb,
                    replace_stale: rb,
                },
            ) => (a, ca, ra) == (b, cb, rb),
            (
                Memfd {
                    label: a,
                    config: ca,
                },
                Memfd {
                    label: b,
                    config: cb,
                },
            ) => (a, ca) == (b, cb),
            _ => false,
        }
    }
}
