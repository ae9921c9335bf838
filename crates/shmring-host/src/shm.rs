//! Shared memory of the tools' own (not a ring): a memfd mapped shared, and futex
//! waits and wakes on words inside it. The bench's reference rows (the two-core
//! floor, the wake-up ping-pong) and the reliability suite's flag table use them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// A memfd mapped shared, read and write, unmapped when dropped.
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory that lives as long as the value; what
// threads do with the bytes is up to the caller (atomics, or one owner at a time).
unsafe impl Send for SharedMemory {}
// SAFETY: as above; `&SharedMemory` only hands out the pointer.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// A new memfd called `name` (for `/proc/PID/fd`), `len` bytes of zeros, mapped.
    pub fn create(name: &std::ffi::CStr, len: usize) -> io::Result<SharedMemory> {
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len).map_err(io::Error::other)?;
        // SAFETY: sizes our own memfd; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd)
    }

    /// Maps all of `fd` (received from the process that created it).
    pub fn map(fd: OwnedFd) -> io::Result<SharedMemory> {
        // SAFETY: `stat` is a plain C struct; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a struct of ours, on a descriptor we own; the result is
        // checked.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = usize::try_from(st.st_size).map_err(io::Error::other)?;
        if len == 0 {
            return Err(io::Error::other("the shared memory is empty"));
        }
        // SAFETY: a fresh shared mapping of the whole file, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMemory {
            fd,
            ptr: p.cast(),
            len,
        })
    }

    /// Asks for transparent huge pages; refused, it works with small pages.
    pub fn advise_huge(&self) {
        // SAFETY: advice on our own live mapping; failure changes nothing.
        unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_HUGEPAGE) };
    }

    /// The first byte (page-aligned).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: an empty file is refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps our own mapping; nothing borrowed from it outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Sleeps while `*w == val`, at most `timeout` (`None`: no timer). A shared (not
/// process-private) futex, so it works between processes; a spurious return is
/// possible, and callers look again.
pub fn futex_wait(w: &AtomicU32, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().try_into().unwrap_or(libc::time_t::MAX),
        tv_nsec: t.subsec_nanos().into(),
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 that outlives the call; `tp` is
    // null or points at `ts`, alive until the call returns.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAIT, val, tp) };
}

/// Wakes every sleeper on `w` (shared futex).
pub fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 that outlives the call.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_mapping_received_by_descriptor_sees_the_same_bytes() {
        let a = SharedMemory::create(c"host-shm-test", 8192).unwrap();
        assert_eq!(a.len(), 8192);
        let b = SharedMemory::map(a.as_fd().try_clone_to_owned().unwrap()).unwrap();
        assert_eq!(b.len(), 8192);
        // SAFETY: both map 8192 bytes of the same file; one byte written, one read.
        unsafe {
            a.ptr().add(4100).write(7);
            assert_eq!(b.ptr().add(4100).read(), 7);
        }
    }

    #[test]
    fn a_wait_on_a_changed_word_returns_and_a_wake_ends_a_sleep() {
        let m = SharedMemory::create(c"host-futex-test", 4096).unwrap();
        // SAFETY: the mapping is zeroed, aligned and outlives both threads' use.
        let w: &AtomicU32 = unsafe { &*m.ptr().cast::<AtomicU32>() };
        futex_wait(w, 1, None); // not 1: returns at once
        std::thread::scope(|s| {
            s.spawn(|| {
                while w.load(Ordering::Acquire) == 0 {
                    futex_wait(w, 0, None);
                }
            });
            w.store(1, Ordering::Release);
            futex_wake(w);
        });
        assert_eq!(w.load(Ordering::Relaxed), 1);
    }
}
