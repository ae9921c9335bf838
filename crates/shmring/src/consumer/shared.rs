//! A consumer shared between threads: [`SharedConsumer`] receives, and the
//! [`SharedFrame`]s it hands out may be released from any thread, at any time,
//! without waiting for a consumer that waits for data.
//!
//! **Releasing.** A release takes the consumer's lock if it is free and applies
//! itself. If another thread holds the consumer (a receive waiting for data, a
//! [`SharedConsumer::with`] call), the frame's number goes into a [`ReleaseQueue`]
//! sized once (the claim log's entries: more than can ever be held), and the
//! releaser nudges the consumer's wait with the wake a producer sends (the data
//! futex, or the eventfd of an eventfd ring). The consumer's receive applies
//! queued releases before every look at the ring, so before it waits and when it
//! wakes, and it does not go to sleep while one is queued (its re-check after
//! arming the wake-up asks the queue too). A thread that lets go of the consumer
//! looks at the queue again after unlocking. So space goes back to producers
//! promptly even while the consumer thread sits in a long receive.
//!
//! The two races, and why neither loses a release (model: `tests/loom.rs`):
//! * releaser against a sleeping receive: the releaser stores into the queue,
//!   then (SeqCst fence) reads the consumer's waiting flag; the consumer raises
//!   the flag, then (SeqCst fence) looks at the queue. One sees the other.
//! * releaser against a holder letting go: the releaser stores into the queue,
//!   then (SeqCst fence) tries the lock; the holder unlocks, then (SeqCst fence)
//!   looks at the queue. Either the holder sees the release and takes the lock
//!   again to apply it, or the releaser's try finds the lock free.
//!
//! **Closing.** [`SharedConsumer::close`] stops receiving; the consumer detaches
//! (gives up its role, and its `Arc<Segment>`: a named ring it created is
//! unlinked if nothing else keeps it) once the last frame handed out is released.
//! Frames keep the consumer, hence the mapping, so their payload stays valid until
//! they are released.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Name, Result};
use crate::release_queue::ReleaseQueue;
use crate::segment::Segment;
use crate::sync::{fence, AtomicU64, Ordering};
use crate::wake;
use crate::Meta;

use super::{Consumer, RawFrame};

/// What a consumer shares with the threads that release its frames.
pub(crate) struct Remote {
    queue: ReleaseQueue,
    /// Frames handed out through the shared consumer and not released (changed
    /// only by the thread that holds the consumer; read by any).
    outstanding: AtomicU64,
    /// Frames released so far (changed with `outstanding`): a receive that finds
    /// the claim log full of held frames waits while this moves.
    released: AtomicU64,
}

impl Remote {
    /// A frame was released (under the consumer's lock).
    fn count_release(&self) {
        // Relaxed: changed only under the lock; readers want a figure.
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
        self.released.fetch_add(1, Ordering::Relaxed);
    }
}

/// How often a receive that finds the claim log full of held frames looks again.
const HELD_POLL: Duration = Duration::from_millis(1);

impl Consumer {
    /// Applies the releases other threads queued (a shared consumer's; nothing
    /// otherwise). Called by the receive before every look at the ring.
    pub(super) fn apply_queued(&self) {
        let Some(r) = &self.remote else { return };
        while let Some(seq) = r.queue.pop() {
            // A frame released twice (a C caller's bug) is not held: nothing to do.
            if self.release_raw(seq).is_ok() {
                r.count_release();
            }
        }
    }

    /// Is a release queued (the sleep's re-check after arming)?
    pub(super) fn release_queued(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.queue.ready())
    }
}

struct Inner {
    /// `None` once detached (closed and every frame released).
    consumer: Mutex<Option<Consumer>>,
    remote: Arc<Remote>,
    /// The ring, for the nudge: the consumer keeps it while a frame is held (and
    /// a release is queued only then); not kept past the detach.
    seg: Weak<Segment>,
    /// The ring's name, for errors.
    label: Name,
    /// The ring's consumer (sleeps on the data futex, or its eventfd), or a
    /// tethered one (the tether futex).
    owner: bool,
    closed: AtomicBool,
    /// The consumer was dropped (set under the lock).
    detached: AtomicBool,
}

