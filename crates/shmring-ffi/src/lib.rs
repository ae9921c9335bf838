//! C ABI for shmring (see `include/shmring.h`, generated from this file by cbindgen).
//!
//! Thin by design: every function validates its arguments, forwards to the core
//! crate, and turns the result into a [`shmring_status`]. Rules that hold for every
//! entry point:
//!
//! * No Rust panic crosses the boundary: each body runs under `catch_unwind` and a
//!   panic becomes [`shmring_status::SHMRING_ERR_PANIC`].
//! * Null pointers and stale or foreign handles are errors, not crashes: handles are
//!   heap objects whose addresses are kept in a registry, checked (and leased) before
//!   use, so a closed handle is never dereferenced.
//! * Error messages go to a fixed-size thread-local buffer (no allocation), read with
//!   [`shmring_last_error`].
//! * The producer's hot path (reserve, commit, abort, send) allocates nothing and
//!   makes no system call on success except the wake-ups and waits documented in
//!   `docs/SANDBOX.md`.

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // the safety contract of every function is in shmring.h

use std::cell::{Cell, UnsafeCell};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt::{self, Write as _};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use shmring::media::{Format, MediaHeader, MEDIA_HEADER_SIZE, MEDIA_MAGIC, MEDIA_VERSION};
use shmring::{Config, Consumer, ConsumerOptions, Error, FullPolicy, Meta, Producer, Segment};

// ---------------------------------------------------------------------------
// Status codes and errors
// ---------------------------------------------------------------------------

/// What every function returns. `SHMRING_OK` (0) is success; `SHMRING_TIMEOUT` (1)
/// means a wait ended without result (not a failure of the ring); negative values
/// are errors, described by `shmring_last_error()`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmring_status {
    SHMRING_OK = 0,
    /// A wait timed out: no frame arrived, or no space freed up in time.
    SHMRING_TIMEOUT = 1,
    /// A required pointer argument was NULL.
    SHMRING_ERR_NULL = -1,
    /// The handle is not a live handle of the expected type (closed, never created,
    /// or of another type).
    SHMRING_ERR_BAD_HANDLE = -2,
    /// An argument is out of range (bad descriptor, bad format, non-UTF-8 name...).
    SHMRING_ERR_INVALID_ARGUMENT = -3,
    /// The call does not fit the handle's state (a reservation is already open,
    /// none is open, ...).
    SHMRING_ERR_STATE = -4,
    /// The handle is being used by another thread right now (producers and
    /// consumers are single-threaded), or is still in use at close.
    SHMRING_ERR_BUSY = -5,
    /// A system call failed.
    SHMRING_ERR_OS = -6,
    /// The ring configuration is invalid.
    SHMRING_ERR_CONFIG = -7,
    /// A named segment already exists.
    SHMRING_ERR_EXISTS = -8,
    /// A named segment does not exist.
    SHMRING_ERR_NOT_FOUND = -9,
    /// The segment is not a shmring segment of this layout version.
    SHMRING_ERR_LAYOUT_MISMATCH = -10,
    /// A memfd is not sealed against shrinking and growing.
    SHMRING_ERR_UNSEALED = -11,
    /// The ring is full and the producer does not wait; the drop is counted.
    SHMRING_ERR_FULL = -12,
    /// The record exceeds the ring's max_record.
    SHMRING_ERR_TOO_LARGE = -13,
    /// Every producer slot is taken.
    SHMRING_ERR_NO_SLOT = -14,
    /// Another consumer is attached and alive.
    SHMRING_ERR_CONSUMER_BUSY = -15,
    /// A producer waited for space and no live consumer is attached.
    SHMRING_ERR_NO_CONSUMER = -16,
    /// Shared memory holds something no honest peer writes. The consumer resets the
    /// ring by itself (unless `manual_reset` is set) and only reports this when it
    /// cannot: frames held from before an earlier reset are still out. Also: a peer
    /// truncated a named segment, whose mapping now reads zeros (create a new one).
    SHMRING_ERR_CORRUPT = -17,
    /// The producer's claim was taken from it (judged dead, or the ring was reset).
    SHMRING_ERR_ABANDONED = -18,
    /// The consumer holds as many frames as the ring tracks; release some.
    SHMRING_ERR_TOO_MANY_HELD = -19,
    /// The frame is not held by this consumer (released twice, or foreign).
    SHMRING_ERR_NOT_HELD = -20,
    /// The ring uses eventfd wake-ups: attach with its eventfd.
    SHMRING_ERR_EVENTFD_REQUIRED = -21,
    /// A media header is malformed, or does not fit its payload.
    SHMRING_ERR_MEDIA = -22,
    /// An internal error (a bug in shmring): the call did nothing harmful.
    SHMRING_ERR_PANIC = -23,
    /// A consumer serving its ring on a socket refused this peer; the message names
    /// the rule (peer-credentials, protocol-version, role, ...).
    SHMRING_ERR_REFUSED = -24,
    /// The hand-off over a socket broke (closed early, not a shmring socket...).
    SHMRING_ERR_HANDOFF = -25,
}

use shmring_status::*;

fn status_of(e: &Error) -> shmring_status {
    match e {
        Error::Os { .. } => SHMRING_ERR_OS,
        Error::Config(_) => SHMRING_ERR_CONFIG,
        Error::Exists(_) => SHMRING_ERR_EXISTS,
        Error::NotFound(_) => SHMRING_ERR_NOT_FOUND,
        Error::LayoutMismatch { .. } => SHMRING_ERR_LAYOUT_MISMATCH,
        Error::Unsealed(_) => SHMRING_ERR_UNSEALED,
        Error::Full { .. } => SHMRING_ERR_FULL,
        Error::Timeout { .. } => SHMRING_TIMEOUT,
        Error::TooLarge { .. } => SHMRING_ERR_TOO_LARGE,
        Error::NoSlot { .. } => SHMRING_ERR_NO_SLOT,
        Error::ConsumerBusy(_) => SHMRING_ERR_CONSUMER_BUSY,
        Error::NoConsumer(_) => SHMRING_ERR_NO_CONSUMER,
        Error::Corrupt { .. } | Error::Truncated(_) => SHMRING_ERR_CORRUPT,
        Error::Abandoned { .. } => SHMRING_ERR_ABANDONED,
        Error::TooManyHeld { .. } => SHMRING_ERR_TOO_MANY_HELD,
        Error::NotHeld { .. } => SHMRING_ERR_NOT_HELD,
        Error::EventfdRequired(_) => SHMRING_ERR_EVENTFD_REQUIRED,
        Error::ReservationOpen(_) | Error::NoReservation(_) => SHMRING_ERR_STATE,
        Error::Refused { .. } => SHMRING_ERR_REFUSED,
        Error::Handoff { .. } => SHMRING_ERR_HANDOFF,
    }
}

