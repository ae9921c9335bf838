//! Ring configuration and segments: create, open, attach, send and receive
//! descriptors, geometry.

use std::ffi::{c_char, c_int, CString};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use shmring::{Address, Config, Segment};

use crate::handles::*;
use crate::stats::*;
use crate::status::shmring_status::*;
use crate::status::*;

/// How to size a ring. Initialise with shmring_config_init(), then change fields.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_config {
    /// Data ring bytes: a power of two, 64 KiB to 2 GiB (default: the core's
    /// `Config::DEFAULT_CAPACITY`, set by shmring_config_init()).
    pub capacity: u64,
    /// Largest payload; 0: capacity / 4. At most capacity / 2 - 64.
    pub max_record: u64,
    /// Records in flight at once; 0: capacity / 4096 clamped to 64..65536.
    pub log_entries: u32,
    /// Producer slots, 1..256 (default 64).
    pub max_producers: u32,
    /// Non-zero: producers wake the consumer through an eventfd (for epoll).
    pub eventfd: u32,
    /// Non-zero: ask for transparent huge pages on the ring (the core's
    /// `Config::huge_pages`).
    pub huge_pages: u32,
}

impl shmring_config {
    pub(crate) fn to_core(self) -> Config {
        Config {
            capacity: self.capacity,
            max_record: (self.max_record != 0).then_some(self.max_record),
            log_entries: (self.log_entries != 0).then_some(self.log_entries),
            max_producers: self.max_producers,
            eventfd: self.eventfd != 0,
            huge_pages: self.huge_pages != 0,
        }
    }
}

/// The validated layout of an attached segment.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_geometry {
    pub capacity: u64,
    pub max_record: u64,
    pub log_entries: u32,
    pub max_producers: u32,
    /// Bit 0: the ring uses eventfd wake-ups.
    pub flags: u32,
    pub reserved: u32,
    /// Bytes of shared memory the segment takes.
    pub total_size: u64,
}

/// An attached shared-memory segment (opaque).
pub struct shmring_segment {
    users: AtomicU32,
    pub(crate) seg: Arc<Segment>,
    name: CString,
}

