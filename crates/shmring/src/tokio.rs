//! Async consumer and producer for tokio (cargo feature `tokio`).
//!
//! * [`AsyncConsumer`] is a [`futures_core::Stream`] of [`AsyncFrame`]s over a ring
//!   created with [`Config::eventfd`](crate::Config::eventfd): it waits on the
//!   ring's eventfd with [`::tokio::io::unix::AsyncFd`] (the runtime's reactor, no
//!   thread per consumer), using [`Consumer::arm`] / [`Consumer::disarm`] around
//!   each wait, and looks at the ring at least every liveness interval so a dead
//!   producer's claim is skipped while it waits.
//! * [`AsyncProducer::reserve`] waits for space without blocking the runtime.
//!
//! **Cancellation.** A frame is taken from the ring only inside the poll that
//! returns it: there is no await point between taking it and handing it out. So
//! dropping a `next()` / [`AsyncConsumer::recv`] future at any point (a `select!`
//! that took another branch, a timeout) loses no frame: the next call returns it.
//! Dropping an [`AsyncProducer::reserve`] future never leaves space claimed: a
//! claim made after the future was dropped is aborted at the producer's next call
//! (or when it is dropped), and the consumer skips it.
//!
//! ```
//! use shmring::tokio::{AsyncConsumer, AsyncProducer};
//! use shmring::{Address, Config, Meta};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> shmring::Result<()> {
//! let seg = Address::memfd("doc-tokio", Config { eventfd: true, ..Config::default() }).open()?;
//! let mut frames = AsyncConsumer::new(seg.consumer()?)?;
//! let mut producer = AsyncProducer::new(seg.producer()?);
//! let mut r = producer.reserve(5).await?;
//! r.payload().copy_from_slice(b"hello");
//! r.commit(Meta::new(0, shmring::media::kind::RAW))?;
//! let frame = frames.recv().await?;
//! assert_eq!(frame.payload(), b"hello");
//! # Ok(()) }
//! ```

use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use ::tokio::time::{Instant, Sleep};

use crate::error::{Error, Result};
use crate::{Consumer, FullPolicy, Meta, Producer, SharedConsumer, SharedFrame};

/// The ring's eventfd, borrowed: the segment (kept alive by the shared consumer,
/// which outlives the `AsyncFd`, see field order in [`AsyncConsumer`]) owns it.
struct EventFd(RawFd);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// An async consumer: a [`futures_core::Stream`] of frames (it never ends; errors
/// are items, and the stream can be polled again after one). Use it with
/// `StreamExt::next` (futures or tokio-stream), or [`AsyncConsumer::recv`].
pub struct AsyncConsumer {
    // Dropped first: deregisters the borrowed eventfd before the segment can go.
    fd: AsyncFd<EventFd>,
    shared: SharedConsumer,
    /// Armed (waiting flag set) and not yet disarmed.
    armed: bool,
    /// Wakes the stream every liveness interval while it waits (made once).
    tick: Pin<Box<Sleep>>,
    interval: Duration,
}

impl AsyncConsumer {
    /// Wraps the consumer of a ring created with [`Config::eventfd`]
    /// (`Error::EventfdRequired` otherwise). Must be called within a tokio runtime
    /// with IO and time enabled.
    ///
    /// [`Config::eventfd`]: crate::Config::eventfd
    pub fn new(consumer: Consumer) -> Result<AsyncConsumer> {
        let seg = consumer.segment().clone();
        let Some(efd) = seg.eventfd() else {
            return Err(Error::EventfdRequired(seg.label()));
        };
        if ::tokio::runtime::Handle::try_current().is_err() {
            return Err(crate::error::os(
                "register eventfd with tokio",
                seg.name(),
                std::io::Error::other("AsyncConsumer::new must be called within a tokio runtime"),
            ));
        }
        // SAFETY: the eventfd is owned by the segment, which the consumer in `shared`
        // keeps open and unchanged for as long as it lives (never closed, it never
        // detaches); `shared` outlives `fd` (fields drop in order, `fd` first;
        // frames only add owners).
        let fd = unsafe {
            AsyncFd::register_with_interest(
                EventFd(efd.as_raw_fd()),
                ::tokio::io::Interest::READABLE,
            )
        }
        .map_err(|e| {
            crate::error::os("register eventfd with tokio", seg.name(), e.into_parts().1)
        })?;
        let interval = consumer.options().liveness_interval;
        Ok(AsyncConsumer {
            fd,
            shared: SharedConsumer::new(consumer),
            armed: false,
            tick: Box::pin(::tokio::time::sleep(interval)),
            interval,
        })
    }

    /// The next frame, waiting for it. Cancel-safe (see the module docs).
    pub async fn recv(&mut self) -> Result<AsyncFrame> {
        std::future::poll_fn(|cx| self.poll_frame(cx)).await
    }

    /// Runs `f` on the consumer (statistics, health, `outstanding`, ...).
    pub fn with_consumer<R>(&self, f: impl FnOnce(&Consumer) -> R) -> R {
        self.shared
            .with(f)
            .expect("an async consumer's shared consumer is never closed")
    }

