//! The secure hand-off in the C ABI: a consumer serves its sealed memfd on a Unix
//! socket (`shmring_listen`), producers connect to it (`shmring_open` of
//! `unix:PATH`), observers get a read-only mapping (`shmring_open_read_only`). The rules (allow-lists, the hello,
//! bounds and timeouts) are the core's (`shmring::handoff`); this only translates.

use std::ffi::c_char;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use shmring::handoff::{ListenerOptions, ListenerThread};
use shmring::{Listener, ReadOnlySegment};

use crate::handles::{c_str, close, lease, out_ptr, register, Handle, Kind};
use crate::segment::{c_address, c_geometry, shmring_geometry, shmring_segment, timeout_of};
use crate::stats::{c_stats, shmring_stats};
use crate::status::shmring_status::{self, *};
use crate::status::{core_err, entry, ok, Res};

/// Options of shmring_listen. Initialise with shmring_listen_options_init(), which
/// sets the library's defaults (this process's uid only, the default bounds).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_listen_options {
    /// Further uids allowed to connect (as producers and observers): an array of
    /// `n_allow_uids`, or NULL when 0. The caller's effective uid is always allowed.
    pub allow_uids: *const u32,
    pub n_allow_uids: usize,
    /// Further gids allowed to connect: an array of `n_allow_gids`, or NULL when 0.
    pub allow_gids: *const u32,
    pub n_allow_gids: usize,
    /// Connections accepted and not yet answered, at most; one more is refused at
    /// once (rule "too-many-pending").
    pub max_pending: u32,
    /// Milliseconds a peer has to send its hello (rule "hello-timeout").
    pub hello_timeout_ms: u32,
}

/// What a listener did so far (a snapshot).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_handoff_stats {
    /// Producers handed the ring.
    pub producers: u64,
    /// Observers handed a read-only descriptor.
    pub observers: u64,
    /// Every refusal, all rules together.
    pub refused: u64,
    /// Refused: uid/gid not allowed (rule "peer-credentials").
    pub refused_credentials: u64,
    /// Refused: another protocol version ("protocol-version").
    pub refused_version: u64,
    /// Refused: unknown role or a role nobody may take ("role").
    pub refused_role: u64,
    /// Refused: not a hello, or closed before one ("malformed-hello").
    pub refused_malformed: u64,
    /// Refused: no hello in time ("hello-timeout").
    pub timed_out: u64,
    /// Refused at once: too many pending ("too-many-pending").
    pub refused_busy: u64,
    /// Answers that could not be sent, accepts that failed.
    pub failed: u64,
    /// Connections waiting for an answer now.
    pub pending: u64,
}

/// A consumer's listener, serving its ring on a socket from one background thread
/// (opaque).
pub struct shmring_listener {
    users: AtomicU32,
    inner: ListenerThread,
}

impl Handle for shmring_listener {
    const KIND: Kind = Kind::Listener;
    const TYPE_NAME: &'static str = "shmring_listener";
    const EXCLUSIVE: bool = false;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

/// A ring mapped read-only (shmring_open_read_only) (opaque).
pub struct shmring_observer {
    users: AtomicU32,
    inner: ReadOnlySegment,
}

impl Handle for shmring_observer {
    const KIND: Kind = Kind::Observer;
    const TYPE_NAME: &'static str = "shmring_observer";
    const EXCLUSIVE: bool = false;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

/// Fills `opts` with the library's defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_listen_options_init(
    opts: *mut shmring_listen_options,
) -> shmring_status {
    entry("shmring_listen_options_init", || {
        let d = ListenerOptions::default();
        *out_ptr(opts, "opts")? = shmring_listen_options {
            allow_uids: std::ptr::null(),
            n_allow_uids: 0,
            allow_gids: std::ptr::null(),
            n_allow_gids: 0,
            max_pending: d.max_pending as u32,
            hello_timeout_ms: d.hello_timeout.as_millis().min(u32::MAX as u128) as u32,
        };
        ok()
    })
}

fn id_list<'a>(p: *const u32, n: usize, what: &str) -> Res<&'a [u32]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail!(
            SHMRING_ERR_NULL,
            "{what} is NULL but its count is {n}"
        ));
    }
    // SAFETY: the caller promises `n` readable u32 at `p` (documented).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Serves the ring `seg` (a sealed memfd, shmring_create of "memfd:[LABEL]") on the