impl Handle for shmring_segment {
    const KIND: Kind = Kind::Segment;
    const TYPE_NAME: &'static str = "shmring_segment";
    const EXCLUSIVE: bool = false;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

pub(crate) fn new_segment(
    seg: Arc<Segment>,
    out: &mut *mut shmring_segment,
) -> Res<shmring_status> {
    let name = CString::new(seg.name().replace('\0', "?")).unwrap_or_default();
    *out = register(Box::new(shmring_segment {
        users: AtomicU32::new(0),
        seg,
        name,
    }));
    ok()
}

/// Fills `cfg` with the library's defaults (a 16 MiB ring, 64 producers, futex
/// wake-ups).
#[no_mangle]
pub unsafe extern "C" fn shmring_config_init(cfg: *mut shmring_config) -> shmring_status {
    entry("shmring_config_init", || {
        let d = shmring::Config::default();
        *out_ptr(cfg, "cfg")? = shmring_config {
            capacity: d.capacity,
            max_record: d.max_record.unwrap_or(0),
            log_entries: d.log_entries.unwrap_or(0),
            max_producers: d.max_producers,
            eventfd: u32::from(d.eventfd),
            huge_pages: u32::from(d.huge_pages),
        };
        ok()
    })
}

/// Bytes of shared memory a ring of this configuration takes.
#[no_mangle]
pub unsafe extern "C" fn shmring_config_segment_size(
    cfg: *const shmring_config,
    out: *mut u64,
) -> shmring_status {
    entry("shmring_config_segment_size", || {
        let cfg = in_ptr(cfg, "cfg")?.to_core();
        let out = out_ptr(out, "out")?;
        *out = cfg.segment_size().map_err(core_err)?;
        ok()
    })
}

/// Creates an anonymous ring backed by a sealed memfd. Hand its descriptor
/// (shmring_segment_fd) to producers. `name` labels it (no file is created).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_create_memfd(
    name: *const c_char,
    cfg: *const shmring_config,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_create_memfd", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let name = c_str(name, "name")?;
        let cfg = in_ptr(cfg, "cfg")?.to_core();
        let memfd = Address::Memfd {
            label: name.into(),
            config: cfg,
        };
        let seg = memfd.open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Creates a named ring (/dev/shm/NAME, mode 0600). It is removed when the handle
/// is closed unless shmring_segment_persist() was called. A ring of that name
/// already there is SHMRING_ERR_EXISTS, whose message says whether its consumer is
/// alive or gone (left by a crash), or it is no ring; to replace one whose
/// consumer is gone, open the address "create:NAME" with shmring_open.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_create_named(
    name: *const c_char,
    cfg: *const shmring_config,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_create_named", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let name = c_str(name, "name")?;
        let cfg = in_ptr(cfg, "cfg")?.to_core();
        let create = Address::Create {
            name: name.into(),
            config: cfg,
            replace_stale: false,
        };
        let seg = create.open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Opens an existing named ring. `eventfd`: the ring's eventfd for an eventfd ring
/// (ownership passes to the library, as for shmring_segment_attach_fd), or -1.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_open_named(
    name: *const c_char,
    eventfd: c_int,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_open_named", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let name = c_str(name, "name")?;
        let address = if eventfd >= 0 {
            Address::NamedEventfd {
                name: name.into(),
                eventfd: own_fd(eventfd, "eventfd")?,
            }
        } else {
            Address::Named(name.into())
        };
        let seg = address.open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Attaches to a named ring from its file's descriptor. `eventfd` is the ring's
/// eventfd, or -1. A memfd ring needs its lock file too: use
/// shmring_segment_attach_fds (this call reports SHMRING_ERR_DESCRIPTORS).
///
/// OWNERSHIP: the library takes ownership of `fd` (and of `eventfd` if >= 0) as soon
/// as they are checked to be open, whether the call succeeds or not: do not close
/// them, and do not close any other descriptor of the same file while producers
/// are attached in this process (closing any descriptor of a file drops the
/// process's record locks, which are its liveness signal).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_attach_fd(
    fd: c_int,
    eventfd: c_int,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_attach_fd", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let mut fds = vec![own_fd(fd, "fd")?];
        if eventfd >= 0 {
            fds.push(own_fd(eventfd, "eventfd")?);
        }
        let seg = Address::Descriptors(fds).open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Attaches to a ring from its descriptors (inherited or received): the
/// sandbox-friendly way, no file-system access. `fds` holds `n` descriptors in the
/// order shmring_segment_descriptors gives them: the segment; for a memfd ring, its
/// lock file; for an eventfd ring, its eventfd.
///
/// OWNERSHIP: the library takes ownership of every descriptor as soon as they are
/// checked to be open, whether the call succeeds or not: do not close them, and do
/// not close any other descriptor of the ring's lock file while producers are
/// attached in this process (that drops its record locks, its liveness signal).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_attach_fds(
    fds: *const c_int,
    n: usize,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_attach_fds", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        if fds.is_null() || n == 0 || n > shmring::sys::fdpass::MAX_FDS {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "fds must point at 1 to {} descriptors (got {n})",
                shmring::sys::fdpass::MAX_FDS
            ));
        }
        // SAFETY: the caller passes `n` readable ints at `fds` (checked non-null).
        let raw = unsafe { std::slice::from_raw_parts(fds, n) };
        let owned = raw
            .iter()
            .map(|&f| own_fd(f, "fds[]"))
            .collect::<Result<Vec<_>, _>>()?;
        let seg = Address::Descriptors(owned).open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// The ring's descriptors, in the order a producer in another process needs them