/// Size of the thread-local error buffer (messages are truncated to fit).
const ERR_CAP: usize = 512;

thread_local! {
    // Const-initialised and without a destructor: first use allocates nothing and
    // registers nothing.
    static LAST_ERROR: UnsafeCell<[u8; ERR_CAP]> = const { UnsafeCell::new([0; ERR_CAP]) };
    static CURRENT_FN: Cell<&'static str> = const { Cell::new("shmring") };
}

/// Writes into a fixed buffer, truncating at a character boundary.
struct FixedWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for FixedWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - 1 - self.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

fn set_error(args: fmt::Arguments<'_>) {
    let func = CURRENT_FN.with(|f| f.get());
    LAST_ERROR.with(|b| {
        // SAFETY: the buffer is this thread's; no reference to it outlives this call
        // (C reads it through the pointer from shmring_last_error, on this thread,
        // between calls).
        let buf = unsafe { &mut *b.get() };
        let mut w = FixedWriter { buf, len: 0 };
        let _ = write!(w, "{func}: {args}");
        let end = w.len;
        w.buf[end] = 0;
    });
}

/// A failure whose message is already in the thread-local buffer.
struct Fail(shmring_status);

fn fail(status: shmring_status, args: fmt::Arguments<'_>) -> Fail {
    set_error(args);
    Fail(status)
}

macro_rules! fail {
    ($status:expr, $($arg:tt)*) => { fail($status, format_args!($($arg)*)) };
}

fn core_err(e: Error) -> Fail {
    let st = status_of(&e);
    set_error(format_args!("{e}"));
    Fail(st)
}

type Res<T = ()> = Result<T, Fail>;

/// Runs an entry point: records its name for messages, catches panics.
fn entry(name: &'static str, f: impl FnOnce() -> Res<shmring_status>) -> shmring_status {
    CURRENT_FN.with(|c| c.set(name));
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(s)) => s,
        Ok(Err(Fail(s))) => s,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
                .unwrap_or("unknown panic");
            set_error(format_args!("internal error: {msg}"));
            SHMRING_ERR_PANIC
        }
    }
}

fn ok() -> Res<shmring_status> {
    Ok(SHMRING_OK)
}

/// The message describing the last failure of a shmring call on this thread
/// (never NULL; empty if none failed yet). The text lives in a thread-local buffer:
/// valid until the next failing shmring call on this thread. Do not free it.
#[no_mangle]
pub extern "C" fn shmring_last_error() -> *const c_char {
    LAST_ERROR.with(|b| b.get() as *const c_char)
}

/// A static name for a status code ("SHMRING_ERR_FULL"...). Never NULL, never freed.
#[no_mangle]
pub extern "C" fn shmring_status_name(status: i32) -> *const c_char {
    let s: &'static CStr = match status {
        0 => c"SHMRING_OK",
        1 => c"SHMRING_TIMEOUT",
        -1 => c"SHMRING_ERR_NULL",
        -2 => c"SHMRING_ERR_BAD_HANDLE",
        -3 => c"SHMRING_ERR_INVALID_ARGUMENT",
        -4 => c"SHMRING_ERR_STATE",
        -5 => c"SHMRING_ERR_BUSY",
        -6 => c"SHMRING_ERR_OS",
        -7 => c"SHMRING_ERR_CONFIG",
        -8 => c"SHMRING_ERR_EXISTS",
        -9 => c"SHMRING_ERR_NOT_FOUND",
        -10 => c"SHMRING_ERR_LAYOUT_MISMATCH",
        -11 => c"SHMRING_ERR_UNSEALED",
        -12 => c"SHMRING_ERR_FULL",
        -13 => c"SHMRING_ERR_TOO_LARGE",
        -14 => c"SHMRING_ERR_NO_SLOT",
        -15 => c"SHMRING_ERR_CONSUMER_BUSY",
        -16 => c"SHMRING_ERR_NO_CONSUMER",
        -17 => c"SHMRING_ERR_CORRUPT",
        -18 => c"SHMRING_ERR_ABANDONED",
        -19 => c"SHMRING_ERR_TOO_MANY_HELD",
        -20 => c"SHMRING_ERR_NOT_HELD",
        -21 => c"SHMRING_ERR_EVENTFD_REQUIRED",
        -22 => c"SHMRING_ERR_MEDIA",
        -23 => c"SHMRING_ERR_PANIC",
        -24 => c"SHMRING_ERR_REFUSED",
        -25 => c"SHMRING_ERR_HANDOFF",
        _ => c"(unknown status)",
    };
    s.as_ptr()
}

/// The library version ("0.1.0"). Static; never freed.
#[no_mangle]
pub extern "C" fn shmring_version() -> *const c_char {
    static V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    V.as_ptr()
}

/// The shared-memory layout version this library speaks. Segments of another
/// version are refused with SHMRING_ERR_LAYOUT_MISMATCH.
#[no_mangle]
pub extern "C" fn shmring_layout_version() -> u32 {
    shmring::layout::LAYOUT_VERSION
}

/// Nanoseconds of CLOCK_MONOTONIC (the clock record timestamps use by default).
#[no_mangle]
pub extern "C" fn shmring_now_ns() -> u64 {
    shmring::now_ns()
}

// ---------------------------------------------------------------------------
// Handle registry
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Segment,
    Producer,
    Consumer,
    Listener,
    Observer,
}

/// Addresses of live handles. Looked up (read lock, no allocation) on every call;
/// written at create and close only.
static REGISTRY: RwLock<BTreeMap<usize, Kind>> = RwLock::new(BTreeMap::new());

