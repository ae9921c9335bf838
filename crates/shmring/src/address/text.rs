//! The text form of an [`Address`]: parsing (`FromStr`, one place) and `Display`.

use super::*;

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
pub(super) fn parse(
    text: &str,
    own: impl Fn(RawFd) -> std::io::Result<OwnedFd>,
) -> Result<Address> {
    if text.is_empty() {
        return Err(bad(text, format!("empty; expected {FORMS}")));
    }
    if text.trim() != text {
        return Err(bad(text, "leading or trailing white space"));
    }
    if let Some(name) = text.strip_prefix("/dev/shm/") {
        return named(text, name, own);
    }
    let scheme = match text.split_once(':') {
        Some((scheme, rest)) if !text.starts_with('/') => Some((scheme, rest)),
        _ => None,
    };
    match scheme {
        Some(("shm", name)) => return named(text, name, own),
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
    named(text, text, own)
}

/// `NAME` or `NAME,eventfd=FD` (a named ring with its eventfd).
fn named(
    text: &str,
    name: &str,
    own: impl Fn(RawFd) -> std::io::Result<OwnedFd>,
) -> Result<Address> {
    let Some((name, fd)) = name.rsplit_once(",eventfd=") else {
        check_name(text, name)?;
        return Ok(Address::Named(name.into()));
    };
    check_name(text, name)?;
    let n = descriptor_number(text, fd, "NAME,eventfd=FD, e.g. cam0,eventfd=5")?;
    is_open(n).map_err(|e| {
        bad(
            text,
            format!("descriptor {n} is not open in this process ({e})"),
        )
    })?;
    let eventfd = own(n).map_err(|e| bad(text, format!("descriptor {n}: {e}")))?;
    Ok(Address::NamedEventfd {
        name: name.into(),
        eventfd,
    })
}

/// A descriptor number as the text writes it (`expected`: the form, for the message).
fn descriptor_number(text: &str, part: &str, expected: &str) -> Result<RawFd> {
    match part.parse() {
        Ok(n) if n >= 0 && !part.starts_with('+') => Ok(n),
        _ => Err(bad(
            text,
            format!("{part:?} is not a descriptor number (expected {expected})"),
        )),
    }
}

/// The rule of a ring's name (the segment's own), said about the address.
fn check_name(text: &str, name: &str) -> Result<()> {
    match crate::segment::name_problem(name) {
        Some(why) => Err(bad(text, why)),
        None => Ok(()),
    }
}

fn descriptors(
    text: &str,
    list: &str,
    own: impl Fn(RawFd) -> std::io::Result<OwnedFd>,
) -> Result<Address> {
    let mut nums: Vec<RawFd> = Vec::new();
    for part in list.split(',') {
        let n = descriptor_number(text, part, "fd:SEG[,LOCK][,EVENTFD], e.g. fd:3,4")?;
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
            Address::NamedEventfd { name, eventfd } => {
                if !name.starts_with('/') && name.contains(':') {
                    f.write_str("shm:")?;
                }
                write!(f, "{name},eventfd={}", eventfd.as_raw_fd())
            }
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
            ("shm:cam 0", "no white space or control characters"),
            ("shm:cam\t0", "no white space or control characters"),
            ("shm:cam\u{7f}", "no white space or control characters"),
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
