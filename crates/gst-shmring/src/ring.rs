//! The ring both elements name in their properties: the properties themselves
//! (`ring`, `fd`, `lock-fd`, and the source's `create` and `capacity`), their values, and
//! opening the ring they name: an [`Address`] of the core, opened by its one `open`.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, LazyLock};

use gst::glib;
use gst::prelude::*;
use shmring::handoff::DEFAULT_CONNECT_TIMEOUT;
use shmring::layout::{MAX_CAPACITY, MIN_CAPACITY};
use shmring::media::{Format, MediaHeader};
use shmring::{Address, Config, Occupant, ReadOnlySegment, Segment};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "shmringring",
        gst::DebugColorFlags::empty(),
        Some("shmring elements: opening rings"),
    )
});

/// The largest picture a ring the elements create takes by default: what a
/// meeting's participants and screen shares carry.
pub const DEFAULT_PICTURE: (u32, u32) = (1920, 1080);

/// Payload bytes of the largest frame of any video format of the core at
/// `width`x`height` (its media header included).
pub fn largest_frame(width: u32, height: u32) -> u64 {
    Format::ALL
        .iter()
        .filter(|f| f.is_video())
        .filter_map(|&f| MediaHeader::video(f, width, height, 0, 0).ok())
        .map(|h| h.payload_len() as u64)
        .max()
        .unwrap_or(0)
}

/// The smallest ring that takes records of `len` bytes: the smallest capacity
/// whose geometry, as the core makes it by default (`Config::with_capacity`: the
/// largest record a quarter of the ring, so at least three such records fit in
/// it), takes them. `None`: no ring takes them.
pub fn capacity_for(len: u64) -> Option<u64> {
    (0..u64::BITS).map(|shift| 1u64 << shift).find(|&c| {
        Config::with_capacity(c)
            .geometry()
            .is_ok_and(|g| g.max_record >= len)
    })
}

/// The capacity of the rings the elements create unless told (`capacity`): the
/// core's default, or more, so that frames of any supported format up to
/// [`DEFAULT_PICTURE`] fit (1920x1080 RGBA: 64 MiB).
pub fn default_capacity() -> u64 {
    let (w, h) = DEFAULT_PICTURE;
    capacity_for(largest_frame(w, h))
        .unwrap_or(MAX_CAPACITY)
        .max(Config::DEFAULT_CAPACITY)
}

/// What to tell someone whose records of `len` bytes a ring refused: the
/// `capacity` to create it with (of `shmringsrc`, `shmringdemux`, or `shmring
/// record --capacity-mib`).
pub fn capacity_advice(len: u64) -> String {
    match capacity_for(len) {
        Some(c) => format!(
            "create the ring with capacity={c} ({} MiB) on its consumer (shmringsrc or shmringdemux capacity={c}, shmring record --capacity-mib {})",
            c >> 20,
            c >> 20
        ),
        None => format!(
            "no ring takes records of {len} bytes (the largest ring is {MAX_CAPACITY} bytes)"
        ),
    }
}

/// Where an element finds its ring.
#[derive(Debug, Clone)]
pub struct Location {
    /// `/dev/shm/NAME`.
    pub name: Option<String>,
    /// An inherited descriptor (a memfd); -1: none.
    pub fd: RawFd,
    /// The ring's inherited lock file descriptor (a memfd ring's); -1: none.
    pub lock_fd: RawFd,
    /// Create the named ring (source only).
    pub create: bool,
    /// Ring bytes when creating.
    pub capacity: u64,
}

impl Default for Location {
    fn default() -> Self {
        Location {
            name: None,
            fd: -1,
            lock_fd: -1,
            create: false,
            capacity: default_capacity(),
        }
    }
}

/// The properties of [`Location`]: `ring` and `fd`, described as the ring to
/// `purpose` ("consume", "write into") with `note` after the ring's, and with
/// `create` also `create` and `capacity`.
pub fn properties(purpose: &str, note: &str, create: bool) -> Vec<glib::ParamSpec> {
    let mut props = vec![
        glib::ParamSpecString::builder("ring")
            .nick("Ring")
            .blurb(&format!(
                "The ring to {purpose}: its name (/dev/shm/NAME), or its address as every \
                 shmring binding takes it (unix:PATH: the ring a consumer serves on that \
                 socket; fd:SEG[,LOCK][,EVENTFD]: inherited descriptors, copied){note}"
            ))
            .mutable_ready()
            .build(),
        glib::ParamSpecInt::builder("fd")
            .nick("File descriptor")
            .blurb(&format!(
                "An inherited descriptor of the ring (a memfd) to {purpose} instead of a named ring; -1: none"
            ))
            .minimum(-1)
            .default_value(-1)
            .mutable_ready()
            .build(),
        glib::ParamSpecInt::builder("lock-fd")
            .nick("Lock file descriptor")
            .blurb(
                "With fd: the ring's inherited lock file descriptor (a memfd ring's second \
                 descriptor, which producers and consumers need; a tap does not); -1: none",
            )
            .minimum(-1)
            .default_value(-1)
            .mutable_ready()
            .build(),
    ];
    if create {
        props.extend([
            glib::ParamSpecBoolean::builder("create")
                .nick("Create")
                .blurb("Create the named ring (removed when the element stops) instead of opening an existing one. A ring of that name whose consumer is gone (left by a crash) is replaced; one with a live consumer is an error")
                .default_value(false)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt64::builder("capacity")
                .nick("Capacity")
                .blurb(&format!(
                    "Ring bytes when creating: a power of two. The default takes frames of any supported format up to {}x{} (a quarter of the ring at most per record); a larger picture needs more (3840x2160 RGBA: {})",
                    DEFAULT_PICTURE.0,
                    DEFAULT_PICTURE.1,
                    capacity_for(largest_frame(3840, 2160)).unwrap_or(MAX_CAPACITY)
                ))
                .minimum(MIN_CAPACITY)
                .maximum(MAX_CAPACITY)
                .default_value(default_capacity())
                .mutable_ready()
                .build(),
        ]);
    }
    props
}