trait Handle {
    const KIND: Kind;
    const TYPE_NAME: &'static str;
    /// Producers and consumers are used by one thread at a time; segments by many.
    const EXCLUSIVE: bool;
    fn users(&self) -> &AtomicU32;
}

/// A handle in use: it cannot be closed until the lease ends.
struct Lease<'a> {
    users: &'a AtomicU32,
    exclusive: bool,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.exclusive {
            self.users.store(0, Ordering::Release);
        } else {
            self.users.fetch_sub(1, Ordering::Release);
        }
    }
}

fn registry_read() -> std::sync::RwLockReadGuard<'static, BTreeMap<usize, Kind>> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

fn registry_write() -> std::sync::RwLockWriteGuard<'static, BTreeMap<usize, Kind>> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

/// Validates `ptr` as a live `T` and leases it for the duration of a call.
fn lease<'a, T: Handle>(ptr: *const T) -> Res<(&'a T, Lease<'a>)> {
    if ptr.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{} handle is NULL", T::TYPE_NAME));
    }
    let reg = registry_read();
    if reg.get(&(ptr as usize)) != Some(&T::KIND) {
        return Err(fail!(
            SHMRING_ERR_BAD_HANDLE,
            "{ptr:p} is not a live {} handle (closed, never created, or another type)",
            T::TYPE_NAME
        ));
    }
    // SAFETY: registered addresses point to live, boxed handles; removal happens
    // under the write lock and only when no lease is held, and we hold the read lock.
    let h: &'a T = unsafe { &*ptr };
    if T::EXCLUSIVE {
        if h.users()
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(fail!(
                SHMRING_ERR_BUSY,
                "{} {ptr:p} is being used by another thread (one thread at a time)",
                T::TYPE_NAME
            ));
        }
    } else {
        h.users().fetch_add(1, Ordering::Acquire);
    }
    drop(reg);
    Ok((
        h,
        Lease {
            users: h.users(),
            exclusive: T::EXCLUSIVE,
        },
    ))
}

fn register<T: Handle>(b: Box<T>) -> *mut T {
    let p = Box::into_raw(b);
    registry_write().insert(p as usize, T::KIND);
    p
}

/// Unregisters and frees a handle. NULL is a no-op (returns OK).
fn close<T: Handle>(ptr: *mut T) -> Res<shmring_status> {
    if ptr.is_null() {
        return ok();
    }
    let mut reg = registry_write();
    if reg.get(&(ptr as usize)) != Some(&T::KIND) {
        return Err(fail!(
            SHMRING_ERR_BAD_HANDLE,
            "{ptr:p} is not a live {} handle (closed twice, never created, or another type)",
            T::TYPE_NAME
        ));
    }
    // SAFETY: registered, so live; we hold the write lock so no lease can start.
    let busy = unsafe { &*ptr }.users().load(Ordering::Acquire);
    if busy != 0 {
        return Err(fail!(
            SHMRING_ERR_BUSY,
            "{} {ptr:p} is in use by another thread; close it after that call returns",
            T::TYPE_NAME
        ));
    }
    reg.remove(&(ptr as usize));
    drop(reg);
    // SAFETY: created by Box::into_raw in `register`, now unreachable for others.
    drop(unsafe { Box::from_raw(ptr) });
    ok()
}

fn out_ptr<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: the caller promises a valid, writable T (documented in the header);
    // we checked NULL.
    Ok(unsafe { &mut *p })
}

fn in_ptr<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: as in out_ptr.
    Ok(unsafe { &*p })
}

fn c_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail!(SHMRING_ERR_INVALID_ARGUMENT, "{what} is not valid UTF-8"))
}

/// Takes ownership of a descriptor after checking it is open.
fn own_fd(fd: c_int, what: &str) -> Res<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(fail!(
            SHMRING_ERR_INVALID_ARGUMENT,
            "{what} {fd} is not an open file descriptor"
        ));
    }
    // SAFETY: open (checked), and the caller hands its ownership to us (documented).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

// ---------------------------------------------------------------------------
// Plain structs
// ---------------------------------------------------------------------------

/// How to size a ring. Initialise with shmring_config_init(), then change fields.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_config {
    /// Data ring bytes: a power of two, 64 KiB to 2 GiB (default 64 MiB).
    pub capacity: u64,
    /// Largest payload; 0: capacity / 4. At most capacity / 2 - 64.
    pub max_record: u64,
    /// Records in flight at once; 0: capacity / 4096 clamped to 64..65536.
    pub log_entries: u32,
    /// Producer slots, 1..256 (default 64).
    pub max_producers: u32,
    /// Non-zero: producers wake the consumer through an eventfd (for epoll).
    pub eventfd: u32,
    /// Zero.
    pub reserved: u32,
}

impl shmring_config {
    fn to_core(self) -> Config {
        Config {
            capacity: self.capacity,
            max_record: (self.max_record != 0).then_some(self.max_record),
            log_entries: (self.log_entries != 0).then_some(self.log_entries),
            max_producers: self.max_producers,
            eventfd: self.eventfd != 0,
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

/// A record's metadata, stored in its header.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_meta {
    /// Which stream the record belongs to.
    pub stream: u32,
    /// What it is: SHMRING_KIND_RAW, SHMRING_KIND_VIDEO, SHMRING_KIND_AUDIO or your own.
    pub kind: u32,
    /// Capture time in ns (CLOCK_MONOTONIC by convention: shmring_now_ns()).
    pub timestamp_ns: u64,
    /// Free for the application.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

impl shmring_meta {
    fn to_core(self) -> Meta {
        Meta {
            stream: self.stream,
            kind: self.kind,
            timestamp_ns: self.timestamp_ns,
            flags: self.flags,
        }
    }
    fn from_core(m: Meta) -> Self {
        shmring_meta {
            stream: m.stream,
            kind: m.kind,
            timestamp_ns: m.timestamp_ns,
            flags: m.flags,
            reserved: 0,
        }
    }
}

/// Space reserved in the ring: write `len` bytes at `data`, then commit or abort.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_reservation {
    /// The payload, in shared memory (64-byte aligned). Valid until the
    /// reservation is committed or aborted, or the producer is closed.
    pub data: *mut u8,
    pub len: usize,
    /// The claim's sequence number (for diagnostics).
    pub seq: u64,
}

/// A frame handed out by a consumer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_frame {
    /// The payload, in shared memory (64-byte aligned, read-only). Valid until the
    /// frame is released or its consumer is closed. A hostile producer could still
    /// change these bytes: copy what you validate.
    pub data: *const u8,
    pub len: usize,
    pub meta: shmring_meta,
    /// Identifies the frame for release.
    pub seq: u64,
    /// Identifies the consumer that handed it out (checked at release).
    pub owner: u64,
}

/// Counters of a ring (a snapshot). Statistics only: a peer can falsify them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_stats {
    pub capacity: u64,
    pub records_committed: u64,
    pub bytes_committed: u64,
    pub records_aborted: u64,
    pub drops_full: u64,
    pub producer_waits: u64,
    pub producer_wakes: u64,
    pub records_consumed: u64,
    pub bytes_consumed: u64,
    pub abandoned: u64,
    pub skipped_aborted: u64,
    pub corruption: u64,
    pub consumer_waits: u64,
    pub consumer_wakes: u64,
    pub peak_occupancy: u64,
    pub occupancy: u64,
    pub records_in_flight: u64,
    pub resets: u64,
    pub reaped_slots: u64,
    pub producers: u32,
    /// Non-zero if a consumer is attached.
    pub consumer_attached: u32,
}

