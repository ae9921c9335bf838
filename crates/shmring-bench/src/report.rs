//! What workers report, and the per-transport results.

use serde::{Deserialize, Serialize};

use crate::transport::Transport;

/// Printed by a worker as the last line of its stdout.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Frames moved (sent by a producer, received and checked by a consumer).
    pub frames: u64,
    pub bytes: u64,
    /// CLOCK_MONOTONIC when the first frame was started / the last one was done.
    pub start_ns: u64,
    pub end_ns: u64,
    /// getrusage(RUSAGE_SELF) at exit.
    pub utime_s: f64,
    pub stime_s: f64,
    pub maxrss_kib: u64,
    /// CPU seconds (user + system) spent in the measured loop only: from the first
    /// frame to the last, without process start-up and set-up.
    pub loop_cpu_s: f64,
    /// Heap allocations in the measured loop (None: counting allocator not installed).
    pub allocs: Option<u64>,
    /// Floor only: allocations of its reading half (`allocs` is its writing half).
    pub allocs_reader: Option<u64>,
    /// Consumer: latency from commit/send to holding the frame, in ns.
    pub lat_p50_ns: Option<u64>,
    pub lat_p99_ns: Option<u64>,
    pub lat_p999_ns: Option<u64>,
    pub lat_max_ns: Option<u64>,
    /// Consumer of the meeting: latency of the audio and of the video records
    /// separately, [p50, p99, p99.9] in ns.
    pub lat_audio_ns: Option<[u64; 3]>,
    pub lat_video_ns: Option<[u64; 3]>,
    /// Consumer: frames whose checksum or sequence number was wrong.
    pub bad_checksums: u64,
    pub bad_sequence: u64,
    /// Descriptors it had open when its work was done, its transport still open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_fds: Option<u64>,
    /// Consumer with `--histogram`: its latency histogram, [ns, count] pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_hist: Option<Vec<[u64; 2]>>,
}

