//! Command-line arguments.

use std::path::PathBuf;
use std::sync::LazyLock;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// Zero-copy shared-memory transport for raw media.
#[derive(Debug, Parser)]
#[command(name = "shmring", version = version(), about)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Record and produce 1080p30 video and audio through a fresh ring in two
    /// processes, with a live status line and a summary.
    Demo(DemoArgs),
    /// Create a ring and record what arrives to Y4M / WAV (or MP4) files; or record
    /// an existing ring beside its own consumer (`--tethered NAME`).
    Record(RecordArgs),
    /// Synthetic capture: test-pattern video and a tone into a ring.
    Produce(ProduceArgs),
    /// Show a ring's counters.
    Stat(StatArgs),
    /// Watch a ring read-only: take every n-th record, write video thumbnails (PNG).
    Tap(TapArgs),
    /// Every ring on this host, live: rates, occupancy, drops, producers, consumer.
    Top(TopArgs),
    /// Serve every ring's counters to Prometheus at http://ADDR/metrics.
    Exporter(ExporterArgs),
    /// Remove a named ring whose owner is gone (refuses a ring in use).
    Rm(RmArgs),
    /// Compare shmring with other transports (`shmring bench --help`).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print a shell completion script on stdout (e.g. `shmring completions bash >
    /// ~/.local/share/bash-completion/completions/shmring`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (shmring.1, shmring-SUBCOMMAND.1) into DIR, generated
    /// from this build's options (`make man`: into target/man).
    #[command(hide = true)]
    Manpages {
        /// Directory for the pages (created if missing).
        dir: PathBuf,
    },
}

/// What `shmring --version` prints after the name: the package version and the
/// shared-memory layout version this build reads and writes (the core's
/// [`shmring::layout::LAYOUT_VERSION`]): a producer and a consumer built from different
/// releases work together when their layout versions are the same.
pub fn version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{} (layout version {})",
            env!("CARGO_PKG_VERSION"),
            shmring::layout::LAYOUT_VERSION
        )
    });
    &VERSION
}

/// The parser of a whole-number option: a negative number, a fraction or a number
/// out of `lo..=` the type's largest is refused with the range it takes (clap
/// names the option: `invalid value '-30' for '--fps <FPS>': expected a whole
/// number from 1 to 4294967295`). Options that use it also take `-N` as their
/// value (`allow_negative_numbers`), so a negative number is not mistaken for
/// flags (`--fps -30` for `-3 -0`).
fn whole<T>(lo: u64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64> + Bounded + Clone + Send + Sync + 'static,
{
    move |text: &str| {
        let hi = T::MAX;
        text.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| format!("expected a whole number from {lo} to {hi}"))
    }
}

/// The largest value of a whole-number option's type.
trait Bounded {
    const MAX: u64;
}
impl Bounded for u32 {
    const MAX: u64 = u32::MAX as u64;
}
impl Bounded for u64 {
    const MAX: u64 = u64::MAX;
}

/// The core's default for delivering past a held claim, in ms (0: strict order).
fn default_overtake_ms() -> u64 {
    shmring::ConsumerOptions::default()
        .overtake_after
        .map_or(0, |d| d.as_millis() as u64)
}