impl Location {
    /// Sets the property `name` if it is one of [`properties`]; false otherwise.
    pub fn set_property(&mut self, name: &str, value: &glib::Value) -> bool {
        const CHECKED: &str = "type checked upstream";
        match name {
            "ring" => self.name = value.get().expect(CHECKED),
            "fd" => self.fd = value.get().expect(CHECKED),
            "lock-fd" => self.lock_fd = value.get().expect(CHECKED),
            "create" => self.create = value.get().expect(CHECKED),
            "capacity" => self.capacity = value.get().expect(CHECKED),
            _ => return false,
        }
        true
    }

    /// The value of the property `name` if it is one of [`properties`].
    pub fn property(&self, name: &str) -> Option<glib::Value> {
        Some(match name {
            "ring" => self.name.to_value(),
            "fd" => self.fd.to_value(),
            "lock-fd" => self.lock_fd.to_value(),
            "create" => self.create.to_value(),
            "capacity" => self.capacity.to_value(),
            _ => return None,
        })
    }

    /// The ring's name, or "fd N", for messages.
    pub fn describe(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("fd {}", self.fd))
    }

    /// The ring, or the element error `kind` naming `element` (`el`'s factory), the
    /// ring and the cause.
    pub fn open_for(
        &self,
        el: &gst::Element,
        element: &str,
        kind: gst::ResourceError,
    ) -> Result<Arc<Segment>, gst::ErrorMessage> {
        self.open(el).map_err(|e| {
            error_msg!(
                kind,
                "{}: cannot open ring {}: {}",
                element,
                self.describe(),
                e
            )
        })
    }

    /// The core's address of the ring these properties name: copies of the
    /// inherited descriptors (`fd`, and `lock-fd` when `with_lock_file`), or the
    /// ring `ring` names (created when `create`), or why there is none.
    pub fn address(&self, with_lock_file: bool) -> Result<Address, String> {
        if self.fd >= 0 {
            let mut fds = vec![self.fd];
            if with_lock_file && self.lock_fd >= 0 {
                fds.push(self.lock_fd);
            }
            return fds
                .into_iter()
                .map(|n| {
                    // SAFETY: the descriptor is only borrowed for the duplication
                    // below, which the kernel checks: a descriptor that is not open
                    // fails with EBADF and is reported, never used.
                    let fd = unsafe { BorrowedFd::borrow_raw(n) };
                    fd.try_clone_to_owned()
                        .map_err(|e| format!("descriptor {n}: {e}"))
                })
                .collect::<Result<Vec<OwnedFd>, _>>()
                .map(Address::Descriptors);
        }
        let Some(text) = self.name.as_deref().filter(|n| !n.is_empty()) else {
            return Err("no ring: set the ring property (a name or address) or fd".into());
        };
        // The one parser of ring addresses (`fd:` copies the descriptors it names,
        // so the element can open the ring again after a restart).
        let address: Address = text.parse().map_err(|e: shmring::Error| e.to_string())?;
        if !self.create {
            return Ok(address);
        }
        match address {
            Address::Named(name) => Ok(Address::create(name, Config::with_capacity(self.capacity))),
            a @ (Address::Create { .. } | Address::Memfd { .. }) => Ok(a),
            a => Err(format!(
                "create=true makes a named ring: ring must be a name, not {a}"
            )),
        }
    }

    /// The ring, or an error naming it and the cause. Creating replaces a ring of
    /// that name whose consumer is gone (left by a crash); one whose consumer is
    /// alive is an error.
    pub fn open(&self, el: &gst::Element) -> Result<Arc<Segment>, String> {
        let address = self.address(true)?;
        match address.open_detailed(DEFAULT_CONNECT_TIMEOUT) {
            Ok(o) => {
                if o.replaced_stale {
                    log!(
                        CAT,
                        Warning,
                        el,
                        "ring {} was left by a consumer that is gone: replaced it",
                        self.describe()
                    );
                }
                Ok(o.segment)
            }
            Err(
                e @ shmring::Error::Exists {
                    occupant: Occupant::Live,
                    ..
                },
            ) => Err(format!(
                "{e}: another source or recorder reads it (mode=tethered or tap reads beside it)"
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The ring mapped read-only (`create` does not apply), or an error naming it.
    pub fn open_read_only(&self) -> Result<ReadOnlySegment, String> {
        let reading = Location {
            create: false,
            ..self.clone()
        };
        reading
            .address(false)?
            .open_read_only()
            .map_err(|e| e.to_string())
    }
}