/// Consumer tuning. Initialise with shmring_consumer_options_init().
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_consumer_options {
    /// How often a pending claim's producer is checked for liveness (default 50 ms).
    pub liveness_interval_ns: u64,
    /// Polls to spin before sleeping in a blocking wait (default 64).
    pub spin: u32,
    /// Non-zero: report SHMRING_ERR_CORRUPT and wait for shmring_consumer_reset()
    /// instead of resetting the ring by itself (default 0).
    pub manual_reset: u32,
    /// Deliver committed records behind a claim pending this long (0, the default:
    /// always in claim order). Each producer's records stay in its commit order.
    pub overtake_after_ns: u64,
}

/// What a producer does when the ring is full.
pub const SHMRING_POLICY_FAIL: u32 = 0;
/// Wait for space up to the policy's timeout.
pub const SHMRING_POLICY_BLOCK: u32 = 1;

/// Meta.kind: opaque bytes.
pub const SHMRING_KIND_RAW: u32 = 0;
/// Meta.kind: a media header, then video planes.
pub const SHMRING_KIND_VIDEO: u32 = 1;
/// Meta.kind: a media header, then interleaved samples.
pub const SHMRING_KIND_AUDIO: u32 = 2;

/// Media format: planar YUV 4:2:0 (Y, U, V).
pub const SHMRING_FORMAT_I420: u32 = 1;
/// Media format: Y plane, then interleaved UV.
pub const SHMRING_FORMAT_NV12: u32 = 2;
/// Media format: packed 8-bit RGBA.
pub const SHMRING_FORMAT_RGBA: u32 = 3;
/// Media format: interleaved signed 16-bit PCM.
pub const SHMRING_FORMAT_PCM_S16: u32 = 16;
/// Media format: interleaved 32-bit float PCM.
pub const SHMRING_FORMAT_PCM_F32: u32 = 17;

/// "SMH1" little-endian.
pub const SHMRING_MEDIA_MAGIC: u32 = 0x3148_4d53;
pub const SHMRING_MEDIA_VERSION: u16 = 1;
pub const SHMRING_MEDIA_HEADER_SIZE: usize = 128;

// The header's literals must be the core's values.
const _: () = {
    use shmring::media::kind;
    assert!(SHMRING_KIND_RAW == kind::RAW);
    assert!(SHMRING_KIND_VIDEO == kind::VIDEO);
    assert!(SHMRING_KIND_AUDIO == kind::AUDIO);
    assert!(SHMRING_FORMAT_I420 == Format::I420 as u32);
    assert!(SHMRING_FORMAT_NV12 == Format::Nv12 as u32);
    assert!(SHMRING_FORMAT_RGBA == Format::Rgba as u32);
    assert!(SHMRING_FORMAT_PCM_S16 == Format::PcmS16 as u32);
    assert!(SHMRING_FORMAT_PCM_F32 == Format::PcmF32 as u32);
    assert!(SHMRING_MEDIA_MAGIC == MEDIA_MAGIC);
    assert!(SHMRING_MEDIA_VERSION == MEDIA_VERSION);
    assert!(SHMRING_MEDIA_HEADER_SIZE == MEDIA_HEADER_SIZE);
};

/// Pass as a timeout to wait forever.
pub const SHMRING_WAIT_FOREVER: i64 = -1;

/// The media header at the start of a video/audio payload, byte for byte
/// (little-endian, 128 bytes; see crates/shmring/src/media.rs). Build and parse it
/// with the shmring_media_* functions, which validate it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct shmring_media_header {
    /// SHMRING_MEDIA_MAGIC.
    pub magic: u32,
    /// SHMRING_MEDIA_VERSION.
    pub version: u16,
    /// SHMRING_MEDIA_HEADER_SIZE.
    pub header_size: u16,
    /// SHMRING_FORMAT_*.
    pub format: u32,
    pub width: u32,
    pub height: u32,
    pub sample_rate: u32,
    pub channels: u32,
    /// Per channel.
    pub samples: u32,
    pub pts_ns: u64,
    pub sequence: u64,
    /// Planes used (video 1..3, audio 1).
    pub planes: u32,
    pub reserved0: u32,
    /// Bytes per row (audio: bytes per sample frame).
    pub stride: [u32; 4],
    /// Byte offset of each plane from the payload start.
    pub offset: [u32; 4],
    /// Byte size of each plane.
    pub size: [u32; 4],
    pub reserved: [u8; 24],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<shmring_media_header>() == MEDIA_HEADER_SIZE);
    assert!(offset_of!(shmring_media_header, format) == 8);
    assert!(offset_of!(shmring_media_header, pts_ns) == 32);
    assert!(offset_of!(shmring_media_header, planes) == 48);
    assert!(offset_of!(shmring_media_header, stride) == 56);
    assert!(offset_of!(shmring_media_header, offset) == 72);
    assert!(offset_of!(shmring_media_header, size) == 88);
    assert!(offset_of!(shmring_media_header, reserved) == 104);
};

