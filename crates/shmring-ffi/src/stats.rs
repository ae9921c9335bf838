//! The counters of a ring as a C struct.

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
    /// Tethered consumers the consumer detached (dead, or stopped releasing).
    pub tethers_detached: u64,
    /// Claims taken back because they stayed pending past the claim timeout.
    pub expired_claims: u64,
}

/// The core's snapshot as the C struct (its fields are `Stats::fields()`, in that
/// order: `tests/header.rs` checks it).
pub(crate) fn c_stats(s: &shmring::Stats) -> shmring_stats {
    shmring_stats {
        capacity: s.capacity,
        records_committed: s.records_committed,
        bytes_committed: s.bytes_committed,
        records_aborted: s.records_aborted,
        drops_full: s.drops_full,
        producer_waits: s.producer_waits,
        producer_wakes: s.producer_wakes,
        records_consumed: s.records_consumed,
        bytes_consumed: s.bytes_consumed,
        abandoned: s.abandoned,
        skipped_aborted: s.skipped_aborted,
        corruption: s.corruption,
        consumer_waits: s.consumer_waits,
        consumer_wakes: s.consumer_wakes,
        peak_occupancy: s.peak_occupancy,
        occupancy: s.occupancy,
        records_in_flight: s.records_in_flight,
        resets: s.resets,
        reaped_slots: s.reaped_slots,
        producers: s.producers,
        consumer_attached: s.consumer_attached as u32,
        stalled_claims: s.stalled_claims,
        forged_claims: s.forged_claims,
        repairs: s.repairs,
        oldest_pending_age_ns: s.oldest_pending_age_ns,
        oldest_pending_slot: s.oldest_pending_slot,
        oldest_pending_pid: s.oldest_pending_pid,
        tethered_consumers: s.tethered_consumers,
        tethers_detached: s.tethers_detached,
        expired_claims: s.expired_claims,
    }
}