/// Unix socket `path` (a file system path, or "@name" for a Linux abstract socket),
/// from one background thread. Peers are checked by the credentials the kernel
/// records at connect (SO_PEERCRED) against the allow-list of `opts` (NULL: the
/// defaults: this process's uid only). Producers receive the memfd (and the
/// eventfd of an eventfd ring), observers a read-only descriptor. A stale socket
/// file of a dead consumer is replaced; shmring_listener_close removes the socket.
#[no_mangle]
pub unsafe extern "C" fn shmring_listen(
    seg: *const shmring_segment,
    path: *const c_char,
    opts: *const shmring_listen_options,
    out: *mut *mut shmring_listener,
) -> shmring_status {
    entry("shmring_listen", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let path = c_str(path, "path")?;
        let mut o = ListenerOptions::default();
        if !opts.is_null() {
            // SAFETY: checked for NULL; the caller promises a valid struct.
            let c = unsafe { &*opts };
            for &u in id_list(c.allow_uids, c.n_allow_uids, "allow_uids")? {
                o = o.allow_uid(u);
            }
            for &g in id_list(c.allow_gids, c.n_allow_gids, "allow_gids")? {
                o = o.allow_gid(g);
            }
            o.max_pending = c.max_pending as usize;
            o.hello_timeout = Duration::from_millis(c.hello_timeout_ms as u64);
        }
        let l = Listener::bind(&h.seg, path, o)
            .and_then(Listener::spawn)
            .map_err(core_err)?;
        *out = register(Box::new(shmring_listener {
            users: AtomicU32::new(0),
            inner: l,
        }));
        ok()
    })
}

/// A snapshot of what the listener did.
#[no_mangle]
pub unsafe extern "C" fn shmring_listener_stats(
    l: *const shmring_listener,
    out: *mut shmring_handoff_stats,
) -> shmring_status {
    entry("shmring_listener_stats", || {
        let (h, _l) = lease(l)?;
        let s = h.inner.stats();
        *out_ptr(out, "out")? = shmring_handoff_stats {
            producers: s.producers,
            observers: s.observers,
            refused: s.refused(),
            refused_credentials: s.refused_credentials,
            refused_version: s.refused_version,
            refused_role: s.refused_role,
            refused_malformed: s.refused_malformed,
            timed_out: s.timed_out,
            refused_busy: s.refused_busy,
            failed: s.failed,
            pending: s.pending,
        };
        ok()
    })
}

/// Stops the listener's thread and removes its socket file. NULL is a no-op.
/// Producers already connected keep producing.
#[no_mangle]
pub unsafe extern "C" fn shmring_listener_close(l: *mut shmring_listener) -> shmring_status {
    entry("shmring_listener_close", || close(l))
}

/// Maps the ring `address` names read-only, as an observer (counters and geometry;
/// for records, shmring_tap_open): a named ring opened O_RDONLY, the ring served
/// on a socket ("unix:PATH": the observer's hello, then a read-only descriptor,
/// which the kernel refuses to map writable), or the first of
/// "fd:" descriptors (a sealed memfd; the library takes over every descriptor the
/// text names, as shmring_open does). Creating addresses are SHMRING_ERR_CONFIG.
/// `timeout_ms` bounds each step of a socket's hand-off (0: the library's
/// default).
#[no_mangle]
pub unsafe extern "C" fn shmring_open_read_only(
    address: *const c_char,
    timeout_ms: u32,
    out: *mut *mut shmring_observer,
) -> shmring_status {
    entry("shmring_open_read_only", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let address = c_address(address)?;
        let obs = address
            .open_read_only_timeout(timeout_of(timeout_ms))
            .map_err(core_err)?;
        *out = register(Box::new(shmring_observer {
            users: AtomicU32::new(0),
            inner: obs,
        }));
        ok()
    })
}

/// A snapshot of the observed ring's counters.
#[no_mangle]
pub unsafe extern "C" fn shmring_observer_stats(
    o: *const shmring_observer,
    out: *mut shmring_stats,
) -> shmring_status {
    entry("shmring_observer_stats", || {
        let (h, _l) = lease(o)?;
        *out_ptr(out, "out")? = c_stats(&h.inner.stats());
        ok()
    })
}

/// The observed ring's validated layout.
#[no_mangle]
pub unsafe extern "C" fn shmring_observer_geometry(
    o: *const shmring_observer,
    out: *mut shmring_geometry,
) -> shmring_status {
    entry("shmring_observer_geometry", || {
        let (h, _l) = lease(o)?;
        *out_ptr(out, "out")? = c_geometry(h.inner.geometry());
        ok()
    })
}

/// The read-only mapping's address range. Writing through it faults.
#[no_mangle]
pub unsafe extern "C" fn shmring_observer_mapping(
    o: *const shmring_observer,
    base: *mut *const u8,
    len: *mut usize,
) -> shmring_status {
    entry("shmring_observer_mapping", || {
        let (h, _l) = lease(o)?;
        let (b, l) = h.inner.mapping();
        *out_ptr(base, "base")? = b;
        *out_ptr(len, "len")? = l;
        ok()
    })
}

/// The observer's descriptor (owned by the observer: do not close it): the read-only
/// one received, unless this process already had the ring open (one descriptor per
/// segment file per process), as when a consumer observes its own ring.
#[no_mangle]
pub unsafe extern "C" fn shmring_observer_fd(
    o: *const shmring_observer,
    out: *mut std::ffi::c_int,
) -> shmring_status {
    entry("shmring_observer_fd", || {
        let (h, _l) = lease(o)?;
        *out_ptr(out, "out")? = std::os::fd::AsRawFd::as_raw_fd(&h.inner.fd());
        ok()
    })
}

/// Unmaps and frees the observer. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_observer_close(o: *mut shmring_observer) -> shmring_status {
    entry("shmring_observer_close", || close(o))
}
