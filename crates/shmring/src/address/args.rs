//! A binding's arguments that say where a ring is ([`AddressArgs`]), turned into
//! one [`Address`] by one set of rules with one set of messages ([`ArgNames`]
//! spells them the binding's way).

use super::*;

/// How a binding spells the arguments of [`AddressArgs`], for its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgNames {
    pub address: &'static str,
    pub fd: &'static str,
    pub fds: &'static str,
    pub eventfd_fd: &'static str,
    pub create: &'static str,
    pub memfd: &'static str,
    pub replace_stale: &'static str,
    /// The sizes of a new ring, together.
    pub sizes: &'static str,
}

impl ArgNames {
    /// Python's keyword arguments (`Consumer(...)`, `Producer(...)`).
    pub const PYTHON: ArgNames = ArgNames {
        address: "address=",
        fd: "fd=",
        fds: "fds=",
        eventfd_fd: "eventfd_fd=",
        create: "create=True",
        memfd: "memfd=True",
        replace_stale: "replace_stale=",
        sizes: "sizes (capacity=, max_record=, log_entries=, max_producers=, eventfd=)",
    };

    /// Node.js's option keys (`new Consumer({...})`, `Producer.open(...)`).
    pub const NODE: ArgNames = ArgNames {
        address: "address",
        fd: "fd",
        fds: "fds",
        eventfd_fd: "eventfdFd",
        create: "create: true",
        memfd: "memfd: true",
        replace_stale: "replaceStale",
        sizes: "sizes (capacity, maxRecord, logEntries, maxProducers, eventfd)",
    };
}

/// Where a ring is, as a binding's keyword arguments give it: the text form
/// (`address`), or its parts. [`AddressArgs::address`] applies the rules of
/// which go together, the same in every binding:
///
/// - `address` alone: nothing else says where (its text holds the sizes of a ring
///   it creates);
/// - descriptors: `fd` (the segment) with an optional `eventfd_fd`, or `fds` (every
///   descriptor of the ring, in the order of [`Segment::descriptors`]); neither
///   with a name or `create`;
/// - `create`: a name ([`Address::Create`]), or `memfd` (the name, if any, its
///   label: [`Address::Memfd`]), with the sizes, unset ones the library's
///   defaults ([`Config::default`]);
/// - otherwise a name ([`Address::Named`]), with `eventfd_fd` for a ring made with
///   an eventfd ([`Address::NamedEventfd`]).
///
/// Sizes, `memfd` and `replace_stale` go with `create` only. Every message names
/// the arguments as the binding spells them. The descriptors are numbers the
/// binding hands over: taken only once the arguments are found to go together
/// (refused arguments take none of them; an `fd:` text takes its own, as
/// [`Address::parse_taking`] does).
///
/// ```
/// use shmring::{Address, AddressArgs, ArgNames};
/// let a = AddressArgs { name: Some("cam0".into()), ..Default::default() };
/// // SAFETY: no descriptor is named.
/// assert_eq!(unsafe { a.address(&ArgNames::PYTHON) }?, Address::Named("cam0".into()));
/// let a = AddressArgs { capacity: Some(1 << 20), ..Default::default() };
/// // SAFETY: no descriptor is named.
/// let e = unsafe { a.address(&ArgNames::NODE) }.unwrap_err().to_string();
/// assert!(e.contains("sizes (capacity, maxRecord"), "{e}");
/// # Ok::<(), shmring::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct AddressArgs {
    /// The text form (its `fd:` descriptors taken over: [`Address::parse_taking`]).
    pub address: Option<String>,
    pub name: Option<String>,
    pub fd: Option<RawFd>,
    pub eventfd_fd: Option<RawFd>,
    pub fds: Option<Vec<RawFd>>,
    pub create: bool,
    pub memfd: bool,
    /// With `create`: whether a ring of that name whose consumer is gone is
    /// replaced (unset: it is, as every `create` does; `Some(false)`: it is an
    /// error, [`Error::Exists`]) (see [`Address::Create`]).
    pub replace_stale: Option<bool>,
    pub capacity: Option<u64>,
    pub max_record: Option<u64>,
    pub log_entries: Option<u32>,
    pub max_producers: Option<u32>,
    pub eventfd: Option<bool>,
}