/// The core's default stall limit for tethered readers, in ms.
fn default_tether_stall_ms() -> u64 {
    shmring::ConsumerOptions::default()
        .tether_stall_limit
        .as_millis() as u64
}

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("ring_source").required(true).args(["create", "listen", "tethered", "websocket"])))]
pub struct RecordArgs {
    /// Name of the ring to create (/dev/shm/NAME; removed when recording ends).
    #[arg(long, value_name = "NAME")]
    pub create: Option<String>,
    /// Record the existing named ring NAME beside its own consumer, as a tethered
    /// consumer: every record, the ring holding each one until this reader has it
    /// too. Needs the ring's consumer alive (e.g. `shmring record --create NAME`).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["refuse_stale", "capacity_mib"]
    )]
    pub tethered: Option<String>,
    /// Create a sealed memfd ring and serve it on this Unix socket (`@NAME`: an
    /// abstract socket) instead: producers `--connect` to it, checked by uid.
    #[arg(long, value_name = "PATH")]
    pub listen: Option<PathBuf>,
    /// With --listen: also let this uid connect (repeatable; default: this user only).
    #[arg(long, value_name = "UID", requires = "listen", value_parser = whole::<u32>(0), allow_negative_numbers = true)]
    pub allow_uid: Vec<u32>,
    /// With --listen: also let this gid connect (repeatable).
    #[arg(long, value_name = "GID", requires = "listen", value_parser = whole::<u32>(0), allow_negative_numbers = true)]
    pub allow_gid: Vec<u32>,
    /// Directory for the files (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// With --create: a ring of this name whose consumer is gone (e.g. a recorder
    /// that was killed) is an error instead of being replaced, as creating does
    /// otherwise (a ring whose consumer is alive is never replaced).
    #[arg(long, requires = "create")]
    pub refuse_stale: bool,
    /// Write the ring's name to this file once the ring exists (atomically).
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,
    /// Ring capacity in MiB (a power of two).
    #[arg(long, value_name = "MIB", default_value_t = shmring::Config::DEFAULT_CAPACITY >> 20,
          value_parser = whole::<u64>(1), allow_negative_numbers = true)]
    pub capacity_mib: u64,
    /// Frame rate written into the Y4M headers.
    #[arg(long, default_value_t = 30, value_parser = whole::<u32>(1), allow_negative_numbers = true)]
    pub fps: u32,
    /// Deliver records behind a producer's reservation that stays open this long
    /// (ms), so one stuck capture thread does not stop the other streams (the
    /// library's default); 0 keeps strict claim order across producers.
    #[arg(long, value_name = "MS", default_value_t = default_overtake_ms(), value_parser = whole::<u64>(0), allow_negative_numbers = true)]
    pub overtake_after_ms: u64,
    /// As the ring's consumer: expel a tethered reader (`record --tethered`, a
    /// tethered `shmringsrc`) that releases nothing for this long (ms), so a stuck
    /// reader holds the ring at most this long (the library's default).
    #[arg(long, value_name = "MS", default_value_t = default_tether_stall_ms(), conflicts_with = "tethered",
          value_parser = whole::<u64>(0), allow_negative_numbers = true)]
    pub tether_stall_ms: u64,
    /// Encode instead of writing Y4M and WAV: one MP4 per stream id with its H.264
    /// video and AAC audio muxed, timed by the records' capture timestamps (built
    /// without GStreamer: video alone, through an ffmpeg child).
    #[arg(long)]
    pub encode: bool,
    /// With --encode: x264's speed preset (a meeting of many participants may
    /// need a faster one to be encoded in real time).
    #[arg(long, value_enum, default_value_t = Preset::Veryfast, requires = "encode")]
    pub preset: Preset,
    /// Print a JSON progress line on stdout twice a second.
    #[arg(long)]
    pub progress: bool,
    /// Instead of a ring, record what WebSocket clients send to HOST:PORT (port 0:
    /// any; the `{"ready":..}` line says which): the receiver of `shmring bench
    /// --workload bot`'s WebSocket row, each message the bench's 64-byte frame
    /// header then a media record as a ring carries it. Ends at SIGINT or once
    /// every connection ended.
    #[arg(long, value_name = "HOST:PORT")]
    pub websocket: Option<String>,
}

/// A record kind a tap takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TapKind {
    Video,
    Audio,
}

impl TapKind {
    /// Its number in the ring ([`shmring::media::kind`]).
    pub fn kind(self) -> u32 {
        match self {
            TapKind::Video => shmring::media::kind::VIDEO,
            TapKind::Audio => shmring::media::kind::AUDIO,
        }
    }
}

