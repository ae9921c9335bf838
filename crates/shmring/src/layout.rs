//! The segment layout: every byte shmring puts in shared memory is defined here.
//!
//! ```text
//!  offset 0                                                  (all numbers little-endian)
//!  +-------------------------------------------------------------------------------+
//!  | CONTROL BLOCK  (CONTROL_SIZE = 4096 bytes, one 64-byte cache line per row)    |
//!  |  line 0  identity: magic "SHMRING1", layout version, sizes (written once)     |
//!  |  line 1  write cursor   u64 = seq:28 | pos:36      (producers, CAS)          |
//!  |  line 2  read cursor    u64 = seq:28 | pos:36      (consumer, store)         |
//!  |          peek cursor    u64 = seq:28 | pos:36      (consumer, store; stats)  |
//!  |          owner read     u64 = seq:28 | pos:36      (consumer, store)         |
//!  |          pins in use    u32 (one past the highest pin entry; 0: none)        |
//!  |  line 3  data futex u32, consumer-waiting u32      (producers wake consumer) |
//!  |  line 4  space futex u32, producers-waiting u32, need u32 (wakes producers)  |
//!  |  line 5  consumer role: state u32                                             |
//!  |  line 6-7 consumer counters                                                   |
//!  |  line 8  claim health: stalled claims, oldest pending claim (since, slot, pid)|
//!  |  line 9  tether futex u32, tethers-waiting u32     (producers wake tethers)   |
//!  |  line 10 tethers: mask u32 (requested or active), detached u64 (consumer)     |
//!  |  line 11-18 one per tethered consumer: state u32, read, peek, counters        |
//!  |  line 19-20 identity copies: line 0 twice more (two of three must agree)     |
//!  |  line 21-36 pins: extent u64 x 128 (ring offset, units; 0 free) (consumer)    |
//!  |  line 37-52 pins: claim u64 x 128 (its log entry while a holder may write)    |
//!  +-------------------------------------------------------------------------------+
//!  | SLOT TABLE  max_producers x SLOT_SIZE (128 bytes): one per attached producer  |
//!  |  state u32 | (pad) u32 | open claim u64 | space-waiting u32 | counters       |
//!  +-------------------------------------------------------------------------------+
//!  | CLAIM LOG   log_entries x u64 (power of two): entry for claim seq k at k % N  |
//!  |  bit 63..36 stamp (k mod 2^28) | 35..34 state | 33..26 slot | 25..0 units    |
//!  +-------------------------------------------------------------------------------+
//!  | padding up to a page boundary (data_offset)                                   |
//!  +-------------------------------------------------------------------------------+
//!  | DATA RING  capacity bytes (power of two), in 64-byte units                    |
//!  |   ... | RecordHeader (64 B) | payload (len bytes, rounded up to 64) | ...     |
//!  +-------------------------------------------------------------------------------+
//! ```
//!
//! A record is one 64-byte [`RecordHeader`] followed by its payload, so every
//! payload starts on a 64-byte boundary. A record never wraps: when it does not fit
//! before the end of the data ring, its claim also covers the units up to the end
//! (padding) and the record starts at offset 0. The claim log entry carries the
//! claim's total length (padding included), so padding needs no header of its own.
//! The consumer pads an empty ring whose write cursor is past the placement window
//! to its end with a claim of its own, so the next record goes to offset 0
//! (`Shared::pad_to_start`).
//!
//! Positions are counted in 64-byte units and wrap at 2^36 units; claim sequence
//! numbers wrap at 2^28. Both are compared with wrapping arithmetic only.

use crate::sync::{AtomicU32, AtomicU64};