impl AddressArgs {
    /// Do the arguments go together? [`Error::Config`] naming (as `names` spells
    /// them) those that do not, or what is missing. Takes nothing and parses
    /// nothing: an address's text is read by [`AddressArgs::address`].
    pub fn check(&self, names: &ArgNames) -> Result<()> {
        let n = names;
        let bad = |what: String| Err(Error::Config(what));
        let sized = self.capacity.is_some()
            || self.max_record.is_some()
            || self.log_entries.is_some()
            || self.max_producers.is_some()
            || self.eventfd.is_some();
        let descriptors = self.fd.is_some() || self.fds.is_some();
        if self.address.is_some() {
            if self.name.is_some()
                || descriptors
                || self.eventfd_fd.is_some()
                || self.create
                || self.memfd
                || self.replace_stale.is_some()
                || sized
            {
                return bad(format!(
                    "{} says how to reach the ring (and create:NAME,capacity=... how to size a \
                     new one): give no name, {}, {}, {}, {}, {}, {} or {} with it",
                    n.address,
                    n.fd,
                    n.fds,
                    n.eventfd_fd,
                    n.create,
                    n.memfd,
                    n.replace_stale,
                    n.sizes
                ));
            }
            return Ok(());
        }
        if !self.create && (self.memfd || self.replace_stale.is_some() || sized) {
            let what = if self.memfd {
                n.memfd
            } else if self.replace_stale.is_some() {
                n.replace_stale
            } else {
                n.sizes
            };
            return bad(format!(
                "{what} goes with {} (it says how to make a new ring)",
                n.create
            ));
        }
        if self.fd.is_some() && self.fds.is_some() {
            return bad(format!("give either {} or {}, not both", n.fd, n.fds));
        }
        if self.fds.is_some() && self.eventfd_fd.is_some() {
            return bad(format!(
                "{} already lists the ring's eventfd; leave {} out",
                n.fds, n.eventfd_fd
            ));
        }
        if descriptors && self.create {
            return bad(format!(
                "give either descriptors ({}, {}) or {}, not both",
                n.fd, n.fds, n.create
            ));
        }
        if descriptors && self.name.is_some() {
            return bad(format!(
                "descriptors ({}, {}) say which ring: give no name with them",
                n.fd, n.fds
            ));
        }
        if self.create && self.eventfd_fd.is_some() {
            return bad(format!(
                "{} makes the ring's eventfd itself: leave {} out",
                n.create, n.eventfd_fd
            ));
        }
        if self.create && !self.memfd && self.name.is_none() {
            return bad(format!("{} needs a name (or {})", n.create, n.memfd));
        }
        if !self.create && !descriptors && self.name.is_none() {
            return bad(format!(
                "give a ring name, {}, {} or {}",
                n.address, n.fd, n.create
            ));
        }
        Ok(())
    }

