//! The handle registry: every handle the library gives out is registered by
//! address and leased for the duration of a call, so a closed or foreign handle is
//! an error, never a dereference. Also the checks of pointer and descriptor
//! arguments.

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

use crate::status::shmring_status::*;
use crate::status::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Segment,
    Producer,
    Consumer,
    Listener,
    Observer,
    Tap,
    Reader,
}

/// Addresses of live handles. Looked up (read lock, no allocation) on every call;
/// written at create and close only.
pub(crate) static REGISTRY: RwLock<BTreeMap<usize, Kind>> = RwLock::new(BTreeMap::new());

pub(crate) trait Handle {
    const KIND: Kind;
    const TYPE_NAME: &'static str;
    /// Producers and consumers are used by one thread at a time; segments by many.
    const EXCLUSIVE: bool;
    fn users(&self) -> &AtomicU32;
    /// Is a call under way on the handle (it cannot be closed then)?
    fn busy(&self) -> bool {
        // Acquire: pairs with the Release decrement when a lease ends.
        self.users().load(Ordering::Acquire) != 0
    }
}

/// A handle in use: it cannot be closed until the lease ends.
pub(crate) struct Lease<'a> {
    users: &'a AtomicU32,
    exclusive: bool,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.exclusive {
            self.users.store(0, Ordering::Release);
        } else {
            self.users.fetch_sub(1, Ordering::Release);
        }
    }
}

pub(crate) fn registry_read() -> std::sync::RwLockReadGuard<'static, BTreeMap<usize, Kind>> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn registry_write() -> std::sync::RwLockWriteGuard<'static, BTreeMap<usize, Kind>> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

/// `ptr` as a live `T`, with the registry's read lock that keeps it live until
/// the caller has counted its lease.
fn live<'a, T: Handle>(
    ptr: *const T,
) -> Res<(
    &'a T,
    std::sync::RwLockReadGuard<'static, BTreeMap<usize, Kind>>,
)> {
    if ptr.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{} handle is NULL", T::TYPE_NAME));
    }
    let reg = registry_read();
    if reg.get(&(ptr as usize)) != Some(&T::KIND) {
        return Err(fail!(
            SHMRING_ERR_BAD_HANDLE,
            "{ptr:p} is not a live {} handle (closed, never created, or another type)",
            T::TYPE_NAME
        ));
    }
    // SAFETY: registered addresses point to live, boxed handles; removal happens
    // under the write lock and only when no lease is held, and we hold the read lock.
    Ok((unsafe { &*ptr }, reg))
}

/// Validates `ptr` as a live `T` and leases it for the duration of a call.
pub(crate) fn lease<'a, T: Handle>(ptr: *const T) -> Res<(&'a T, Lease<'a>)> {
    let (h, reg) = live(ptr)?;
    if T::EXCLUSIVE {
        if h.users()
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(fail!(
                SHMRING_ERR_BUSY,
                "{} {ptr:p} is being used by another thread (one thread at a time)",
                T::TYPE_NAME
            ));
        }
    } else {
        h.users().fetch_add(1, Ordering::Acquire);
    }
    drop(reg);
    Ok((
        h,
        Lease {
            users: h.users(),
            exclusive: T::EXCLUSIVE,
        },
    ))
}

/// Like [`lease`] for the one call of an exclusive handle that any thread may make
/// beside the others (a consumer's release): counted in `count(handle)`, which
/// the handle's [`Handle::busy`] reports so that it is not closed meanwhile.
pub(crate) fn lease_shared<'a, T: Handle>(
    ptr: *const T,
    count: impl FnOnce(&'a T) -> &'a AtomicU32,
) -> Res<(&'a T, Lease<'a>)> {
    let (h, reg) = live(ptr)?;
    let users = count(h);
    // Acquire: pairs with the Release decrement of an earlier lease.
    users.fetch_add(1, Ordering::Acquire);
    drop(reg);
    Ok((
        h,
        Lease {
            users,
            exclusive: false,
        },
    ))
}

pub(crate) fn register<T: Handle>(b: Box<T>) -> *mut T {
    let p = Box::into_raw(b);
    registry_write().insert(p as usize, T::KIND);
    p
}

/// Unregisters and frees a handle. NULL is a no-op (returns OK).
pub(crate) fn close<T: Handle>(ptr: *mut T) -> Res<shmring_status> {
    if ptr.is_null() {
        return ok();
    }
    let mut reg = registry_write();
    if reg.get(&(ptr as usize)) != Some(&T::KIND) {
        return Err(fail!(
            SHMRING_ERR_BAD_HANDLE,
            "{ptr:p} is not a live {} handle (closed twice, never created, or another type)",
            T::TYPE_NAME
        ));
    }
    // SAFETY: registered, so live; we hold the write lock so no lease can start.
    if unsafe { &*ptr }.busy() {
        return Err(fail!(
            SHMRING_ERR_BUSY,
            "{} {ptr:p} is in use by another thread; close it after that call returns",
            T::TYPE_NAME
        ));
    }
    reg.remove(&(ptr as usize));
    drop(reg);
    // SAFETY: created by Box::into_raw in `register`, now unreachable for others.
    drop(unsafe { Box::from_raw(ptr) });
    ok()
}

pub(crate) fn out_ptr<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: the caller promises a valid, writable T (documented in the header);
    // we checked NULL.
    Ok(unsafe { &mut *p })
}

pub(crate) fn in_ptr<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: as in out_ptr.
    Ok(unsafe { &*p })
}

pub(crate) fn c_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(fail!(SHMRING_ERR_NULL, "{what} is NULL"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail!(SHMRING_ERR_INVALID_ARGUMENT, "{what} is not valid UTF-8"))
}
