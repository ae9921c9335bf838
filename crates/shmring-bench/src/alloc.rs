//! A global allocator that counts allocations, for "heap allocations per frame".

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting every `alloc`, `alloc_zeroed` and `realloc`.
/// Install it in a binary with
/// `#[global_allocator] static A: shmring_bench::CountingAlloc = shmring_bench::CountingAlloc;`
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`; we only count.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations made so far by this process (0 forever if [`CountingAlloc`] is not
/// the global allocator).
pub fn alloc_count() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Is [`CountingAlloc`] the process's global allocator? (Allocates once to see
/// whether the counter moves.)
pub fn counting_installed() -> bool {
    let before = alloc_count();
    let b = std::hint::black_box(Box::new(std::hint::black_box(7u64)));
    drop(b);
    alloc_count() != before
}
