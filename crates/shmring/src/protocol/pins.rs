//! The pin table as producers read it: ranges of the data ring they place
//! records around (see [`crate::layout::Pins`]).
//!
//! The ring's consumer pins the record of a claim it stops waiting for in claim
//! order (it parks it, or takes it back at the claim timeout) while the claim's
//! holder may still write it, and of a frame it handed out from such a claim, and
//! only then publishes a read cursor past it. A producer loads the read cursor
//! (Acquire), then the pins (Acquire): whatever read cursor lets its claim reach a
//! pinned record's bytes was published after the pin, so it sees the pin (or,
//! later, the pin gone). The consumer clears a pin (Release) once the holder
//! settled the claim (its open-claim word, loaded with Acquire, no longer holds
//! it) or died, or once it released the frame: a producer that sees the pin gone
//! (Acquire) writes after everything the holder and the consumer did there.
//!
//! Entries are cleared in place and never moved, so a producer looking at them
//! one by one, while the consumer adds and clears others, never misses one that
//! was there all along.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// References to the pin table's shared words.
#[derive(Clone, Copy)]
pub struct PinTable<'a> {
    /// One past the highest entry in use (0: none).
    pub in_use: &'a AtomicU32,
    /// Each entry's extent ([`pack_pin`]).
    pub extent: &'a [AtomicU64],
}

/// The extent of a pin: `units` units at ring offset `off` (in units).
#[inline]
pub const fn pack_pin(off: u64, units: u64) -> u64 {
    (off & 0xffff_ffff) | (units << 32)
}

/// The (offset, units) of a pin entry read from shared memory, if it can be one:
/// not free, inside a ring of `cap` units.
#[inline]
pub const fn unpack_pin(v: u64, cap: u64) -> Option<(u64, u64)> {
    let (off, units) = (v & 0xffff_ffff, v >> 32);
    if units == 0 || off >= cap || units > cap - off {
        None
    } else {
        Some((off, units))
    }
}

impl PinTable<'_> {
    /// The ring's consumer pins `extent` ([`pack_pin`]) in entry `i`, free until
    /// now; `hi` is one past the highest entry in use after it. Before it
    /// publishes a read cursor past the record.
    pub fn set(&self, i: usize, extent: u64, hi: usize) {
        // Release: a producer that sees the entry (Acquire) sees what we wrote
        // before; and the read cursor's Release store comes after it.
        self.extent[i].store(extent, Ordering::Release);
        self.set_in_use(hi);
    }

    /// The ring's consumer clears entry `i`: nobody writes or reads its record
    /// any more. `hi` as for [`PinTable::set`].
    pub fn clear(&self, i: usize, hi: usize) {
        // Release: a producer that sees the entry free (Acquire) writes after
        // everything the holder and the consumer did with the record.
        self.extent[i].store(0, Ordering::Release);
        self.set_in_use(hi);
    }

    fn set_in_use(&self, hi: usize) {
        // Relaxed load: only the consumer writes it. Release store: as the extents.
        if self.in_use.load(Ordering::Relaxed) != hi as u32 {
            self.in_use.store(hi as u32, Ordering::Release);
        }
    }

    /// The end (ring offset, in units) of a pin that the record at ring offset
    /// `off` of `units` units would overlap, if any. One load when nothing is
    /// pinned; entries that cannot be pins (a peer's writes) are ignored.
    #[inline]
    pub fn overlap(&self, off: u64, units: u64, cap: u64) -> Option<u64> {
        // Acquire: pairs with the consumer's Release stores (see the module doc).
        let hi = self.in_use.load(Ordering::Acquire) as usize;
        if hi == 0 {
            return None;
        }
        self.overlap_in(&self.extent[..hi.min(self.extent.len())], off, units, cap)
    }

    #[cold]
    fn overlap_in(&self, entries: &[AtomicU64], off: u64, units: u64, cap: u64) -> Option<u64> {
        entries.iter().find_map(|e| {
            // Acquire: as above.
            let (a, n) = unpack_pin(e.load(Ordering::Acquire), cap)?;
            (a < off + units && off < a + n).then_some(a + n)
        })
    }
}