/// `b"SHMRING1"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMRING1");
/// Bumped on any change to this file's layout or to the protocol.
pub const LAYOUT_VERSION: u32 = 5;
/// Record alignment, record header size and the unit of all positions.
pub const UNIT: u64 = 64;
/// Size of the control block at offset 0.
pub const CONTROL_SIZE: u64 = 4096;
/// Size of one producer slot.
pub const SLOT_SIZE: u64 = 128;
/// Page size assumed for the data offset and mapping sizes.
pub const PAGE: u64 = 4096;
/// Smallest data ring.
pub const MIN_CAPACITY: u64 = 64 * 1024;
/// Largest data ring (claim lengths must fit the 26-bit units field).
pub const MAX_CAPACITY: u64 = 1 << 31;
/// Most producer slots (the log entry's slot field is 8 bits).
pub const MAX_PRODUCERS: u32 = 256;
/// Entries of the pin table ([`Pins`]): data ring ranges producers place records
/// around.
pub const MAX_PINS: usize = 128;
/// Most tethered consumers beside the ring's own consumer (one bit each in
/// [`Tethers::mask`]).
pub const MAX_TETHERS: u32 = 8;
/// Fewest and most claim-log entries (records in flight at once).
pub const MIN_LOG_ENTRIES: u32 = 16;
pub const MAX_LOG_ENTRIES: u32 = 1 << 22;

/// Flag in [`Identity::flags`]: producers must signal through an eventfd.
pub const FLAG_EVENTFD: u32 = 1;
/// Flag in [`Identity::flags`]: every process maps the ring asking for transparent
/// huge pages (`MADV_HUGEPAGE`), so whoever touches a page first gets a huge one.
pub const FLAG_HUGE_PAGES: u32 = 2;
/// Flag in [`Identity::flags`]: the ring's record locks (liveness) live on a lock
/// file of their own, a second memfd handed only to processes that may write the
/// ring (every memfd ring); without it, on the segment file (named rings).
pub const FLAG_LOCK_FILE: u32 = 4;

// ---- packed cursor: seq (28 bits) | pos (36 bits) ----------------------------------

pub const SEQ_BITS: u32 = 28;
pub const POS_BITS: u32 = 36;
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
pub const POS_MASK: u64 = (1 << POS_BITS) - 1;

#[inline]
pub const fn pack_cursor(seq: u64, pos: u64) -> u64 {
    ((seq & SEQ_MASK) << POS_BITS) | (pos & POS_MASK)
}
#[inline]
pub const fn cursor_seq(c: u64) -> u64 {
    c >> POS_BITS
}
#[inline]
pub const fn cursor_pos(c: u64) -> u64 {
    c & POS_MASK
}
/// `a - b` in the sequence space.
#[inline]
pub const fn seq_diff(a: u64, b: u64) -> u64 {
    a.wrapping_sub(b) & SEQ_MASK
}
/// `a - b` in the position space.
#[inline]
pub const fn pos_diff(a: u64, b: u64) -> u64 {
    a.wrapping_sub(b) & POS_MASK
}

// ---- claim log entry: stamp (28) | state (2) | slot (8) | units (26) ---------------

pub const UNITS_BITS: u32 = 26;
pub const SLOT_BITS: u32 = 8;
pub const UNITS_MASK: u64 = (1 << UNITS_BITS) - 1;
const SLOT_SHIFT: u32 = UNITS_BITS;
const STATE_SHIFT: u32 = UNITS_BITS + SLOT_BITS;
const STAMP_SHIFT: u32 = STATE_SHIFT + 2;

/// State of a claim, held in its log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ClaimState {
    /// Space is claimed; the producer is writing.
    Claimed = 0,
    /// The record is complete and may be read.
    Committed = 1,
    /// The producer gave the space up (dropped reservation); skip it.
    Aborted = 2,
    /// Space no record will fill; skip it: a dead producer's claim the consumer
    /// took back, or the padding the consumer claims to place the next record at
    /// the ring's start (born in this state).
    Abandoned = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEntry {
    pub stamp: u64,
    pub state: ClaimState,
    pub slot: u32,
    pub units: u64,
}

