//! The counters of a ring as a C struct, and the core's list of them.

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

use shmring::{FieldKind, Snapshot};

use crate::handles::*;
use crate::status::shmring_status::*;
use crate::status::*;

/// Counters of a ring (a snapshot). Statistics only: a peer can falsify them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmring_stats {
    pub capacity: u64,
    pub records_committed: u64,
    pub bytes_committed: u64,
    pub records_aborted: u64,
    pub drops_full: u64,
    pub producer_waits: u64,
    pub producer_wakes: u64,
    pub records_consumed: u64,
    pub bytes_consumed: u64,
    pub abandoned: u64,
    pub skipped_aborted: u64,
    pub corruption: u64,
    pub consumer_waits: u64,
    pub consumer_wakes: u64,
    pub peak_occupancy: u64,
    pub occupancy: u64,
    pub records_in_flight: u64,
    pub resets: u64,
    pub reaped_slots: u64,
    pub producers: u32,
    /// Non-zero if a consumer is attached.
    pub consumer_attached: u32,
    /// Claims the consumer overtook because they stayed pending past its limit.
    pub stalled_claims: u64,
    /// Forged claims the consumer skipped (also counted in `corruption`).
    pub forged_claims: u64,
    /// Shared fields a peer changed that the consumer rewrote without a reset
    /// (also counted in `corruption`).
    pub repairs: u64,
    /// How long the oldest pending claim has been pending, in ns (0: none is).
    pub oldest_pending_age_ns: u64,
    /// That claim's producer slot (meaningful when the age is not 0).
    pub oldest_pending_slot: u32,
    /// The pid holding that slot (0: unknown).
    pub oldest_pending_pid: u32,
    /// Tethered consumers attached and alive.
    pub tethered_consumers: u32,
    /// Tethered consumers the consumer expelled (dead, or stopped releasing).
    pub tethers_detached: u64,
    /// Claims taken back from a live producer (past the claim timeout, or parked
    /// with the claim log full behind them).
    pub expired_claims: u64,
    /// Records the ring's consumer's filter refused (released unread; not in
    /// `records_consumed`).
    pub records_filtered: u64,
    /// Paddings the ring's consumer claimed so the next record goes to the ring's
    /// start (claims that hold no record).
    pub placements: u64,
    /// Bytes producers place records around: claims a live holder may still
    /// write, frames held from them.
    pub pinned_bytes: u64,
    /// Paddings producers claimed to place a record around a pinned one.
    pub pin_paddings: u64,
}

/// The fields `shmring_stats` copies as they are, and the one flag (`bool` in the
/// core, 0 or 1 in C): both conversions are made from this one list. No field is
/// defaulted, so a counter added to the core fails to compile here.
macro_rules! stats_mirror {
    ($($field:ident),* ; $flag:ident) => {
        /// The core's snapshot as the C struct (its fields are `Stats::fields()`, in
        /// that order: `tests/header.rs` checks it).
        pub(crate) fn c_stats(s: &shmring::Stats) -> shmring_stats {
            shmring_stats {
                $($field: s.$field,)*
                $flag: s.$flag as u32,
            }
        }

        /// The C struct as the core's snapshot (the inverse of [`c_stats`]).
        pub(crate) fn core_stats(s: &shmring_stats) -> shmring::Stats {
            shmring::Stats {
                $($field: s.$field,)*
                $flag: s.$flag != 0,
            }
        }
    };
}

stats_mirror!(
    capacity,
    records_committed,
    bytes_committed,
    records_aborted,
    drops_full,
    producer_waits,
    producer_wakes,
    records_consumed,
    bytes_consumed,
    abandoned,
    skipped_aborted,
    corruption,
    consumer_waits,
    consumer_wakes,
    peak_occupancy,
    occupancy,
    records_in_flight,
    resets,
    reaped_slots,
    producers,
    stalled_claims,
    forged_claims,
    repairs,
    oldest_pending_age_ns,
    oldest_pending_slot,
    oldest_pending_pid,
    tethered_consumers,
    tethers_detached,
    expired_claims,
    records_filtered,
    placements,
    pinned_bytes,
    pin_paddings;
    consumer_attached
);

