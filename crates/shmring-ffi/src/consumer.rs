//! The consumer: frames, release, resets, wake-ups.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use shmring::{Consumer, ConsumerOptions, ConsumerSettings, Setting, SharedConsumer};

use crate::handles::*;
use crate::status::shmring_status::*;
use crate::status::*;
use crate::{producer::*, segment::*};

/// A frame handed out by a consumer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_frame {
    /// The payload, in shared memory (64-byte aligned, read-only). Valid until the
    /// frame is released or its consumer is closed. A hostile producer could still
    /// change these bytes: copy what you validate. (A tap reader's: the caller's
    /// buffer, shmring_reader_next.)
    pub data: *const u8,
    pub len: usize,
    pub meta: shmring_meta,
    /// Identifies the frame for release.
    pub seq: u64,
    /// Identifies the consumer that handed it out (checked at release).
    pub owner: u64,
}

/// Consumer tuning, the core's `ConsumerOptions` (the same names in every
/// binding). Initialise with shmring_consumer_options_init(). In every `*_ns`
/// field, 0 means the library's default, and SHMRING_NEVER turns off what is
/// optional (overtaking, the latency budget, the claim timeout, the age limit;
/// the other two cannot be never).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_consumer_options {
    /// How often a pending claim's producer is checked for liveness (default 50 ms).
    pub liveness_interval_ns: u64,
    /// Polls to spin before sleeping in a blocking wait (default 64; 0: sleep at
    /// once).
    pub spin: u32,
    /// Non-zero: report SHMRING_ERR_CORRUPT and wait for shmring_consumer_reset()
    /// instead of resetting the ring by itself (default 0).
    pub manual_reset: u32,
    /// Deliver committed records behind a claim pending this long (default: 100 ms;
    /// SHMRING_NEVER: never, strict claim order). Each producer's records stay in its
    /// commit order.
    pub overtake_after_ns: u64,
    /// The ring's consumer expels a tethered consumer whose read cursor stays
    /// behind its own without moving for this long (it then gets
    /// SHMRING_ERR_DETACHED; default 500 ms). Ignored by a tethered consumer (it is
    /// the ring's consumer's limit).
    pub tether_stall_limit_ns: u64,
    /// Let a record wait up to this long before the consumer sees it, so one
    /// wake-up serves many records (default: never, producers wake a sleeping
    /// consumer at every commit; see the core's `ConsumerOptions::latency_budget`).
    pub latency_budget_ns: u64,
    /// Take back a claim still pending this long after the consumer first saw it,
    /// whoever holds it: its producer's commit then fails with
    /// SHMRING_ERR_ABANDONED (default 500 ms; see the core's
    /// `ConsumerOptions::claim_timeout`). SHMRING_NEVER: wait for live producers for
    /// ever (trusted producers only).
    pub claim_timeout_ns: u64,
    /// Release unread (counted in `records_filtered`) a record older than this
    /// when the consumer reaches it, by its timestamp on CLOCK_MONOTONIC
    /// (shmring_now_ns()), so a live viewer that fell behind skips to fresh
    /// records (default: off, every record; see the core's
    /// `ConsumerOptions::max_age`).
    pub max_age_ns: u64,
    /// Which fields filter the records handed out: 0 (the default, as in a zeroed
    /// struct) takes every record; SHMRING_FILTER_KIND, SHMRING_FILTER_STREAM or
    /// both (`|`) take only records of `kind` and/or `stream`. Records a filter
    /// refuses are released at once, unread (their space returns to producers), and
    /// counted in `records_filtered` (shmring_stats, or the tethered consumer's
    /// shmring_tether_info), not in `records_consumed`.
    pub filter: u32,
    /// With SHMRING_FILTER_KIND: only records of this kind (SHMRING_KIND_VIDEO, ...).
    pub kind: u32,
    /// With SHMRING_FILTER_STREAM: only records of this stream.
    pub stream: u32,
}

/// `shmring_consumer_options.filter`: filter by `kind`.
pub const SHMRING_FILTER_KIND: u32 = 1;
/// `shmring_consumer_options.filter`: filter by `stream`.
pub const SHMRING_FILTER_STREAM: u32 = 2;

/// A duration option meaning "never": the option is off (see
/// shmring_consumer_options).
pub const SHMRING_NEVER: u64 = u64::MAX;

/// Pass as a timeout to wait forever.
pub const SHMRING_WAIT_FOREVER: i64 = -1;

pub(crate) static NEXT_CONSUMER_ID: AtomicU64 = AtomicU64::new(1);

