//! Taps: read-only observers that copy records as they go by (`shmring::Tap`).
//! They write nothing to the ring, so they never slow its producers or consumers;
//! what they miss is counted in their own stats.

use std::cell::UnsafeCell;
use std::ffi::c_char;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use shmring::{Filter, ReadOnlySegment, Tap, TapFrame, TapOptions};

use crate::handles::*;
use crate::producer::shmring_meta;
use crate::status::shmring_status::*;
use crate::status::*;

/// Pass as `kind` or `stream` of shmring_tap_options or shmring_consumer_options to
/// take every value.
pub const SHMRING_TAP_ANY: i64 = -1;

/// What a tap takes and how it waits. Initialise with shmring_tap_options_init().
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_tap_options {
    /// Deliver every n-th record that matches `kind` and `stream` (1: all; 0 is
    /// taken as 1). `kind` and `stream` are a consumer's filter too
    /// (shmring_consumer_options).
    pub every: u32,
    /// Zero.
    pub reserved: u32,
    /// Only records of this kind (SHMRING_KIND_VIDEO, ...); SHMRING_TAP_ANY: all.
    pub kind: i64,
    /// Only records of this stream; SHMRING_TAP_ANY: all.
    pub stream: i64,
    /// How long an idle tap sleeps between looks (it polls: asking producers for a
    /// wake-up would be a write). 0: the library's default.
    pub poll_interval_ns: u64,
    /// Step over a claim still pending after this long (counted lost). 0: the
    /// library's default.
    pub skip_pending_after_ns: u64,
}

/// A record a tap copied.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_tap_frame {
    /// Payload length in bytes (with SHMRING_ERR_BUFFER_TOO_SMALL: the buffer size
    /// needed).
    pub len: usize,
    pub meta: shmring_meta,
    /// The record's claim sequence number (low 28 bits).
    pub seq: u64,
}

/// What a tap has seen (its own counters: the ring does not know its taps).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_tap_counters {
    /// Records delivered intact.
    pub delivered: u64,
    /// Records lost: overwritten while copied, skipped when the tap fell a ring
    /// behind, or stepped over while pending.
    pub lost: u64,
    /// Of `lost`, records found overwritten after they were copied (never delivered).
    pub torn: u64,
    /// Records not taken because of `every`, `kind` or `stream`.
    pub filtered: u64,
    /// Times the tap jumped to the newest record (lapped, or the ring was reset).
    pub skips: u64,
    /// Records between the tap and the ring's write cursor now.
    pub lag: u64,
}

struct TapState {
    tap: Tap,
    kept: Kept,
}

/// A record too large for the caller's buffer, kept for the next call: the rule
/// of every call that copies a tap's record into a caller's buffer
/// (shmring_tap_next, shmring_reader_next).
#[derive(Default)]
pub(crate) struct Kept {
    bytes: Vec<u8>,
    frame: Option<TapFrame>,
}

impl Kept {
    /// Copies the next record `tap` takes (or the one kept) into `buf` (`cap`
    /// bytes), waiting up to `timeout_ns` (0: do not wait; negative: no limit).
    /// `write` describes the record to the caller on SHMRING_OK and on
    /// SHMRING_ERR_BUFFER_TOO_SMALL (the record is then kept for the next call).
    pub(crate) fn copy_next(
        &mut self,
        tap: &mut Tap,
        buf: *mut u8,
        cap: usize,
        timeout_ns: i64,
        write: impl FnOnce(&TapFrame),
    ) -> Res<shmring_status> {
        if buf.is_null() && cap != 0 {
            return Err(fail!(SHMRING_ERR_NULL, "buf is NULL but cap is {cap}"));
        }
        let too_small = |f: &TapFrame| {
            fail!(
                SHMRING_ERR_BUFFER_TOO_SMALL,
                "the record is {} bytes, the buffer {cap}; it is kept for the next call",
                f.len
            )
        };
        if let Some(f) = self.frame {
            write(&f);
            if f.len > cap {
                return Err(too_small(&f));
            }
            copy_out(&self.bytes[..f.len], buf);
            self.frame = None;
            return ok();
        }
        let timeout = (timeout_ns >= 0).then(|| Duration::from_nanos(timeout_ns as u64));
        let kept = &mut self.bytes;
        let got = tap
            .next_with(timeout, |payload, _| {
                if payload.len() <= cap {
                    // A torn copy is discarded by the tap: the caller never sees it.
                    copy_out(payload, buf);
                    false
                } else {
                    kept.clear();
                    kept.extend_from_slice(payload);
                    true
                }
            })
            .map_err(core_err)?;
        match got {
            None => {
                set_error(format_args!("no record within {timeout_ns} ns"));
                Ok(SHMRING_TIMEOUT)
            }
            Some((f, true)) => {
                write(&f);
                self.frame = Some(f);
                Err(too_small(&f))
            }
            Some((f, false)) => {
                write(&f);
                ok()
            }
        }
    }
}

/// A read-only tap on a ring (opaque). One thread at a time.
pub struct shmring_tap {
    users: AtomicU32,
    state: UnsafeCell<TapState>,
}

