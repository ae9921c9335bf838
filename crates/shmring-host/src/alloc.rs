//! A global allocator that counts allocations: for "heap allocations per frame"
//! (the bench's workers) and "no allocation per record" (the tests). It counts for
//! the whole process and for each thread, so a test measures its own thread while
//! others run beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Allocations of the process. Relaxed: a counter read for figures, ordering
/// nothing else.
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations of this thread: const-initialised and without destructor, so
    /// touching it never allocates.
    static THREAD_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    // try_with: the thread-local may already be gone while a thread exits.
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// The system allocator, counting every `alloc`, `alloc_zeroed` and `realloc`.
/// Install it in the program that counts (and only there) with
/// `#[global_allocator] static A: shmring_host::CountingAlloc = shmring_host::CountingAlloc;`
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`; we only count, touching an
// atomic and a thread-local that never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations made so far by this process (0 forever if [`CountingAlloc`] is not
/// the global allocator).
pub fn alloc_count() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Allocations made so far by the calling thread (0 forever if [`CountingAlloc`] is
/// not the global allocator).
pub fn thread_alloc_count() -> u64 {
    THREAD_ALLOCS.with(|c| c.get())
}

/// Is [`CountingAlloc`] the process's global allocator? (Allocates once to see
/// whether the counter moves.)
pub fn counting_installed() -> bool {
    let before = alloc_count();
    let b = std::hint::black_box(Box::new(std::hint::black_box(7u64)));
    drop(b);
    alloc_count() != before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static A: CountingAlloc = CountingAlloc;

    #[test]
    fn the_counter_sees_this_threads_allocations() {
        assert!(counting_installed());
        let before = thread_alloc_count();
        let v = std::hint::black_box(Vec::<u8>::with_capacity(16));
        assert_eq!(thread_alloc_count(), before + 1);
        drop(v);
        let (before, process_before) = (thread_alloc_count(), alloc_count());
        let other = std::thread::spawn(|| {
            let mine = thread_alloc_count();
            for _ in 0..1000 {
                drop(std::hint::black_box(vec![1u8; 32]));
            }
            thread_alloc_count() - mine
        });
        assert_eq!(other.join().unwrap(), 1000);
        // Spawning costs this thread a few allocations, not the other thread's 1000.
        assert!(
            thread_alloc_count() - before < 100,
            "another thread's allocations are not counted here"
        );
        assert!(
            alloc_count() - process_before >= 1000,
            "the process counts them all"
        );
    }
}
