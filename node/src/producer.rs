//! `Producer` and `Reservation`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use napi::{sys, Env, JsObject, JsTypedArray, JsUnknown, NapiValue, TypedArrayType, ValueType};
use napi_derive::napi;
use shmring::media::{kind, MediaHeader, SEQUENCE_AUTO};
use shmring::{Address, AddressArgs, FullPolicy, Meta, Producer, Segment};

use crate::args::{self, Fd, Options};
use crate::consumer::{open, stats_object, JsConsumer};
use crate::errors::{error, millis, OrThrow, CLOSED, INVALID_ARG, RELEASED};
use crate::views::{self, WeakView};

/// Options of the Producer factories: `{ eventfdFd, onFull, timeoutMs }`.
struct ProducerInit {
    /// The ring's eventfd (rings created with `eventfd: true`); taken over.
    eventfd_fd: Option<i32>,
    /// When the ring is full: "block" (wait up to `timeoutMs`) or "fail" (throw
    /// `SHMRING_FULL` at once). Absent: the core's default policy.
    on_full: Option<String>,
    timeout_ms: Option<f64>,
}

impl ProducerInit {
    fn read(env: Env, v: Option<JsUnknown>, call: &'static str) -> napi::Result<ProducerInit> {
        let mut o = Options::new(env, v, call)?;
        let init = ProducerInit {
            eventfd_fd: o.int::<Fd>("eventfdFd")?.map(|f| f.0),
            on_full: o.string("onFull")?,
            timeout_ms: o.number("timeoutMs")?,
        };
        o.finish()?;
        Ok(init)
    }

    /// For a factory whose ring comes with its eventfd: `eventfdFd` is refused,
    /// saying `why`.
    fn without_eventfd(self, env: Env, why: &str) -> napi::Result<ProducerInit> {
        if self.eventfd_fd.is_some() {
            return Err(error(
                env,
                INVALID_ARG,
                &format!("{why}; leave eventfdFd out"),
            ));
        }
        Ok(self)
    }
}

/// A call's `{ timeoutMs }`: absent, the producer's policy; 0: fail at once if
/// full; > 0: wait that long.
fn wait_of(env: Env, v: Option<JsUnknown>, call: &'static str) -> napi::Result<Option<f64>> {
    let mut o = Options::new(env, v, call)?;
    let t = o.number("timeoutMs")?;
    o.finish()?;
    Ok(t)
}

/// The producer and the seq of its open reservation, shared with reservations and
/// their views.
struct Core {
    producer: RefCell<Option<Producer>>,
    open: Cell<Option<u64>>,
}

/// Held by a reservation and every view of it: when the last is gone and the
/// reservation is still open, it is aborted (the consumer never sees it).
struct Hold {
    core: Rc<Core>,
    seq: u64,
    /// Keeps the mapping while a (detached) view may still be in use.
    _mapping: Arc<Segment>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.core.open.get() == Some(self.seq) {
            self.core.open.set(None);
            if let Ok(mut p) = self.core.producer.try_borrow_mut() {
                if let Some(p) = p.as_mut() {
                    p.abort_raw();
                }
            }
        }
    }
}

/// A record's metadata, `{ stream, kind, timestampNs, flags }`: anything absent is
/// 0 (the kind `kind_`), and the timestamp the commit time.
fn meta_of(env: Env, v: Option<JsUnknown>, kind_: u32, call: &'static str) -> napi::Result<Meta> {
    let mut o = Options::new(env, v, call)?;
    let meta = Meta {
        stream: o.int("stream")?.unwrap_or(0),
        kind: o.int("kind")?.unwrap_or(kind_),
        timestamp_ns: o.big_u64("timestampNs")?.unwrap_or_else(shmring::now_ns),
        flags: o.int("flags")?.unwrap_or(0),
    };
    o.finish()?;
    Ok(meta)
}

fn policy_of(
    env: Env,
    on_full: Option<&str>,
    timeout_ms: Option<f64>,
    current: FullPolicy,
) -> napi::Result<FullPolicy> {
    match (on_full, timeout_ms) {
        (Some("fail"), _) => Ok(FullPolicy::Fail),
        (Some("block"), Some(t)) => Ok(FullPolicy::Block(millis(env, t, "timeoutMs")?)),
        (Some("block"), None) => match current {
            FullPolicy::Block(d) => Ok(FullPolicy::Block(d)),
            FullPolicy::Fail => Err(error(
                env,
                INVALID_ARG,
                "onFull \"block\" needs timeoutMs (the producer's policy was \"fail\")",
            )),
        },
        (None, None) => Ok(current),
        (None, Some(0.0)) => Ok(FullPolicy::Fail),
        (None, Some(t)) => Ok(FullPolicy::Block(millis(env, t, "timeoutMs")?)),
        (Some(o), _) => Err(error(
            env,
            INVALID_ARG,
            &format!("onFull must be \"block\" or \"fail\", got {o:?}"),
        )),
    }
}

