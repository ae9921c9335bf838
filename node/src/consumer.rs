//! `Consumer` and `Frame`.

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::BigInt;
use napi::{Env, JsFunction, JsObject, JsUnknown, ValueType};
use napi_derive::napi;
use shmring::media::{kind, EndOfStream, MediaHeader, MediaRecord};
use shmring::{
    AddressArgs, ArgNames, Consumer, ConsumerSettings, RawFrame, Segment, Setting, SettingKind,
    SettingValue, SharedConsumer, SharedFrame, Snapshot,
};

use crate::args::{self, js_name, Fd, Options};
use crate::errors::{core, error, millis, OrThrow, CLOSED, INVALID_ARG, RELEASED};
use crate::uvpoll::Watcher;
use crate::views::{self, WeakView};

/// Opens the ring `args` say, by the core's rules for which arguments go together
/// (its messages spelling them Node.js's way). The descriptors given (`fd`, `fds`,
/// `eventfdFd`, an `fd:` address) are taken over.
pub fn open(env: Env, args: AddressArgs) -> napi::Result<Arc<Segment>> {
    // Arguments that do not go together: the package's code for bad arguments.
    match args.check(&ArgNames::NODE) {
        Err(shmring::Error::Config(why)) => return Err(error(env, INVALID_ARG, &why)),
        r => r.map_err(|e| core(env, e))?,
    }
    // SAFETY: the package documents that the descriptors given are handed over.
    unsafe { args.address(&ArgNames::NODE) }
        .map_err(|e| core(env, e))?
        .open()
        .or_throw(env)
}

/// Held by a frame and by every view of it. The record goes back to the ring at
/// `release()`, or, for a frame never released, when the frame and every view of
/// it are collected. The frame (the core's `SharedFrame`) keeps the consumer and
/// the mapping: a closed consumer detaches once the last frame is given back.
struct Hold {
    frame: RefCell<Option<SharedFrame>>,
}

impl Hold {
    fn give_back(&self) {
        drop(self.frame.borrow_mut().take());
    }
}

/// The consumer of a ring.
#[napi(js_name = "Consumer")]
pub struct JsConsumer {
    shared: SharedConsumer,
    watcher: Option<Watcher>,
}

impl JsConsumer {
    fn with<R>(&self, env: Env, f: impl FnOnce(&Consumer) -> napi::Result<R>) -> napi::Result<R> {
        if self.shared.is_closed() {
            return Err(error(env, CLOSED, "the consumer is closed"));
        }
        self.shared.with(f).or_throw(env)?
    }

    pub(crate) fn segment(&self, env: Env) -> napi::Result<Arc<Segment>> {
        self.with(env, |c| Ok(c.segment().clone()))
    }

    fn frame(&self, env: Env, frame: Option<SharedFrame>) -> napi::Result<Option<Frame>> {
        let Some(frame) = frame else { return Ok(None) };
        let raw = frame.raw();
        let hold = Rc::new(Hold {
            frame: RefCell::new(Some(frame)),
        });
        let (media, end, media_error) =
            if raw.meta.kind == kind::VIDEO || raw.meta.kind == kind::AUDIO {
                // SAFETY: the record is held: ptr/len lie inside the ring until released.
                let payload = unsafe { std::slice::from_raw_parts(raw.ptr, raw.len) };
                match crate::media::read(raw.meta.kind, payload) {
                    Ok(MediaRecord::Frame(h)) => (Some(h), None, None),
                    Ok(MediaRecord::End(e)) => (None, Some(e), None),
                    Err(e) => (None, None, Some(e)),
                }
            } else {
                (None, None, None)
            };
        let _ = env;
        Ok(Some(Frame {
            hold: Some(hold),
            raw,
            media,
            end,
            media_error,
            view: None,
        }))
    }
}

