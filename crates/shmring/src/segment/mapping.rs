//! The segment's mapping: a probe of the control block alone, then the whole ring,
//! with the SIGBUS guard of a named ring (whose file a peer could truncate).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use rustix::mm::{MapFlags, ProtFlags};

use super::{files, Backing, Segment};
use crate::error::{os, Error, Result};
use crate::layout::{Geometry, FLAG_HUGE_PAGES};

impl Segment {
    /// Maps the whole ring from `data` (a memfd ring's segment) or the lock file
    /// (a named ring's, which is the segment).
    pub(super) fn map_file(
        locks: Option<Arc<files::LockFile>>,
        data: Option<OwnedFd>,
        geo: Geometry,
        name: String,
        backing: Backing,
        prot: ProtFlags,
    ) -> Result<Segment> {
        let len = geo.total_size as usize;
        let fd = match (&data, &locks) {
            (Some(d), _) => d.as_fd(),
            (None, Some(l)) => l
                .writable()
                .filter(|_| prot.contains(ProtFlags::WRITE))
                .or(l.file())
                .expect("a named ring's lock file is its file"),
            (None, None) => unreachable!("a segment is mapped from a descriptor"),
        };
        let m = Mapping::new(fd, len, &name, prot)?;
        if geo.flags & FLAG_HUGE_PAGES != 0 {
            // SAFETY: advice on our own mapping, its exact range; it changes no
            // contents. Refused (an old kernel): the ring works with small pages.
            let _ = unsafe {
                rustix::mm::madvise(
                    m.ptr.as_ptr().cast(),
                    len,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
        let guard = m.guard(&backing, &name)?;
        let base = m.ptr;
        std::mem::forget(m); // ownership moves to the Segment, unmapped in its Drop
        Ok(Segment {
            base,
            len,
            locks,
            data,
            read_only: std::sync::OnceLock::new(),
            max_record: std::sync::atomic::AtomicU64::new(geo.max_record),
            geo,
            label: name.as_str().into(),
            name,
            backing,
            persist: std::sync::atomic::AtomicBool::new(false),
            eventfd: None,
            guard,
        })
    }
}

/// A shared mapping (read-write, or read-only for observers), unmapped on drop
/// unless forgotten.
pub(super) struct Mapping {
    pub(super) ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    pub(super) fn new(
        fd: BorrowedFd<'_>,
        len: usize,
        name: &str,
        prot: ProtFlags,
    ) -> Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED), so no existing
        // memory is affected; the descriptor is valid for the call.
        let p =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }
                .map_err(|e| os("mmap", name, e))?;
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// A named segment can be truncated by any process that opens it (it cannot be
    /// sealed): its mappings are guarded against SIGBUS before anyone touches them.
    pub(super) fn guard(
        &self,
        backing: &Backing,
        name: &str,
    ) -> Result<Option<crate::sys::sigbus::Guard>> {
        if *backing == Backing::Memfd {
            return Ok(None);
        }
        crate::sys::sigbus::register(self.ptr.as_ptr(), self.len)
            .map(Some)
            .map_err(|e| match e {
                Some(errno) => os(
                    "install SIGBUS guard",
                    name,
                    std::io::Error::from_raw_os_error(errno),
                ),
                None => Error::Config(format!(
                    "segment {name}: too many named segments mapped in this process"
                )),
            })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
