//! Producers: attach, reserve in place, commit, abort, send.

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use shmring::{FullPolicy, Meta, Producer};

use crate::handles::*;
use crate::segment::*;
use crate::status::shmring_status::*;
use crate::status::*;

/// A record's metadata, stored in its header.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_meta {
    /// Which stream the record belongs to.
    pub stream: u32,
    /// What it is: SHMRING_KIND_RAW, SHMRING_KIND_VIDEO, SHMRING_KIND_AUDIO or your own.
    pub kind: u32,
    /// Capture time in ns (CLOCK_MONOTONIC by convention: shmring_now_ns()).
    pub timestamp_ns: u64,
    /// Free for the application.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

impl shmring_meta {
    pub(crate) fn to_core(self) -> Meta {
        Meta {
            stream: self.stream,
            kind: self.kind,
            timestamp_ns: self.timestamp_ns,
            flags: self.flags,
        }
    }
    pub(crate) fn from_core(m: Meta) -> Self {
        shmring_meta {
            stream: m.stream,
            kind: m.kind,
            timestamp_ns: m.timestamp_ns,
            flags: m.flags,
            reserved: 0,
        }
    }
}

/// Space reserved in the ring: write `len` bytes at `data`, then commit or abort.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_reservation {
    /// The payload, in shared memory (64-byte aligned). Valid until the
    /// reservation is committed or aborted, or the producer is closed.
    pub data: *mut u8,
    pub len: usize,
    /// The claim's sequence number (for diagnostics).
    pub seq: u64,
}

/// What a producer does when the ring is full.
pub const SHMRING_POLICY_FAIL: u32 = 0;

/// Wait for space up to the policy's timeout.
pub const SHMRING_POLICY_BLOCK: u32 = 1;

/// Runs, at attach time, the one-time initialisations the hot path would otherwise
/// do on first use: rustix finds the vDSO's clock_gettime through the auxiliary
/// vector on its first clock read (prctl(PR_GET_AUXV), falling back to reading
/// /proc/self/auxv), which a sandbox entered after attach forbids. It also touches
/// this thread's error buffer.
pub(crate) fn prime_lazy_state() {
    let _ = shmring::now_ns();
    let _ = std::time::Instant::now();
    touch_error_buffer();
}

pub(crate) struct ProducerState {
    producer: Producer,
    /// Bytes of the reservation open in `producer` (from `reserve_raw`), if any.
    reserved: Option<usize>,
}

/// A producer attached to a ring (opaque). One thread at a time.
pub struct shmring_producer {
    users: AtomicU32,
    state: UnsafeCell<ProducerState>,
}

impl Handle for shmring_producer {
    const KIND: Kind = Kind::Producer;
    const TYPE_NAME: &'static str = "shmring_producer";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
}

impl shmring_producer {
    /// SAFETY: call only while holding the exclusive lease.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &mut ProducerState {
        // SAFETY: the exclusive lease makes us the only user.
        unsafe { &mut *self.state.get() }
    }
}

/// Attaches a producer to a ring (takes one producer slot, held until close). May
/// allocate; nothing after it on the producer path does.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_attach(
    seg: *const shmring_segment,
    out: *mut *mut shmring_producer,
) -> shmring_status {
    entry("shmring_producer_attach", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let p = Producer::new(h.seg.clone()).map_err(core_err)?;
        prime_lazy_state();
        *out = register(Box::new(shmring_producer {
            users: AtomicU32::new(0),
            state: UnsafeCell::new(ProducerState {
                producer: p,
                reserved: None,
            }),
        }));
        ok()
    })
}

/// Detaches: aborts an open reservation and frees the slot. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_close(p: *mut shmring_producer) -> shmring_status {
    entry("shmring_producer_close", || close(p))
}

/// Sets what reserve() does when the ring is full: SHMRING_POLICY_FAIL (fail at
/// once with SHMRING_ERR_FULL) or SHMRING_POLICY_BLOCK (wait up to `timeout_ns`,
/// then SHMRING_TIMEOUT or SHMRING_ERR_NO_CONSUMER). Default: block 1 s.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_set_policy(
    p: *mut shmring_producer,
    policy: u32,
    timeout_ns: u64,
) -> shmring_status {
    entry("shmring_producer_set_policy", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let pol = match policy {
            SHMRING_POLICY_FAIL => FullPolicy::Fail,
            SHMRING_POLICY_BLOCK => FullPolicy::Block(Duration::from_nanos(timeout_ns)),
            _ => {
                return Err(fail!(
                    SHMRING_ERR_INVALID_ARGUMENT,
                    "policy {policy}: expected SHMRING_POLICY_FAIL or SHMRING_POLICY_BLOCK"
                ))
            }
        };
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        if st.producer.has_reservation() {
            return Err(fail!(
                SHMRING_ERR_STATE,
                "a reservation is open: commit or abort it first"
            ));
        }
        st.producer.set_policy(pol);
        ok()
    })
}

/// The producer slot this producer occupies.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_slot(
    p: *const shmring_producer,
    out: *mut u32,
) -> shmring_status {
    entry("shmring_producer_slot", || {
        let (h, _l) = lease(p)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        *out = st.producer.slot();
        ok()
    })
}

