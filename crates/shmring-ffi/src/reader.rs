//! One reader of a ring of any kind (`shmring::Reader`): the ring's consumer, a
//! tethered consumer or a tap, chosen by a value, read with the same calls.

use std::cell::UnsafeCell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, Ordering};

use shmring::{Reader, ReaderCounts, ReaderFlavor, ReaderKind, ReaderOptions, SharedConsumer};

use crate::consumer::{
    core_options, next_frame, release_frame, shmring_consumer_options, shmring_frame,
    NEXT_CONSUMER_ID,
};
use crate::handles::*;
use crate::producer::shmring_meta;
use crate::segment::{c_address, c_geometry, shmring_geometry};
use crate::stats::{c_stats, shmring_stats};
use crate::status::shmring_status::*;
use crate::status::*;
use crate::tap::{core_tap_options, shmring_tap_options, Kept};

/// `kind` of shmring_reader_open: the ring's consumer (every record, in place;
/// the only kind that may create the ring it reads).
pub const SHMRING_READER_CONSUMER: u32 = 0;
/// `kind` of shmring_reader_open: a tethered consumer beside the ring's (every
/// record, in place, holding space until released; see
/// shmring_consumer_attach_tethered).
pub const SHMRING_READER_TETHERED: u32 = 1;
/// `kind` of shmring_reader_open: a tap (copies into the caller's buffer, holds
/// nothing, may lose records; see shmring_tap_open).
pub const SHMRING_READER_TAP: u32 = 2;

/// The core's kind of the C value: SHMRING_READER_* are the indices of
/// `ReaderKind::ALL`.
fn core_kind(kind: u32) -> Res<ReaderKind> {
    ReaderKind::ALL.get(kind as usize).copied().ok_or_else(|| {
        fail!(
            SHMRING_ERR_INVALID_ARGUMENT,
            "reader kind {kind}: expected SHMRING_READER_CONSUMER (0), \
             SHMRING_READER_TETHERED (1) or SHMRING_READER_TAP (2)"
        )
    })
}

/// What a reader has counted, whatever its kind (each only grows).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_reader_counters {
    /// Records this reader missed: a tap's lost records; 0 for a consumer, which
    /// misses none it is given.
    pub lost: u64,
    /// Records a tap's filter or `every` did not take (a consumer's filter counts
    /// in the ring's `records_filtered`).
    pub filtered: u64,
    /// Times this consumer reset the ring; 0 for a tap.
    pub resets: u64,
}

struct ReaderState {
    reader: Reader,
    /// A tap's record too large for the caller's buffer.
    kept: Kept,
}

/// A reader of a ring, of any kind (opaque). One thread at a time, except
/// shmring_reader_release, which any thread may call at any time.
pub struct shmring_reader {
    users: AtomicU32,
    /// Calls of shmring_reader_release under way (they take no exclusive lease).
    releasers: AtomicU32,
    id: u64,
    kind: u32,
    /// The consumer inside (not a tap), for releases from any thread: they never
    /// touch `state`.
    releaser: Option<SharedConsumer>,
    state: UnsafeCell<ReaderState>,
}

impl Handle for shmring_reader {
    const KIND: Kind = Kind::Reader;
    const TYPE_NAME: &'static str = "shmring_reader";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
    fn busy(&self) -> bool {
        // Acquire: pairs with the Release decrements when leases end.
        self.users.load(Ordering::Acquire) != 0 || self.releasers.load(Ordering::Acquire) != 0
    }
}

impl shmring_reader {
    /// The reader, under the exclusive lease.
    ///
    /// # Safety
    /// The caller holds the handle's exclusive lease.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &mut ReaderState {
        // SAFETY: the exclusive lease makes the caller the only user of the state
        // (releases use `releaser` alone).
        unsafe { &mut *self.state.get() }
    }
}

/// Opens a reader of the ring `address` names (the text of shmring_open) of
/// `kind`: SHMRING_READER_CONSUMER (the ring's consumer, as
/// shmring_consumer_attach; the only kind that may create the ring, e.g.
/// "create:NAME"), SHMRING_READER_TETHERED (as shmring_consumer_attach_tethered)
/// or SHMRING_READER_TAP (as shmring_tap_open). A tethered consumer or a tap on
/// an address that creates a ring is SHMRING_ERR_CONFIG; another `kind` is
/// SHMRING_ERR_INVALID_ARGUMENT. `copts` are the consumer kinds' options, `topts`
/// the tap's; either may be NULL for the defaults. The library takes over every
/// descriptor the text names, as shmring_open does.
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_open(
    address: *const c_char,
    kind: u32,
    copts: *const shmring_consumer_options,
    topts: *const shmring_tap_options,
    out: *mut *mut shmring_reader,
) -> shmring_status {
    entry("shmring_reader_open", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let opts = ReaderOptions {
            kind: core_kind(kind)?,
            consumer: core_options(copts)?,
            tap: core_tap_options(topts)?,
        };
        let reader = Reader::open(c_address(address)?, opts).map_err(core_err)?;
        *out = register(Box::new(shmring_reader {
            users: AtomicU32::new(0),
            releasers: AtomicU32::new(0),
            id: NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed),
            kind,
            releaser: reader.consumer().cloned(),
            state: UnsafeCell::new(ReaderState {
                reader,
                kept: Kept::default(),
            }),
        }));
        ok()
    })
}