/// One transport's figures for one workload and mode (the `--json` objects). With
/// `--repeat N` every figure is the median of the N runs, and the `*_range` fields
/// hold the smallest and the largest value measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub transport: String,
    pub workload: String,
    pub mode: String,
    pub frame_bytes: u64,
    pub frames: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub gbps: f64,
    pub frames_per_s: f64,
    pub cpu_s_producer: f64,
    pub cpu_s_consumer: f64,
    pub cpu_s_per_gib: f64,
    /// Rated mode: measured CPU % of one core (both sides). Unthrottled: what the
    /// measured CPU per GiB costs at `--rate`.
    pub cpu_pct_at_rate: f64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_p999_us: Option<f64>,
    /// Meeting: latency per kind of record.
    pub lat_audio_p50_us: Option<f64>,
    pub lat_audio_p99_us: Option<f64>,
    pub lat_video_p50_us: Option<f64>,
    pub lat_video_p99_us: Option<f64>,
    pub allocs_per_frame_producer: Option<f64>,
    pub allocs_per_frame_consumer: Option<f64>,
    /// Peak resident memory of the producer (the largest of several) and of the
    /// consumer; `--scale rings`: the mean over the rings' processes.
    pub rss_producer_kib: Option<u64>,
    pub rss_consumer_kib: Option<u64>,
    /// CPU per GiB relative to shmring / floor in the same run.
    pub cpu_vs_shmring: Option<f64>,
    pub cpu_vs_floor: Option<f64>,
    /// CPU per GiB relative to the two-core floor (`floor-2core`) in the same run.
    pub cpu_vs_floor_2core: Option<f64>,
    /// CPU per GiB minus the floor's: what the transport itself costs.
    pub cpu_s_per_gib_above_floor: Option<f64>,
    /// CPU per GiB minus the two-core floor's: what the transport costs beyond
    /// handing each record from one core to another.
    pub cpu_s_per_gib_above_floor_2core: Option<f64>,
    /// Runs this row sums up (`--repeat`); the figures are their medians.
    pub runs: u32,
    /// [smallest, largest] over the runs.
    pub cpu_s_per_gib_range: Option<[f64; 2]>,
    pub gbps_range: Option<[f64; 2]>,
    pub lat_p50_us_range: Option<[f64; 2]>,
    pub lat_p99_us_range: Option<[f64; 2]>,
    pub lat_audio_p99_us_range: Option<[f64; 2]>,
    pub lat_video_p99_us_range: Option<[f64; 2]>,
    /// shmring rings: how often the producer waited for space / the consumer slept
    /// for data (futex waits), and the peak bytes in the ring.
    pub ring_producer_waits: Option<u64>,
    pub ring_consumer_waits: Option<u64>,
    pub ring_peak_occupancy: Option<u64>,
    /// `--scale`: the producer threads on the ring, or the rings side by side.
    pub count: Option<u32>,
    /// `--scale`: producer processes (in all, over every ring).
    pub processes: Option<u32>,
    /// `--scale rings`: CPU % of one core per ring (producer and consumer).
    pub cpu_pct_per_ring: Option<f64>,
    /// `--scale`: the open descriptors of a producer / consumer process at its
    /// peak (/proc/PID/fd), the mean over the processes.
    pub fds_producer: Option<f64>,
    pub fds_consumer: Option<f64>,
    /// Why this transport failed (then the figures are partial or zero).
    pub error: Option<String>,
    /// `--workload bot`: its participants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participants: Option<u32>,
    /// `--workload bot`: CPU seconds per minute of the bot's run (CPU s / wall
    /// minutes) of the producer (the browser's role), of the receiver (`shmring
    /// record --encode`), and of the whole bot (both), with the whole's range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_bot_minute_producer: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_bot_minute_receiver: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_bot_minute: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_bot_minute_range: Option<[f64; 2]>,
    /// `--workload bot`: CPU % of one core of the producer and of the receiver
    /// (the whole bot's: `cpu_pct_at_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct_producer: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct_receiver: Option<f64>,
    /// `--workload bot`, the ring's row: the share of CPU it saves against the
    /// WebSocket (1 - ring / websocket; py-shmring against py-websocket), of the
    /// receiver and of the whole bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_receiver: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_whole: Option<f64>,
    /// `--workload bot`: video frames the recorder's encoders took, and those it
    /// dropped because they fell behind (more than the host encodes in real time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames_encoded: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames_dropped: Option<u64>,
    /// `--workload bot`, the Python receiver's rows (no encoder): the video frames
    /// it received (each read through a numpy view of its Y plane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames_received: Option<u64>,
    /// What must be read beside the figures (e.g. the encoder fell behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Row {
    /// A row with no figures yet.
    pub fn empty(transport: Transport, workload: &str, mode: &str, frame_bytes: u64) -> Row {
        Row {
            transport: transport.name().to_string(),
            workload: workload.to_string(),
            mode: mode.to_string(),
            frame_bytes,
            runs: 1,
            ..Default::default()
        }
    }

    /// Is it the row of transport `t`?
    pub fn is(&self, t: Transport) -> bool {
        self.transport == t.name()
    }
}

/// The fields every `--json` object has (more may follow).
pub const JSON_FIELDS: &[&str] = &[
    "transport",
    "workload",
    "frames",
    "bytes",
    "seconds",
    "gbps",
    "cpu_s_per_gib",
    "cpu_pct_at_rate",
    "lat_p50_us",
    "lat_p99_us",
    "lat_p999_us",
    "allocs_per_frame_producer",
    "allocs_per_frame_consumer",
    "rss_producer_kib",
    "rss_consumer_kib",
    "cpu_vs_shmring",
    "cpu_vs_floor",
    "cpu_vs_floor_2core",
    "cpu_s_per_gib_above_floor",
    "cpu_s_per_gib_above_floor_2core",
    "runs",
    "cpu_s_per_gib_range",
];

/// The fields every `--workload bot` object has besides [`JSON_FIELDS`]; the
/// encoding rows also have `frames_encoded` and `frames_dropped`, the Python
/// receiver's `frames_received`.
pub const BOT_JSON_FIELDS: &[&str] = &[
    "participants",
    "cpu_s_per_bot_minute_producer",
    "cpu_s_per_bot_minute_receiver",
    "cpu_s_per_bot_minute",
    "cpu_pct_producer",
    "cpu_pct_receiver",
];

/// The fields every `--scale` object has besides [`JSON_FIELDS`].
pub const SCALE_JSON_FIELDS: &[&str] = &[
    "count",
    "processes",
    "frame_bytes",
    "mode",
    "lat_p99_us_range",
    "fds_producer",
    "fds_consumer",
    "cpu_pct_per_ring",
];