/// (shmring_segment_attach_fds): up to `cap` are written to `out`, their number to
/// `*n` (at most 3: segment, lock file, eventfd). They stay owned by the segment:
/// do not close them.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_descriptors(
    seg: *const shmring_segment,
    out: *mut c_int,
    cap: usize,
    n: *mut usize,
) -> shmring_status {
    entry("shmring_segment_descriptors", || {
        let (h, _l) = lease(seg)?;
        let n = out_ptr(n, "n")?;
        let d = h.seg.descriptors();
        *n = d.len();
        if cap < d.len() || out.is_null() {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "the ring has {} descriptors; out must hold that many (cap {cap})",
                d.len()
            ));
        }
        for (i, f) in d.iter().enumerate() {
            // SAFETY: `out` holds at least `cap` >= d.len() ints (checked above).
            unsafe { *out.add(i) = f.as_raw_fd() };
        }
        ok()
    })
}

/// Receives a ring's descriptors sent with shmring_segment_send over a Unix socket,
/// and attaches to it.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_recv(
    sock: c_int,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_segment_recv", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        if sock < 0 {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "socket {sock} is invalid"
            ));
        }
        // SAFETY: borrowed for the call only; recvmsg reports EBADF for a closed fd.
        let s = unsafe { BorrowedFd::borrow_raw(sock) };
        let fds = shmring::recv_fds(s).map_err(|e| {
            fail!(
                SHMRING_ERR_OS,
                "receiving descriptors on socket {sock}: {e}"
            )
        })?;
        let seg = Address::Descriptors(fds).open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Sends the ring's descriptors (shmring_segment_descriptors) over a connected Unix
/// socket.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_send(
    sock: c_int,
    seg: *const shmring_segment,
) -> shmring_status {
    entry("shmring_segment_send", || {
        let (h, _l) = lease(seg)?;
        if sock < 0 {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "socket {sock} is invalid"
            ));
        }
        // SAFETY: borrowed for the call only; sendmsg reports EBADF for a closed fd.
        let s = unsafe { BorrowedFd::borrow_raw(sock) };
        h.seg
            .send(s)
            .map_err(|e| fail!(SHMRING_ERR_OS, "sending descriptors on socket {sock}: {e}"))?;
        ok()
    })
}

/// Closes a segment handle. Producers and consumers attached through it keep the
/// mapping alive until they are closed too. NULL is accepted (no-op).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_close(seg: *mut shmring_segment) -> shmring_status {
    entry("shmring_segment_close", || close(seg))
}

/// Keep a named segment after its creator closes it.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_persist(seg: *const shmring_segment) -> shmring_status {
    entry("shmring_segment_persist", || {
        let (h, _l) = lease(seg)?;
        h.seg.persist();
        ok()
    })
}

/// The segment's descriptor, owned by the segment (do not close it). To hand it to
/// a child process, dup() it or clear FD_CLOEXEC on a dup.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_fd(
    seg: *const shmring_segment,
    out: *mut c_int,
) -> shmring_status {
    entry("shmring_segment_fd", || {
        let (h, _l) = lease(seg)?;
        *out_ptr(out, "out")? = h.seg.fd().as_raw_fd();
        ok()
    })
}

/// A read-only descriptor of the ring's file, for taps and observers in this
/// process or another: a mapping made from it cannot be written. Owned by the
/// segment: do not close it; dup() it to hand it on (shmring_tap_open_fd takes
/// ownership of what it is given, and needs a memfd ring's: a tap opens a named
/// ring by name).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_read_only_fd(
    seg: *const shmring_segment,
    out: *mut c_int,
) -> shmring_status {
    entry("shmring_segment_read_only_fd", || {
        let (h, _l) = lease(seg)?;
        let out = out_ptr(out, "out")?;
        *out = h.seg.read_only_fd().map_err(core_err)?.as_raw_fd();
        ok()
    })
}

/// The ring's eventfd (readable when data is ready), or -1 for a futex ring. Owned
/// by the segment: do not close it.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_eventfd(
    seg: *const shmring_segment,
    out: *mut c_int,
) -> shmring_status {
    entry("shmring_segment_eventfd", || {
        let (h, _l) = lease(seg)?;
        *out_ptr(out, "out")? = h.seg.eventfd().map_or(-1, |f| f.as_raw_fd());
        ok()
    })
}