impl LogEntry {
    #[inline]
    pub const fn pack(self) -> u64 {
        ((self.stamp & SEQ_MASK) << STAMP_SHIFT)
            | ((self.state as u64) << STATE_SHIFT)
            | (((self.slot as u64) & 0xff) << SLOT_SHIFT)
            | (self.units & UNITS_MASK)
    }
    #[inline]
    pub const fn unpack(v: u64) -> Self {
        let state = match (v >> STATE_SHIFT) & 3 {
            0 => ClaimState::Claimed,
            1 => ClaimState::Committed,
            2 => ClaimState::Aborted,
            _ => ClaimState::Abandoned,
        };
        LogEntry {
            stamp: v >> STAMP_SHIFT,
            state,
            slot: ((v >> SLOT_SHIFT) & 0xff) as u32,
            units: v & UNITS_MASK,
        }
    }
    /// The value every entry holds before its first claim: it reads as the
    /// previous generation of the first sequence number that maps to `index`.
    #[inline]
    pub const fn initial(seq: u64, log_entries: u64) -> u64 {
        LogEntry {
            stamp: seq.wrapping_sub(log_entries) & SEQ_MASK,
            state: ClaimState::Aborted,
            slot: 0,
            units: 0,
        }
        .pack()
    }
}

/// Number of units a record with a payload of `len` bytes occupies (header included).
#[inline]
pub const fn record_units(len: u64) -> u64 {
    1 + len.div_ceil(UNIT)
}

/// Where a claim of `total` units starting at `pos` puts its record: returns
/// `(record offset in units from the data ring start, record units)`, or `None` when
/// the numbers cannot come from an honest claim.
#[inline]
pub fn claim_geometry(pos: u64, total: u64, cap_units: u64) -> Option<(u64, u64)> {
    if total == 0 || total > cap_units {
        return None;
    }
    let off = pos & (cap_units - 1);
    if off + total <= cap_units {
        Some((off, total))
    } else {
        let pad = cap_units - off;
        let units = total - pad; // total > pad here
        Some((0, units))
    }
}

/// Total units (padding included) a producer must claim at `pos` for a record of
/// `units` units.
#[inline]
pub const fn claim_total(pos: u64, units: u64, cap_units: u64) -> u64 {
    let off = pos & (cap_units - 1);
    if off + units <= cap_units {
        units
    } else {
        (cap_units - off) + units
    }
}

// ---- structures in shared memory --------------------------------------------------

/// Line 0 of the control block. Written by the creator, `magic` last (Release), and
/// rewritten by the consumer when it finds it changed. Peers read each field once
/// (Relaxed after the Acquire load of `magic`) and check the local copy.
#[repr(C)]
pub struct Identity {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub control_size: AtomicU32,
    pub capacity: AtomicU64,
    pub max_record: AtomicU64,
    pub log_entries: AtomicU32,
    pub max_producers: AtomicU32,
    pub flags: AtomicU32,
    pub _pad: u32,
    pub data_offset: AtomicU64,
    pub total_size: AtomicU64,
}

#[repr(C, align(64))]
pub struct Line<T>(pub T);

/// The consumer's cursors. `read` is *the ring's* read cursor, the only one
/// producers look at: no consumer needs a byte or a claim before it. With no
/// tethered consumer it is the consumer's own read cursor (`owner_read`); with
/// some, the consumer publishes the farthest behind of its own and theirs.
#[repr(C)]
pub struct Cursors {
    pub read: AtomicU64,
    pub peek: AtomicU64,
    pub owner_read: AtomicU64,
    /// One past the highest entry of the pin table in use (0: no pin): producers
    /// look at the pins only when it is not 0. On the line producers load the
    /// read cursor from, so looking costs them nothing more.
    pub pinned: AtomicU32,
}

