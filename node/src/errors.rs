//! JavaScript exceptions with stable `code`s. [`code_of`] is the one mapping from
//! the core's error variants to codes; the message is the core's `Display` text.

use napi::{sys, Env, JsUnknown, NapiValue};

/// The stable `code` of a core error.
pub fn code_of(e: &shmring::Error) -> &'static str {
    use shmring::Error as E;
    // No wildcard: a new core variant must get a code here before this compiles.
    match e {
        E::Os { .. } => "SHMRING_OS",
        E::Config(_) => "SHMRING_CONFIG",
        E::Exists { .. } => "SHMRING_EXISTS",
        E::NotFound(_) => "SHMRING_NOT_FOUND",
        E::LayoutMismatch { .. } => "SHMRING_LAYOUT_MISMATCH",
        E::Unsealed(_) => "SHMRING_UNSEALED",
        E::Full { .. } => "SHMRING_FULL",
        E::Timeout { .. } => "SHMRING_TIMEOUT",
        E::TooLarge { .. } => "SHMRING_TOO_LARGE",
        E::NoSlot { .. } => "SHMRING_NO_SLOT",
        E::ConsumerBusy(_) => "SHMRING_CONSUMER_BUSY",
        E::NoConsumer(_) => "SHMRING_NO_CONSUMER",
        E::Corrupt { .. } => "SHMRING_CORRUPT",
        E::Truncated(_) => "SHMRING_TRUNCATED",
        E::Abandoned { .. } => "SHMRING_ABANDONED",
        E::TooManyHeld { .. } => "SHMRING_TOO_MANY_HELD",
        E::NotHeld { .. } => "SHMRING_NOT_HELD",
        E::Closed(_) => CLOSED,
        E::ReservationOpen(_) => "SHMRING_RESERVATION_OPEN",
        E::NoReservation(_) => "SHMRING_NO_RESERVATION",
        E::EventfdRequired(_) => "SHMRING_EVENTFD_REQUIRED",
        E::Descriptors { .. } => "SHMRING_DESCRIPTORS",
        E::Refused { .. } => "SHMRING_REFUSED",
        E::Handoff { .. } => "SHMRING_HANDOFF",
        E::Detached { .. } => "SHMRING_DETACHED",
        E::NoTetherLine { .. } => "SHMRING_NO_TETHER_LINE",
        E::NoSpace { .. } => "SHMRING_NO_SPACE",
    }
}

/// Errors of the binding itself (arguments, object state), not of the core.
pub const INVALID_ARG: &str = "SHMRING_INVALID_ARG";
pub const RELEASED: &str = "SHMRING_RELEASED";
pub const CLOSED: &str = "SHMRING_CLOSED";

/// A JS `Error` with `code` and `message`, ready to be thrown by napi-rs.
pub fn error(env: Env, code: &str, msg: &str) -> napi::Error {
    let mut c = std::ptr::null_mut();
    let mut m = std::ptr::null_mut();
    let mut out = std::ptr::null_mut();
    // SAFETY: env is the live environment of the current call; the strings are
    // valid UTF-8 with explicit lengths; the out-pointers are local.
    let ok = unsafe {
        sys::napi_create_string_utf8(env.raw(), c_str(code), code.len(), &mut c)
            == sys::Status::napi_ok
            && sys::napi_create_string_utf8(env.raw(), c_str(msg), msg.len(), &mut m)
                == sys::Status::napi_ok
            && sys::napi_create_error(env.raw(), c, m, &mut out) == sys::Status::napi_ok
    };
    if !ok {
        return napi::Error::from_reason(format!("{code}: {msg}"));
    }
    // SAFETY: `out` is a JS value just created in this environment.
    let v = unsafe { JsUnknown::from_raw_unchecked(env.raw(), out) };
    napi::Error::from(v)
}

fn c_str(s: &str) -> *const std::ffi::c_char {
    s.as_ptr().cast()
}

/// The core error as a JS exception.
pub fn core(env: Env, e: shmring::Error) -> napi::Error {
    error(env, code_of(&e), &e.to_string())
}

/// `?`-friendly conversion of core results.
pub trait OrThrow<T> {
    fn or_throw(self, env: Env) -> napi::Result<T>;
}

impl<T> OrThrow<T> for shmring::Result<T> {
    fn or_throw(self, env: Env) -> napi::Result<T> {
        self.map_err(|e| core(env, e))
    }
}

/// A duration in milliseconds (`f64`, non-negative).
pub fn millis(env: Env, v: f64, what: &str) -> napi::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(v / 1000.0).map_err(|_| {
        error(
            env,
            INVALID_ARG,
            &format!("{what} must be a non-negative number of milliseconds, got {v}"),
        )
    })
}