/// The consumer of a ring (opaque). One thread at a time, except
/// shmring_consumer_release, which any thread may call at any time.
pub struct shmring_consumer {
    users: AtomicU32,
    /// Calls of shmring_consumer_release under way (they take no exclusive lease).
    releasers: AtomicU32,
    id: u64,
    /// The core's shared consumer: a release from another thread while one waits
    /// in shmring_consumer_next is queued and applied by that wait.
    consumer: SharedConsumer,
}

impl Handle for shmring_consumer {
    const KIND: Kind = Kind::Consumer;
    const TYPE_NAME: &'static str = "shmring_consumer";
    const EXCLUSIVE: bool = true;
    fn users(&self) -> &AtomicU32 {
        &self.users
    }
    fn busy(&self) -> bool {
        // Acquire: pairs with the Release decrements when leases end.
        self.users.load(Ordering::Acquire) != 0 || self.releasers.load(Ordering::Acquire) != 0
    }
}

impl shmring_consumer {
    /// Runs `f` on the consumer (the caller holds the exclusive lease, so no
    /// receive is under way: it does not wait).
    fn with<R>(&self, f: impl FnOnce(&Consumer) -> R) -> Res<R> {
        self.consumer.with(f).map_err(core_err)
    }
}

/// Fills `opts` with the library's defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_options_init(
    opts: *mut shmring_consumer_options,
) -> shmring_status {
    entry("shmring_consumer_options_init", || {
        let d = ConsumerOptions::default();
        *out_ptr(opts, "opts")? = shmring_consumer_options {
            liveness_interval_ns: d.liveness_interval.as_nanos() as u64,
            spin: d.spin,
            manual_reset: u32::from(!d.auto_reset),
            overtake_after_ns: d.overtake_after.map_or(0, |t| t.as_nanos() as u64),
            tether_stall_limit_ns: d.tether_stall_limit.as_nanos() as u64,
            latency_budget_ns: d.latency_budget.map_or(0, |t| t.as_nanos() as u64),
            // An option off by default is 0 (the default); one on by default, its
            // duration.
            claim_timeout_ns: d.claim_timeout.map_or(0, |t| t.as_nanos() as u64),
            max_age_ns: d.max_age.map_or(0, |t| t.as_nanos() as u64),
            filter: d.filter.kind.map_or(0, |_| SHMRING_FILTER_KIND)
                | d.filter.stream.map_or(0, |_| SHMRING_FILTER_STREAM),
            kind: d.filter.kind.unwrap_or(0),
            stream: d.filter.stream.unwrap_or(0),
        };
        ok()
    })
}

/// The core's options from the C struct (NULL: the defaults), by the core's rules
/// (`shmring::Setting::from_nanos`: 0 the default, SHMRING_NEVER never).
pub(crate) fn core_options(opts: *const shmring_consumer_options) -> Res<ConsumerOptions> {
    if opts.is_null() {
        return Ok(ConsumerOptions::default());
    }
    // SAFETY: non-null; the caller promises a valid struct.
    let o = unsafe { &*opts };
    if o.filter & !(SHMRING_FILTER_KIND | SHMRING_FILTER_STREAM) != 0 {
        return Err(fail!(
            SHMRING_ERR_INVALID_ARGUMENT,
            "filter {:#x}: only SHMRING_FILTER_KIND (1) and SHMRING_FILTER_STREAM (2) are filters",
            o.filter
        ));
    }
    ConsumerSettings {
        liveness_interval: Setting::from_nanos(o.liveness_interval_ns),
        spin: Some(o.spin),
        overtake_after: Setting::from_nanos(o.overtake_after_ns),
        manual_reset: o.manual_reset != 0,
        tether_stall_limit: Setting::from_nanos(o.tether_stall_limit_ns),
        latency_budget: Setting::from_nanos(o.latency_budget_ns),
        claim_timeout: Setting::from_nanos(o.claim_timeout_ns),
        max_age: Setting::from_nanos(o.max_age_ns),
        kind: (o.filter & SHMRING_FILTER_KIND != 0).then_some(o.kind),
        stream: (o.filter & SHMRING_FILTER_STREAM != 0).then_some(o.stream),
    }
    .options()
    .map_err(core_err)
}

fn new_consumer(c: Consumer, out: &mut *mut shmring_consumer) -> Res<shmring_status> {
    *out = register(Box::new(shmring_consumer {
        users: AtomicU32::new(0),
        releasers: AtomicU32::new(0),
        id: NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed),
        consumer: SharedConsumer::new(c),
    }));
    ok()
}

