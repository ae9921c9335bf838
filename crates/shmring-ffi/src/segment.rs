//! Ring configuration and segments: create and open (by address), descriptors,
//! geometry.

use std::ffi::{c_char, c_int, CString};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use shmring::handoff::DEFAULT_CONNECT_TIMEOUT;
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

/// Creates a ring: `address` is a creating address, "create:NAME" (the named ring
/// /dev/shm/NAME, mode 0600) or "memfd:[LABEL]" (an anonymous sealed memfd,
/// labelled LABEL, default "shmring"), and `cfg` sizes it (NULL: the address's
/// options, else the library's defaults). To open a ring that is there already,
/// shmring_open.
///
/// "create:NAME" replaces a ring of that name whose consumer is gone (its process
/// was killed or crashed); a ring whose consumer is alive, or a file of that name
/// that is no ring, is left alone: SHMRING_ERR_EXISTS, whose message says which.
/// "create:NAME,stale=refuse" refuses a stale ring too (SHMRING_ERR_EXISTS). A named
/// ring is removed when its creator's handle is closed, unless
/// shmring_segment_persist() was called. Hand a memfd ring to producers by its
/// descriptors (shmring_segment_descriptors) or on a socket (shmring_listen).
///
/// The sizes go in one place: `cfg`, or the text's options (capacity=SIZE,
/// max_record=SIZE, log_entries=N, max_producers=N, eventfd, huge_pages; see
/// shmring_open), not both. SHMRING_ERR_INVALID_ARGUMENT: `address` reaches an
/// existing ring (no "create:" or "memfd:"), or both give sizes. Bad text is
/// SHMRING_ERR_CONFIG, and so are sizes out of the library's limits; each message
/// names what is wrong.
///
/// ```c
/// shmring_config cfg;
/// shmring_config_init(&cfg);
/// cfg.capacity = 64u << 20;
/// shmring_segment *seg = NULL;
/// if (shmring_create("create:cam0", &cfg, &seg) != SHMRING_OK)
///     fprintf(stderr, "%s\n", shmring_last_error());
/// ```
#[no_mangle]
pub unsafe extern "C" fn shmring_create(
    address: *const c_char,
    cfg: *const shmring_config,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_create", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let text = c_str(address, "address")?;
        // Not `parse_taking`: a creating address names no descriptor, and one that
        // names some is refused below with the caller's descriptors untouched.
        let mut address: Address = text.parse().map_err(core_err)?;
        let (Address::Create { config, .. } | Address::Memfd { config, .. }) = &mut address else {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "ring address {text:?} reaches an existing ring: shmring_create takes \
                 create:NAME or memfd:[LABEL] (shmring_open opens a ring that is there)"
            ));
        };
        if !cfg.is_null() {
            if *config != Config::default() {
                return Err(fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "ring address {text:?} gives the ring's sizes and so does cfg: give \
                     them in one place (cfg NULL, or no size options in the text)"
                ));
            }
            *config = in_ptr(cfg, "cfg")?.to_core();
        }
        let seg = address.open().map_err(core_err)?;
        new_segment(seg, out)
    })
}

pub(crate) fn timeout_of(ms: u32) -> Duration {
    if ms == 0 {
        DEFAULT_CONNECT_TIMEOUT
    } else {
        Duration::from_millis(ms as u64)
    }
}

/// Opens the ring `address` names, writable: then shmring_producer_attach or
/// shmring_consumer_attach as usual. The address is the text every binding and the
/// `shmring` command take:
///   NAME, /NAME, shm:NAME     the named ring /dev/shm/NAME
///   NAME,eventfd=FD           a named ring made with an eventfd, with its
///                             eventfd, descriptor FD of this process
///   unix:PATH (or a path with a '/' after its first character)
///                             the ring a consumer serves on that Unix socket
///                             (shmring_listen): the producer's hello, then the
///                             sealed memfd (and an eventfd ring's eventfd)
///   fd:SEG[,LOCK][,EVENTFD]   descriptors this process holds (inherited or
///                             received), in the order of
///                             shmring_segment_descriptors: no file-system access
///   create:NAME[,OPTION...]   create the named ring, as shmring_create does
///   memfd:[LABEL][,OPTION...] create an anonymous sealed memfd ring
/// OPTIONs (the fields of shmring_config): capacity=SIZE, max_record=SIZE,
/// log_entries=N, max_producers=N, eventfd, huge_pages (SIZE: bytes, or with K, M
/// or G); "create:" also takes stale=refuse. To size a new ring from a
/// shmring_config, shmring_create. Bad text is SHMRING_ERR_CONFIG, its message
/// naming what is wrong. `timeout_ms` bounds each step of a socket's hand-off (0:
/// the library's default); a socket's errors: SHMRING_ERR_NOT_FOUND (no socket
/// there), SHMRING_ERR_NO_CONSUMER (a stale socket), SHMRING_ERR_REFUSED (the
/// message names the rule), SHMRING_TIMEOUT, SHMRING_ERR_HANDOFF.
///
/// OWNERSHIP: the library takes over every descriptor an "fd:" or "eventfd="
/// address names once the text is valid and each is open, whether the call then
/// succeeds or not (otherwise none is taken): do not close them, and do not close
/// any other descriptor of the ring's lock file while producers are attached in
/// this process (that drops its record locks, its liveness signal).
#[no_mangle]
pub unsafe extern "C" fn shmring_open(
    address: *const c_char,
    timeout_ms: u32,
    out: *mut *mut shmring_segment,
) -> shmring_status {
    entry("shmring_open", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let address = c_address(address)?;
        let seg = address
            .open_timeout(timeout_of(timeout_ms))
            .map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// The address text at `address`, parsed by the core; "fd:" descriptors are taken
/// over (the C ABI's rule for descriptors).
pub(crate) fn c_address(address: *const c_char) -> Res<Address> {
    let text = c_str(address, "address")?;
    // SAFETY: the C ABI documents that the library takes over the descriptors an
    // "fd:" address names (shmring_open).
    unsafe { Address::parse_taking(text) }.map_err(core_err)
}

/// The ring's descriptors, in the order a producer in another process names them
/// in its address ("fd:SEG[,LOCK][,EVENTFD]", shmring_open): up to `cap` are written to `out`, their number to
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
/// segment: do not close it; dup() it to hand it on (shmring_tap_open with "fd:N"
/// takes ownership of what it is given, and needs a memfd ring's: a tap opens a
/// named ring by name).
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