    fn disarm(&mut self) {
        if self.armed {
            self.with_consumer(|c| c.disarm());
            self.armed = false;
        }
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Result<AsyncFrame>> {
        loop {
            if !self.armed {
                // The only place a frame leaves the ring: returned from this poll.
                match self.shared.try_next() {
                    Ok(Some(f)) => return Poll::Ready(Ok(f)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
                // Something arrived meanwhile, or a release was queued (arm
                // disarmed itself): look again.
                if self.with_consumer(|c| c.arm()) {
                    continue;
                }
                self.armed = true;
                let deadline = Instant::now() + self.interval;
                self.tick.as_mut().reset(deadline);
            }
            match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    // Cleared before draining (in disarm): a later signal sets it again.
                    guard.clear_ready();
                    self.disarm();
                    continue;
                }
                Poll::Ready(Err(e)) => {
                    self.disarm();
                    let seg = self.shared.label();
                    return Poll::Ready(Err(crate::error::os("wait on the eventfd", seg, e)));
                }
                Poll::Pending => {}
            }
            // Look at the ring every liveness interval even without a signal.
            if self.tick.as_mut().poll(cx).is_ready() {
                self.disarm();
                continue;
            }
            return Poll::Pending;
        }
    }
}

impl futures_core::Stream for AsyncConsumer {
    type Item = Result<AsyncFrame>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_frame(cx).map(Some)
    }
}

impl Drop for AsyncConsumer {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// A frame from an [`AsyncConsumer`]: a [`SharedFrame`], the payload in place in
/// shared memory, released on drop (in any order, from any thread).
pub type AsyncFrame = SharedFrame;

/// An async producer: [`AsyncProducer::reserve`] waits for space without blocking
/// the runtime.
///
/// How it waits: the claim runs on tokio's blocking pool
/// (`spawn_blocking`) with the producer's own [`FullPolicy`], so a full ring is
/// waited out on the ring's space futex exactly as a synchronous producer waits
/// (woken by the consumer's release, with its hysteresis; the drop is counted once
/// if the wait times out), while runtime threads keep running. A timer-polling
/// loop would instead count a drop (`drops_full`) at every failed attempt and wake
/// late or often. The cost is a hop to the blocking pool per reservation.
pub struct AsyncProducer {
    producer: Arc<Mutex<Producer>>,
}

impl AsyncProducer {
    pub fn new(producer: Producer) -> AsyncProducer {
        AsyncProducer {
            producer: Arc::new(Mutex::new(producer)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Producer> {
        self.producer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims space for `len` bytes, waiting (without blocking the runtime) as the
    /// producer's [`FullPolicy`] says. Cancel-safe: see the module docs.
    pub async fn reserve(&mut self, len: usize) -> Result<AsyncReservation<'_>> {
        let policy = self.lock().policy();
        self.reserve_with(len, policy).await
    }

    /// [`AsyncProducer::reserve`] with an explicit policy for this call.
    pub async fn reserve_with(
        &mut self,
        len: usize,
        policy: FullPolicy,
    ) -> Result<AsyncReservation<'_>> {
        let p = self.producer.clone();
        let claim = move || {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            // No reservation can be alive here (it borrows `self` mutably): an open
            // one is left from a reserve whose future was dropped. Abort it.
            p.abort_raw();
            // The address crosses threads as a number: it stays valid for the claim.
            p.reserve_raw(len, policy).map(|r| (r.ptr as usize, r.len))
        };
        let (ptr, len) = match ::tokio::task::spawn_blocking(claim).await {
            Ok(r) => r?,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        Ok(AsyncReservation {
            producer: self,
            ptr: ptr as *mut u8,
            len,
            done: false,
        })
    }

    /// Runs `f` on the producer (policy, slot, segment).
    pub fn with_producer<R>(&self, f: impl FnOnce(&mut Producer) -> R) -> R {
        f(&mut self.lock())
    }
}

/// Space claimed by [`AsyncProducer::reserve`]: write the payload in place, then
/// [`AsyncReservation::commit`]. Dropped without a commit, it is aborted.
pub struct AsyncReservation<'p> {
    producer: &'p mut AsyncProducer,
    ptr: *mut u8,
    len: usize,
    done: bool,
}

// SAFETY: the claimed bytes are exclusively ours until commit or abort, inside a
// mapping the producer keeps; the producer itself is behind a mutex.
unsafe impl Send for AsyncReservation<'_> {}

impl AsyncReservation<'_> {
    /// The payload bytes, inside the ring. Their previous contents are unspecified.
    pub fn payload(&mut self) -> &mut [u8] {
        // SAFETY: the open claim gives us these `len` bytes until commit or abort,
        // which consume or drop `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Publishes the record.
    pub fn commit(mut self, meta: Meta) -> Result<()> {
        self.done = true;
        let len = self.len;
        self.producer.lock().commit_raw(len, meta)
    }

    /// Gives the space back without publishing anything.
    pub fn abort(self) {}
}

impl Drop for AsyncReservation<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.producer.lock().abort_raw();
        }
    }
}