/// The ring a reading command looks at, read-only: a name or address, or a
/// consumer's socket.
#[derive(Debug, Clone, Args)]
#[group(id = "ring_source", required = true, multiple = false)]
pub struct RingSource {
    /// Ring name (/dev/shm/NAME), or any ring address (unix:PATH: observed
    /// read-only; fd:SEG[,LOCK][,EVENTFD]: inherited descriptors).
    pub name: Option<String>,
    /// Observe the ring a consumer serves on this socket instead (read-only).
    #[arg(long, value_name = "PATH")]
    pub connect: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct TapArgs {
    #[command(flatten)]
    pub ring: RingSource,
    /// Take every N-th record that matches --kind and --stream.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = whole::<u32>(1), allow_negative_numbers = true)]
    pub every: u32,
    /// Only records of this kind.
    #[arg(long, value_enum)]
    pub kind: Option<TapKind>,
    /// Only records of this stream.
    #[arg(long, value_name = "ID", value_parser = whole::<u32>(0), allow_negative_numbers = true)]
    pub stream: Option<u32>,
    /// Write a PNG thumbnail of every video frame taken into this directory
    /// (created if missing): NNNNNN-video-STREAM.png.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Largest thumbnail width in pixels (frames are scaled down by a whole factor).
    #[arg(long, value_name = "PX", default_value_t = 320, value_parser = whole::<u32>(1), allow_negative_numbers = true)]
    pub thumb_width: u32,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(
        long,
        value_name = "S",
        allow_negative_numbers = true,
        conflicts_with = "count"
    )]
    pub seconds: Option<f64>,
    /// Stop after taking this many records.
    #[arg(long, value_name = "N", value_parser = whole::<u64>(1), allow_negative_numbers = true)]
    pub count: Option<u64>,
}

/// x264's speed presets, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Preset {
    Ultrafast,
    Superfast,
    #[default]
    Veryfast,
    Faster,
    Fast,
    Medium,
}

impl Preset {
    /// The name x264 (and ffmpeg's -preset) knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Ultrafast => "ultrafast",
            Preset::Superfast => "superfast",
            Preset::Veryfast => "veryfast",
            Preset::Faster => "faster",
            Preset::Fast => "fast",
            Preset::Medium => "medium",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// Wait for space (up to --block-ms), then drop the frame.
    Block,
    /// Drop the frame at once when the ring is full.
    Drop,
}

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("ring_source").required(true).args(["ring", "connect"])))]
pub struct ProduceArgs {
    /// Ring to write into (created by `shmring record --create NAME`): its name,
    /// or any ring address (unix:PATH, fd:SEG[,LOCK][,EVENTFD]).
    #[arg(long, value_name = "NAME")]
    pub ring: Option<String>,
    /// Get the ring from a consumer serving it on this socket (`shmring record
    /// --listen PATH`): the sealed memfd, and the eventfd if the ring has one.
    #[arg(long, value_name = "PATH")]
    pub connect: Option<PathBuf>,
    #[command(flatten)]
    pub media: MediaArgs,
    /// A meeting instead: N participants, each a stream id with its own video and
    /// its own audio (a thread each), ids --first-stream.. (the shape of `shmring
    /// bench --workload meeting`: two such processes with --video 1280x720@30 make
    /// its meeting). The "audio" of the summary is then a list.
    #[arg(long, value_name = "N", conflicts_with = "streams", value_parser = whole::<u32>(0), allow_negative_numbers = true)]
    pub participants: Option<u32>,
    /// With --participants: the first stream id.
    #[arg(
        long,
        value_name = "ID",
        default_value_t = 0,
        requires = "participants",
        value_parser = whole::<u32>(0),
        allow_negative_numbers = true
    )]
    pub first_stream: u32,
    /// How long to produce, in wall-clock seconds (frames the producer cannot draw
    /// in time are not made up for afterwards).
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub seconds: f64,
    /// What to do when the ring is full.
    #[arg(long, value_enum, default_value_t = Policy::Block)]
    pub policy: Policy,
    /// Longest wait for space with --policy block.
    #[arg(long, default_value_t = 1000, value_parser = whole::<u64>(0), allow_negative_numbers = true)]
    pub block_ms: u64,
}

