//! What this process created in the file system, removed at `close()` and at
//! interpreter exit: the name of a named ring a consumer created, the socket of a
//! listener. Frames and views still alive then keep their mapping (a name is
//! removed, not the memory); a ring kept with `persist` is left alone.
//!
//! Python runs no finaliser for objects still referenced at exit (a frame a daemon
//! thread holds, a cycle the last collection missed), so the module registers
//! [`at_exit`] with `atexit`: it removes what every live object created.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pyo3::prelude::*;
use shmring::handoff::ListenerThread;
use shmring::Segment;

/// The name of a named ring this process created.
pub struct CreatedRing {
    seg: Weak<Segment>,
    /// Removed or kept (`persist`): nothing more to do.
    settled: AtomicBool,
}

impl CreatedRing {
    /// Registers the ring `seg`, created here.
    pub fn register(seg: &Arc<Segment>) -> Arc<CreatedRing> {
        let ring = Arc::new(CreatedRing {
            seg: Arc::downgrade(seg),
            settled: AtomicBool::new(false),
        });
        let mut rings = lock(&RINGS);
        rings.retain(|w| w.strong_count() > 0);
        rings.push(Arc::downgrade(&ring));
        ring
    }

    /// Keeps the ring after this process (`persist`).
    pub fn keep(&self) {
        self.settled.store(true, Ordering::Relaxed);
        if let Some(seg) = self.seg.upgrade() {
            seg.persist();
        }
    }

    /// Removes the ring's name now, unless it was kept or removed already. The
    /// mapping stays for whoever still uses it. A ring no longer mapped here was
    /// unlinked when its segment was dropped (or kept): its name may be another
    /// process's ring by now, and is left alone.
    pub fn remove(&self) {
        if self.settled.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(seg) = self.seg.upgrade() {
            // Ours to remove; the segment must not remove it again when dropped.
            seg.persist();
            let _ = Segment::unlink_named(seg.name());
        }
    }
}

/// A listener's thread (and socket) until it is closed.
pub type ListenerSlot = Mutex<Option<ListenerThread>>;

/// Registers a listener, stopped at exit if still running.
pub fn register_listener(l: ListenerThread) -> Arc<ListenerSlot> {
    let slot = Arc::new(Mutex::new(Some(l)));
    let mut all = lock(&LISTENERS);
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&slot));
    slot
}

static RINGS: Mutex<Vec<Weak<CreatedRing>>> = Mutex::new(Vec::new());
static LISTENERS: Mutex<Vec<Weak<ListenerSlot>>> = Mutex::new(Vec::new());

/// Locks `m`, whether or not a panic poisoned it (every holder leaves it whole).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called by `atexit`: stops every listener (its socket is removed) and removes
/// the name of every ring created here and still mapped.
#[pyfunction]
pub fn at_exit(py: Python<'_>) {
    let listeners: Vec<_> = lock(&LISTENERS).drain(..).collect();
    let rings: Vec<_> = lock(&RINGS).drain(..).collect();
    py.detach(move || {
        for slot in listeners.iter().filter_map(Weak::upgrade) {
            drop(lock(&slot).take());
        }
        for ring in rings.iter().filter_map(Weak::upgrade) {
            ring.remove();
        }
    });
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let f = wrap_pyfunction!(at_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (f,))?;
    Ok(())
}