#[napi]
impl JsConsumer {
    /// `new Consumer(options)`: the ring (`name`, `address`, `create`, `memfd`, the
    /// sizes, the descriptors) and the core's consumer options, by the names of the
    /// core's table (`ConsumerSettings::OPTIONS`: camelCase, durations in
    /// milliseconds with `Ms`). Anything absent is the core's default; a key that
    /// is none of these is an error.
    #[napi(constructor)]
    pub fn new(env: Env, init: Option<JsUnknown>) -> napi::Result<Self> {
        views::detect(env);
        let mut o = Options::new(env, init, "new Consumer()")?;
        let mut settings = ConsumerSettings::default();
        for (name, kind) in ConsumerSettings::OPTIONS {
            let key = js_name(name, kind == SettingKind::Duration);
            let value = match kind {
                SettingKind::Duration => o
                    .number(&key)?
                    .map(|v| Setting::from_f64(Some(v), Duration::from_millis(1), &key))
                    .transpose()
                    .map_err(|e| core(env, e))?
                    .map(SettingValue::Duration),
                SettingKind::Count => o.int::<u32>(&key)?.map(SettingValue::Count),
                SettingKind::Flag => o.boolean(&key)?.map(SettingValue::Flag),
            };
            if let Some(v) = value {
                settings.set(name, v).map_err(|e| core(env, e))?;
            }
        }
        let opts = settings.options().map_err(|e| core(env, e))?;
        let args = AddressArgs {
            address: o.string("address")?,
            name: o.string("name")?,
            fd: o.int::<Fd>("fd")?.map(|f| f.0),
            eventfd_fd: o.int::<Fd>("eventfdFd")?.map(|f| f.0),
            fds: o
                .ints::<Fd>("fds")?
                .map(|v| v.into_iter().map(|f| f.0).collect()),
            create: o.boolean("create")?.unwrap_or(false),
            memfd: o.boolean("memfd")?.unwrap_or(false),
            replace_stale: o.boolean("replaceStale")?,
            capacity: o.int::<u64>("capacity")?,
            max_record: o.int::<u64>("maxRecord")?,
            log_entries: o.int::<u32>("logEntries")?,
            max_producers: o.int::<u32>("maxProducers")?,
            eventfd: o.boolean("eventfd")?,
        };
        let persist = o.boolean("persist")?.unwrap_or(false);
        o.finish()?;
        let seg = open(env, args)?;
        if persist {
            seg.persist();
        }
        let c = Consumer::with_options(seg, opts).or_throw(env)?;
        Ok(JsConsumer {
            shared: SharedConsumer::new(c),
            watcher: None,
        })
    }

    /// The next frame, waiting up to `timeoutMs` (absent: forever). Blocks this
    /// thread while it waits; `null` on timeout.
    #[napi]
    pub fn next(&self, env: Env, timeout_ms: Option<JsUnknown>) -> napi::Result<Option<Frame>> {
        let t = args::opt(timeout_ms, |v| {
            millis(env, args::number(env, v, "timeoutMs")?, "timeoutMs")
        })?;
        let f = self.shared.next_timeout(t).or_throw(env)?;
        self.frame(env, f)
    }

    /// The next frame if one is ready, without waiting.
    #[napi]
    pub fn try_next(&self, env: Env) -> napi::Result<Option<Frame>> {
        let f = self.shared.try_next().or_throw(env)?;
        self.frame(env, f)
    }

    /// Eventfd rings: asks producers to signal the eventfd; `true` if something is
    /// already there (then call `tryNext()` instead of waiting). Pair every `false`
    /// with `disarm()` after the wait.
    #[napi]
    pub fn arm(&self, env: Env) -> napi::Result<bool> {
        self.with(env, |c| Ok(c.arm()))
    }

    /// Ends a wait begun by `arm()` and drains the eventfd.
    #[napi]
    pub fn disarm(&self, env: Env) -> napi::Result<()> {
        self.with(env, |c| {
            c.disarm();
            Ok(())
        })
    }