/// A producer attached to a ring: writes records in place (zero copy where V8
/// allows; see `zeroCopy`). Make one with `Producer.open(name)`,
/// `Producer.fromFd(fd)` or `Producer.forConsumer(consumer)`.
#[napi(js_name = "Producer")]
pub struct JsProducer {
    core: Rc<Core>,
}

impl JsProducer {
    fn attach(env: Env, seg: Arc<Segment>, init: ProducerInit) -> napi::Result<JsProducer> {
        views::detect(env);
        let mut p = Producer::new(seg).or_throw(env)?;
        let pol = policy_of(env, init.on_full.as_deref(), init.timeout_ms, p.policy())?;
        p.set_policy(pol);
        Ok(JsProducer {
            core: Rc::new(Core {
                producer: RefCell::new(Some(p)),
                open: Cell::new(None),
            }),
        })
    }

    fn with<R>(
        &self,
        env: Env,
        f: impl FnOnce(&mut Producer) -> napi::Result<R>,
    ) -> napi::Result<R> {
        let mut g = self.core.producer.borrow_mut();
        match g.as_mut() {
            Some(p) => f(p),
            None => Err(error(env, CLOSED, "the producer is closed")),
        }
    }

    fn reserve_impl(
        &self,
        env: Env,
        len: u64,
        timeout_ms: Option<f64>,
        media: Option<MediaHeader>,
    ) -> napi::Result<Reservation> {
        let len = usize::try_from(len).map_err(|_| error(env, INVALID_ARG, "length too large"))?;
        let mapping = self.with(env, |p| Ok(p.segment().clone()))?;
        let raw = self.with(env, |p| {
            let policy = policy_of(env, None, timeout_ms, p.policy())?;
            let raw = p.reserve_raw(len, policy).or_throw(env)?;
            if let Some(h) = &media {
                // The record is payload_len() bytes: write the header in place, then
                // let the core validate what we wrote (it rejects sizes that do not
                // fit the header's fields).
                // SAFETY: ptr..ptr+len is our open reservation.
                let payload = unsafe { std::slice::from_raw_parts_mut(raw.ptr, raw.len) };
                let ok = h
                    .write_to(payload)
                    .map_err(|e| e.to_string())
                    .and_then(|_| {
                        MediaHeader::parse(payload)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = ok {
                    p.abort_raw();
                    return Err(error(env, INVALID_ARG, &e));
                }
            }
            Ok(raw)
        })?;
        self.core.open.set(Some(raw.seq));
        let hold = Rc::new(Hold {
            core: self.core.clone(),
            seq: raw.seq,
            _mapping: mapping,
        });
        let copy = if views::zero_copy() {
            None
        } else {
            // The copy path: JavaScript fills a buffer in its own heap; commit copies
            // it into the ring. The media header goes there too.
            let (v, data) = views::new_view(env, raw.len)?;
            if let Some(h) = &media {
                // SAFETY: `data` is a fresh buffer of raw.len >= payload_len() bytes.
                let b = unsafe { std::slice::from_raw_parts_mut(data, raw.len) };
                let _ = h.write_to(b);
            }
            let mut r = std::ptr::null_mut();
            // SAFETY: live env and value; a strong reference (count 1), deleted at
            // commit, abort or drop.
            unsafe { sys::napi_create_reference(env.raw(), v.array, 1, &mut r) };
            Some((
                CopyBuf {
                    env: env.raw(),
                    r,
                    data,
                },
                WeakView::new(env, &v)?,
            ))
        };
        let (copy, view) = match copy {
            Some((c, v)) => (Some(c), Some(v)),
            None => (None, None),
        };
        Ok(Reservation {
            hold: Some(hold),
            ptr: raw.ptr,
            len: raw.len,
            media,
            view,
            copy,
        })
    }
}

#[napi]
impl JsProducer {
    /// Attaches to the named ring `/dev/shm/NAME`.
    #[napi(factory)]
    pub fn open(env: Env, name: JsUnknown, init: Option<JsUnknown>) -> napi::Result<Self> {
        let name = args::string(env, &name, "name")?;
        let mut init = ProducerInit::read(env, init, "Producer.open()")?;
        let seg = open(
            env,
            AddressArgs {
                name: Some(name),
                eventfd_fd: init.eventfd_fd.take(),
                ..Default::default()
            },
        )?;
        Self::attach(env, seg, init)
    }

    /// Attaches to the ring `address` names: the text every binding and the
    /// `shmring` command take (`NAME`, `unix:PATH`, `fd:SEG[,LOCK][,EVENTFD]` (taken
    /// over), `create:...`, `memfd:...`), parsed by the core.
    #[napi(factory)]
    pub fn from_address(
        env: Env,
        address: JsUnknown,
        init: Option<JsUnknown>,
    ) -> napi::Result<Self> {
        let address = args::string(env, &address, "address")?;
        let mut init = ProducerInit::read(env, init, "Producer.fromAddress()")?;
        let seg = open(
            env,
            AddressArgs {
                address: Some(address),
                eventfd_fd: init.eventfd_fd.take(),
                ..Default::default()
            },
        )?;
        Self::attach(env, seg, init)
    }

    /// Attaches to a named ring received as a descriptor (inherited or passed);
    /// the producer takes the descriptor (and `eventfdFd`) over. A memfd ring
    /// needs all its descriptors: [`Producer::from_fds`].
    #[napi(factory)]
    pub fn from_fd(env: Env, fd: JsUnknown, init: Option<JsUnknown>) -> napi::Result<Self> {
        let Fd(fd) = args::int(env, &fd, "fd")?;
        let mut init = ProducerInit::read(env, init, "Producer.fromFd()")?;
        let seg = open(
            env,
            AddressArgs {
                fd: Some(fd),
                eventfd_fd: init.eventfd_fd.take(),
                ..Default::default()
            },
        )?;
        Self::attach(env, seg, init)
    }

    /// Attaches to a ring received as its descriptors (`consumer.descriptors`:
    /// the segment, a memfd ring's lock file, an eventfd ring's eventfd, in that
    /// order); the producer takes them over.
    #[napi(factory)]
    pub fn from_fds(env: Env, fds: JsUnknown, init: Option<JsUnknown>) -> napi::Result<Self> {
        let fds: Vec<i32> = args::array(env, &fds, "fds", |v, w| args::int::<Fd>(env, v, w))?
            .into_iter()
            .map(|f| f.0)
            .collect();
        let mut init = ProducerInit::read(env, init, "Producer.fromFds()")?;
        let seg = open(
            env,
            AddressArgs {
                fds: Some(fds),
                eventfd_fd: init.eventfd_fd.take(),
                ..Default::default()
            },
        )?;
        Self::attach(env, seg, init)
    }

    /// Connects to a consumer serving its ring on the Unix socket `path` (or
    /// `@name`, a Linux abstract socket): it checks who we are and hands over the
    /// sealed memfd (and eventfd). Throws `SHMRING_REFUSED` naming the rule the
    /// consumer's policy refused us by.
    #[napi(factory)]
    pub fn connect(env: Env, path: JsUnknown, init: Option<JsUnknown>) -> napi::Result<Self> {
        let path = args::string(env, &path, "path")?;
        let init = ProducerInit::read(env, init, "Producer.connect()")?
            .without_eventfd(env, "a consumer's socket hands the eventfd over")?;
        let seg = Address::Socket(path.into()).open().or_throw(env)?;
        Self::attach(env, seg, init)
    }

    /// Attaches to the ring of a consumer in this process.
    #[napi(factory)]
    pub fn for_consumer(
        env: Env,
        consumer: &JsConsumer,
        init: Option<JsUnknown>,
    ) -> napi::Result<Self> {
        let init = ProducerInit::read(env, init, "Producer.forConsumer()")?
            .without_eventfd(env, "the consumer's ring comes with its eventfd")?;
        let seg = consumer.segment(env)?;
        Self::attach(env, seg, init)
    }

    /// Claims `length` bytes in the ring. Fill `reservation.data` in place, then
    /// `commit(meta)`; or `abort()`. One open reservation per producer.
    #[napi]
    pub fn reserve(
        &self,
        env: Env,
        length: JsUnknown,
        opts: Option<JsUnknown>,
    ) -> napi::Result<Reservation> {
        let len = args::int::<u64>(env, &length, "length")?;
        let timeout = wait_of(env, opts, "reserve()")?;
        self.reserve_impl(env, len, timeout, None)
    }

    /// Claims a video record and writes its media header; the planes follow it
    /// (`reservation.media.planes`: offset, stride, size of each).
    #[napi]
    pub fn reserve_video(&self, env: Env, init: JsUnknown) -> napi::Result<Reservation> {
        let mut o = Options::new(env, Some(init), "reserveVideo()")?;
        let w = required(env, o.int::<u32>("width")?, "reserveVideo: width")?;
        let h = required(env, o.int::<u32>("height")?, "reserveVideo: height")?;
        let format = o.string("format")?;
        let pts = o.big_u64("ptsNs")?.unwrap_or_else(shmring::now_ns);
        let seq = o.big_u64("sequence")?.unwrap_or(SEQUENCE_AUTO);
        let fps = o.ints::<u32>("fps")?;
        let timeout = o.number("timeoutMs")?;
        o.finish()?;
        let f = crate::media::parse_format(env, format.as_deref().unwrap_or("i420"))?;
        let (num, den) = match fps.as_deref() {
            None => (0, 1),
            Some(&[num, den]) => (num, den),
            Some(_) => {
                return Err(error(
                    env,
                    INVALID_ARG,
                    "reserveVideo: fps is [numerator, denominator]",
                ))
            }
        };
        // The core checks the format, the size and the rate (one set of limits).
        let hd = MediaHeader::video(f, w, h, pts, seq)
            .and_then(|hd| hd.with_frame_rate(num, den))
            .map_err(|e| error(env, INVALID_ARG, &format!("reserveVideo: {e}")))?;
        self.reserve_impl(env, hd.payload_len() as u64, timeout, Some(hd))
    }

    /// Claims an audio record (interleaved samples) and writes its media header.
    #[napi]
    pub fn reserve_audio(&self, env: Env, init: JsUnknown) -> napi::Result<Reservation> {
        let mut o = Options::new(env, Some(init), "reserveAudio()")?;
        let samples = required(env, o.int::<u32>("samples")?, "reserveAudio: samples")?;
        let channels = required(env, o.int::<u32>("channels")?, "reserveAudio: channels")?;
        let rate = required(env, o.int::<u32>("sampleRate")?, "reserveAudio: sampleRate")?;
        let format = o.string("format")?;
        let pts = o.big_u64("ptsNs")?.unwrap_or_else(shmring::now_ns);
        let seq = o.big_u64("sequence")?.unwrap_or(SEQUENCE_AUTO);
        let timeout = o.number("timeoutMs")?;
        o.finish()?;
        let f = crate::media::parse_format(env, format.as_deref().unwrap_or("pcm_s16"))?;
        // The core checks the format, rate, channels and size (one set of limits).
        let hd = MediaHeader::audio(f, rate, channels, samples, pts, seq)
            .map_err(|e| error(env, INVALID_ARG, &format!("reserveAudio: {e}")))?;
        self.reserve_impl(env, hd.payload_len() as u64, timeout, Some(hd))
    }

    /// Ends stream `stream` of `kind` (KIND_VIDEO or KIND_AUDIO): commits an
    /// end-of-stream record, numbered after the stream's last record from this
    /// producer. Readers end the stream there (`frame.end`).
    #[napi]
    pub fn end_stream(&self, env: Env, stream: JsUnknown, kind: JsUnknown) -> napi::Result<()> {
        let stream: u32 = args::int(env, &stream, "stream")?;
        let kind: u32 = args::int(env, &kind, "kind")?;
        if kind != kind::VIDEO && kind != kind::AUDIO {
            return Err(error(
                env,
                INVALID_ARG,
                &format!("endStream: kind {kind} is not KIND_VIDEO or KIND_AUDIO"),
            ));
        }
        self.with(env, |p| p.end_stream(stream, kind).or_throw(env))
    }

    /// Copies `bytes` into the ring as one record (the one-copy path).
    #[napi]
    pub fn send(
        &self,
        env: Env,
        bytes: JsUnknown,
        meta: Option<JsUnknown>,
        opts: Option<JsUnknown>,
    ) -> napi::Result<()> {
        let bytes = uint8_array(env, bytes, "bytes")?;
        let meta = meta_of(env, meta, kind::RAW, "send()")?;
        let timeout = wait_of(env, opts, "send()")?;
        let src: &[u8] = bytes.as_ref();
        self.with(env, |p| {
            let policy = policy_of(env, None, timeout, p.policy())?;
            let r = p.reserve_raw(src.len(), policy).or_throw(env)?;
            // SAFETY: r.ptr is r.len == src.len() writable bytes of our reservation.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), r.ptr, r.len) };
            p.commit_raw(r.len, meta).or_throw(env)
        })
    }

    /// Sets what to do when the ring is full: "block" (wait up to `timeoutMs`) or
    /// "fail".
    #[napi]
    pub fn set_policy(
        &self,
        env: Env,
        on_full: JsUnknown,
        timeout_ms: Option<JsUnknown>,
    ) -> napi::Result<()> {
        let on_full = args::string(env, &on_full, "onFull")?;
        let timeout_ms = args::opt(timeout_ms, |v| args::number(env, v, "timeoutMs"))?;
        self.with(env, |p| {
            let pol = policy_of(env, Some(&on_full), timeout_ms, p.policy())?;
            p.set_policy(pol);
            Ok(())
        })
    }

    /// The full-ring policy: {onFull: "block" | "fail", timeoutMs}.
    #[napi]
    pub fn policy(&self, env: Env) -> napi::Result<JsObject> {
        let pol = self.with(env, |p| Ok(p.policy()))?;
        let mut o = env.create_object()?;
        match pol {
            FullPolicy::Fail => {
                o.set_named_property("onFull", env.create_string("fail")?)?;
                o.set_named_property("timeoutMs", env.create_double(0.0)?)?;
            }
            FullPolicy::Block(d) => {
                o.set_named_property("onFull", env.create_string("block")?)?;
                o.set_named_property("timeoutMs", env.create_double(d.as_secs_f64() * 1000.0)?)?;
            }
        }
        Ok(o)
    }

    /// A snapshot of the ring's counters (as `Consumer.stats()`).
    #[napi]
    pub fn stats(&self, env: Env) -> napi::Result<JsObject> {
        let s = self.with(env, |p| Ok(p.segment().stats()))?;
        stats_object(env, &s)
    }

    /// `[address, length]` of the ring's mapping in this process.
    #[napi]
    pub fn mapping(&self, env: Env) -> napi::Result<Vec<f64>> {
        let (a, l) = self.with(env, |p| Ok(p.segment().mapping()))?;
        Ok(vec![a as usize as f64, l as f64])
    }

    /// The ring's layout (as `Consumer.geometry()`).
    #[napi]
    pub fn geometry(&self, env: Env) -> napi::Result<JsObject> {
        let seg = self.with(env, |p| Ok(p.segment().clone()))?;
        crate::consumer::geometry_object(env, &seg)
    }

    /// The producer slot this producer occupies.
    #[napi(getter)]
    pub fn slot(&self, env: Env) -> napi::Result<u32> {
        self.with(env, |p| Ok(p.slot()))
    }

    /// Detaches (an open reservation is aborted). Idempotent.
    #[napi]
    pub fn close(&self) {
        self.core.open.set(None);
        if let Ok(mut g) = self.core.producer.try_borrow_mut() {
            g.take();
        }
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.core.producer.borrow().is_none()
    }
}

/// A required option: `SHMRING_INVALID_ARG` naming it when absent.
fn required<T>(env: Env, v: Option<T>, what: &str) -> napi::Result<T> {
    v.ok_or_else(|| error(env, INVALID_ARG, &format!("{what} is required")))
}

/// A `Uint8Array` (a `Buffer` is one) argument.
fn uint8_array(env: Env, v: JsUnknown, what: &str) -> napi::Result<napi::JsTypedArrayValue> {
    if v.get_type()? == ValueType::Object && v.is_typedarray()? {
        // SAFETY: checked to be a typed array.
        let a = unsafe { v.cast::<JsTypedArray>() }.into_value()?;
        if a.typedarray_type == TypedArrayType::Uint8 {
            return Ok(a);
        }
    }
    Err(error(
        env,
        INVALID_ARG,
        &format!("{what} must be a Uint8Array (or a Buffer)"),
    ))
}

/// The copy path's buffer: a JavaScript `Uint8Array` kept alive until commit.
struct CopyBuf {
    env: sys::napi_env,
    r: sys::napi_ref,
    data: *mut u8,
}

impl Drop for CopyBuf {
    fn drop(&mut self) {
        // SAFETY: our strong reference, in the environment that made it.
        unsafe { sys::napi_delete_reference(self.env, self.r) };
    }
}

/// Space claimed in the ring. `data` is a writable `Uint8Array` into the ring (or,
/// see `zeroCopy`, a buffer that `commit` copies in). Committed by `commit(meta)`,
/// aborted by `abort()` or when it and its views are garbage-collected.
#[napi]
pub struct Reservation {
    hold: Option<Rc<Hold>>,
    ptr: *mut u8,
    len: usize,
    media: Option<MediaHeader>,
    view: Option<WeakView>,
    copy: Option<CopyBuf>,
}

impl Reservation {
    fn take(&mut self, env: Env) -> napi::Result<Rc<Hold>> {
        let hold = self.hold.take().ok_or_else(|| {
            error(
                env,
                RELEASED,
                "the reservation was already committed or aborted",
            )
        })?;
        // Ours from here: a view's hold dropped later must not abort anything.
        hold.core.open.set(None);
        if let Some(v) = self.view.take() {
            // Writes through views after commit or abort reach nothing.
            v.detach(env);
        }
        Ok(hold)
    }
}

#[napi]
impl Reservation {
    /// The bytes to fill: in the ring (zero copy), or in the JavaScript heap on the
    /// copy path. Its previous contents are unspecified (media reservations start
    /// with the media header: write the planes after it).
    #[napi(getter)]
    pub fn data(&mut self, env: Env) -> napi::Result<JsUnknown> {
        let Some(hold) = self.hold.clone() else {
            return Err(error(
                env,
                RELEASED,
                "the reservation was already committed or aborted",
            ));
        };
        if let Some(c) = &self.copy {
            let mut v = std::ptr::null_mut();
            // SAFETY: our strong reference, in the current environment.
            unsafe { sys::napi_get_reference_value(env.raw(), c.r, &mut v) };
            // SAFETY: a live value of this environment.
            return Ok(unsafe { JsUnknown::from_raw_unchecked(env.raw(), v) });
        }
        if let Some(v) = self.view.as_ref().and_then(|w| w.get(env)) {
            return Ok(v);
        }
        // SAFETY: the claim's bytes stay ours (and the mapping mapped: Hold → Core →
        // Producer → Segment) until commit or abort, which detach this view first;
        // while the view lives, its hold keeps the reservation from being aborted.
        let v = unsafe { views::external_view(env, self.ptr, self.len, Box::new(hold))? };
        self.view = Some(WeakView::new(env, &v)?);
        Ok(v.into_unknown(env))
    }

    /// Publishes the record. `meta`: {stream, kind, timestampNs, flags}; the kind
    /// defaults to video/audio for media reservations, the timestamp to now.
    #[napi]
    pub fn commit(&mut self, env: Env, meta: Option<JsUnknown>) -> napi::Result<()> {
        let default_kind = match self.media {
            Some(h) if h.format.is_video() => kind::VIDEO,
            Some(_) => kind::AUDIO,
            None => kind::RAW,
        };
        let meta = meta_of(env, meta, default_kind, "commit()")?;
        if self.hold.is_none() {
            return Err(error(
                env,
                RELEASED,
                "the reservation was already committed or aborted",
            ));
        }
        if let Some(c) = self.copy.take() {
            // SAFETY: `c.data` is the JavaScript buffer of `len` bytes (kept alive by
            // `c`); `ptr` our open reservation of the same length.
            unsafe { std::ptr::copy_nonoverlapping(c.data, self.ptr, self.len) };
        }
        let hold = self.take(env)?;
        let mut g = hold.core.producer.borrow_mut();
        let p = g
            .as_mut()
            .ok_or_else(|| error(env, CLOSED, "the producer is closed"))?;
        p.commit_raw(self.len, meta).or_throw(env)
    }

    /// Gives the space back without publishing anything. Idempotent.
    #[napi]
    pub fn abort(&mut self, env: Env) {
        if let Ok(hold) = self.take(env) {
            self.copy = None;
            if let Ok(mut g) = hold.core.producer.try_borrow_mut() {
                if let Some(p) = g.as_mut() {
                    p.abort_raw();
                }
            }
        }
    }

    /// True until committed or aborted.
    #[napi(getter)]
    pub fn open(&self) -> bool {
        self.hold.is_some()
    }

    #[napi(getter)]
    pub fn length(&self) -> f64 {
        self.len as f64
    }

    /// Address of the payload in the ring, in this process (inside
    /// `producer.mapping()`).
    #[napi(getter)]
    pub fn address(&self) -> f64 {
        self.ptr as usize as f64
    }

    /// The media header written by `reserveVideo`/`reserveAudio`, or null.
    #[napi(getter)]
    pub fn media(&self, env: Env) -> napi::Result<Option<JsObject>> {
        self.media
            .as_ref()
            .map(|h| crate::media::header_object(env, h))
            .transpose()
    }
}
