//! Command lines of `shmring bench` and of its worker program, `shmring-bench-worker`.

use clap::{Parser, ValueEnum};

use crate::transport::{Set, Transport};

/// The long help of `--transports`, from the list itself.
fn transports_help() -> String {
    let names = |set: Set| -> Vec<&str> {
        Transport::ALL
            .iter()
            .filter(|s| s.set == set && s.transport.built())
            .map(|s| s.name)
            .collect()
    };
    let mut h = format!(
        "Transports to run, comma separated. Default: {}.\nAlso, only when named: {} (a \
         second reader of every frame, video and 4 KiB workloads); {} (a Python receiver; \
         needs python3 with the shmring package and websockets).",
        names(Set::Default).join(", "),
        names(Set::SecondReader).join(", "),
        names(Set::Python).join(", ")
    );
    for s in Transport::ALL.iter().filter(|s| !s.transport.built()) {
        let (t, f) = (s.name, s.feature.unwrap_or(s.name));
        h += &format!("\nNot in this build: {t} (cargo build --release -p shmring-cli -F {f}).");
    }
    h
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    /// 1080p I420 frames (3,110,400 bytes).
    Video,
    /// 4 KiB records: per-record overhead.
    Audio,
    /// Video and audio.
    All,
    /// A video meeting: --participants each sending 1280x720@30 I420 and 10 ms of
    /// 48 kHz stereo, from threads in two producer processes into one consumer, at
    /// the real rate (--mode and --rate do not apply).
    Meeting,
    /// The whole meeting bot, WebSocket against the ring: one producer process in
    /// the role of the browser (a thread per stream; --participants, at most 16,
    /// each 1280x720@30 I420 drawn into the ring's reservation or the WebSocket's
    /// send buffer, and 10 ms 48 kHz stereo) and `shmring record --encode --preset
    /// ultrafast` as the receiver (H.264 + AAC, an MP4 per participant into a
    /// temporary directory), fed by a ring (`shmring`) or by a loopback WebSocket
    /// framed as Chromium frames it (`websocket`: 131,000-byte fragments, masked).
    /// CPU of each process and of the whole, per bot-minute, and the share the ring
    /// saves; frames encoded and dropped. --transports may also name py-shmring and
    /// py-websocket: the same producer into the story's Python receiver
    /// (python/bench/py_bot_receiver.py, in the checkout's .venv or $SHMRING_PYTHON:
    /// numpy views over every frame, no encode) over the ring or the `websockets`
    /// library, with frames received. --seconds defaults to 20; --transports
    /// defaults to shmring,websocket; --mode and --rate do not apply.
    Bot,
}

/// What `--scale` grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScaleArg {
    /// One ring and one consumer; for each of --counts (default 1,2,4,8,16,32,64)
    /// that many sending threads, in two producer processes (threads round robin;
    /// with --processes, each thread a producer process of its own), each sending
    /// records of one --size (default 4096 and 1382400, a 1280x720 I420 frame, as
    /// two series) at --rate in all (rated) or as fast as they go (unthrottled),
    /// following --mode. The consumer reads and checks every byte. Transports:
    /// shmring, floor (every thread writes and reads its own records in one
    /// process: the baseline) and, when built in, iceoryx2 (a publisher per thread).
    Producers,
    /// For each of --counts (default 1,4,16,64) that many rings side by side, each
    /// with its own producer process and consumer process at a meeting
    /// participant's rate (a 1280x720@30 I420 stream and a 10 ms 48 kHz stereo
    /// stream, two threads; --mode does not apply): total CPU and CPU per ring,
    /// resident memory and open descriptors per ring process, and latency over all
    /// rings. Each ring is --ring-mib of shared memory (64 rings of 16 MiB: 1 GiB,
    /// resident once written; --ring-mib 4 holds two frames). On a small host 64 rings
    /// (128 processes, 2.7 GB/s) are more than it sustains: the row then reports
    /// "could not sustain" with what it moved. Transports: shmring and, when
    /// built in, iceoryx2 (a service per ring).
    Rings,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// At a fixed byte rate (--rate) for a fixed time.
    Rated,
    /// As fast as the transport goes.
    Unthrottled,
    /// Both.
    Both,
}