    /// Calls `callback(status)` from the event loop each time the ring's eventfd is
    /// readable, until `unwatch()`. While watching, the consumer keeps the loop alive.
    /// The poll handle is made once, with the first callback given; later calls
    /// restart it (no allocation per wait).
    #[napi]
    pub fn watch(&mut self, env: Env, callback: JsUnknown) -> napi::Result<()> {
        if callback.get_type()? != ValueType::Function {
            return Err(error(
                env,
                INVALID_ARG,
                "watch: callback must be a function",
            ));
        }
        // SAFETY: checked to be a function.
        let callback = unsafe { callback.cast::<JsFunction>() };
        let seg = self.segment(env)?;
        let Some(fd) = seg.eventfd() else {
            return Err(error(
                env,
                "SHMRING_EVENTFD_REQUIRED",
                &format!(
                    "ring {}: waiting in the event loop needs a ring created with eventfd: true",
                    seg.name()
                ),
            ));
        };
        if self.watcher.is_none() {
            self.watcher = Some(Watcher::new(env, fd.as_raw_fd(), callback)?);
        }
        if let Some(w) = self.watcher.as_mut() {
            w.start(env)?;
        }
        Ok(())
    }

    /// Stops `watch()`.
    #[napi]
    pub fn unwatch(&mut self) {
        if let Some(w) = self.watcher.as_mut() {
            w.stop();
        }
    }

    /// The consumer's liveness interval in milliseconds: how often a waiting
    /// consumer must look at the ring (a dead producer's claim is skipped then).
    #[napi(getter)]
    pub fn liveness_interval_ms(&self, env: Env) -> napi::Result<f64> {
        self.with(env, |c| {
            Ok(c.options().liveness_interval.as_secs_f64() * 1000.0)
        })
    }

    /// A snapshot of the ring's counters (names and meaning: `shmring::Stats::fields`).
    #[napi]
    pub fn stats(&self, env: Env) -> napi::Result<JsObject> {
        let s = self.with(env, |c| Ok(c.segment().stats()))?;
        stats_object(env, &s)
    }

    /// Resets this consumer made (it resets a corrupted ring by itself; frames held
    /// across a reset stay valid).
    #[napi(getter)]
    pub fn resets(&self, env: Env) -> napi::Result<f64> {
        self.with(env, |c| Ok(c.resets() as f64))
    }

    /// What the consumer has seen of the ring's health: resets, lastCorruption,
    /// stalledClaims, oldestPending ({slot, ms} or null).
    #[napi]
    pub fn health(&self, env: Env) -> napi::Result<JsObject> {
        let h = self.with(env, |c| Ok(c.health()))?;
        let mut o = env.create_object()?;
        o.set_named_property("resets", env.create_double(h.resets as f64)?)?;
        match h.last_corruption {
            Some(w) => o.set_named_property("lastCorruption", env.create_string(w)?)?,
            None => o.set_named_property("lastCorruption", env.get_null()?)?,
        }
        o.set_named_property("stalledClaims", env.create_double(h.stalled_claims as f64)?)?;
        match h.oldest_pending {
            Some((slot, age)) => {
                let mut p = env.create_object()?;
                p.set_named_property("slot", env.create_uint32(slot)?)?;
                p.set_named_property("ms", env.create_double(age.as_secs_f64() * 1000.0)?)?;
                o.set_named_property("oldestPending", p)?;
            }
            None => o.set_named_property("oldestPending", env.get_null()?)?,
        }
        Ok(o)
    }

    /// `[address, length]` of the ring's mapping in this process: every frame's
    /// payload lies inside it.
    #[napi]
    pub fn mapping(&self, env: Env) -> napi::Result<Vec<f64>> {
        let (p, l) = self.with(env, |c| Ok(c.segment().mapping()))?;
        Ok(vec![p as usize as f64, l as f64])
    }

    /// The ring's layout: capacity, maxRecord, logEntries, maxProducers, eventfd,
    /// segmentSize.
    #[napi]
    pub fn geometry(&self, env: Env) -> napi::Result<JsObject> {
        let seg = self.segment(env)?;
        geometry_object(env, &seg)
    }