    /// The address these arguments say: [`AddressArgs::check`]'s error for
    /// arguments that do not go together, else the address (an address text that
    /// does not parse: its [`Error::Config`]).
    ///
    /// # Safety
    /// Every descriptor given (`fd`, `eventfd_fd`, `fds`, and those an `fd:` text
    /// names) is handed over: once taken, nothing else in the process may use or
    /// close it.
    pub unsafe fn address(self, names: &ArgNames) -> Result<Address> {
        self.check(names)?;
        // SAFETY: handed over by the caller; called only once the arguments are
        // found to go together.
        let take = |fd: RawFd| unsafe { OwnedFd::from_raw_fd(fd) };
        if let Some(text) = self.address {
            // SAFETY: handed over by the caller.
            return unsafe { Address::parse_taking(&text) };
        }
        if let Some(fds) = self.fds {
            return Ok(Address::Descriptors(fds.into_iter().map(take).collect()));
        }
        if let Some(fd) = self.fd {
            let fds = [Some(fd), self.eventfd_fd].into_iter().flatten();
            return Ok(Address::Descriptors(fds.map(take).collect()));
        }
        // Checked: a name is given unless a memfd is created.
        let name = self.name;
        if self.create {
            // Unset sizes are the library's defaults.
            let d = Config::default();
            let config = Config {
                capacity: self.capacity.unwrap_or(d.capacity),
                max_record: self.max_record.or(d.max_record),
                log_entries: self.log_entries.or(d.log_entries),
                max_producers: self.max_producers.unwrap_or(d.max_producers),
                eventfd: self.eventfd.unwrap_or(d.eventfd),
                ..d
            };
            return Ok(match (self.memfd, name) {
                (true, label) => Address::Memfd {
                    label: label.unwrap_or_else(|| DEFAULT_LABEL.into()),
                    config,
                },
                (false, name) => Address::Create {
                    name: name.unwrap_or_default(),
                    config,
                    replace_stale: self.replace_stale.unwrap_or(true),
                },
            });
        }
        let name = name.unwrap_or_default();
        Ok(match self.eventfd_fd {
            Some(eventfd) => Address::NamedEventfd {
                name,
                eventfd: take(eventfd),
            },
            None => Address::Named(name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor to hand over (the address closes it).
    fn fd() -> RawFd {
        std::os::fd::IntoRawFd::into_raw_fd(std::fs::File::open("/dev/null").unwrap())
    }

    fn address(a: AddressArgs, names: &ArgNames) -> Result<Address> {
        // SAFETY: every descriptor in these tests is made for it and handed over.
        unsafe { a.address(names) }
    }

    fn named(name: &str) -> AddressArgs {
        AddressArgs {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn err(a: AddressArgs, names: &ArgNames) -> String {
        match address(a, names) {
            Err(Error::Config(e)) => e,
            r => panic!("should be refused: {r:?}"),
        }
    }

    #[test]
    fn each_part_gives_its_address() {
        let p = &ArgNames::PYTHON;
        assert_eq!(
            address(named("cam0"), p).unwrap(),
            Address::Named("cam0".into())
        );
        let a = AddressArgs {
            eventfd_fd: Some(fd()),
            ..named("cam0")
        };
        assert!(
            matches!(address(a, p).unwrap(), Address::NamedEventfd { name, .. } if name == "cam0")
        );
        let a = AddressArgs {
            fd: Some(fd()),
            eventfd_fd: Some(fd()),
            ..Default::default()
        };
        assert!(matches!(address(a, p).unwrap(), Address::Descriptors(v) if v.len() == 2));
        let a = AddressArgs {
            fds: Some(vec![fd(), fd(), fd()]),
            ..Default::default()
        };
        assert!(matches!(address(a, p).unwrap(), Address::Descriptors(v) if v.len() == 3));
        let a = AddressArgs {
            create: true,
            capacity: Some(1 << 20),
            eventfd: Some(true),
            ..named("cam0")
        };
        let mut config = Config::with_capacity(1 << 20);
        config.eventfd = true;
        assert_eq!(
            address(a, p).unwrap(),
            Address::Create {
                name: "cam0".into(),
                config: config.clone(),
                replace_stale: true
            }
        );
        let a = AddressArgs {
            create: true,
            replace_stale: Some(false),
            ..named("cam0")
        };
        assert!(matches!(
            address(a, p).unwrap(),
            Address::Create {
                replace_stale: false,
                ..
            }
        ));
        let a = AddressArgs {
            create: true,
            memfd: true,
            ..Default::default()
        };
        assert_eq!(
            address(a, p).unwrap(),
            Address::Memfd {
                label: DEFAULT_LABEL.into(),
                config: Config::default()
            }
        );
        let a = AddressArgs {
            address: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(address(a, p).unwrap(), Address::Named("x".into()));
    }

    #[test]
    fn parts_that_do_not_go_together_are_named_the_bindings_way() {
        for (names, spelled) in [
            (
                &ArgNames::PYTHON,
                ["fd=", "fds=", "eventfd_fd=", "create=True"],
            ),
            (&ArgNames::NODE, ["fd", "fds", "eventfdFd", "create: true"]),
        ] {
            let [fd_, fds_, efd_, create_] = spelled;
            let cases: Vec<(AddressArgs, String)> = vec![
                (
                    AddressArgs {
                        address: Some("x".into()),
                        ..named("y")
                    },
                    format!("{} says how to reach the ring", names.address),
                ),
                (
                    AddressArgs {
                        address: Some("x".into()),
                        capacity: Some(1),
                        ..Default::default()
                    },
                    names.sizes.to_string(),
                ),
                (
                    AddressArgs {
                        fd: Some(fd()),
                        fds: Some(vec![fd()]),
                        ..Default::default()
                    },
                    format!("give either {fd_} or {fds_}, not both"),
                ),
                (
                    AddressArgs {
                        fds: Some(vec![fd()]),
                        eventfd_fd: Some(fd()),
                        ..Default::default()
                    },
                    format!("{fds_} already lists the ring's eventfd; leave {efd_} out"),
                ),
                (
                    AddressArgs {
                        fd: Some(fd()),
                        create: true,
                        ..Default::default()
                    },
                    format!("or {create_}, not both"),
                ),
                (
                    AddressArgs {
                        fd: Some(fd()),
                        ..named("y")
                    },
                    "give no name with them".into(),
                ),
                (
                    AddressArgs {
                        create: true,
                        eventfd_fd: Some(fd()),
                        ..named("y")
                    },
                    format!("leave {efd_} out"),
                ),
                (
                    AddressArgs {
                        create: true,
                        ..Default::default()
                    },
                    format!("{create_} needs a name"),
                ),
                (
                    AddressArgs {
                        capacity: Some(1 << 20),
                        ..named("y")
                    },
                    format!("{} goes with {create_}", names.sizes),
                ),
                (
                    AddressArgs {
                        memfd: true,
                        ..Default::default()
                    },
                    format!("{} goes with {create_}", names.memfd),
                ),
                (
                    AddressArgs {
                        replace_stale: Some(false),
                        ..named("y")
                    },
                    format!("{} goes with {create_}", names.replace_stale),
                ),
                (AddressArgs::default(), "give a ring name".into()),
            ];
            for (args, needle) in cases {
                let shown = format!("{args:?}");
                let e = err(args, names);
                assert!(e.contains(&needle), "{shown}: {e:?} lacks {needle:?}");
            }
        }
    }

    #[test]
    fn refused_arguments_take_no_descriptor() {
        let (f, e) = (fd(), fd());
        let a = AddressArgs {
            fd: Some(f),
            eventfd_fd: Some(e),
            create: true,
            ..named("y")
        };
        err(a, &ArgNames::PYTHON);
        for n in [f, e] {
            // SAFETY: F_GETFD only reads the descriptor table.
            let flags = unsafe { libc::fcntl(n, libc::F_GETFD) };
            assert!(flags >= 0, "{n} still open");
            // SAFETY: made here and not taken.
            drop(unsafe { OwnedFd::from_raw_fd(n) });
        }
    }
}
