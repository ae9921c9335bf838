//! One reader over the three ways to read a ring ([`ReaderKind`]): the ring's
//! consumer, a tethered consumer, a tap. [`Reader`] matches its flavor once in each
//! public method, so an element, a command or a binding that lets its user choose
//! the kind writes no switch of its own.
//!
//! A consumer (the ring's or tethered) hands out frames in place, held until
//! released ([`ReaderFrame::Held`], a [`SharedFrame`]: releasable from any
//! thread); a tap copies each record into a buffer the caller lends
//! ([`ReaderFrame::Copied`]) and may lose records (counted: [`ReaderCounts`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::layout::Geometry;
use crate::tap::{Tap, TapFrame, TapOptions};
use crate::{
    Address, Consumer, ConsumerOptions, Health, Meta, Segment, SharedConsumer, SharedFrame, Stats,
    TetherInfo,
};

/// Which reader of a ring (DESIGN.md's glossary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaderKind {
    /// The ring's consumer: every record, in place; the ring's space comes back
    /// as it releases.
    #[default]
    Consumer,
    /// A tethered consumer beside the ring's: every record in place, holding
    /// space until it releases ([`Consumer::tethered`]).
    Tethered,
    /// A tap: copies of the records as they go by, on a read-only mapping; holds
    /// nothing, may lose records ([`Tap`]).
    Tap,
}

impl ReaderKind {
    /// Every kind, in this order.
    pub const ALL: [ReaderKind; 3] = [ReaderKind::Consumer, ReaderKind::Tethered, ReaderKind::Tap];

    /// Its name in every binding and command (`consumer`, `tethered`, `tap`).
    pub const fn name(self) -> &'static str {
        match self {
            ReaderKind::Consumer => "consumer",
            ReaderKind::Tethered => "tethered",
            ReaderKind::Tap => "tap",
        }
    }

    /// Does it read in place (and hold what it reads)?
    pub const fn in_place(self) -> bool {
        !matches!(self, ReaderKind::Tap)
    }

    /// May this kind open `address`? Only the ring's consumer may create the ring
    /// it reads; a tethered consumer and a tap read one that exists
    /// ([`Error::Config`] otherwise).
    ///
    /// ```
    /// use shmring::{Address, Config, ReaderKind};
    /// let new = Address::create("cam0", Config::default());
    /// assert!(ReaderKind::Consumer.may_open(&new).is_ok());
    /// let e = ReaderKind::Tethered.may_open(&new).unwrap_err().to_string();
    /// assert!(e.contains("reads a ring that exists"), "{e}");
    /// ```
    pub fn may_open(self, address: &Address) -> Result<()> {
        if address.creates() && self != ReaderKind::Consumer {
            return Err(Error::Config(format!(
                "ring address {address}: a new ring is read by its own consumer; a {} \
                 reads a ring that exists (another element or process consumes it)",
                match self {
                    ReaderKind::Tethered => "tethered consumer",
                    _ => "tap",
                }
            )));
        }
        Ok(())
    }
}

impl fmt::Display for ReaderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReaderKind {
    type Err = Error;

    /// ```
    /// use shmring::ReaderKind;
    /// assert_eq!("tap".parse::<ReaderKind>()?, ReaderKind::Tap);
    /// let e = "owner".parse::<ReaderKind>().unwrap_err().to_string();
    /// assert!(e.contains("consumer, tethered or tap"), "{e}");
    /// # Ok::<(), shmring::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<ReaderKind> {
        ReaderKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::Config(format!("reader {s:?}: expected consumer, tethered or tap"))
            })
    }
}

/// How a [`Reader`] reads: its kind, and the options of that kind.
#[derive(Debug, Clone, Default)]
pub struct ReaderOptions {
    pub kind: ReaderKind,
    /// For the ring's consumer and a tethered one.
    pub consumer: ConsumerOptions,
    /// For a tap.
    pub tap: TapOptions,
}

/// A record a [`Reader`] gave.
#[derive(Debug)]
pub enum ReaderFrame {
    /// In the ring, held until dropped or released (on any thread).
    Held(SharedFrame),
    /// Copied into the buffer given to [`Reader::next_into`].
    Copied(TapFrame),
}

impl ReaderFrame {
    pub fn meta(&self) -> Meta {
        match self {
            ReaderFrame::Held(f) => f.meta(),
            ReaderFrame::Copied(f) => f.meta,
        }
    }

    /// Its claim sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            ReaderFrame::Held(f) => f.seq(),
            ReaderFrame::Copied(f) => f.seq,
        }
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        match self {
            ReaderFrame::Held(f) => f.payload().len(),
            ReaderFrame::Copied(f) => f.len,
        }
    }

    /// No payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload: in the ring, or in `buf` (the buffer given to
    /// [`Reader::next_into`]).
    pub fn payload<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match self {
            ReaderFrame::Held(f) => f.payload(),
            ReaderFrame::Copied(f) => &buf[..f.len.min(buf.len())],
        }
    }
}

