//! # shmring
//!
//! A lock-free, multi-producer, single-consumer ring buffer in shared memory for
//! moving raw media (3 MB video frames and 4 KB audio packets alike) between
//! processes on one Linux host, with zero-copy writes and reads.
//!
//! * Producers [`Producer::reserve`] space, write the payload in place, and
//!   [`Reservation::commit`]. Any number of threads and processes; no locks.
//! * The consumer gets [`Frame`]s that point into the ring and stay valid until
//!   dropped, in any order; space returns to producers as the oldest are released.
//! * Producers may be sandboxed and hostile: nothing they write can crash or hang
//!   the consumer. A producer killed mid-write is detected and its claim skipped.
//!
//! The protocol and the layout are described in [`layout`] and [`protocol`], and in
//! `docs/DESIGN.md`.
//!
//! ```
//! use shmring::{Address, Config, Meta};
//! let seg = Address::memfd("example", Config::with_capacity(1 << 20)).open()?;
//! let consumer = seg.consumer()?;
//! let mut producer = seg.producer()?;
//! let mut r = producer.reserve(4096)?;
//! r.payload().fill(1);
//! r.commit(Meta::new(7, shmring::media::kind::AUDIO))?;
//! let frame = consumer.try_next()?.expect("a frame");
//! assert_eq!((frame.stream(), frame.len()), (7, 4096));
//! # Ok::<(), shmring::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

pub mod layout;
pub mod media;
pub mod protocol;
pub mod release_queue;
pub mod sync;

#[cfg(not(loom))]
mod address;
#[cfg(not(loom))]
mod consumer;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod fields;
#[cfg(not(loom))]
mod filter;
#[cfg(not(loom))]
pub mod handoff;
#[cfg(not(loom))]
mod options;
#[cfg(not(loom))]
mod producer;
#[cfg(not(loom))]
mod reader;
#[cfg(not(loom))]
mod segment;
#[cfg(not(loom))]
mod slots;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
pub mod sys;
#[cfg(not(loom))]
mod tap;
#[cfg(not(loom))]
mod tether;
#[cfg(not(loom))]
mod wake;

/// Async consumer and producer for tokio (feature `tokio`).
#[cfg(all(feature = "tokio", not(loom)))]
pub mod tokio;

#[cfg(all(feature = "tokio", not(loom)))]
pub use self::tokio::{AsyncConsumer, AsyncFrame, AsyncProducer, AsyncReservation};
#[cfg(not(loom))]
pub use address::{remove_stale, Address, AddressArgs, ArgNames, Opened, RemovedRing};
#[cfg(not(loom))]
pub use consumer::{Consumer, Frame, Health, RawFrame, SharedConsumer, SharedFrame};
#[cfg(not(loom))]
pub use error::{Error, Name, Occupant, Result, Room};
#[cfg(not(loom))]
pub use fields::{Field, FieldKind, Snapshot};
#[cfg(not(loom))]
pub use filter::Filter;
#[cfg(not(loom))]
pub use handoff::{Listener, ListenerOptions};
#[cfg(not(loom))]
pub use options::{ConsumerOptions, ConsumerSettings, Setting, SettingKind, SettingValue};
#[cfg(not(loom))]
pub use producer::{FullPolicy, Meta, Producer, RawReservation, Reservation};
#[cfg(not(loom))]
pub use reader::{Reader, ReaderCounts, ReaderFlavor, ReaderFrame, ReaderKind, ReaderOptions};
#[cfg(not(loom))]
pub use segment::{Config, ReadOnlySegment, Segment};
#[cfg(not(loom))]
pub use stats::Stats;
#[cfg(not(loom))]
pub use sys::fdpass::{recv_fds, send_fds};
#[cfg(not(loom))]
pub use sys::now_ns;
#[cfg(not(loom))]
pub use tap::{Tap, TapFrame, TapOptions, TapStats};
#[cfg(not(loom))]
pub use tether::TetherInfo;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (docs/GUIDE.md), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/GUIDE.md")]
pub struct GuideDoctests;