/// `*out` receives the reader's kind (SHMRING_READER_*).
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_kind(
    reader: *const shmring_reader,
    out: *mut u32,
) -> shmring_status {
    entry("shmring_reader_kind", || {
        let out = out_ptr(out, "out")?;
        let (h, _l) = lease(reader)?;
        *out = h.kind;
        ok()
    })
}

/// The next record, waiting up to `timeout_ns` (0: do not wait; negative, e.g.
/// SHMRING_WAIT_FOREVER: no limit). SHMRING_OK: `*out` describes it. A consumer's
/// (SHMRING_READER_CONSUMER, _TETHERED) is in the ring, `out->data` valid until
/// shmring_reader_release (or close), and `buf` is not used (it may be NULL).
/// A tap's is copied into `buf` (`cap` bytes; `out->data` is `buf`), as
/// shmring_tap_next copies: SHMRING_ERR_BUFFER_TOO_SMALL when the record is
/// larger (`out->len` bytes, `out->data` NULL; the reader keeps it and the next
/// call with a large enough buffer returns it). SHMRING_TIMEOUT: none came.
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_next(
    reader: *mut shmring_reader,
    buf: *mut u8,
    cap: usize,
    timeout_ns: i64,
    out: *mut shmring_frame,
) -> shmring_status {
    entry("shmring_reader_next", || {
        let (h, _l) = lease(reader as *const shmring_reader)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: we hold the exclusive lease.
        let st = unsafe { h.state() };
        match st.reader.flavor_mut() {
            ReaderFlavor::Consumer(c) => next_frame(c, h.id, timeout_ns, out),
            ReaderFlavor::Tap(tap) => st.kept.copy_next(tap, buf, cap, timeout_ns, |f| {
                *out = shmring_frame {
                    data: if f.len <= cap { buf } else { std::ptr::null() },
                    len: f.len,
                    meta: shmring_meta::from_core(f.meta),
                    seq: f.seq,
                    owner: h.id,
                }
            }),
        }
    })
}

/// Releases a frame this reader handed out: a consumer's as
/// shmring_consumer_release does (in any order, from any thread, also while
/// another thread waits in shmring_reader_next); nothing for a tap's copy.
/// SHMRING_ERR_NOT_HELD: handed out by another reader or consumer, or released
/// already. The frame's data pointer of a consumer is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_release(
    reader: *mut shmring_reader,
    frame: *const shmring_frame,
) -> shmring_status {
    entry("shmring_reader_release", || {
        let (h, _l) = lease_shared(reader as *const shmring_reader, |h| &h.releasers)?;
        // A tap's copy (no consumer) holds nothing of the ring.
        release_frame(h.releaser.as_ref(), h.id, frame)
    })
}

/// What the reader has counted (shmring_reader_counters).
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_counts(
    reader: *const shmring_reader,
    out: *mut shmring_reader_counters,
) -> shmring_status {
    entry("shmring_reader_counts", || {
        let (h, _l) = lease(reader)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: we hold the exclusive lease.
        let ReaderCounts {
            lost,
            filtered,
            resets,
        } = unsafe { h.state() }.reader.counts().map_err(core_err)?;
        *out = shmring_reader_counters {
            lost,
            filtered,
            resets,
        };
        ok()
    })
}

/// A snapshot of the ring's counters (as shmring_segment_stats).
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_stats(
    reader: *const shmring_reader,
    out: *mut shmring_stats,
) -> shmring_status {
    entry("shmring_reader_stats", || {
        let (h, _l) = lease(reader)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: we hold the exclusive lease.
        *out = c_stats(&unsafe { h.state() }.reader.stats().map_err(core_err)?);
        ok()
    })
}

/// The ring's geometry (as shmring_segment_geometry).
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_geometry(
    reader: *const shmring_reader,
    out: *mut shmring_geometry,
) -> shmring_status {
    entry("shmring_reader_geometry", || {
        let (h, _l) = lease(reader)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: we hold the exclusive lease.
        *out = c_geometry(&unsafe { h.state() }.reader.geometry().map_err(core_err)?);
        ok()
    })
}

/// Closes the reader: a consumer's frames not released become invalid, and a ring
/// it created is removed once nothing else keeps it. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_reader_close(reader: *mut shmring_reader) -> shmring_status {
    entry("shmring_reader_close", || close(reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_the_cores_in_order() {
        let c = [
            SHMRING_READER_CONSUMER,
            SHMRING_READER_TETHERED,
            SHMRING_READER_TAP,
        ];
        for (value, kind) in c.into_iter().zip(ReaderKind::ALL) {
            assert_eq!(core_kind(value).ok(), Some(kind));
        }
        assert!(core_kind(3).is_err());
    }
}