/// Becomes the ring's consumer (taking over from a dead one). `opts` may be NULL
/// for the defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_attach(
    seg: *const shmring_segment,
    opts: *const shmring_consumer_options,
    out: *mut *mut shmring_consumer,
) -> shmring_status {
    entry("shmring_consumer_attach", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let c = Consumer::with_options(h.seg.clone(), core_options(opts)?).map_err(core_err)?;
        new_consumer(c, out)
    })
}

/// Attaches a *tethered* consumer: a full consumer beside the ring's own, with its
/// own cursors, used like one (shmring_consumer_next, _release, _close). It gets
/// every record from where it starts: the ring consumer's read cursor when that
/// consumer next looks at the ring and adopts it (at its next poll, or within its
/// liveness interval when idle); until then it sees no records. Its frames hold
/// their space until released, like the ring consumer's. The ring's consumer must
/// be attached and alive (SHMRING_ERR_NO_CONSUMER); SHMRING_ERR_NO_TETHER_LINE when
/// every line is taken. The ring's consumer expels a tethered consumer that dies
/// or stops releasing (see `tether_stall_limit_ns`): its calls then return
/// SHMRING_ERR_DETACHED; close it and attach again. It cannot reset the ring, and
/// waits on its own wake-up (not the eventfd: shmring_consumer_arm refuses it).
/// `opts` may be NULL for the defaults.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_attach_tethered(
    seg: *const shmring_segment,
    opts: *const shmring_consumer_options,
    out: *mut *mut shmring_consumer,
) -> shmring_status {
    entry("shmring_consumer_attach_tethered", || {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let (h, _l) = lease(seg)?;
        let c = Consumer::tethered(h.seg.clone(), core_options(opts)?).map_err(core_err)?;
        new_consumer(c, out)
    })
}

/// `*out` receives 1 for a tethered consumer (shmring_consumer_attach_tethered),
/// 0 for the ring's consumer.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_is_tethered(
    c: *const shmring_consumer,
    out: *mut u32,
) -> shmring_status {
    entry("shmring_consumer_is_tethered", || {
        let out = out_ptr(out, "out")?;
        let (h, _l) = lease(c)?;
        *out = u32::from(h.with(|c| c.is_tethered())?);
        ok()
    })
}

/// Detaches the consumer. Every frame it handed out becomes invalid. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_close(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_close", || close(c))
}

/// The next frame, waiting up to `timeout_ns` (0: do not wait; negative, e.g.
/// SHMRING_WAIT_FOREVER: no limit). SHMRING_OK: `*out` is a frame, valid until
/// shmring_consumer_release (or consumer close). SHMRING_TIMEOUT: none arrived.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_next(
    c: *mut shmring_consumer,
    timeout_ns: i64,
    out: *mut shmring_frame,
) -> shmring_status {
    entry("shmring_consumer_next", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        next_frame(&h.consumer, h.id, timeout_ns, out_ptr(out, "out")?)
    })
}

/// The next frame of `c` into `out` (shmring_consumer_next, shmring_reader_next of
/// a consumer), handed out by the handle numbered `owner`.
pub(crate) fn next_frame(
    c: &SharedConsumer,
    owner: u64,
    timeout_ns: i64,
    out: &mut shmring_frame,
) -> Res<shmring_status> {
    let timeout = (timeout_ns >= 0).then(|| Duration::from_nanos(timeout_ns as u64));
    match c.next_raw(timeout).map_err(core_err)? {
        Some(f) => {
            *out = shmring_frame {
                data: f.ptr,
                len: f.len,
                meta: shmring_meta::from_core(f.meta),
                seq: f.seq,
                owner,
            };
            ok()
        }
        None => {
            set_error(format_args!("no frame within {timeout_ns} ns"));
            Ok(SHMRING_TIMEOUT)
        }
    }
}

/// Releases a frame handed out by this consumer; frames may be released in any
/// order, from any thread, also while another thread waits in
/// shmring_consumer_next (the release is then queued, and that wait gives the
/// space back to producers at once). SHMRING_ERR_NOT_HELD: handed out by another
/// consumer, or released already (detected when the consumer is not in another
/// thread's call; a repeated release queued meanwhile is ignored). The frame's data
/// pointer is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_release(
    c: *mut shmring_consumer,
    frame: *const shmring_frame,
) -> shmring_status {
    entry("shmring_consumer_release", || {
        let (h, _l) = lease_shared(c as *const shmring_consumer, |h| &h.releasers)?;
        release_frame(Some(&h.consumer), h.id, frame)
    })
}