/// A consumer whose frames may be released from any thread: a cheap handle
/// (clone it freely), `Send + Sync`. Receives with the [`Consumer`]'s verbs
/// ([`try_next`](SharedConsumer::try_next),
/// [`next_timeout`](SharedConsumer::next_timeout), [`recv`](SharedConsumer::recv),
/// [`next_raw`](SharedConsumer::next_raw)); one receive at a time (others wait
/// for it). See the module documentation for how releases reach it.
///
/// ```
/// # use shmring::{Address, Config, Meta, SharedConsumer};
/// let seg = Address::memfd("doc-shared", Config::with_capacity(1 << 20)).open().unwrap();
/// let consumer = SharedConsumer::new(seg.consumer().unwrap());
/// seg.producer().unwrap().send(b"frame", Meta::new(0, 1)).unwrap();
/// let frame = consumer.try_next().unwrap().unwrap();
/// // Released on another thread, when it is done with it.
/// std::thread::spawn(move || assert_eq!(&frame[..], b"frame")).join().unwrap();
/// assert_eq!(consumer.outstanding(), 0);
/// ```
#[derive(Clone)]
pub struct SharedConsumer {
    inner: Arc<Inner>,
}

impl SharedConsumer {
    /// Shares `consumer` (the ring's or a tethered one).
    pub fn new(mut consumer: Consumer) -> SharedConsumer {
        let remote = Arc::new(Remote {
            // A consumer holds at most one frame per claim log entry.
            queue: ReleaseQueue::new(consumer.seg.geometry().log_entries as usize),
            outstanding: AtomicU64::new(0),
            released: AtomicU64::new(0),
        });
        consumer.remote = Some(remote.clone());
        SharedConsumer {
            inner: Arc::new(Inner {
                remote,
                seg: Arc::downgrade(&consumer.seg),
                label: consumer.seg.label(),
                owner: !consumer.is_tethered(),
                consumer: Mutex::new(Some(consumer)),
                closed: AtomicBool::new(false),
                detached: AtomicBool::new(false),
            }),
        }
    }

    /// The ring, while the consumer is attached or anything else keeps it.
    pub fn segment(&self) -> Option<Arc<Segment>> {
        self.inner.seg.upgrade()
    }

    /// The ring's name (`Segment::label`).
    pub fn label(&self) -> &Name {
        &self.inner.label
    }

    fn lock(&self) -> MutexGuard<'_, Option<Consumer>> {
        // A panic elsewhere while holding the lock leaves the consumer's own state
        // consistent (every call is a complete protocol step): carry on.
        self.inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn closed_error(&self) -> Error {
        Error::Closed(self.inner.label.clone())
    }

