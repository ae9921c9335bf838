//! Node.js bindings for shmring (napi-rs over Node-API): the native add-on behind
//! the `shmring` npm package (`node/index.js` adds the JavaScript around it).
//!
//! The bindings are thin: every ring operation is the core crate's. What lives
//! here is lifetime bookkeeping between JavaScript objects and ring memory:
//!
//! * A frame and every `Uint8Array` view of it share one hold on the record; the
//!   record goes back to the ring when the frame is released (or collected) *and*
//!   no view is left, so a view never sees memory a producer may reuse.
//! * A reservation and its view share one hold on the claim; dropped without a
//!   commit, the claim is aborted. Commit and abort detach the view.
//! * Where V8 refuses external array buffers (its memory cage, as in Electron),
//!   views are copies instead: `zeroCopy` says which.

mod args;
mod consumer;
mod errors;
mod media;
mod producer;
mod uvpoll;
mod views;

use napi::Env;
use napi_derive::napi;

/// Whether views into the ring are zero-copy in this process (false where V8
/// forbids external array buffers, or when `SHMRING_NODE_FORCE_COPY` is set).
#[napi]
pub fn zero_copy(env: Env) -> bool {
    views::detect(env)
}

/// Nanoseconds of CLOCK_MONOTONIC, the clock record timestamps use by default.
#[napi]
pub fn now_ns() -> napi::bindgen_prelude::BigInt {
    shmring::now_ns().into()
}

/// The add-on's version (the workspace's).
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The shared-memory layout version this add-on reads and writes (the core's):
/// processes built from different releases share a ring when it is equal.
#[napi]
pub fn layout_version() -> u32 {
    shmring::layout::LAYOUT_VERSION
}

/// The address of a typed array's first byte in this process (to check that a
/// view is zero-copy: inside `mapping()`).
#[napi]
pub fn address_of(env: Env, view: napi::JsUnknown) -> napi::Result<f64> {
    if view.get_type()? != napi::ValueType::Object || !view.is_typedarray()? {
        return Err(errors::error(
            env,
            errors::INVALID_ARG,
            "addressOf: view must be a typed array",
        ));
    }
    // SAFETY: checked to be a typed array.
    let v = unsafe { view.cast::<napi::JsTypedArray>() }.into_value()?;
    // Node-API's typed array data pointer already includes the byte offset.
    let bytes: &[u8] = v.as_ref();
    Ok(bytes.as_ptr() as usize as f64)
}