/// What a reader has counted, whatever its kind (each only grows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderCounts {
    /// Records this reader missed: a tap's lost records (overwritten while read,
    /// passed by the producers, stepped over while pending); 0 for a consumer,
    /// which misses none it is given.
    pub lost: u64,
    /// Records not taken: a tap's filter or `every`; a consumer's filter or age
    /// limit ([`Consumer::records_filtered`]).
    pub filtered: u64,
    /// Times this consumer reset the ring (its records from before the reset
    /// dropped, counted by the ring); 0 for a tap, whose jumps over a reset count
    /// in `lost`.
    pub resets: u64,
}

/// One reader of a ring, of any [`ReaderKind`].
///
/// ```
/// use shmring::{Address, Config, Meta, Reader, ReaderKind, ReaderOptions};
/// let name = format!("doc-reader-{}", std::process::id());
/// let ring = Reader::open(
///     Address::create(name.clone(), Config::with_capacity(1 << 20)),
///     ReaderOptions::default(),
/// )?;
/// let tap = Reader::open(
///     Address::Named(name.clone()),
///     ReaderOptions { kind: ReaderKind::Tap, ..Default::default() },
/// )?;
/// let mut tap = tap;
/// let mut ring = ring;
/// Address::Named(name).open()?.producer()?.send(b"hello", Meta::new(0, 0))?;
/// let mut buf = Vec::new();
/// for reader in [&mut ring, &mut tap] {
///     let f = reader.next_into(&mut buf, None)?.expect("a record");
///     assert_eq!(f.payload(&buf), b"hello");
/// }
/// # Ok::<(), shmring::Error>(())
/// ```
pub struct Reader {
    kind: ReaderKind,
    flavor: Flavor,
}

enum Flavor {
    /// The ring's consumer or a tethered one.
    Consumer(SharedConsumer),
    Tap(Box<Tap>),
}

impl Reader {
    /// Reads the ring at `address` as `opts.kind` says. Only the ring's consumer
    /// may create the ring it reads; a tethered consumer and a tap read one that
    /// exists ([`Error::Config`] otherwise).
    pub fn open(address: Address, opts: ReaderOptions) -> Result<Reader> {
        opts.kind.may_open(&address)?;
        match opts.kind {
            ReaderKind::Tap => Ok(Reader::from(Tap::new(address.open_read_only()?, opts.tap))),
            kind => Reader::consume(address.open()?, kind, opts.consumer),
        }
    }

    /// The ring's consumer or a tethered one (`kind`) of a ring already open (a
    /// tap maps its ring read-only: [`Reader::open`], or `Reader::from` a
    /// [`Tap`]).
    pub fn consume(seg: Arc<Segment>, kind: ReaderKind, opts: ConsumerOptions) -> Result<Reader> {
        Ok(Reader::from(match kind {
            ReaderKind::Consumer => Consumer::with_options(seg, opts)?,
            ReaderKind::Tethered => Consumer::tethered(seg, opts)?,
            ReaderKind::Tap => {
                return Err(Error::Config(format!(
                    "ring {}: a tap reads a read-only mapping of its ring (Reader::open)",
                    seg.name()
                )))
            }
        }))
    }

    /// Which reader it is.
    pub fn kind(&self) -> ReaderKind {
        self.kind
    }

    /// The next record, waiting up to `timeout` (`None`: forever); `Ok(None)` when
    /// the time ran out. A consumer's is held in place; a tap's is copied into
    /// `buf` (resized to the payload; its capacity kept, so a reused buffer
    /// allocates only to grow).
    pub fn next_into(
        &mut self,
        buf: &mut Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Option<ReaderFrame>> {
        Ok(match &mut self.flavor {
            Flavor::Consumer(c) => c.next_timeout(timeout)?.map(ReaderFrame::Held),
            Flavor::Tap(t) => t.next_into(buf, timeout)?.map(ReaderFrame::Copied),
        })
    }

    /// What it has counted.
    pub fn counts(&self) -> Result<ReaderCounts> {
        Ok(match &self.flavor {
            Flavor::Consumer(c) => {
                let (resets, filtered) = c.with(|c| (c.resets(), c.records_filtered()))?;
                ReaderCounts {
                    lost: 0,
                    filtered,
                    resets,
                }
            }
            Flavor::Tap(t) => {
                let s = t.stats();
                ReaderCounts {
                    lost: s.lost,
                    filtered: s.filtered,
                    resets: 0,
                }
            }
        })
    }

    /// Why a consumer last found the ring corrupt (it resets it by itself unless
    /// told not to); `None` for a tap, which writes nothing and resets nothing.
    pub fn last_corruption(&self) -> Option<&'static str> {
        match &self.flavor {
            Flavor::Consumer(_) => self.health().and_then(|h| h.last_corruption),
            Flavor::Tap(_) => None,
        }
    }