impl shmring_media_header {
    fn from_core(h: &MediaHeader) -> Self {
        shmring_media_header {
            magic: MEDIA_MAGIC,
            version: MEDIA_VERSION,
            header_size: MEDIA_HEADER_SIZE as u16,
            format: h.format as u32,
            width: h.width,
            height: h.height,
            sample_rate: h.sample_rate,
            channels: h.channels,
            samples: h.samples,
            pts_ns: h.pts_ns,
            sequence: h.sequence,
            planes: h.planes,
            reserved0: 0,
            stride: h.stride,
            offset: h.offset,
            size: h.size,
            reserved: [0; 24],
        }
    }

    fn to_core(self) -> Res<MediaHeader> {
        let format = Format::from_u32(self.format)
            .ok_or_else(|| fail!(SHMRING_ERR_MEDIA, "unknown media format {}", self.format))?;
        if self.planes == 0 || self.planes > 4 {
            return Err(fail!(
                SHMRING_ERR_MEDIA,
                "{} planes, expected 1 to 4",
                self.planes
            ));
        }
        Ok(MediaHeader {
            format,
            width: self.width,
            height: self.height,
            sample_rate: self.sample_rate,
            channels: self.channels,
            samples: self.samples,
            pts_ns: self.pts_ns,
            sequence: self.sequence,
            planes: self.planes,
            stride: self.stride,
            offset: self.offset,
            size: self.size,
        })
    }
}

// ---------------------------------------------------------------------------
// Segments
// ---------------------------------------------------------------------------

/// An attached shared-memory segment (opaque).
pub struct shmring_segment {
    users: AtomicU32,
    seg: Arc<Segment>,
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

fn new_segment(seg: Arc<Segment>, out: &mut *mut shmring_segment) -> Res<shmring_status> {
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
            reserved: 0,
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
        let seg = Segment::create_memfd(name, &cfg).map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Creates a named ring (/dev/shm/NAME, mode 0600). It is removed when the handle
/// is closed unless shmring_segment_persist() was called.
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
        let seg = Segment::create_named(name, &cfg).map_err(core_err)?;
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
        let seg = if eventfd >= 0 {
            let efd = own_fd(eventfd, "eventfd")?;
            Segment::open_named_with_eventfd(name, efd)
        } else {
            Segment::open_named(name)
        }
        .map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Attaches to a ring from a descriptor (inherited or received): the sandbox-friendly
/// way, no file-system access. `eventfd` is the ring's eventfd, or -1.
///
/// OWNERSHIP: the library takes ownership of `fd` (and of `eventfd` if >= 0) as soon
/// as they are checked to be open, whether the call succeeds or not: do not close
/// them, and do not close any other descriptor of the same segment while producers
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
        let fd = own_fd(fd, "fd")?;
        let efd = if eventfd >= 0 {
            Some(own_fd(eventfd, "eventfd")?)
        } else {
            None
        };
        let seg = Segment::from_fds(fd, efd).map_err(core_err)?;
        new_segment(seg, out)
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
        let mut fds = shmring::recv_fds(s)
            .map_err(|e| {
                fail!(
                    SHMRING_ERR_OS,
                    "receiving descriptors on socket {sock}: {e}"
                )
            })?
            .into_iter();
        let fd = fds.next().ok_or_else(|| {
            fail!(
                SHMRING_ERR_OS,
                "socket {sock}: message carried no descriptors"
            )
        })?;
        let seg = Segment::from_fds(fd, fds.next()).map_err(core_err)?;
        new_segment(seg, out)
    })
}

/// Sends the ring's descriptor (and eventfd) over a connected Unix socket.
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
        let mut fds = vec![h.seg.fd()];
        fds.extend(h.seg.eventfd());
        shmring::send_fds(s, &fds)
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

fn c_geometry(g: &shmring::layout::Geometry) -> shmring_geometry {
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

fn c_stats(s: &shmring::Stats) -> shmring_stats {
    {
        shmring_stats {
            capacity: s.capacity,
            records_committed: s.records_committed,
            bytes_committed: s.bytes_committed,
            records_aborted: s.records_aborted,
            drops_full: s.drops_full,
            producer_waits: s.producer_waits,
            producer_wakes: s.producer_wakes,
            records_consumed: s.records_consumed,
            bytes_consumed: s.bytes_consumed,
            abandoned: s.abandoned,
            skipped_aborted: s.skipped_aborted,
            corruption: s.corruption,
            consumer_waits: s.consumer_waits,
            consumer_wakes: s.consumer_wakes,
            peak_occupancy: s.peak_occupancy,
            occupancy: s.occupancy,
            records_in_flight: s.records_in_flight,
            resets: s.resets,
            reaped_slots: s.reaped_slots,
            producers: s.producers,
            consumer_attached: s.consumer_attached as u32,
        }
    }
}

// ---------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------

/// Runs, at attach time, the one-time initialisations the hot path would otherwise
/// do on first use: rustix finds the vDSO's clock_gettime through the auxiliary
/// vector on its first clock read (prctl(PR_GET_AUXV), falling back to reading
/// /proc/self/auxv), which a sandbox entered after attach forbids. It also touches
/// this thread's error buffer.
fn prime_lazy_state() {
    let _ = shmring::now_ns();
    let _ = std::time::Instant::now();
    LAST_ERROR.with(|b| b.get());
}

struct ProducerState {
    producer: Producer,
    /// Bytes of the reservation open in `producer` (from `reserve_raw`), if any.
    reserved: Option<usize>,
}

/// A producer attached to a ring (opaque). One thread at a time.
pub struct shmring_producer {
    users: AtomicU32,
    state: UnsafeCell<ProducerState>,
}

impl Handle for shmring_producer {
    const KIND: Kind = Kind::Producer;
    const TYPE_NAME: &'static str = "shmring_producer";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

impl shmring_producer {
    /// SAFETY: call only while holding the exclusive lease.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &mut ProducerState {
        // SAFETY: the exclusive lease makes us the only user.
        unsafe { &mut *self.state.get() }
    }
}

/// Attaches a producer to a ring (takes one producer slot, held until close). May
/// allocate; nothing after it on the producer path does.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_attach(
    seg: *const shmring_segment,
    out: *mut *mut shmring_producer,
) -> shmring_status {
    entry("shmring_producer_attach", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let p = Producer::new(h.seg.clone()).map_err(core_err)?;
        prime_lazy_state();
        *out = register(Box::new(shmring_producer {
            users: AtomicU32::new(0),
            state: UnsafeCell::new(ProducerState {
                producer: p,
                reserved: None,
            }),
        }));
        ok()
    })
}