pub(crate) fn reserve_impl(
    p: *mut shmring_producer,
    len: usize,
    policy: Option<FullPolicy>,
    out: *mut shmring_reservation,
) -> Res<shmring_status> {
    let (h, _l) = lease(p as *const shmring_producer)?;
    let out = out_ptr(out, "out")?;
    // SAFETY: exclusive lease.
    let st = unsafe { h.state() };
    if st.producer.has_reservation() {
        return Err(fail!(
            SHMRING_ERR_STATE,
            "a reservation is already open on this producer: commit or abort it first"
        ));
    }
    let policy = policy.unwrap_or(st.producer.policy());
    let r = st.producer.reserve_raw(len, policy).map_err(core_err)?;
    st.reserved = Some(r.len);
    *out = shmring_reservation {
        data: r.ptr,
        len: r.len,
        seq: r.seq,
    };
    ok()
}

/// Reserves `len` payload bytes, following the producer's full-ring policy. On
/// SHMRING_OK, `out->data` points at `len` writable bytes in the ring: fill them in
/// place, then call shmring_producer_commit or shmring_producer_abort. One
/// reservation at a time per producer.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_reserve(
    p: *mut shmring_producer,
    len: usize,
    out: *mut shmring_reservation,
) -> shmring_status {
    entry("shmring_producer_reserve", || {
        reserve_impl(p, len, None, out)
    })
}

/// Like shmring_producer_reserve, waiting at most `timeout_ns` for space
/// (0: fail at once with SHMRING_ERR_FULL).
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_reserve_timeout(
    p: *mut shmring_producer,
    len: usize,
    timeout_ns: u64,
    out: *mut shmring_reservation,
) -> shmring_status {
    entry("shmring_producer_reserve_timeout", || {
        let pol = if timeout_ns == 0 {
            FullPolicy::Fail
        } else {
            FullPolicy::Block(Duration::from_nanos(timeout_ns))
        };
        reserve_impl(p, len, Some(pol), out)
    })
}

/// The length of the reservation open on this producer (and forgets it: commit and
/// abort both close it), or SHMRING_ERR_STATE.
pub(crate) fn open_reservation(st: &mut ProducerState) -> Res<usize> {
    match st.reserved.take() {
        Some(len) if st.producer.has_reservation() => Ok(len),
        _ => Err(fail!(
            SHMRING_ERR_STATE,
            "no reservation is open on this producer"
        )),
    }
}

/// Publishes the open reservation with `meta`. The reservation's data pointer is
/// invalid afterwards. SHMRING_ERR_ABANDONED: the claim was taken from us (nothing
/// published).
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_commit(
    p: *mut shmring_producer,
    meta: *const shmring_meta,
) -> shmring_status {
    entry("shmring_producer_commit", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let meta = in_ptr(meta, "meta")?.to_core();
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        let len = open_reservation(st)?;
        st.producer.commit_raw(len, meta).map_err(core_err)?;
        ok()
    })
}

/// Ends stream `stream` of `kind` (SHMRING_KIND_VIDEO or SHMRING_KIND_AUDIO):
/// commits an end-of-stream record, numbered after the stream's last record from
/// this producer. Readers end the stream there (shmringsrc sends EOS, `shmring
/// record` closes the stream's file). SHMRING_ERR_INVALID_ARGUMENT for another kind;
/// SHMRING_ERR_STATE while a reservation is open.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_end_stream(
    p: *mut shmring_producer,
    stream: u32,
    kind: u32,
) -> shmring_status {
    entry("shmring_producer_end_stream", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        if kind != shmring::media::kind::VIDEO && kind != shmring::media::kind::AUDIO {
            return Err(fail!(
                SHMRING_ERR_INVALID_ARGUMENT,
                "kind {kind} is not SHMRING_KIND_VIDEO or SHMRING_KIND_AUDIO"
            ));
        }
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        if st.producer.has_reservation() {
            return Err(fail!(
                SHMRING_ERR_STATE,
                "a reservation is open on this producer: commit or abort it first"
            ));
        }
        st.producer.end_stream(stream, kind).map_err(core_err)?;
        ok()
    })
}

/// Gives the open reservation's space back without publishing anything.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_abort(p: *mut shmring_producer) -> shmring_status {
    entry("shmring_producer_abort", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        open_reservation(st)?;
        st.producer.abort_raw();
        ok()
    })
}

/// Copies `len` bytes into the ring as one record (reserve + copy + commit).
/// `data` may be NULL when `len` is 0.
#[no_mangle]
pub unsafe extern "C" fn shmring_producer_send(
    p: *mut shmring_producer,
    data: *const u8,
    len: usize,
    meta: *const shmring_meta,
) -> shmring_status {
    entry("shmring_producer_send", || {
        let (h, _l) = lease(p as *const shmring_producer)?;
        let meta = in_ptr(meta, "meta")?.to_core();
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            if data.is_null() {
                return Err(fail!(SHMRING_ERR_NULL, "data is NULL"));
            }
            // SAFETY: the caller promises `len` readable bytes at `data`.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        // SAFETY: exclusive lease.
        let st = unsafe { h.state() };
        if st.producer.has_reservation() {
            return Err(fail!(
                SHMRING_ERR_STATE,
                "a reservation is open on this producer: commit or abort it first"
            ));
        }
        st.producer.send(bytes, meta).map_err(core_err)?;
        ok()
    })
}
