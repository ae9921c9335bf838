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

#[macro_use]
mod status;
mod consumer;
mod handles;
mod media;
mod producer;
mod reader;
mod segment;
mod stats;
mod tap;

// The secure hand-off.
mod handoff;

pub use consumer::*;
pub use handoff::*;
pub use media::*;
pub use producer::*;
pub use reader::*;
pub use segment::*;
pub use stats::*;
pub use status::*;
pub use tap::*;
