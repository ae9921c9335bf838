//! The floor shmring's tools stand on: what the `shmring` command, the bench, the
//! reliability suite, the examples and the tests need from the host, and nothing of
//! the ring itself (this crate does not depend on `shmring`).
//!
//! - [`ChildGuard`]: the one child supervisor: a child process stopped and reaped
//!   when dropped (also while a panic unwinds), optionally tied to the thread that
//!   spawned it (`PR_SET_PDEATHSIG`) and given inherited descriptors;
//!   [`place_fds`] gives a child descriptors at the numbers it expects;
//! - [`usage`]: CPU time and memory of a process from `/proc` and `getrusage`;
//! - [`CountingAlloc`]: a global allocator that counts, for the programs that count
//!   allocations (the bench's workers, the no-allocation tests);
//! - [`stop_flag`]: a flag set by SIGINT, SIGTERM or SIGHUP;
//! - [`status`]: the live status line of long work (`shmring bench`, `shmring
//!   record`): redrawn in place on a terminal, plain lines elsewhere;
//! - [`SharedMemory`], [`futex_wait`], [`futex_wake`]: a memfd mapped shared and
//!   futexes in it, for the tools' own shared words (not a ring).
//!
//! Not published: a dependency of the workspace's tools only.

mod alloc;
mod child;
mod shm;
pub mod status;
mod stop;
pub mod usage;

pub use alloc::{alloc_count, counting_installed, thread_alloc_count, CountingAlloc};
pub use child::{pid_gone, place_fds, ChildGuard};
pub use shm::{futex_wait, futex_wake, SharedMemory};
pub use stop::stop_flag;
pub use usage::{
    cpu_ns, open_descriptors, own_peak_rss_kb, private_memory, proc_memory, rusage, CpuMeter,
    ProcMemory, Rusage,
};