    /// The segment's name: "/name", "memfd:name" or "fd:N".
    #[napi(getter)]
    pub fn name(&self, env: Env) -> napi::Result<String> {
        Ok(self.segment(env)?.name().to_string())
    }

    /// The segment's descriptor (hand it to producers); owned by the consumer.
    #[napi(getter)]
    pub fn fd(&self, env: Env) -> napi::Result<i32> {
        Ok(self.segment(env)?.fd().as_raw_fd())
    }

    /// The ring's descriptors, in the order a producer in another process needs
    /// them (`Producer.fromFds`); owned by the consumer.
    #[napi(getter)]
    pub fn descriptors(&self, env: Env) -> napi::Result<Vec<i32>> {
        Ok(self
            .segment(env)?
            .descriptors()
            .iter()
            .map(|f| f.as_raw_fd())
            .collect())
    }

    /// The ring's eventfd (eventfd rings), or null; owned by the consumer.
    #[napi(getter)]
    pub fn eventfd_fd(&self, env: Env) -> napi::Result<Option<i32>> {
        Ok(self.segment(env)?.eventfd().map(|f| f.as_raw_fd()))
    }

    /// Frames handed out and not yet given back to the ring.
    #[napi(getter)]
    pub fn outstanding(&self, env: Env) -> napi::Result<f64> {
        self.with(env, |c| Ok(c.outstanding() as f64))
    }

    /// Keep a named ring created here after the consumer is closed.
    #[napi]
    pub fn persist(&self, env: Env) -> napi::Result<()> {
        self.segment(env)?.persist();
        Ok(())
    }

    /// Stops consuming. Frames still alive stay valid; the ring is detached (and a
    /// named ring created here unlinked) once they are released. Idempotent.
    #[napi]
    pub fn close(&mut self) {
        self.watcher = None;
        self.shared.close();
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.shared.is_closed()
    }
}

/// A snapshot of counters as an object: the names are the core's
/// (`Snapshot::fields`); flags become booleans.
pub fn stats_object(env: Env, s: &impl Snapshot) -> napi::Result<JsObject> {
    let mut o = env.create_object()?;
    for f in s.fields() {
        match f.kind {
            shmring::FieldKind::Flag => {
                o.set_named_property(f.name, env.get_boolean(f.value != 0)?)?
            }
            shmring::FieldKind::Counter | shmring::FieldKind::Gauge => {
                o.set_named_property(f.name, env.create_double(f.value as f64)?)?
            }
        }
    }
    Ok(o)
}

pub fn geometry_object(env: Env, seg: &Segment) -> napi::Result<JsObject> {
    let g = seg.geometry();
    let mut o = env.create_object()?;
    o.set_named_property("capacity", env.create_double(g.capacity as f64)?)?;
    o.set_named_property("maxRecord", env.create_double(g.max_record as f64)?)?;
    o.set_named_property("logEntries", env.create_uint32(g.log_entries)?)?;
    o.set_named_property("maxProducers", env.create_uint32(g.max_producers)?)?;
    o.set_named_property("eventfd", env.get_boolean(seg.uses_eventfd())?)?;
    o.set_named_property("segmentSize", env.create_double(g.total_size as f64)?)?;
    Ok(o)
}

/// A record received from the ring. `data` is a `Uint8Array` into the ring (or a
/// copy where V8 forbids external buffers, see `zeroCopy`).
#[napi]
pub struct Frame {
    hold: Option<Rc<Hold>>,
    raw: RawFrame,
    media: Option<MediaHeader>,
    end: Option<EndOfStream>,
    media_error: Option<String>,
    view: Option<WeakView>,
}

impl Frame {
    fn check_held(&self, env: Env) -> napi::Result<&Rc<Hold>> {
        self.hold.as_ref().ok_or_else(|| {
            error(
                env,
                RELEASED,
                &format!(
                    "frame {} (stream {}) was released; its payload may have been reused",
                    self.raw.seq, self.raw.meta.stream
                ),
            )
        })
    }
}