/// The segment's name for messages ("/name", "memfd:name" or "fd:N"). Owned by the
/// handle: valid until shmring_segment_close.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_name(seg: *const shmring_segment) -> *const c_char {
    let mut p: *const c_char = std::ptr::null();
    let _ = entry("shmring_segment_name", || {
        let (h, _l) = lease(seg)?;
        p = h.name.as_ptr();
        ok()
    });
    p
}

/// The segment's validated layout.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_geometry(
    seg: *const shmring_segment,
    out: *mut shmring_geometry,
) -> shmring_status {
    entry("shmring_segment_geometry", || {
        let (h, _l) = lease(seg)?;
        *out_ptr(out, "out")? = c_geometry(h.seg.geometry());
        ok()
    })
}

/// The mapping's address range (for zero-copy checks).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_mapping(
    seg: *const shmring_segment,
    base: *mut *const u8,
    len: *mut usize,
) -> shmring_status {
    entry("shmring_segment_mapping", || {
        let (h, _l) = lease(seg)?;
        let (b, l) = h.seg.mapping();
        *out_ptr(base, "base")? = b;
        *out_ptr(len, "len")? = l;
        ok()
    })
}

/// One tethered consumer of a ring (see shmring_segment_tethers).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_tether_info {
    /// Its line.
    pub line: u32,
    /// Non-zero: it asked to attach and the ring's consumer has not adopted it yet.
    pub requested: u32,
    /// The pid holding the line, as the kernel reports it (0: unknown).
    pub pid: u32,
    /// Zero.
    pub reserved: u32,
    pub records_consumed: u64,
    pub bytes_consumed: u64,
    /// Records it lost when the ring was reset under it.
    pub lost: u64,
    /// How far its read cursor is behind the write cursor, in records and bytes.
    pub lag_records: u64,
    pub lag_bytes: u64,
    /// Records its filter refused (released unread; not in `records_consumed`).
    pub records_filtered: u64,
}

/// The tethered consumers attached to the ring: `*n` receives how many there are,
/// and the first `min(*n, cap)` are written to `out` (which may be NULL when `cap`
/// is 0).
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_tethers(
    seg: *const shmring_segment,
    out: *mut shmring_tether_info,
    cap: usize,
    n: *mut usize,
) -> shmring_status {
    entry("shmring_segment_tethers", || {
        let (h, _l) = lease(seg)?;
        let n = out_ptr(n, "n")?;
        if out.is_null() && cap != 0 {
            return Err(fail!(SHMRING_ERR_NULL, "out is NULL but cap is {cap}"));
        }
        let all = h.seg.tethers();
        *n = all.len();
        for (i, t) in all.iter().take(cap).enumerate() {
            // SAFETY: the caller promises `cap` writable entries at `out`; i < cap.
            unsafe {
                *out.add(i) = shmring_tether_info {
                    line: t.line,
                    requested: u32::from(t.requested),
                    pid: t.pid,
                    reserved: 0,
                    records_consumed: t.records_consumed,
                    bytes_consumed: t.bytes_consumed,
                    lost: t.lost,
                    lag_records: t.lag_records,
                    lag_bytes: t.lag_bytes,
                    records_filtered: t.records_filtered,
                }
            };
        }
        ok()
    })
}

/// A snapshot of the ring's counters.
#[no_mangle]
pub unsafe extern "C" fn shmring_segment_stats(
    seg: *const shmring_segment,
    out: *mut shmring_stats,
) -> shmring_status {
    entry("shmring_segment_stats", || {
        let (h, _l) = lease(seg)?;
        *out_ptr(out, "out")? = c_stats(&h.seg.stats());
        ok()
    })
}

pub(crate) fn c_geometry(g: &shmring::layout::Geometry) -> shmring_geometry {
    shmring_geometry {
        capacity: g.capacity,
        max_record: g.max_record,
        log_entries: g.log_entries,
        max_producers: g.max_producers,
        flags: g.flags,
        reserved: 0,
        total_size: g.total_size,
    }
}