/// Compare shmring with the transports people use today for raw media between
/// processes: the producer writes every byte of each frame, the consumer reads every
/// byte and checks a checksum, each side in its own process.
#[derive(Debug, Parser)]
#[command(name = "shmring bench")]
pub struct BenchArgs {
    /// Transports to run, comma separated (see the list below).
    #[arg(long, value_delimiter = ',', long_help = transports_help(), value_name = "LIST")]
    pub transports: Option<Vec<String>>,
    /// Which workload.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: WorkloadArg,
    /// Rated, unthrottled, or both.
    #[arg(long, value_enum, default_value = "both")]
    pub mode: ModeArg,
    /// Byte rate of the rated mode, in MB/s (10^6 bytes).
    #[arg(long, default_value_t = 150.0)]
    pub rate: f64,
    /// Seconds per transport and run.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Short runs (1 s each; whole default suite under a minute on 2 cores). The
    /// figures of one-second runs are indicative only.
    #[arg(long)]
    pub quick: bool,
    /// Run each transport N times, interleaved (every transport once, then again),
    /// and report the median of each figure and its range over the runs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Participants of the meeting workload.
    #[arg(long, default_value_t = 9, value_name = "N")]
    pub participants: u32,
    /// Move exactly this many frames per run instead of running for --seconds (the
    /// meeting and --scale: per sending thread, per stream).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Measure how the cost grows with producer threads on one ring, or with rings
    /// side by side, instead of the --workload (see the values); --plot draws CPU
    /// per GiB and p99 latency against the count. --transports may name any
    /// transport the meeting runs on; --repeat gives medians and ranges.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub scale: Option<ScaleArg>,
    /// --scale: the counts to run, comma separated, each from 1 to 64.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub counts: Option<Vec<String>>,
    /// --scale producers: the record sizes in bytes, comma separated (a series each).
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub size: Option<Vec<String>>,
    /// --scale producers: each sending thread in a producer process of its own
    /// (instead of all of them in two).
    #[arg(long)]
    pub processes: bool,
    /// Write the results as JSON (an array, one object per transport, workload and
    /// mode; with --repeat, the medians and ranges of its runs).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Draw CPU per GiB, latency, and CPU/RSS over time of the shmring run (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Ring capacity of the shmring transports, in MiB (the library's default; a
    /// ring larger than the last-level cache costs cache misses on every lap). It must
    /// hold two records of the workload: at least 8 for 1080p video.
    #[arg(long, default_value_t = 16)]
    pub ring_mib: u64,
    /// Ask for transparent huge pages on the shmring rings (`Config::huge_pages`;
    /// effective where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows).
    #[arg(long)]
    pub huge_pages: bool,
    /// (testing) The producer damages every Nth frame; the consumer must notice.
    #[arg(long, hide = true)]
    pub corrupt_every: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Producer,
    Consumer,
    /// Producer and consumer work in one process, no transport.
    Floor,
}

/// `shmring-bench-worker`: one side of one transport.
#[derive(Debug, Parser, Clone)]
#[command(name = "shmring-bench-worker")]
pub struct WorkerArgs {
    #[arg(long)]
    pub transport: Transport,
    #[arg(long, value_enum)]
    pub role: Role,
    /// Bytes per frame.
    #[arg(long)]
    pub size: usize,
    /// Frames to send (0: run for --seconds).
    #[arg(long, default_value_t = 0)]
    pub frames: u64,
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Bytes per second (0: unthrottled).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Inherited descriptor: the memfd, socket, pipe end or listener (a consumer of
    /// several producers gets one per producer).
    #[arg(long)]
    pub fd: Vec<i32>,
    /// Loopback TCP port to connect to.
    #[arg(long)]
    pub port: Option<u16>,
    /// iceoryx2 service name.
    #[arg(long)]
    pub service: Option<String>,
    /// Ring size in MiB (floor: the bytes of buffers it cycles through).
    #[arg(long, default_value_t = 64)]
    pub ring_mib: u64,
    #[arg(long)]
    pub corrupt_every: Option<u64>,
    /// Ask for transparent huge pages on shared memory (the two-core floor's buffers).
    #[arg(long)]
    pub huge_pages: bool,
    /// The meeting workload with this many participants (--size and --rate then
    /// describe the wake-up row's schedule only).
    #[arg(long)]
    pub meeting: Option<u32>,
    /// --scale producers: this many sending threads in all, each a stream of --size
    /// records at --rate / N (0: unthrottled), spread over --producers processes.
    #[arg(long)]
    pub threads: Option<u32>,
    /// The consumer reports its whole latency histogram (to merge several).
    #[arg(long)]
    pub histogram: bool,
    /// The bot workload's producer with this many participants: media records
    /// (`shmring record`'s) into the named ring --ring, or over a WebSocket to --port.
    #[arg(long)]
    pub bot: Option<u32>,
    /// The named ring of the bot workload's producer.
    #[arg(long)]
    pub ring: Option<String>,
    /// Producer processes of the meeting, and which one this is.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    #[arg(long, default_value_t = 0)]
    pub part: u32,
}

pub fn parse<P: Parser>(argv0: &str, args: &[String]) -> Result<P, clap::Error> {
    P::try_parse_from(std::iter::once(argv0.to_string()).chain(args.iter().cloned()))
}
