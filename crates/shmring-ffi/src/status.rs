//! Status codes, the thread-local error message, and the entry-point wrapper
//! every function runs under (panics caught, the function named in messages).

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_char, CStr};
use std::fmt::{self, Write as _};
use std::panic::{catch_unwind, AssertUnwindSafe};

use shmring::Error;

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
    /// This tethered consumer was expelled by the ring's consumer (it stopped
    /// releasing frames for too long, or another process wrote its line; the
    /// message says which); attach again.
    SHMRING_ERR_DETACHED = -26,
    /// Every tethered-consumer line of the ring is taken.
    SHMRING_ERR_NO_TETHER_LINE = -27,
    /// The caller's buffer is smaller than the record (the length needed is
    /// reported; the record is kept for the next call).
    SHMRING_ERR_BUFFER_TOO_SMALL = -28,
    /// The descriptors given are not the ring's: a memfd ring's lock file is
    /// missing (producers need every descriptor of shmring_segment_descriptors, in
    /// its order), one is of the wrong kind, or there are too many.
    SHMRING_ERR_DESCRIPTORS = -29,
    /// There is no room for the ring's memory: `/dev/shm` (a named ring) or the
    /// creating process's memory (a memfd ring) is smaller than the ring. The
    /// message says the size needed, the room free and how to make more. A ring
    /// reserves its memory when it is created, so this comes from the call that
    /// creates it.
    SHMRING_ERR_NO_SPACE = -30,
}

use shmring_status::*;

pub(crate) fn status_of(e: &Error) -> shmring_status {
    match e {
        Error::Os { .. } => SHMRING_ERR_OS,
        Error::Config(_) => SHMRING_ERR_CONFIG,
        Error::Exists { .. } => SHMRING_ERR_EXISTS,
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
        Error::Descriptors { .. } => SHMRING_ERR_DESCRIPTORS,
        Error::ReservationOpen(_) | Error::NoReservation(_) | Error::Closed(_) => SHMRING_ERR_STATE,
        Error::Refused { .. } => SHMRING_ERR_REFUSED,
        Error::Handoff { .. } => SHMRING_ERR_HANDOFF,
        Error::Detached { .. } => SHMRING_ERR_DETACHED,
        Error::NoTetherLine { .. } => SHMRING_ERR_NO_TETHER_LINE,
        Error::NoSpace { .. } => SHMRING_ERR_NO_SPACE,
    }
}

/// Size of the thread-local error buffer (messages are truncated to fit).
pub(crate) const ERR_CAP: usize = 512;

thread_local! {
    // Const-initialised and without a destructor: first use allocates nothing and
    // registers nothing.
    static LAST_ERROR: UnsafeCell<[u8; ERR_CAP]> = const { UnsafeCell::new([0; ERR_CAP]) };
    static CURRENT_FN: Cell<&'static str> = const { Cell::new("shmring") };
}

/// Writes into a fixed buffer, truncating at a character boundary.
pub(crate) struct FixedWriter<'a> {
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

pub(crate) fn set_error(args: fmt::Arguments<'_>) {
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
pub(crate) struct Fail(shmring_status);

pub(crate) fn fail(status: shmring_status, args: fmt::Arguments<'_>) -> Fail {
    set_error(args);
    Fail(status)
}

macro_rules! fail {
    ($status:expr, $($arg:tt)*) => { $crate::status::fail($status, format_args!($($arg)*)) };
}

pub(crate) fn core_err(e: Error) -> Fail {
    let st = status_of(&e);
    set_error(format_args!("{e}"));
    Fail(st)
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

/// Runs an entry point: records its name for messages, catches panics.
pub(crate) fn entry(name: &'static str, f: impl FnOnce() -> Res<shmring_status>) -> shmring_status {
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

/// Touches this thread's error buffer (a first use allocates nothing, but do it
/// before a sandbox is entered all the same).
pub(crate) fn touch_error_buffer() {
    LAST_ERROR.with(|b| b.get());
}

pub(crate) fn ok() -> Res<shmring_status> {
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
        -26 => c"SHMRING_ERR_DETACHED",
        -27 => c"SHMRING_ERR_NO_TETHER_LINE",
        -28 => c"SHMRING_ERR_BUFFER_TOO_SMALL",
        -29 => c"SHMRING_ERR_DESCRIPTORS",
        -30 => c"SHMRING_ERR_NO_SPACE",
        _ => c"(unknown status)",
    };
    s.as_ptr()
}

/// The library version (the workspace's, e.g. "0.2.0"). Static; never freed.
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