/// The pin table: ranges of the data ring that producers place records around,
/// because a process may still write them (the record of a claim the consumer
/// stopped waiting for in order, while its holder has not settled it) or the
/// consumer still reads them (a frame it handed out from such a claim), while
/// the ring's read cursor has moved past them. Written by the ring's consumer
/// only; see `protocol::Pins`.
#[repr(C)]
pub struct Pins {
    /// Entry `i`: ring offset in units (bits 0..32) and length in units (bits
    /// 32..64) of a pinned record; 0: free.
    pub extent: [AtomicU64; MAX_PINS],
    /// Entry `i`: the claim's log entry value as its holder's open-claim word
    /// holds it while the holder may still write the record; 0 for a frame the
    /// consumer holds (the holder committed).
    pub claim: [AtomicU64; MAX_PINS],
}

#[repr(C)]
pub struct Futex {
    /// Bumped by whoever wakes; waiters sleep on it.
    pub seq: AtomicU32,
    /// Non-zero while someone is (about to be) asleep on `seq`.
    pub waiting: AtomicU32,
    /// Space futex: the most units a waiting producer needs (a hint; the consumer
    /// wakes producers once that much, and at least 1/16 of the ring, is free, so a
    /// full ring does not wake them for every released record). Data futex: the
    /// consumer's wake mark under a latency budget (producers wake it only once
    /// this many units are in the ring; 0: at every commit).
    pub need: AtomicU32,
}

/// Whether a consumer is attached. Only informative: liveness is the consumer's
/// record lock, and which process is the consumer is known to that process alone
/// (nothing here can make anyone treat a slot or a claim as the consumer's own).
#[repr(C)]
pub struct ConsumerRole {
    /// 0 = none attached, 1 = attached.
    pub state: AtomicU32,
}

/// Counters written by the consumer only.
#[repr(C)]
#[derive(Default)]
pub struct ConsumerCounters {
    pub records_consumed: AtomicU64,
    pub bytes_consumed: AtomicU64,
    pub abandoned: AtomicU64,
    pub skipped_aborted: AtomicU64,
    pub corruption: AtomicU64,
    pub waits: AtomicU64,
    pub wakes_sent: AtomicU64,
    pub peak_occupancy: AtomicU64,
    pub resets: AtomicU64,
    pub reaped_slots: AtomicU64,
    /// Records its filter refused (released unread; `ConsumerOptions::filter`).
    /// In what was padding of layout version 1's line 7: zero on rings older
    /// consumers made, and never written by them.
    pub filtered: AtomicU64,
    /// Paddings it claimed to place the next record at the ring's start
    /// (`Shared::pad_to_start`); taps tell them from lost records by it. Padding
    /// of line 7 before, as `filtered`.
    pub placements: AtomicU64,
}

/// Claims that stay pending, as the consumer sees them (written by the consumer
/// only, Relaxed: statistics for `shmring stat`, never relied on).
#[repr(C)]
#[derive(Default)]
pub struct ClaimHealth {
    /// Claims the consumer overtook because they stayed pending past its limit.
    pub stalled_claims: AtomicU64,
    /// Claims found forged (naming a live producer that does not hold them).
    pub forged_claims: AtomicU64,
    /// Shared state the consumer repaired without a reset (identity line, its own
    /// published cursors, the consumer role).
    pub repairs: AtomicU64,
    /// `CLOCK_MONOTONIC` nanoseconds when the oldest claim still pending was first
    /// seen pending; 0 when none is.
    pub oldest_pending_since_ns: AtomicU64,
    /// That claim's producer slot.
    pub oldest_pending_slot: AtomicU32,
    /// The pid holding that slot's lock, as the kernel reports it to the consumer
    /// (0: unknown, e.g. in another pid namespace).
    pub oldest_pending_pid: AtomicU32,
    /// Claims taken back from a live producer: pending past the consumer's claim
    /// timeout, or parked while the claim log filled up behind them.
    pub expired_claims: AtomicU64,
}

