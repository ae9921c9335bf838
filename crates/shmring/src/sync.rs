//! Atomics used by the protocol: `std`'s normally, loom's under `--cfg loom` so the
//! model checker can explore every interleaving of [`crate::protocol`].

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Spin hint inside retry loops (a yield under loom, so the model makes progress).
#[inline]
pub fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