/// The media a producer makes (`produce`, and the demo's producer).
#[derive(Debug, Clone, Args)]
pub struct MediaArgs {
    /// Video as WIDTHxHEIGHT@FPS, or "none".
    #[arg(long, default_value = "1920x1080@30")]
    pub video: String,
    /// Audio as RATExCHANNELS (16-bit PCM, 10 ms packets), or "none".
    #[arg(long, default_value = "48000x2")]
    pub audio: String,
    /// Video streams (one thread each; streams 0..N).
    #[arg(long, default_value_t = 1, value_parser = whole::<u32>(0), allow_negative_numbers = true)]
    pub streams: u32,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How long to run.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub seconds: f64,
    /// Where the recorder writes its files.
    #[arg(long, default_value = "shmring-demo-out")]
    pub out: PathBuf,
    #[command(flatten)]
    pub media: MediaArgs,
    /// Encode video to MP4 with ffmpeg.
    #[arg(long)]
    pub encode: bool,
    /// Use a named ring (/dev/shm/NAME) instead of a memfd served on a socket.
    #[arg(long, value_name = "NAME")]
    pub create: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatArgs {
    #[command(flatten)]
    pub ring: RingSource,
    /// Print one JSON object and exit.
    #[arg(long)]
    pub json: bool,
    /// Print one Prometheus / OpenMetrics scrape and exit.
    #[arg(long, conflicts_with = "json")]
    pub prometheus: bool,
    /// Seconds between updates.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub interval: f64,
    /// Stop after this many updates (default: until Ctrl-C).
    #[arg(long, value_parser = whole::<u64>(0), allow_negative_numbers = true)]
    pub count: Option<u64>,
}

/// Column `shmring top` sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Ring name.
    Name,
    /// Records per second, highest first.
    Rate,
    /// MB per second, highest first.
    Mbps,
    /// Occupancy now, highest first.
    Occupancy,
    /// Drops when full, most first.
    Drops,
    /// Resets after corruption, most first.
    Resets,
    /// Age of the oldest claim held open, oldest first.
    Claim,
    /// Stalled (overtaken) claims, most first.
    Stalled,
}

impl SortKey {
    /// The next key (the `s` key in the live view).
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Name => SortKey::Rate,
            SortKey::Rate => SortKey::Mbps,
            SortKey::Mbps => SortKey::Occupancy,
            SortKey::Occupancy => SortKey::Drops,
            SortKey::Drops => SortKey::Resets,
            SortKey::Resets => SortKey::Claim,
            SortKey::Claim => SortKey::Stalled,
            SortKey::Stalled => SortKey::Name,
        }
    }
    /// Its name on the command line.
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Rate => "rate",
            SortKey::Mbps => "mbps",
            SortKey::Occupancy => "occupancy",
            SortKey::Drops => "drops",
            SortKey::Resets => "resets",
            SortKey::Claim => "claim",
            SortKey::Stalled => "stalled",
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// Print one plain table (rates over --interval) and exit.
    #[arg(long)]
    pub once: bool,
    /// Print one JSON array (rates over --interval) and exit.
    #[arg(long, conflicts_with = "once")]
    pub json: bool,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub interval: f64,
    /// Sort by this column (the `s` key cycles through them, `r` reverses).
    #[arg(long, value_enum, default_value_t = SortKey::Name)]
    pub sort: SortKey,
    /// Reverse the order.
    #[arg(long)]
    pub reverse: bool,
    #[command(flatten)]
    pub rings: RingSelection,
}

/// Which rings `top` and `exporter` read.
#[derive(Debug, Clone, Args)]
pub struct RingSelection {
    /// Only this ring (repeat for more; default: every ring in /dev/shm of this user).
    #[arg(long, value_name = "NAME")]
    pub ring: Vec<String>,
    /// Only rings whose name starts with this.
    #[arg(long, value_name = "PREFIX", conflicts_with = "ring")]
    pub prefix: Option<String>,
    /// Also observe, read-only, the ring served on every Unix socket in this
    /// directory (`shmring record --listen DIR/NAME.sock`); repeatable.
    #[arg(long, value_name = "DIR")]
    pub sockets: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ExporterArgs {
    /// Address to serve on (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9464")]
    pub listen: String,
    #[command(flatten)]
    pub rings: RingSelection,
}

#[derive(Debug, Clone, Args)]
pub struct RmArgs {
    /// Ring name (/dev/shm/NAME).
    pub name: String,
}