#[napi]
impl Frame {
    /// The payload: a `Uint8Array` into the ring (zero copy), the same object while
    /// JavaScript holds it. A frame collected without `release()` goes back to the
    /// ring only once its views are collected too.
    #[napi(getter)]
    pub fn data(&mut self, env: Env) -> napi::Result<JsUnknown> {
        let hold = self.check_held(env)?.clone();
        if let Some(v) = self.view.as_ref().and_then(|w| w.get(env)) {
            return Ok(v);
        }
        let v = if views::zero_copy() {
            // SAFETY: the record stays held (and the mapping mapped: Hold → Ring →
            // Consumer → Segment) for as long as the view keeps `hold`.
            unsafe {
                views::external_view(env, self.raw.ptr as *mut u8, self.raw.len, Box::new(hold))?
            }
        } else {
            // SAFETY: the record is held; ptr/len lie inside the ring.
            unsafe { views::copied_view(env, self.raw.ptr, self.raw.len)? }
        };
        self.view = Some(WeakView::new(env, &v)?);
        Ok(v.into_unknown(env))
    }

    /// Gives the record back to the ring now, and detaches every view of it: typed
    /// arrays over the payload (`data`, `planes()`, subarrays) become empty, so no
    /// JavaScript access can reach memory a producer may reuse. Finish asynchronous
    /// work that reads a view (a pending write) before releasing. Idempotent.
    #[napi]
    pub fn release(&mut self, env: Env) {
        if let Some(h) = self.hold.take() {
            if let Some(v) = self.view.take() {
                v.detach(env);
            }
            h.give_back();
        }
    }

    /// True once `release()` was called.
    #[napi(getter)]
    pub fn released(&self) -> bool {
        self.hold.is_none()
    }

    #[napi(getter)]
    pub fn seq(&self) -> f64 {
        self.raw.seq as f64
    }

    #[napi(getter)]
    pub fn length(&self) -> f64 {
        self.raw.len as f64
    }

    #[napi(getter)]
    pub fn stream(&self) -> u32 {
        self.raw.meta.stream
    }

    #[napi(getter)]
    pub fn kind(&self) -> u32 {
        self.raw.meta.kind
    }

    #[napi(getter)]
    pub fn flags(&self) -> u32 {
        self.raw.meta.flags
    }

    /// Capture time in nanoseconds (CLOCK_MONOTONIC unless the producer chose).
    #[napi(getter)]
    pub fn timestamp_ns(&self) -> BigInt {
        BigInt::from(self.raw.meta.timestamp_ns)
    }

    /// Payload address in this process (inside `consumer.mapping()`).
    #[napi(getter)]
    pub fn address(&self) -> f64 {
        self.raw.ptr as usize as f64
    }

    /// The media header (video and audio records), or null; see `mediaError`.
    #[napi(getter)]
    pub fn media(&self, env: Env) -> napi::Result<Option<JsObject>> {
        self.media
            .as_ref()
            .map(|h| crate::media::header_object(env, h))
            .transpose()
    }

    /// An end-of-stream record (the producer ended this stream of this kind): its
    /// `sequence` and `ptsNs`; null for every other record.
    #[napi(getter)]
    pub fn end(&self, env: Env) -> napi::Result<Option<JsObject>> {
        self.end
            .map(|e| {
                let mut o = env.create_object()?;
                o.set_named_property(
                    "sequence",
                    env.create_bigint_from_u64(e.sequence)?.into_unknown()?,
                )?;
                o.set_named_property(
                    "ptsNs",
                    env.create_bigint_from_u64(e.pts_ns)?.into_unknown()?,
                )?;
                Ok(o)
            })
            .transpose()
    }

    /// Why a video or audio record's media header was rejected, or null.
    #[napi(getter)]
    pub fn media_error(&self) -> Option<String> {
        self.media_error.clone()
    }
}