/// Detaches: aborts an open reservation and frees the slot. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_close(p: *mut shmring_producer) -> shmring_status {
    entry("shmring_producer_close", || close(p))
}

/// Sets what reserve() does when the ring is full: SHMRING_POLICY_FAIL (fail at
/// once with SHMRING_ERR_FULL) or SHMRING_POLICY_BLOCK (wait up to `timeout_ns`,
/// then SHMRING_TIMEOUT or SHMRING_ERR_NO_CONSUMER). Default: block 1 s.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_set_policy(
    p: *mut shmring_producer,
    policy: u32,
    timeout_ns: u64,
) -> shmring_status {
    entry("shmring_producer_set_policy", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let pol = match policy {
            SHMRING_POLICY_FAIL => FullPolicy::Fail,
            SHMRING_POLICY_BLOCK => FullPolicy::Block(Duration::from_nanos(timeout_ns)),
            _ => {
                return Err(fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "policy {policy}: expected SHMRING_POLICY_FAIL or SHMRING_POLICY_BLOCK"
                ))
            }
        };
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        if st.producer.has_reservation() {
            return Err(fail!(
                SHMRING_ERR_STATE,
                "a reservation is open: commit or abort it first"
            ));
        }
        st.producer.set_policy(pol);
        ok()
    })
}

/// The producer slot this producer occupies.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_slot(
    p: *const shmring_producer,
    out: *mut u32,
) -> shmring_status {
    entry("shmring_producer_slot", || {
        let (h, _l) = lease(p)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        *out = st.producer.slot();
        ok()
    })
}

fn reserve_impl(
    p: *mut shmring_producer,
    len: usize,
    policy: Option<FullPolicy>,
    out: *mut shmring_reservation,
) -> Res<shmring_status> {
    let (h, _l) = lease(p as *const shmring_producer)?;
    let out = out_ptr(out, "out")?;
    // SAFETY: exclusive lease.
    let st = unsafe { h.state() };
    if st.producer.has_reservation() {
        return Err(fail!(
            SHMRING_ERR_STATE,
            "a reservation is already open on this producer: commit or abort it first"
        ));
    }
    let policy = policy.unwrap_or(st.producer.policy());
    let r = st.producer.reserve_raw(len, policy).map_err(core_err)?;
    st.reserved = Some(r.len);
    *out = shmring_reservation {
        data: r.ptr,
        len: r.len,
        seq: r.seq,
    };
    ok()
}

/// Reserves `len` payload bytes, following the producer's full-ring policy. On
/// SHMRING_OK, `out->data` points at `len` writable bytes in the ring: fill them in
/// place, then call shmring_producer_commit or shmring_producer_abort. One
/// reservation at a time per producer.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_reserve(
    p: *mut shmring_producer,
    len: usize,
    out: *mut shmring_reservation,
) -> shmring_status {
    entry("shmring_producer_reserve", || {
        reserve_impl(p, len, None, out)
    })
}

/// Like shmring_producer_reserve, waiting at most `timeout_ns` for space
/// (0: fail at once with SHMRING_ERR_FULL).
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_reserve_timeout(
    p: *mut shmring_producer,
    len: usize,
    timeout_ns: u64,
    out: *mut shmring_reservation,
) -> shmring_status {
    entry("shmring_producer_reserve_timeout", || {
        let pol = if timeout_ns == 0 {
            FullPolicy::Fail
        } else {
            FullPolicy::Block(Duration::from_nanos(timeout_ns))
        };
        reserve_impl(p, len, Some(pol), out)
    })
}

/// The length of the reservation open on this producer (and forgets it: commit and
/// abort both close it), or SHMRING_ERR_STATE.
fn open_reservation(st: &mut ProducerState) -> Res<usize> {
    match st.reserved.take() {
        Some(len) if st.producer.has_reservation() => Ok(len),
        _ => Err(fail!(
            SHMRING_ERR_STATE,
            "no reservation is open on this producer"
        )),
    }
}

/// Publishes the open reservation with `meta`. The reservation's data pointer is
/// invalid afterwards. SHMRING_ERR_ABANDONED: the claim was taken from us (nothing
/// published).
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_commit(
    p: *mut shmring_producer,
    meta: *const shmring_meta,
) -> shmring_status {
    entry("shmring_producer_commit", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let meta = in_ptr(meta, "meta")?.to_core();
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        let len = open_reservation(st)?;
        st.producer.commit_raw(len, meta).map_err(core_err)?;
        ok()
    })
}

/// Gives the open reservation's space back without publishing anything.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_abort(p: *mut shmring_producer) -> shmring_status {
    entry("shmring_producer_abort", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        open_reservation(st)?;
        st.producer.abort_raw();
        ok()
    })
}

/// Copies `len` bytes into the ring as one record (reserve + copy + commit).
/// `data` may be NULL when `len` is 0.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_send(
    p: *mut shmring_producer,
    data: *const u8,
    len: usize,
    meta: *const shmring_meta,
) -> shmring_status {
    entry("shmring_producer_send", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let meta = in_ptr(meta, "meta")?.to_core();
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            if data.is_null() {
                return Err(fail!(SHMRING_ERR_NULL, "data is NULL"));
            }
            // SAFETY: the caller promises `len` readable bytes at `data`.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        if st.producer.has_reservation() {
            return Err(fail!(
                SHMRING_ERR_STATE,
                "a reservation is open on this producer: commit or abort it first"
            ));
        }
        st.producer.send(bytes, meta).map_err(core_err)?;
        ok()
    })
}

// ---------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------

static NEXT_CONSUMER_ID: AtomicU64 = AtomicU64::new(1);

/// The consumer of a ring (opaque). One thread at a time.
pub struct shmring_consumer {
    users: AtomicU32,
    id: u64,
    consumer: UnsafeCell<Consumer>,
}