/// Which tether lines are in use. Written by tethered consumers (setting their
/// bit when they ask to attach, clearing it when they leave) and by the consumer
/// (clearing the bit of one it detaches).
#[repr(C)]
#[derive(Default)]
pub struct Tethers {
    /// Bit `j`: tether line `j` is requested or active.
    pub mask: AtomicU32,
    pub _pad: u32,
    /// Tethered consumers the consumer expelled (dead, or stopped releasing).
    pub detached: AtomicU64,
    /// Where the consumer's last reset started the new generation (a cursor):
    /// tethered consumers that find the ring reset rebase there.
    pub reset_base: AtomicU64,
}

/// Tether line states.
pub const TETHER_FREE: u32 = 0;
/// Asked to attach; the consumer sets `read` and makes it ACTIVE.
pub const TETHER_REQUESTED: u32 = 1;
pub const TETHER_ACTIVE: u32 = 2;
/// Expelled by the consumer because it stopped releasing for too long; its holder
/// is told and frees the line.
pub const TETHER_DETACHED: u32 = 3;
/// Expelled by the consumer because its read cursor moved in a way no release
/// makes (backwards, or without giving space back): another process wrote it.
pub const TETHER_OVERWRITTEN: u32 = 4;

/// One tethered consumer: a full consumer beside the ring's own, with its own
/// cursors, holding space until it releases it.
#[repr(C)]
#[derive(Default)]
pub struct TetherLine {
    pub state: AtomicU32,
    /// The pid the kernel reported to the ring's consumer for the line's lock when
    /// it adopted it (0: unknown), for readers without the lock file (observers).
    pub pid: AtomicU32,
    /// Its read cursor (its own store, Release; the consumer's at adoption).
    pub read: AtomicU64,
    /// Its peek cursor (statistics).
    pub peek: AtomicU64,
    pub records_consumed: AtomicU64,
    pub bytes_consumed: AtomicU64,
    /// Records it lost by resynchronising after the ring was reset.
    pub lost: AtomicU64,
    /// Records its filter refused (released unread). In what was padding.
    pub records_filtered: AtomicU64,
}

#[repr(C)]
pub struct Control {
    pub identity: Line<Identity>,
    pub write: Line<AtomicU64>,
    pub cursors: Line<Cursors>,
    pub data: Line<Futex>,
    pub space: Line<Futex>,
    pub consumer: Line<ConsumerRole>,
    pub counters: Line<ConsumerCounters>,
    pub health: Line<ClaimHealth>,
    /// Tethered consumers sleep here (producers wake them all).
    pub tether_data: Line<Futex>,
    pub tethers: Line<Tethers>,
    pub tether: [Line<TetherLine>; MAX_TETHERS as usize],
    /// The identity line twice more, written with line 0: whoever attaches takes
    /// the geometry two of the three agree on, so a peer's single write cannot
    /// make anyone take a forged one (the consumer rewrites all three).
    pub identity_copies: [Line<Identity>; 2],
    /// Lines 21 to 52.
    pub pins: Line<Pins>,
}

/// Slot states. Any other value is treated like ACTIVE (and reaped once its lock
/// byte is free).
pub const SLOT_FREE: u32 = 0;
pub const SLOT_ACTIVE: u32 = 2;

/// Counters written by one producer only (the slot's holder).
#[repr(C)]
#[derive(Default)]
pub struct ProducerCounters {
    pub records_committed: AtomicU64,
    pub bytes_committed: AtomicU64,
    pub aborted: AtomicU64,
    pub drops_full: AtomicU64,
    pub waits: AtomicU64,
    pub wakes_sent: AtomicU64,
    /// Paddings it claimed to place a record around a pin (see [`Pins`]); taps
    /// tell them from lost records by it.
    pub paddings: AtomicU64,
    pub _reserved: AtomicU64,
}