    /// Runs `f` on the consumer, locked, then applies what was queued meanwhile;
    /// [`Error::Closed`] once closed.
    fn locked<R>(&self, f: impl FnOnce(&Consumer) -> Result<R>) -> Result<R> {
        // Relaxed: a closed consumer refuses new work; a call racing with close
        // may still run (close detaches only once nothing is held).
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(self.closed_error());
        }
        let r = {
            let g = self.lock();
            match g.as_ref() {
                Some(c) => {
                    let r = f(c);
                    c.apply_queued();
                    r
                }
                None => Err(self.closed_error()),
            }
        };
        self.settle();
        r
    }

    /// After letting go of the consumer: a release queued while we held it, or a
    /// close waiting for its last frame, is applied now by whoever gets the lock.
    fn settle(&self) {
        loop {
            // SeqCst: our unlock before the loads below; pairs with the releaser's
            // fence between its push and its try of the lock (module docs).
            fence(Ordering::SeqCst);
            if !self.inner.remote.queue.ready() && !self.detach_due() {
                return;
            }
            let mut g = match self.inner.consumer.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                // The holder settles when it lets go.
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            self.apply(&mut g);
        }
    }

    /// Holding the consumer: applies queued releases, and detaches a closed
    /// consumer that holds nothing any more.
    fn apply(&self, g: &mut Option<Consumer>) {
        if let Some(c) = g.as_ref() {
            c.apply_queued();
        }
        if g.is_some() && self.detach_due() {
            *g = None;
            // Relaxed: read under the lock, or as a hint after settle's fence.
            self.inner.detached.store(true, Ordering::Relaxed);
        }
    }

    /// Closed, every frame released, and not detached yet?
    fn detach_due(&self) -> bool {
        // Relaxed: read after a SeqCst fence (settle) or under the lock.
        self.inner.closed.load(Ordering::Relaxed)
            && self.inner.remote.outstanding.load(Ordering::Relaxed) == 0
            && !self.inner.detached.load(Ordering::Relaxed)
    }

    /// The next frame if one is ready, without waiting.
    pub fn try_next(&self) -> Result<Option<SharedFrame>> {
        self.next_timeout(Some(Duration::ZERO))
    }

    /// The next frame, waiting up to `timeout` (`None`: forever). `Ok(None)` on
    /// timeout. Releases from other threads are applied while it waits.
    pub fn next_timeout(&self, timeout: Option<Duration>) -> Result<Option<SharedFrame>> {
        Ok(self.next_raw(timeout)?.map(|raw| SharedFrame {
            consumer: self.clone(),
            raw,
        }))
    }

    /// The next frame, waiting for it.
    pub fn recv(&self) -> Result<SharedFrame> {
        loop {
            if let Some(f) = self.next_timeout(None)? {
                return Ok(f);
            }
        }
    }

    /// Like [`SharedConsumer::next_timeout`] but the frame is a [`RawFrame`],
    /// released with [`SharedConsumer::release_raw`] (for bindings).
    ///
    /// When the frames handed out fill the claim log (the next record is behind
    /// one not yet released), the receive waits for a release, up to its timeout:
    /// the frames are often held by other threads, which release them soon. Only
    /// when none is released for a liveness interval (the caller holds them
    /// itself, or their holder is stuck) is it [`Error::TooManyHeld`].
    pub fn next_raw(&self, timeout: Option<Duration>) -> Result<Option<RawFrame>> {
        let start = Instant::now();
        // (when a release was last seen, the release count then), once saturated.
        let mut saturated: Option<(Instant, u64)> = None;
        loop {
            let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
            let r = self.locked(|c| {
                let got = c.next_raw(left)?;
                if got.is_some() {
                    // Relaxed: changed only under the lock; readers want a figure.
                    self.inner
                        .remote
                        .outstanding
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(got)
            });
            let Err(e @ Error::TooManyHeld { .. }) = r else {
                return r;
            };
            // Relaxed: a figure that only grows; the lock orders what matters.
            let released = self.inner.remote.released.load(Ordering::Relaxed);
            let now = Instant::now();
            let (since, seen) = saturated.get_or_insert((now, released));
            if released != *seen {
                (*since, *seen) = (now, released);
            }
            let idle = self.with(|c| c.options().liveness_interval)?;
            if left.is_some_and(|l| l.is_zero()) || now.duration_since(*since) >= idle {
                return Err(e);
            }
            std::thread::sleep(HELD_POLL.min(left.unwrap_or(HELD_POLL)));
        }
    }

    /// Releases a frame handed out by [`SharedConsumer::next_raw`], from any
    /// thread, without waiting: applied now if the consumer is free (then a frame
    /// not held is [`Error::NotHeld`]), else queued for the thread that holds it,
    /// whose wait is nudged.
    pub fn release_raw(&self, seq: u64) -> Result<()> {
        let inner = &*self.inner;
        let queued = match inner.consumer.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut g) = queued {
            let r = match g.as_ref() {
                Some(c) => c.release_raw(seq).map(|()| inner.remote.count_release()),
                None => Err(Error::NotHeld {
                    segment: inner.label.clone(),
                    seq,
                }),
            };
            self.apply(&mut g);
            drop(g);
            self.settle();
            return r;
        }
        if inner.remote.queue.push(seq).is_err() {
            // Cannot happen (the queue has a place per frame that can be held);
            // should it, wait for the consumer rather than lose the release.
            let mut g = self.lock();
            if let Some(c) = g.as_ref() {
                if c.release_raw(seq).is_ok() {
                    inner.remote.count_release();
                }
            }
            self.apply(&mut g);
            drop(g);
            self.settle();
            return Ok(());
        }
        // Wake the holder if it sleeps in a receive (the handshake's fence orders
        // our push before reading its flag), then, in case it is letting go
        // instead, settle (whose fence orders our push before trying the lock).
        self.nudge();
        self.settle();
        Ok(())
    }

    /// The wake a producer sends, to the consumer's wait.
    fn nudge(&self) {
        // Gone: the consumer detached, nobody waits.
        let Some(seg) = self.inner.seg.upgrade() else {
            return;
        };
        let c = seg.control();
        if self.inner.owner {
            wake::notify_one(&c.data.0, seg.eventfd());
        } else {
            wake::notify(&c.tether_data.0, true, None);
        }
    }

    /// Runs `f` on the consumer (statistics, health, arm/disarm, ...), waiting for
    /// a receive in progress on another thread. [`Error::Closed`] once closed.
    pub fn with<R>(&self, f: impl FnOnce(&Consumer) -> R) -> Result<R> {
        self.locked(|c| Ok(f(c)))
    }

    /// Like [`SharedConsumer::with`], for what needs the consumer itself
    /// ([`Consumer::reset`]).
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut Consumer) -> R) -> Result<R> {
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(self.closed_error());
        }
        let r = {
            let mut g = self.lock();
            let r = g.as_mut().map(f).ok_or_else(|| self.closed_error());
            self.apply(&mut g);
            r
        };
        self.settle();
        r
    }

    /// Frames handed out and not yet released (a release queued counts until the
    /// consumer applies it).
    pub fn outstanding(&self) -> u64 {
        // Relaxed: a figure.
        self.inner.remote.outstanding.load(Ordering::Relaxed)
    }

    /// Stops receiving (every call but releases then fails with
    /// [`Error::Closed`]). The consumer detaches once the last frame handed out
    /// is released: at once if none is held. Frames stay valid until released.
    /// Idempotent.
    pub fn close(&self) {
        // Relaxed: the SeqCst fence in `settle` orders it before trying the lock;
        // a holder letting go sees it after its own fence.
        self.inner.closed.store(true, Ordering::Relaxed);
        self.settle();
    }

    /// Was [`SharedConsumer::close`] called?
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Relaxed)
    }

    /// Has the consumer detached (closed, and every frame released)?
    pub fn is_detached(&self) -> bool {
        // Relaxed: a figure (set under the lock when the consumer is dropped).
        self.inner.detached.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for SharedConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConsumer")
            .field("segment", &self.inner.label)
            .field("outstanding", &self.outstanding())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A frame of a [`SharedConsumer`]: the payload in place in shared memory,
/// `Send + Sync`, released by [`SharedFrame::release`] or on drop, on any thread.
pub struct SharedFrame {
    consumer: SharedConsumer,
    raw: RawFrame,
}

// SAFETY: the payload lies in the shared mapping, which `consumer` (→ segment)
// keeps mapped; reading it from another thread is what shared memory is for. The
// release goes through the shared consumer, which any thread may call.
unsafe impl Send for SharedFrame {}
// SAFETY: `&SharedFrame` only reads the payload and copies of the metadata.
unsafe impl Sync for SharedFrame {}

impl SharedFrame {
    /// The payload, in the ring (no copy). See [`crate::Frame::payload`].
    pub fn payload(&self) -> &[u8] {
        // SAFETY: ptr/len come from a held record inside the mapping (validated by
        // the consumer), which `consumer` keeps mapped; the record is not released
        // before this frame is.
        unsafe { std::slice::from_raw_parts(self.raw.ptr, self.raw.len) }
    }
    pub fn meta(&self) -> Meta {
        self.raw.meta
    }
    pub fn seq(&self) -> u64 {
        self.raw.seq
    }
    /// The frame's numbers and address (it stays held until released).
    pub fn raw(&self) -> RawFrame {
        self.raw
    }
    /// Releases the frame now (same as dropping it).
    pub fn release(self) {}
}

impl std::ops::Deref for SharedFrame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.payload()
    }
}

impl Drop for SharedFrame {
    fn drop(&mut self) {
        // Held by us: NotHeld cannot happen (and a drop has no one to tell).
        let _ = self.consumer.release_raw(self.raw.seq);
    }
}

impl std::fmt::Debug for SharedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFrame")
            .field("seq", &self.raw.seq)
            .field("len", &self.raw.len)
            .field("meta", &self.raw.meta)
            .finish()
    }
}