impl Handle for shmring_consumer {
    const KIND: Kind = Kind::Consumer;
    const TYPE_NAME: &'static str = "shmring_consumer";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

impl shmring_consumer {
    /// SAFETY: call only while holding the exclusive lease.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self) -> &mut Consumer {
        // SAFETY: the exclusive lease makes us the only user.
        unsafe { &mut *self.consumer.get() }
    }
}

/// Fills `opts` with the defaults (50 ms liveness checks, 64 spins).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_options_init(
    opts: *mut shmring_consumer_options,
) -> shmring_status {
    entry("shmring_consumer_options_init", || {
        let d = ConsumerOptions::default();
        *out_ptr(opts, "opts")? = shmring_consumer_options {
            liveness_interval_ns: d.liveness_interval.as_nanos() as u64,
            spin: d.spin,
            manual_reset: u32::from(!d.auto_reset),
            overtake_after_ns: d.overtake_after.map_or(0, |t| t.as_nanos() as u64),
        };
        ok()
    })
}

/// Becomes the ring's consumer (taking over from a dead one). `opts` may be NULL
/// for the defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_attach(
    seg: *const shmring_segment,
    opts: *const shmring_consumer_options,
    out: *mut *mut shmring_consumer,
) -> shmring_status {
    entry("shmring_consumer_attach", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let o = if opts.is_null() {
            ConsumerOptions::default()
        } else {
            // SAFETY: non-null; the caller promises a valid struct.
            let o = unsafe { &*opts };
            ConsumerOptions {
                liveness_interval: Duration::from_nanos(o.liveness_interval_ns),
                spin: o.spin,
                auto_reset: o.manual_reset == 0,
                overtake_after: (o.overtake_after_ns != 0)
                    .then(|| Duration::from_nanos(o.overtake_after_ns)),
            }
        };
        let c = Consumer::with_options(h.seg.clone(), o).map_err(core_err)?;
        *out = register(Box::new(shmring_consumer {
            users: AtomicU32::new(0),
            id: NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed),
            consumer: UnsafeCell::new(c),
        }));
        ok()
    })
}

/// Detaches the consumer. Every frame it handed out becomes invalid. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_close(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_close", || close(c))
}

/// The next frame, waiting up to `timeout_ns` (0: do not wait; negative, e.g.
/// SHMRING_WAIT_FOREVER: no limit). SHMRING_OK: `*out` is a frame, valid until
/// shmring_consumer_release (or consumer close). SHMRING_TIMEOUT: none arrived.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_next(
    c: *mut shmring_consumer,
    timeout_ns: i64,
    out: *mut shmring_frame,
) -> shmring_status {
    entry("shmring_consumer_next", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let out = out_ptr(out, "out")?;
        let timeout = (timeout_ns >= 0).then(|| Duration::from_nanos(timeout_ns as u64));
        // SAFETY: exclusive lease.
        let cons = unsafe { h.get() };
        match cons.next_raw(timeout).map_err(core_err)? {
            Some(f) => {
                *out = shmring_frame {
                    data: f.ptr,
                    len: f.len,
                    meta: shmring_meta::from_core(f.meta),
                    seq: f.seq,
                    owner: h.id,
                };
                ok()
            }
            None => {
                set_error(format_args!("no frame within {timeout_ns} ns"));
                Ok(SHMRING_TIMEOUT)
            }
        }
    })
}

/// Releases a frame handed out by this consumer; frames may be released in any
/// order. SHMRING_ERR_NOT_HELD: released already, or handed out by another
/// consumer. The frame's data pointer is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_release(
    c: *mut shmring_consumer,
    frame: *const shmring_frame,
) -> shmring_status {
    entry("shmring_consumer_release", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let f = in_ptr(frame, "frame")?;
        if f.owner != h.id {
            return Err(fail!(
                SHMRING_ERR_NOT_HELD,
                "frame {} was handed out by another consumer (owner {}, this is {})",
                f.seq,
                f.owner,
                h.id
            ));
        }
        // SAFETY: exclusive lease.
        unsafe { h.get() }.release_raw(f.seq).map_err(core_err)?;
        ok()
    })
}

/// Frames handed out and not yet released.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_outstanding(
    c: *mut shmring_consumer,
    out: *mut u64,
) -> shmring_status {
    entry("shmring_consumer_outstanding", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: exclusive lease.
        *out = unsafe { h.get() }.outstanding();
        ok()
    })
}

/// Resets the ring by hand (a consumer does this by itself on corruption unless
/// `manual_reset` is set): forgets every claim in flight. Frames still held stay
/// valid; release them as usual. SHMRING_ERR_CORRUPT while frames held from before
/// an earlier reset are still out.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_reset(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_reset", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        // SAFETY: exclusive lease.
        unsafe { h.get() }.reset().map_err(core_err)?;
        ok()
    })
}

/// `*resets` receives how many times this consumer reset the ring (by itself or
/// through shmring_consumer_reset()); a change means corruption was found and
/// recovered from. If `cause` is not NULL, why the last reset was made is copied
/// into it as a NUL-terminated string, truncated to `cause_len` bytes ("" if none).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_resets(
    c: *const shmring_consumer,
    resets: *mut u64,
    cause: *mut c_char,
    cause_len: usize,
) -> shmring_status {
    entry("shmring_consumer_resets", || {
        let out = out_ptr(resets, "resets")?;
        let (h, _l) = lease(c)?;
        // SAFETY: lease held; `health` reads only.
        let health = unsafe { h.get() }.health();
        *out = health.resets;
        if !cause.is_null() && cause_len > 0 {
            let text = health.last_corruption.unwrap_or("").as_bytes();
            let n = text.len().min(cause_len - 1);
            // SAFETY: the caller promises `cause_len` writable bytes at `cause`; we
            // write n + 1 <= cause_len of them.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), cause.cast::<u8>(), n);
                *cause.add(n) = 0;
            }
        }
        ok()
    })
}

/// Frees the slots of dead producers that hold nothing; `*freed` (may be NULL)
/// receives how many.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_reap(
    c: *mut shmring_consumer,
    freed: *mut u32,
) -> shmring_status {
    entry("shmring_consumer_reap", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        // SAFETY: exclusive lease.
        let n = unsafe { h.get() }.reap();
        if !freed.is_null() {
            // SAFETY: non-null, the caller promises a writable u32.
            unsafe { *freed = n };
        }
        ok()
    })
}

