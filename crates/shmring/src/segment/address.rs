//! How to reach a ring: [`Address`], its text form, and the one `open`.

use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::{files, Config, ReadOnlySegment, Segment};
use crate::error::{Error, Occupant, Result};
use crate::handoff::DEFAULT_CONNECT_TIMEOUT;
use crate::layout::FLAG_LOCK_FILE;

/// How to reach a ring: by name, by inherited descriptors, through a consumer's
/// socket, or by creating it. Every binding and the `shmring` command take the same
/// text form ([`FromStr`], written back by [`Display`](fmt::Display)):
///
/// | text | the ring |
/// | --- | --- |
/// | `NAME`, `/NAME`, `shm:NAME`, `/dev/shm/NAME` | the named ring `/dev/shm/NAME` ([`Address::Named`]); a name that contains `:` is written `shm:NAME` |
/// | `unix:PATH`, or a path with a `/` after its first character (`./ring.sock`, `/run/cam0.sock`) | the ring a consumer serves on the Unix socket `PATH` (the hand-off of [`crate::handoff`]; `unix:@NAME`: an abstract socket) ([`Address::Socket`]) |
/// | `fd:SEG[,LOCK][,EVENTFD]` | descriptors this process holds, in the order of [`Segment::descriptors`]: the segment; a memfd ring's lock file; an eventfd ring's eventfd ([`Address::Descriptors`]) |
/// | `create:NAME[,OPTION...]` | create the named ring ([`Address::Create`]): one of that name whose consumer is gone (left by a crash) is replaced, one whose consumer is alive is an error saying so (option `stale=refuse`: a stale one is an error too) |
/// | `memfd:[LABEL][,OPTION...]` | create an anonymous ring, a sealed memfd labelled `LABEL` (default `shmring`) ([`Address::Memfd`]) |
///
/// Options of `create:` and `memfd:`, the [`Config`] fields: `capacity=SIZE`,
/// `max_record=SIZE`, `log_entries=N`, `max_producers=N`, `eventfd`, `huge_pages`
/// (a `SIZE` is bytes, or a number with `K`, `M` or `G`: KiB, MiB, GiB). A name is
/// what `/dev/shm` allows (1 to 200 characters, no `/` except a leading one);
/// text with a `/` further on is a path, so a socket in the current directory is
/// `./ring.sock` or `unix:ring.sock`, while `ring.sock` is a named ring. A path is
/// taken as written: nothing is looked up while parsing.
///
/// A named ring created with [`Config::eventfd`] wants its eventfd in every
/// producer: reach it by descriptors (`fd:SEG,EVENTFD`), or with
/// [`Segment::open_named_with_eventfd`]; by name alone, a producer is refused
/// ([`Error::EventfdRequired`]).
///
/// Parsed with `FromStr`, `fd:` takes *copies* of the descriptors it names
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
    /// A ring's descriptors (inherited or received), in the one order of
    /// [`Segment::descriptors`]: the segment, then a memfd ring's lock file, then an
    /// eventfd ring's eventfd. A read-only open uses the first alone.
    Descriptors(Vec<OwnedFd>),
    /// The Unix socket a consumer serves its ring on (see [`crate::Listener`];
    /// `@NAME`: a Linux abstract socket). Producers get the ring's descriptors
    /// ([`Segment::connect`]), observers a read-only one ([`Segment::observe`]).
    Socket(PathBuf),
    /// Create the named ring `/dev/shm/NAME`. One of that name whose consumer is
    /// gone (its process was killed or crashed) is replaced when `replace_stale`;
    /// one whose consumer is alive, or a file that is no ring, is never touched:
    /// [`Error::Exists`] says which ([`Occupant`]).
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
const FORMS: &str = "NAME, shm:NAME, unix:PATH, fd:SEG[,LOCK][,EVENTFD], create:NAME[,OPTION...] \
                     or memfd:[LABEL][,OPTION...]";

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

    /// Opens the ring writable, for producers and consumers (a socket's consumer
    /// gets [`DEFAULT_CONNECT_TIMEOUT`] for each step of the hand-off).
    pub fn open(self) -> Result<Arc<Segment>> {
        self.open_timeout(DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Address::open`] with a timeout for each step of a socket's hand-off
    /// ([`Segment::connect_timeout`]); other addresses do not wait.
    pub fn open_timeout(self, timeout: Duration) -> Result<Arc<Segment>> {
        self.open_detailed(timeout).map(|o| o.segment)
    }

    /// [`Address::open_timeout`], also saying whether creating replaced a stale ring.
    pub fn open_detailed(self, timeout: Duration) -> Result<Opened> {
        let segment = match self {
            Address::Named(name) => Segment::open_named(&name)?,
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
    /// `O_RDONLY` ([`ReadOnlySegment::open_named`]), a socket's ring observed
    /// ([`Segment::observe`], [`DEFAULT_CONNECT_TIMEOUT`] for each step), the first
    /// of the descriptors (a sealed memfd, [`ReadOnlySegment::from_fd`]). Creating
    /// addresses are refused ([`Error::Config`]).
    pub fn open_read_only(self) -> Result<ReadOnlySegment> {
        self.open_read_only_timeout(DEFAULT_CONNECT_TIMEOUT)
    }

    /// [`Address::open_read_only`] with a timeout for each step of a socket's
    /// hand-off ([`Segment::observe_timeout`]).
    pub fn open_read_only_timeout(self, timeout: Duration) -> Result<ReadOnlySegment> {
        match self {
            Address::Named(name) => ReadOnlySegment::open_named(&name),
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
        parse(text, |fd| unsafe { take(fd) })
    }

    /// The named ring's name, or what a message calls the ring otherwise (the text
    /// form).
    pub fn describe(&self) -> String {
        match self {
            Address::Named(name) => name.clone(),
            a => a.to_string(),
        }
    }
}

/// Creates the named ring `name`; one of that name whose consumer is gone is
/// replaced when `replace_stale`. The one place this is decided.
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
        let occupant = match Segment::open_named(name) {
            Ok(seg) if seg.consumer_alive() => Occupant::Live,
            Ok(seg) => {
                drop(seg);
                if replace_stale && !replaced {
                    // Another process may replace it at the same moment: one of the
                    // two then finds the other's ring, with a live consumer or not
                    // yet, and says so.
                    let _ = Segment::unlink_named(name);
                    replaced = true;
                    continue;
                }
                Occupant::Stale
            }
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

/// A copy of descriptor `fd` (close-on-exec); the original stays the caller's.
fn copy(fd: RawFd) -> std::io::Result<OwnedFd> {
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

impl FromStr for Address {
    type Err = Error;

    /// Parses the text form (see [`Address`]); `fd:` copies the descriptors.
    fn from_str(text: &str) -> Result<Address> {
        parse(text, copy)
    }
}

/// A bad address: names the text and what is wrong with it.
fn bad(text: &str, what: impl fmt::Display) -> Error {
    Error::Config(format!("ring address {text:?}: {what}"))
}

/// The one parser of the text form; `own` makes an owned descriptor of a number
/// (called only once the whole text is valid and every number named is open).
fn parse(text: &str, own: impl Fn(RawFd) -> std::io::Result<OwnedFd>) -> Result<Address> {
    if text.is_empty() {
        return Err(bad(text, format!("empty; expected {FORMS}")));
    }
    if text.trim() != text {
        return Err(bad(text, "leading or trailing white space"));
    }
    if let Some(name) = text.strip_prefix("/dev/shm/") {
        return named(text, name);
    }
    let scheme = match text.split_once(':') {
        Some((scheme, rest)) if !text.starts_with('/') => Some((scheme, rest)),
        _ => None,
    };
    match scheme {
        Some(("shm", name)) => return named(text, name),
        Some(("unix", "")) => return Err(bad(text, "unix: needs a socket path")),
        Some(("unix", path)) => return Ok(Address::Socket(path.into())),
        Some(("fd", list)) => return descriptors(text, list, own),
        Some(("create", rest)) => {
            let (name, opts) = options(text, rest, true)?;
            check_name(text, name)?;
            return Ok(Address::Create {
                name: name.into(),
                config: opts.config,
                replace_stale: opts.replace_stale,
            });
        }
        Some(("memfd", rest)) => {
            let (label, opts) = options(text, rest, false)?;
            if label.contains('/') || label.contains('\0') {
                return Err(bad(text, "a memfd label cannot contain '/'"));
            }
            let label = if label.is_empty() {
                DEFAULT_LABEL
            } else {
                label
            };
            return Ok(Address::Memfd {
                label: label.into(),
                config: opts.config,
            });
        }
        _ => {}
    }
    // A '/' after the first character: a path (a name cannot hold one).
    if text.chars().skip(1).any(|c| c == '/') {
        return Ok(Address::Socket(text.into()));
    }
    if let Some((scheme, _)) = scheme {
        return Err(bad(
            text,
            format!(
                "unknown form {scheme:?}: expected {FORMS} (a ring name that contains ':' is \
                 written shm:{text})"
            ),
        ));
    }
    named(text, text)
}

fn named(text: &str, name: &str) -> Result<Address> {
    check_name(text, name)?;
    Ok(Address::Named(name.into()))
}

/// The rules of a `/dev/shm` name (as the segment calls check them), said about the
/// address.
fn check_name(text: &str, name: &str) -> Result<()> {
    let n = name.strip_prefix('/').unwrap_or(name);
    if n.is_empty() {
        return Err(bad(text, "the ring name is empty"));
    }
    if n.len() > 200 {
        return Err(bad(
            text,
            format!("the ring name is {} bytes; at most 200", n.len()),
        ));
    }
    if n.contains('/') || n.contains('\0') || n == "." || n == ".." {
        return Err(bad(
            text,
            format!("{name:?} is not a ring name (no '/' except a leading one, not . or ..)"),
        ));
    }
    Ok(())
}

fn descriptors(
    text: &str,
    list: &str,
    own: impl Fn(RawFd) -> std::io::Result<OwnedFd>,
) -> Result<Address> {
    let mut nums: Vec<RawFd> = Vec::new();
    for part in list.split(',') {
        let n: RawFd = match part.parse() {
            Ok(n) if n >= 0 && !part.starts_with('+') => n,
            _ => {
                return Err(bad(
                    text,
                    format!(
                        "{part:?} is not a descriptor number (expected fd:SEG[,LOCK][,EVENTFD], \
                         e.g. fd:3,4)"
                    ),
                ))
            }
        };
        if nums.contains(&n) {
            return Err(bad(text, format!("descriptor {n} is given twice")));
        }
        nums.push(n);
    }
    if nums.len() > 3 {
        return Err(bad(
            text,
            format!(
                "{} descriptors; a ring has at most 3 (segment, lock file, eventfd)",
                nums.len()
            ),
        ));
    }
    // Every one is open before any is owned: on an error none is taken.
    for &n in &nums {
        is_open(n).map_err(|e| {
            bad(
                text,
                format!("descriptor {n} is not open in this process ({e})"),
            )
        })?;
    }
    let fds = nums
        .into_iter()
        .map(|n| own(n).map_err(|e| bad(text, format!("descriptor {n}: {e}"))))
        .collect::<Result<Vec<OwnedFd>>>()?;
    Ok(Address::Descriptors(fds))
}

struct Options {
    config: Config,
    replace_stale: bool,
}

/// `NAME[,OPTION...]` of `create:` (`stale` allowed) and `memfd:`.
fn options<'a>(text: &str, rest: &'a str, create: bool) -> Result<(&'a str, Options)> {
    let mut parts = rest.split(',');
    let name = parts.next().unwrap_or("");
    let mut o = Options {
        config: Config::default(),
        replace_stale: true,
    };
    let mut seen: Vec<&str> = Vec::new();
    for part in parts {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (part, None),
        };
        if seen.contains(&key) {
            return Err(bad(text, format!("option {key} is given twice")));
        }
        seen.push(key);
        let need = |v: Option<&'a str>| -> Result<&'a str> {
            v.ok_or_else(|| bad(text, format!("option {key} needs a value ({key}=...)")))
        };
        let flag = |v: Option<&str>| match v {
            None => Ok(true),
            Some(v) => Err(bad(
                text,
                format!("option {key} takes no value (got {key}={v})"),
            )),
        };
        let c = &mut o.config;
        match key {
            "capacity" => c.capacity = size(text, key, need(value)?)?,
            "max_record" => c.max_record = Some(size(text, key, need(value)?)?),
            "log_entries" => c.log_entries = Some(number(text, key, need(value)?)?),
            "max_producers" => c.max_producers = number(text, key, need(value)?)?,
            "eventfd" => c.eventfd = flag(value)?,
            "huge_pages" => c.huge_pages = flag(value)?,
            "stale" if create => {
                o.replace_stale = match need(value)? {
                    "replace" => true,
                    "refuse" => false,
                    v => {
                        return Err(bad(
                            text,
                            format!("stale={v}: expected stale=replace or stale=refuse"),
                        ))
                    }
                }
            }
            "" => return Err(bad(text, "an empty option (two commas, or one at the end)")),
            _ => {
                return Err(bad(
                    text,
                    format!(
                        "unknown option {key:?}; expected capacity=SIZE, max_record=SIZE, \
                         log_entries=N, max_producers=N, eventfd, huge_pages{}",
                        if create { ", stale=replace|refuse" } else { "" }
                    ),
                ))
            }
        }
    }
    Ok((name, o))
}

fn number<T: FromStr>(text: &str, key: &str, v: &str) -> Result<T> {
    v.parse()
        .map_err(|_| bad(text, format!("{key}={v}: expected a whole number")))
}

/// Bytes, or a number with K, M or G (KiB, MiB, GiB).
fn size(text: &str, key: &str, v: &str) -> Result<u64> {
    let (digits, shift) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| !digits.starts_with('+'))
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| {
            bad(
                text,
                format!("{key}={v}: expected bytes, or a number with K, M or G (e.g. 64M)"),
            )
        })
}

/// A size as the text form writes it: the largest unit that divides it.
fn size_text(n: u64) -> String {
    for (shift, unit) in [(30, 'G'), (20, 'M'), (10, 'K')] {
        if n != 0 && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// The options of a configuration that differ from the defaults.
fn config_text(c: &Config) -> String {
    let d = Config::default();
    let mut s = String::new();
    if c.capacity != d.capacity {
        s += &format!(",capacity={}", size_text(c.capacity));
    }
    if let Some(m) = c.max_record {
        s += &format!(",max_record={}", size_text(m));
    }
    if let Some(l) = c.log_entries {
        s += &format!(",log_entries={l}");
    }
    if c.max_producers != d.max_producers {
        s += &format!(",max_producers={}", c.max_producers);
    }
    if c.eventfd {
        s += ",eventfd";
    }
    if c.huge_pages {
        s += ",huge_pages";
    }
    s
}

impl fmt::Display for Address {
    /// The text form, which [`FromStr`] reads back as the same address (`fd:`: as
    /// copies of the same descriptors).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Named(name) if !name.starts_with('/') && name.contains(':') => {
                write!(f, "shm:{name}")
            }
            Address::Named(name) => f.write_str(name),
            Address::Descriptors(fds) => {
                f.write_str("fd:")?;
                for (i, fd) in fds.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}", fd.as_raw_fd())?;
                }
                Ok(())
            }
            Address::Socket(path) => write!(f, "unix:{}", path.display()),
            Address::Create {
                name,
                config,
                replace_stale,
            } => {
                write!(f, "create:{name}{}", config_text(config))?;
                if !replace_stale {
                    f.write_str(",stale=refuse")?;
                }
                Ok(())
            }
            Address::Memfd { label, config } => {
                write!(f, "memfd:{label}{}", config_text(config))
            }
        }
    }
}

impl PartialEq for Address {
    /// The same address: descriptors compare by number (in one process, the same
    /// descriptor).
    fn eq(&self, other: &Address) -> bool {
        use Address::*;
        match (self, other) {
            (Named(a), Named(b)) => a == b,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn p(text: &str) -> Address {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    fn err(text: &str) -> String {
        match text.parse::<Address>() {
            Ok(a) => panic!("{text:?} should not parse, got {a:?}"),
            Err(e) => {
                assert!(matches!(e, Error::Config(_)), "{e:?}");
                e.to_string()
            }
        }
    }

    /// Both parsers give the same address, and it reads back from its text.
    fn round_trip(a: &Address) {
        let text = a.to_string();
        let b = p(&text);
        match (a, &b) {
            (Address::Descriptors(x), Address::Descriptors(y)) => {
                assert_eq!(x.len(), y.len(), "{text}");
                for (x, y) in x.iter().zip(y) {
                    let key = |f: &OwnedFd| files::key_of(f.as_fd(), "test").unwrap();
                    assert_eq!(key(x), key(y), "{text}: copies of the same files");
                }
            }
            _ => {
                assert_eq!(&b, a, "{text}");
                assert_eq!(b.to_string(), text);
            }
        }
    }

    #[test]
    fn names() {
        for (text, name) in [
            ("cam0", "cam0"),
            ("/cam0", "/cam0"),
            ("shm:cam0", "cam0"),
            ("shm:cam:0", "cam:0"),
            ("/cam:0", "/cam:0"),
            ("/dev/shm/cam0", "cam0"),
            ("ring.sock", "ring.sock"),
            ("@cam", "@cam"),
        ] {
            let a = p(text);
            assert_eq!(a, Address::Named(name.into()), "{text}");
            round_trip(&a);
        }
        assert_eq!(p("shm:cam:0").to_string(), "shm:cam:0");
        assert_eq!(p("cam0").describe(), "cam0");
    }

    #[test]
    fn sockets() {
        for (text, path) in [
            ("unix:/run/cam0.sock", "/run/cam0.sock"),
            ("unix:ring.sock", "ring.sock"),
            ("unix:@cam0", "@cam0"),
            ("/run/shmring/cam0.sock", "/run/shmring/cam0.sock"),
            ("./ring.sock", "./ring.sock"),
            ("dir/ring.sock", "dir/ring.sock"),
            ("a:b/ring.sock", "a:b/ring.sock"),
        ] {
            let a = p(text);
            assert_eq!(a, Address::Socket(path.into()), "{text}");
            round_trip(&a);
        }
        assert_eq!(p("/run/x.sock").to_string(), "unix:/run/x.sock");
    }

    #[test]
    fn creating() {
        let a = p("create:cam0");
        assert_eq!(a, Address::create("cam0", Config::default()));
        assert_eq!(a.to_string(), "create:cam0");
        let a = p(
            "create:/cam0,capacity=64M,max_record=4194304,log_entries=512,\
                   max_producers=8,eventfd,huge_pages,stale=refuse",
        );
        assert_eq!(
            a,
            Address::Create {
                name: "/cam0".into(),
                config: Config {
                    capacity: 64 << 20,
                    max_record: Some(4 << 20),
                    log_entries: Some(512),
                    max_producers: 8,
                    eventfd: true,
                    huge_pages: true,
                },
                replace_stale: false,
            }
        );
        assert_eq!(
            a.to_string(),
            "create:/cam0,capacity=64M,max_record=4M,log_entries=512,max_producers=8,eventfd,\
             huge_pages,stale=refuse"
        );
        round_trip(&a);
        assert_eq!(
            p("create:x,stale=replace,capacity=65537"),
            Address::Create {
                name: "x".into(),
                config: Config::with_capacity(65537),
                replace_stale: true
            }
        );
        round_trip(&p("create:x,capacity=65537,max_record=3K"));
        let m = p("memfd:");
        assert_eq!(
            m,
            Address::Memfd {
                label: "shmring".into(),
                config: Config::default()
            }
        );
        assert_eq!(m.to_string(), "memfd:shmring");
        round_trip(&m);
        let m = p("memfd:rec,capacity=1G,eventfd");
        assert_eq!(m.to_string(), "memfd:rec,capacity=1G,eventfd");
        round_trip(&m);
        round_trip(&p("memfd:,capacity=128k"));
    }

    #[test]
    fn descriptors_are_copied_and_read_back() {
        let seg = Segment::create_memfd("address-test", &Config::with_capacity(1 << 16)).unwrap();
        let raw: Vec<RawFd> = seg.descriptors().iter().map(|f| f.as_raw_fd()).collect();
        let text = format!(
            "fd:{}",
            raw.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let a = p(&text);
        let Address::Descriptors(fds) = &a else {
            panic!("{a:?}")
        };
        assert_eq!(fds.len(), 2);
        for (copy, orig) in fds.iter().zip(&raw) {
            assert_ne!(copy.as_raw_fd(), *orig, "a copy, not the original");
        }
        round_trip(&a);
        // The copies open the same ring.
        let other = a.open().unwrap();
        assert_eq!(other.geometry(), seg.geometry());
        // Taken over: the address holds the numbers themselves.
        let n = std::os::fd::IntoRawFd::into_raw_fd(seg.fd().try_clone_to_owned().unwrap());
        // SAFETY: `n` is ours (made just above) and handed over here.
        let a = unsafe { Address::parse_taking(&format!("fd:{n}")) }.unwrap();
        assert_eq!(a.to_string(), format!("fd:{n}"));
        drop(a);
        // SAFETY: F_GETFD only reads the table: the address closed `n`.
        assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } < 0);
    }

    #[test]
    fn bad_text_says_what_is_wrong() {
        for (text, what) in [
            ("", "empty; expected NAME"),
            (" cam0", "white space"),
            ("cam:0", "unknown form \"cam\""),
            ("cam:0", "shm:cam:0"),
            ("tcp:1.2.3.4", "unknown form \"tcp\""),
            ("shm:", "the ring name is empty"),
            ("/", "the ring name is empty"),
            ("/dev/shm/", "the ring name is empty"),
            ("shm:a/b", "not a ring name"),
            ("shm:..", "not a ring name"),
            ("unix:", "unix: needs a socket path"),
            ("fd:", "\"\" is not a descriptor number"),
            ("fd:x", "\"x\" is not a descriptor number"),
            ("fd:-1", "\"-1\" is not a descriptor number"),
            ("fd:+3", "\"+3\" is not a descriptor number"),
            ("fd:3,", "\"\" is not a descriptor number"),
            ("fd:3,3", "descriptor 3 is given twice"),
            ("fd:0,1,2,3", "4 descriptors; a ring has at most 3"),
            (
                "fd:1000000",
                "descriptor 1000000 is not open in this process",
            ),
            ("create:", "the ring name is empty"),
            ("create:a/b", "not a ring name"),
            ("create:x,capacity", "option capacity needs a value"),
            ("create:x,capacity=lots", "capacity=lots: expected bytes"),
            (
                "create:x,capacity=99999999999G",
                "capacity=99999999999G: expected bytes",
            ),
            (
                "create:x,max_producers=-1",
                "max_producers=-1: expected a whole number",
            ),
            ("create:x,eventfd=1", "option eventfd takes no value"),
            ("create:x,colour=red", "unknown option \"colour\""),
            ("create:x,,eventfd", "an empty option"),
            ("create:x,eventfd,eventfd", "option eventfd is given twice"),
            (
                "create:x,stale=maybe",
                "stale=maybe: expected stale=replace or stale=refuse",
            ),
            ("memfd:x,stale=refuse", "unknown option \"stale\""),
            ("memfd:a/b", "a memfd label cannot contain '/'"),
        ] {
            let e = err(text);
            assert!(e.contains(what), "{text:?}: {e}");
            assert!(
                e.contains(&format!("{text:?}")),
                "{text:?}: names the text: {e}"
            );
        }
        let long = "x".repeat(201);
        assert!(err(&long).contains("201 bytes; at most 200"));
    }

    #[test]
    fn read_only_refuses_to_create() {
        let e = p("memfd:").open_read_only().unwrap_err().to_string();
        assert!(
            e.contains("memfd:shmring") && e.contains("read-only"),
            "{e}"
        );
    }
}