    /// What a consumer has seen of the ring's health ([`Consumer::health`]);
    /// `None` for a tap.
    pub fn health(&self) -> Option<Health> {
        match &self.flavor {
            Flavor::Consumer(c) => c.with(|c| c.health()).ok(),
            Flavor::Tap(_) => None,
        }
    }

    /// A tethered consumer's line as the ring lists it ([`Consumer::tether_info`]);
    /// `None` for the ring's consumer and a tap.
    pub fn tether_info(&self) -> Option<TetherInfo> {
        match &self.flavor {
            Flavor::Consumer(c) => c.with(|c| c.tether_info()).ok().flatten(),
            Flavor::Tap(_) => None,
        }
    }

    /// The ring's counters now.
    pub fn stats(&self) -> Result<Stats> {
        match &self.flavor {
            Flavor::Consumer(c) => c.with(|c| c.segment().stats()),
            Flavor::Tap(t) => Ok(t.segment().stats()),
        }
    }

    /// The ring's layout.
    pub fn geometry(&self) -> Result<Geometry> {
        match &self.flavor {
            Flavor::Consumer(c) => c.with(|c| *c.segment().geometry()),
            Flavor::Tap(t) => Ok(*t.segment().geometry()),
        }
    }

    /// Frees the slots of producers that died (the ring's consumer reaps them by
    /// itself at its liveness interval; this is for a reader waiting with nothing
    /// to read). Nothing for a tap, which writes nothing.
    pub fn reap(&self) -> Result<u32> {
        match &self.flavor {
            Flavor::Consumer(c) => c.with(|c| c.reap()),
            Flavor::Tap(_) => Ok(0),
        }
    }

    /// The consumer inside, for what only a consumer does (`None` for a tap).
    pub fn consumer(&self) -> Option<&SharedConsumer> {
        match &self.flavor {
            Flavor::Consumer(c) => Some(c),
            Flavor::Tap(_) => None,
        }
    }

    /// The consumer inside, for a binding that keeps it (`None` for a tap).
    pub fn into_consumer(self) -> Option<SharedConsumer> {
        match self.flavor {
            Flavor::Consumer(c) => Some(c),
            Flavor::Tap(_) => None,
        }
    }

    /// The tap inside (`None` for a consumer).
    pub fn tap(&self) -> Option<&Tap> {
        match &self.flavor {
            Flavor::Consumer(_) => None,
            Flavor::Tap(t) => Some(t),
        }
    }

    /// The reader inside, by flavor, for a binding that hands out frames its own
    /// way (by number from the consumer, into a caller's buffer from the tap) with
    /// one match.
    ///
    /// ```
    /// use shmring::{Address, Config, Meta, Reader, ReaderFlavor, ReaderOptions};
    /// let name = format!("doc-reader-flavor-{}", std::process::id());
    /// let mut reader = Reader::open(
    ///     Address::create(name.clone(), Config::with_capacity(1 << 20)),
    ///     ReaderOptions::default(),
    /// )?;
    /// Address::Named(name).open()?.producer()?.send(b"hi", Meta::new(0, 0))?;
    /// let ReaderFlavor::Consumer(c) = reader.flavor_mut() else { panic!("a consumer") };
    /// let f = c.next_raw(None)?.expect("a record");
    /// assert_eq!(f.len, 2);
    /// c.release_raw(f.seq)?;
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn flavor_mut(&mut self) -> ReaderFlavor<'_> {
        match &mut self.flavor {
            Flavor::Consumer(c) => ReaderFlavor::Consumer(c),
            Flavor::Tap(t) => ReaderFlavor::Tap(t),
        }
    }
}

/// A [`Reader`]'s flavor, borrowed ([`Reader::flavor_mut`]).
#[derive(Debug)]
pub enum ReaderFlavor<'a> {
    /// The ring's consumer or a tethered one.
    Consumer(&'a SharedConsumer),
    Tap(&'a mut Tap),
}

impl From<Consumer> for Reader {
    /// The ring's consumer or a tethered one, shared ([`SharedConsumer`]).
    fn from(c: Consumer) -> Reader {
        Reader {
            kind: if c.is_tethered() {
                ReaderKind::Tethered
            } else {
                ReaderKind::Consumer
            },
            flavor: Flavor::Consumer(SharedConsumer::new(c)),
        }
    }
}

impl From<Tap> for Reader {
    fn from(t: Tap) -> Reader {
        Reader {
            kind: ReaderKind::Tap,
            flavor: Flavor::Tap(Box::new(t)),
        }
    }
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("kind", &self.kind())
            .finish_non_exhaustive()
    }
}