/// For an eventfd ring driven by epoll/poll: announces that the consumer is about to
/// wait. `*ready` non-zero: a frame is already there (do not wait; call next).
/// Otherwise wait for the eventfd, then call shmring_consumer_disarm.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_arm(
    c: *mut shmring_consumer,
    ready: *mut u32,
) -> shmring_status {
    entry("shmring_consumer_arm", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let ready = out_ptr(ready, "ready")?;
        // SAFETY: exclusive lease.
        *ready = unsafe { h.get() }.arm() as u32;
        ok()
    })
}

/// Ends a wait begun with shmring_consumer_arm (clears the flag, drains the eventfd).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_disarm(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_disarm", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        // SAFETY: exclusive lease.
        unsafe { h.get() }.disarm();
        ok()
    })
}

// ---------------------------------------------------------------------------
// Media header
// ---------------------------------------------------------------------------

/// Builds a video header (tight strides, 64-byte-aligned planes after the header)
/// for SHMRING_FORMAT_I420, _NV12 or _RGBA.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_video(
    format: u32,
    width: u32,
    height: u32,
    pts_ns: u64,
    sequence: u64,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_video", || {
        let out = out_ptr(out, "out")?;
        let f = Format::from_u32(format)
            .filter(|f| f.is_video())
            .ok_or_else(|| {
                fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "format {format} is not a video format (I420, NV12, RGBA)"
                )
            })?;
        // Every plane size and offset must fit the header's 32-bit fields.
        let total = width as u64 * 4 * height as u64 + 4 * 64 + MEDIA_HEADER_SIZE as u64;
        if width == 0 || height == 0 || total > u32::MAX as u64 {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "{width}x{height}: dimensions must be non-zero and the frame under 4 GiB"
            ));
        }
        *out = shmring_media_header::from_core(&MediaHeader::video(
            f, width, height, pts_ns, sequence,
        ));
        ok()
    })
}

/// Builds an audio header (interleaved samples right after the header) for
/// SHMRING_FORMAT_PCM_S16 or _PCM_F32; `samples` is per channel.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_audio(
    format: u32,
    sample_rate: u32,
    channels: u32,
    samples: u32,
    pts_ns: u64,
    sequence: u64,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_audio", || {
        let out = out_ptr(out, "out")?;
        let f = Format::from_u32(format)
            .filter(|f| f.is_audio())
            .ok_or_else(|| {
                fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "format {format} is not an audio format (PCM s16, PCM f32)"
                )
            })?;
        let total =
            f.sample_bytes() as u64 * channels as u64 * samples as u64 + MEDIA_HEADER_SIZE as u64;
        if channels == 0 || total > u32::MAX as u64 {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "{channels} channels x {samples} samples: need channels > 0 and under 4 GiB"
            ));
        }
        *out = shmring_media_header::from_core(&MediaHeader::audio(
            f,
            sample_rate,
            channels,
            samples,
            pts_ns,
            sequence,
        ));
        ok()
    })
}

/// Payload bytes a header describes (header plus planes): reserve this many.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_payload_len(
    hdr: *const shmring_media_header,
    out: *mut usize,
) -> shmring_status {
    entry("shmring_media_payload_len", || {
        let h = in_ptr(hdr, "hdr")?.to_core()?;
        *out_ptr(out, "out")? = h.payload_len();
        ok()
    })
}

/// Writes the header's 128 bytes at the start of `payload` (`len` bytes, which must
/// hold every plane the header describes). Allocates nothing.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_write(
    hdr: *const shmring_media_header,
    payload: *mut u8,
    len: usize,
) -> shmring_status {
    entry("shmring_media_write", || {
        let h = in_ptr(hdr, "hdr")?.to_core()?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        // SAFETY: the caller promises `len` writable bytes at `payload`.
        let buf = unsafe { std::slice::from_raw_parts_mut(payload, len) };
        h.write_to(buf)
            .map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))?;
        ok()
    })
}

/// Reads and validates the header at the start of `payload` (`len` bytes; e.g. a
/// frame's data and len): every plane is checked to lie inside the payload. The
/// bytes are read once, so a peer changing them cannot invalidate `*out`.
#[no_mangle]
pub unsafe extern "C" fn shmring_media_parse(
    payload: *const u8,
    len: usize,
    out: *mut shmring_media_header,
) -> shmring_status {
    entry("shmring_media_parse", || {
        let out = out_ptr(out, "out")?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        // SAFETY: the caller promises `len` readable bytes at `payload`.
        let buf = unsafe { std::slice::from_raw_parts(payload, len) };
        let h = MediaHeader::parse(buf).map_err(|e| fail!(SHMRING_ERR_MEDIA, "{e}"))?;
        *out = shmring_media_header::from_core(&h);
        ok()
    })
}

/// Plane `index` of a payload whose header `hdr` was parsed from (`len` bytes):
/// `*data`, `*size` (checked to lie inside the payload).
#[no_mangle]
pub unsafe extern "C" fn shmring_media_plane(
    hdr: *const shmring_media_header,
    payload: *const u8,
    len: usize,
    index: u32,
    data: *mut *const u8,
    size: *mut usize,
) -> shmring_status {
    entry("shmring_media_plane", || {
        let h = in_ptr(hdr, "hdr")?;
        if payload.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "payload is NULL"));
        }
        if index >= h.planes.min(4) {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "plane {index}: the header has {} planes",
                h.planes
            ));
        }
        let (o, s) = (
            h.offset[index as usize] as usize,
            h.size[index as usize] as usize,
        );
        if o + s > len {
            return Err(fail!(
                SHMRING_ERR_MEDIA,
                "plane {index} at {o}..{} lies outside the {len}-byte payload",
                o + s
            ));
        }
        // SAFETY: o + s <= len, inside the caller's payload.
        *out_ptr(data, "data")? = unsafe { payload.add(o) };
        *out_ptr(size, "size")? = s;
        ok()
    })
}

// The secure hand-off (after the macros above, which it uses).
mod handoff;
pub use handoff::*;
