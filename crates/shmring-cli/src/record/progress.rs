//! What a run says while it records: the ring's health on stderr, a status line for
//! a person watching, and `{"progress":..}` lines with `--progress`.

use std::time::{Duration, Instant};

use serde_json::json;
use shmring::{Health, Reader, Segment, TetherInfo};
use shmring_host::status::{Look, StatusLine};

use super::source::Source;
use super::{emit, handoff_json, Read};
use crate::record::recorder::Recorder;
use crate::{mb, procinfo};

/// Watches a run: every tick it samples the ring's health and this process's memory
/// and shows the progress.
pub(super) struct Watch {
    start: Instant,
    tick: Duration,
    next_tick: Instant,
    /// This process's peak memory, the ring not counted.
    pub peak: procinfo::PeakMemory,
    seen: Health,
    line_seen: Option<TetherInfo>,
    /// `{"progress":..}` lines on stdout.
    json: bool,
    /// What a person watching sees (the JSON lines of --progress are for programs):
    /// redrawn in place on a terminal, a line every 10 s elsewhere.
    status: Option<StatusLine>,
}

impl Watch {
    pub fn new(progress: bool) -> Watch {
        let start = Instant::now();
        let tick = Duration::from_millis(500);
        Watch {
            start,
            tick,
            next_tick: start + tick,
            peak: procinfo::PeakMemory::now(),
            seen: Health::default(),
            line_seen: None,
            json: progress,
            status: (!progress)
                .then(|| StatusLine::new("shmring record", Duration::from_secs(10), Look::Spinner)),
        }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// Whether a tick is due (and if so, counts the next from now).
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_tick {
            return false;
        }
        self.next_tick = now + self.tick;
        true
    }

    /// Reports changes in the ring's health and samples this process's memory.
    pub fn sample(&mut self, seg: &Segment, reader: &Reader) {
        report_health(seg, reader, &mut self.seen);
        self.sample_memory();
    }

    fn sample_memory(&mut self) {
        self.peak.sample();
    }

    /// A tethered recorder's line as the ring lists it (once the line is gone, as
    /// last seen); `None` for the ring's consumer.
    pub fn line(&mut self, reader: &Reader) -> Option<TetherInfo> {
        self.line_seen = reader.tether_info().or(self.line_seen);
        self.line_seen
    }

    /// Shows the progress: the status line, or a `{"progress":..}` line.
    pub fn show(&mut self, src: &Source, reader: &Reader, rec: &Recorder, read: Read) {
        let line = self.line(reader);
        if let Some(s) = &mut self.status {
            let st = src.seg.stats();
            let resets = match reader.counts().map_or(0, |c| c.resets) {
                0 => String::new(),
                n => format!("  resets {n}"),
            };
            s.set(
                format!(
                    "{}: {:.0} s  video {}  audio {}  {} records ({:.1} MB)  \
                     ring {:.1}/{} MiB  drops {}{resets}",
                    src.label,
                    self.start.elapsed().as_secs_f64(),
                    rec.video_frames(),
                    rec.audio_packets(),
                    read.records,
                    mb(read.bytes),
                    st.occupancy as f64 / f64::from(1 << 20),
                    st.capacity >> 20,
                    st.drops_full,
                ),
                false,
            );
        }
        if self.json {
            let st = src.seg.stats();
            emit(json!({"progress": {
                "video_frames": rec.video_frames(), "audio_packets": rec.audio_packets(),
                "malformed": rec.malformed(), "records": read.records,
                "bytes": read.bytes, "tether": line.as_ref().map(crate::stat::tether_json),
                "occupancy": st.occupancy,
                "drops_full": st.drops_full, "abandoned": st.abandoned,
                "resets": st.resets, "stalled_claims": st.stalled_claims,
                "private_rss_kb": self.peak.private_kb, "rss_kb": self.peak.rss_kb,
                "handoff": src.listener.as_ref().map(|l| handoff_json(&l.stats())),
                "elapsed_s": self.start.elapsed().as_secs_f64(),
            }}));
        }
    }

    /// Ends the status line and samples memory once more; the seconds recorded.
    pub fn finish(&mut self) -> f64 {
        if let Some(s) = self.status.take() {
            s.finish();
        }
        self.sample_memory();
        self.start.elapsed().as_secs_f64()
    }

    /// Reports what changed in the ring's health since the last tick.
    pub fn report_health(&mut self, seg: &Segment, reader: &Reader) {
        report_health(seg, reader, &mut self.seen);
    }
}

/// Says on stderr what changed in the ring's health since `seen`: resets (a peer
/// wrote something no honest producer writes; the consumer reset the ring and
/// recording went on) and claims held open past the overtake limit.
fn report_health(seg: &Segment, reader: &Reader, seen: &mut Health) {
    let Some(h) = reader.health() else { return };
    if h.resets != seen.resets {
        eprintln!(
            "shmring record: ring {}: corruption detected ({}); the ring was reset and recording goes on ({} resets)",
            seg.name(),
            h.last_corruption.unwrap_or("unknown"),
            h.resets
        );
    }
    if h.stalled_claims != seen.stalled_claims {
        // The kernel proves which pid holds the slot, not who wrote the claim.
        let holder = match seg.stats().oldest_pending_pid {
            0 => " (its holder is unknown)".to_string(),
            pid => format!(" (which pid {pid} holds)"),
        };
        match h.oldest_pending {
            Some((slot, age)) => eprintln!(
                "shmring record: ring {}: a reservation naming producer slot {slot}{holder} has been open for {} ms; records behind it are recorded meanwhile",
                seg.name(),
                age.as_millis()
            ),
            None => eprintln!(
                "shmring record: ring {}: a reservation stayed open past the limit and was overtaken",
                seg.name()
            ),
        }
    }
    *seen = h;
}
