//! Python bindings for shmring (built with maturin): the native module
//! `shmring._shmring`, re-exported by the `shmring` Python package.
//!
//! The bindings are thin: every ring operation is the core crate's. What lives
//! here is lifetime bookkeeping between Python objects and ring memory:
//!
//! * A [`consumer::PyFrame`] holds the core's [`shmring::SharedFrame`]. Python views
//!   of its payload (buffer exports and numpy arrays) are counted; the record is
//!   handed back to the ring only when the frame is released *and* no view is left
//!   (deferred release), so a view never points at memory a producer may reuse.
//! * A [`producer::PyReservation`] owns a core reservation; numpy arrays of it are
//!   made read-only when it is committed or aborted.
//! * Every class may be used from any thread (`frozen`, its state behind locks that
//!   are taken without the GIL and never held while calling into Python); what the
//!   process created (a named ring's name, a listener's socket) is removed at
//!   `close()` and at exit ([`cleanup`]).

use pyo3::prelude::*;

mod args;
mod cleanup;
mod consumer;
mod errors;
mod handoff;
mod media;
mod producer;
mod tap;
mod views;

/// Native part of the `shmring` package. Import `shmring` instead.
#[pymodule]
fn _shmring(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<consumer::PyConsumer>()?;
    m.add_class::<consumer::PyFrame>()?;
    m.add_class::<producer::PyProducer>()?;
    m.add_class::<producer::PyReservation>()?;
    m.add_class::<views::ViewGuard>()?;
    m.add_class::<handoff::PyListener>()?;
    m.add_class::<handoff::PyObserver>()?;
    m.add_class::<tap::PyTap>()?;
    m.add_class::<tap::PyTapFrame>()?;
    media::register(m)?;
    m.add_function(wrap_pyfunction!(now_ns, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The shared-memory layout version this build reads and writes (the core's): a
    // producer and a consumer of different releases work together when it is equal.
    m.add("LAYOUT_VERSION", shmring::layout::LAYOUT_VERSION)?;
    cleanup::register(m)?;
    Ok(())
}

/// Nanoseconds of CLOCK_MONOTONIC, the clock record timestamps use by default.
#[pyfunction]
fn now_ns() -> u64 {
    shmring::now_ns()
}