impl Handle for shmring_tap {
    const KIND: Kind = Kind::Tap;
    const TYPE_NAME: &'static str = "shmring_tap";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

fn c_frame(f: &TapFrame) -> shmring_tap_frame {
    shmring_tap_frame {
        len: f.len,
        meta: shmring_meta::from_core(f.meta),
        seq: f.seq,
    }
}

/// Copies `src` to `buf`, which the caller of shmring_tap_next promised has room
/// (`src.len() <= cap`, checked by the callers).
fn copy_out(src: &[u8], buf: *mut u8) {
    if !src.is_empty() {
        // SAFETY: `buf` is non-null when cap > 0 (checked at entry) and has `cap` >=
        // src.len() writable bytes (the caller's promise, documented).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf, src.len()) };
    }
}

/// Fills `opts` with the library's defaults (every record, any kind and stream).
#[no_mangle]
pub unsafe extern "C" fn shmring_tap_options_init(
    opts: *mut shmring_tap_options,
) -> shmring_status {
    entry("shmring_tap_options_init", || {
        let d = TapOptions::default();
        *out_ptr(opts, "opts")? = shmring_tap_options {
            every: d.every,
            reserved: 0,
            kind: d.filter.kind.map_or(SHMRING_TAP_ANY, i64::from),
            stream: d.filter.stream.map_or(SHMRING_TAP_ANY, i64::from),
            poll_interval_ns: d.poll_interval.as_nanos() as u64,
            skip_pending_after_ns: d.skip_pending_after.as_nanos() as u64,
        };
        ok()
    })
}

/// The tap's filter as C gives it: a kind and a stream, each SHMRING_TAP_ANY or a
/// 32-bit value.
fn filter(kind: i64, stream: i64) -> Res<Filter> {
    Ok(Filter {
        kind: any_or(kind, "kind")?,
        stream: any_or(stream, "stream")?,
    })
}

fn any_or(v: i64, what: &str) -> Res<Option<u32>> {
    match v {
        SHMRING_TAP_ANY => Ok(None),
        v => u32::try_from(v).map(Some).map_err(|_| {
            fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "{what} {v} is neither a 32-bit value nor SHMRING_TAP_ANY (-1)"
            )
        }),
    }
}

pub(crate) fn core_tap_options(opts: *const shmring_tap_options) -> Res<TapOptions> {
    let d = TapOptions::default();
    if opts.is_null() {
        return Ok(d);
    }
    // SAFETY: non-null; the caller promises a valid struct.
    let o = unsafe { &*opts };
    let or_default = |ns: u64, d: Duration| {
        if ns == 0 {
            d
        } else {
            Duration::from_nanos(ns)
        }
    };
    Ok(TapOptions {
        every: o.every,
        filter: filter(o.kind, o.stream)?,
        poll_interval: or_default(o.poll_interval_ns, d.poll_interval),
        skip_pending_after: or_default(o.skip_pending_after_ns, d.skip_pending_after),
    })
}

fn new_tap(
    ro: ReadOnlySegment,
    opts: TapOptions,
    out: &mut *mut shmring_tap,
) -> Res<shmring_status> {
    *out = register(Box::new(shmring_tap {
        users: AtomicU32::new(0),
        state: UnsafeCell::new(TapState {
            tap: Tap::new(ro, opts),
            kept: Kept::default(),
        }),
    }));
    ok()
}

/// Opens a tap on the ring `address` names (the text of shmring_open), mapped
/// read-only: a named ring, the ring served on a socket ("unix:PATH", observed),
/// or the first of "fd:" descriptors (a sealed memfd; the library takes over
/// every descriptor the text names, as shmring_open does). It starts at the newest
/// record. `opts` may be NULL for the defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_tap_open(
    address: *const c_char,
    opts: *const shmring_tap_options,
    out: *mut *mut shmring_tap,
) -> shmring_status {
    entry("shmring_tap_open", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let o = core_tap_options(opts)?;
        let address = crate::segment::c_address(address)?;
        let ro = address.open_read_only().map_err(core_err)?;
        new_tap(ro, o, out)
    })
}

/// Copies the next record the tap takes into `buf` (`cap` bytes), waiting up to
/// `timeout_ns` (0: do not wait; negative: no limit). SHMRING_OK: `*out` describes
/// the record and its payload is in `buf[0..out->len]`. A record overwritten while
/// it was copied is never delivered (it is counted lost, and the tap goes on to
/// the next one); `buf` holds undefined bytes after any other status.
/// SHMRING_TIMEOUT: none came. SHMRING_ERR_BUFFER_TOO_SMALL: the record is
/// `out->len` bytes; the tap keeps it and the next call with a large enough buffer
/// returns it (`buf` may be NULL when `cap` is 0).
#[no_mangle]
pub unsafe extern "C" fn shmring_tap_next(
    tap: *mut shmring_tap,
    buf: *mut u8,
    cap: usize,
    timeout_ns: i64,
    out: *mut shmring_tap_frame,
) -> shmring_status {
    entry("shmring_tap_next", || {
        let (h, _l) = lease(tap as *const shmring_tap)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: the exclusive lease makes us the only user of the state.
        let st = unsafe { &mut *h.state.get() };
        st.kept
            .copy_next(&mut st.tap, buf, cap, timeout_ns, |f| *out = c_frame(f))
    })
}

/// A snapshot of the tap's own counters.
#[no_mangle]
pub unsafe extern "C" fn shmring_tap_stats(
    tap: *const shmring_tap,
    out: *mut shmring_tap_counters,
) -> shmring_status {
    entry("shmring_tap_stats", || {
        let (h, _l) = lease(tap)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: the exclusive lease makes us the only user of the state.
        let tap = &unsafe { &*h.state.get() }.tap;
        let s = tap.stats();
        *out = shmring_tap_counters {
            delivered: s.delivered,
            lost: s.lost,
            torn: s.torn,
            filtered: s.filtered,
            skips: s.skips,
            lag: s.lag,
        };
        ok()
    })
}

/// Unmaps the ring and frees the tap. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_tap_close(tap: *mut shmring_tap) -> shmring_status {
    entry("shmring_tap_close", || close(tap))
}