#[repr(C, align(64))]
pub struct Slot {
    pub state: AtomicU32,
    pub _pad0: u32,
    /// The log entry value of the holder's open claim (0: none), stored (Release)
    /// before the claim's CAS and cleared (Release) after its commit or abort. A
    /// claim naming this slot that is not this value was not made by the holder.
    pub open_claim: AtomicU64,
    /// 1 while the holder is counted in the space futex's waiting count, so a
    /// reaper can take a dead sleeper's count back.
    pub space_waiting: AtomicU32,
    pub _pad32: u32,
    pub _pad: [u64; 5],
    pub counters: ProducerCounters,
}

/// Marks the `seq` field of a record header written by a producer (bits 32..64):
/// bytes never written (zeros) or written by something else never read as the
/// header of claim 0, whatever the consumer's position.
pub const HEADER_TAG: u64 = (u64::from_le_bytes(*b"SHMRREC\0") & 0xffff_ffff) << 32;

/// The `seq` field of the header of claim `seq`: its low 28 bits and [`HEADER_TAG`].
#[inline]
pub const fn header_seq(seq: u64) -> u64 {
    HEADER_TAG | (seq & SEQ_MASK)
}

/// The 64-byte header at the start of every record. Written by the producer before
/// it commits; read by the consumer (as untrusted input) after it sees the commit.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length in bytes.
    pub len: u64,
    /// Producer's timestamp, nanoseconds (CLOCK_MONOTONIC unless agreed otherwise).
    pub timestamp_ns: u64,
    pub stream: u32,
    pub kind: u32,
    pub flags: u32,
    pub _pad: u32,
    /// The claim sequence number, for cross-checking: [`header_seq`] of it.
    pub seq: u64,
    pub _reserved: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<RecordHeader>() as u64 == UNIT);
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Slot>() as u64 == SLOT_SIZE);
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Control>() as u64 <= CONTROL_SIZE);
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Identity>() <= 64);

/// Sizes and offsets of a segment, computed from its configuration. Held locally
/// by every side after validation; never re-read from shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub capacity: u64,
    pub max_record: u64,
    pub log_entries: u32,
    pub max_producers: u32,
    pub flags: u32,
    pub slots_offset: u64,
    pub log_offset: u64,
    pub data_offset: u64,
    pub total_size: u64,
}

impl Geometry {
    /// Layout for a configuration, or a message naming the invalid field.
    pub fn new(
        capacity: u64,
        max_record: u64,
        log_entries: u32,
        max_producers: u32,
        flags: u32,
    ) -> Result<Self, String> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(format!(
                "capacity {capacity} must be a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"
            ));
        }
        if record_units(max_record) * UNIT > capacity / 2 {
            return Err(format!(
                "max_record {max_record} too large for capacity {capacity} (at most {})",
                Self::largest_record(capacity)
            ));
        }
        if !log_entries.is_power_of_two()
            || !(MIN_LOG_ENTRIES..=MAX_LOG_ENTRIES).contains(&log_entries)
        {
            return Err(format!(
                "log_entries {log_entries} must be a power of two in {MIN_LOG_ENTRIES}..={MAX_LOG_ENTRIES}"
            ));
        }
        if max_producers == 0 || max_producers > MAX_PRODUCERS {
            return Err(format!(
                "max_producers {max_producers} must be in 1..={MAX_PRODUCERS}"
            ));
        }
        let slots_offset = CONTROL_SIZE;
        let log_offset = slots_offset + max_producers as u64 * SLOT_SIZE;
        let data_offset = (log_offset + log_entries as u64 * 8).next_multiple_of(PAGE);
        Ok(Geometry {
            capacity,
            max_record,
            log_entries,
            max_producers,
            flags,
            slots_offset,
            log_offset,
            data_offset,
            total_size: data_offset + capacity,
        })
    }

    /// The largest payload a ring of `capacity` bytes accepts (a record may take at
    /// most half the ring, so that a padded claim always fits an empty ring).
    pub const fn largest_record(capacity: u64) -> u64 {
        capacity / 2 - UNIT
    }

    #[inline]
    pub const fn cap_units(&self) -> u64 {
        self.capacity / UNIT
    }
}