/// Releases `frame`, which the handle numbered `owner` handed out, to `c`
/// (shmring_consumer_release, shmring_reader_release; `None`: a tap's copy,
/// nothing to release).
pub(crate) fn release_frame(
    c: Option<&SharedConsumer>,
    owner: u64,
    frame: *const shmring_frame,
) -> Res<shmring_status> {
    let f = in_ptr(frame, "frame")?;
    if f.owner != owner {
        return Err(fail!(
            SHMRING_ERR_NOT_HELD,
            "frame {} was handed out by another consumer or reader (owner {}, this is {owner})",
            f.seq,
            f.owner,
        ));
    }
    if let Some(c) = c {
        c.release_raw(f.seq).map_err(core_err)?;
    }
    ok()
}

/// Frames handed out and not yet released.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_outstanding(
    c: *mut shmring_consumer,
    out: *mut u64,
) -> shmring_status {
    entry("shmring_consumer_outstanding", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let out = out_ptr(out, "out")?;
        *out = h.with(|c| c.outstanding())?;
        ok()
    })
}

/// Resets the ring by hand (a consumer does this by itself on corruption unless
/// `manual_reset` is set): forgets every claim in flight. Frames still held stay
/// valid; release them as usual. SHMRING_ERR_CORRUPT while frames held from before
/// an earlier reset are still out. The ring's consumer only: a tethered consumer
/// gets SHMRING_ERR_CONFIG.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_reset(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_reset", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        h.consumer
            .with_mut(|c| c.reset())
            .map_err(core_err)?
            .map_err(core_err)?;
        ok()
    })
}

/// `*resets` receives how many times this consumer reset the ring (by itself or
/// through shmring_consumer_reset()); a change means corruption was found and
/// recovered from. If `cause` is not NULL, why the last reset was made is copied
/// into it as a NUL-terminated string, truncated to `cause_len` bytes ("" if none).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_resets(
    c: *const shmring_consumer,
    resets: *mut u64,
    cause: *mut c_char,
    cause_len: usize,
) -> shmring_status {
    entry("shmring_consumer_resets", || {
        let out = out_ptr(resets, "resets")?;
        let (h, _l) = lease(c)?;
        let health = h.with(|c| c.health())?;
        *out = health.resets;
        if !cause.is_null() && cause_len > 0 {
            let text = health.last_corruption.unwrap_or("").as_bytes();
            let n = text.len().min(cause_len - 1);
            // SAFETY: the caller promises `cause_len` writable bytes at `cause`; we
            // write n + 1 <= cause_len of them.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), cause.cast::<u8>(), n);
                *cause.add(n) = 0;
            }
        }
        ok()
    })
}

/// Frees the slots of dead producers that hold nothing; `*freed` (may be NULL)
/// receives how many.
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_reap(
    c: *mut shmring_consumer,
    freed: *mut u32,
) -> shmring_status {
    entry("shmring_consumer_reap", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let n = h.with(|c| c.reap())?;
        if !freed.is_null() {
            // SAFETY: non-null, the caller promises a writable u32.
            unsafe { *freed = n };
        }
        ok()
    })
}

/// The eventfd wakes the ring's consumer only: a tethered one waits in
/// shmring_consumer_next.
fn ring_consumer_only(c: &Consumer) -> Res<()> {
    if c.is_tethered() {
        return Err(fail!(
            SHMRING_ERR_STATE,
            "a tethered consumer of {} does not wait on the eventfd; wait in shmring_consumer_next",
            c.segment().name()
        ));
    }
    Ok(())
}

/// For an eventfd ring driven by epoll/poll: announces that the consumer is about to
/// wait. `*ready` non-zero: a frame is already there (do not wait; call next).
/// Otherwise wait for the eventfd, then call shmring_consumer_disarm. The ring's
/// consumer only (SHMRING_ERR_STATE for a tethered one).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_arm(
    c: *mut shmring_consumer,
    ready: *mut u32,
) -> shmring_status {
    entry("shmring_consumer_arm", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        let ready = out_ptr(ready, "ready")?;
        *ready = h.with(|c| ring_consumer_only(c).map(|()| c.arm() as u32))??;
        ok()
    })
}

/// Ends a wait begun with shmring_consumer_arm (clears the flag, drains the eventfd).
#[no_mangle]
pub unsafe extern "C" fn shmring_consumer_disarm(c: *mut shmring_consumer) -> shmring_status {
    entry("shmring_consumer_disarm", || {
        let (h, _l) = lease(c as *const shmring_consumer)?;
        h.with(|c| ring_consumer_only(c).map(|()| c.disarm()))??;
        ok()
    })
}