/// shmring_stats_field.kind: only ever grows while the ring lives.
pub const SHMRING_FIELD_COUNTER: u32 = 0;
/// shmring_stats_field.kind: a level that goes up and down.
pub const SHMRING_FIELD_GAUGE: u32 = 1;
/// shmring_stats_field.kind: a yes/no state, as 0 or 1.
pub const SHMRING_FIELD_FLAG: u32 = 2;

/// One field of a shmring_stats snapshot, named and explained (the core's
/// `Stats::fields()`, from which every report is derived).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmring_stats_field {
    /// The field's name in shmring_stats, e.g. "records_committed". Static.
    pub name: *const c_char,
    /// One line saying what it counts. Static.
    pub help: *const c_char,
    /// The unit of `value`: "bytes", "ns", or "" for a count. Static.
    pub unit: *const c_char,
    /// SHMRING_FIELD_COUNTER, _GAUGE or _FLAG.
    pub kind: u32,
    /// Zero.
    pub reserved: u32,
    /// Its value in the snapshot (a flag is 0 or 1).
    pub value: u64,
}

/// The core's field names, help lines and units as C strings, made once.
fn field_strings() -> &'static [[CString; 3]] {
    static STRINGS: OnceLock<Vec<[CString; 3]>> = OnceLock::new();
    STRINGS.get_or_init(|| {
        let c = |s: &str| CString::new(s.replace('\0', "?")).unwrap_or_default();
        shmring::Stats::default()
            .fields()
            .map(|f| [c(f.name), c(f.help), c(f.unit)])
            .collect()
    })
}

/// Every field of the snapshot `*s`, in the struct's order, with its name, kind,
/// unit and meaning: `*n` receives how many there are, and the first
/// `min(*n, cap)` are written to `out` (which may be NULL when `cap` is 0). The
/// strings are static. For reports that list every counter without naming each.
#[no_mangle]
pub unsafe extern "C" fn shmring_stats_fields(
    s: *const shmring_stats,
    out: *mut shmring_stats_field,
    cap: usize,
    n: *mut usize,
) -> shmring_status {
    entry("shmring_stats_fields", || {
        let s = core_stats(in_ptr(s, "s")?);
        let n = out_ptr(n, "n")?;
        if cap > 0 && out.is_null() {
            return Err(fail!(SHMRING_ERR_NULL, "out is NULL and cap is {cap}"));
        }
        let strings = field_strings();
        let mut count = 0;
        for (i, f) in s.fields().enumerate() {
            if i < cap {
                let [name, help, unit] = &strings[i];
                // SAFETY: the caller promises `cap` writable entries at `out`
                // (non-NULL, checked above), and i < cap.
                unsafe {
                    *out.add(i) = shmring_stats_field {
                        name: name.as_ptr(),
                        help: help.as_ptr(),
                        unit: unit.as_ptr(),
                        kind: match f.kind {
                            FieldKind::Counter => SHMRING_FIELD_COUNTER,
                            FieldKind::Gauge => SHMRING_FIELD_GAUGE,
                            FieldKind::Flag => SHMRING_FIELD_FLAG,
                        },
                        reserved: 0,
                        value: f.value,
                    }
                };
            }
            count += 1;
        }
        *n = count;
        ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_stats_inverts_c_stats() {
        let mut core = shmring::Stats::default();
        assert_eq!(core_stats(&c_stats(&core)), core);
        core.records_committed = 7;
        core.consumer_attached = true;
        core.oldest_pending_pid = 9;
        core.tethers_detached = 11;
        assert_eq!(core_stats(&c_stats(&core)), core);
    }

    #[test]
    fn field_strings_follow_the_cores_list() {
        let names: Vec<String> = field_strings()
            .iter()
            .map(|[n, _, _]| n.to_str().unwrap().to_owned())
            .collect();
        let core: Vec<&str> = shmring::Stats::default().fields().map(|f| f.name).collect();
        assert_eq!(names, core);
    }
}
