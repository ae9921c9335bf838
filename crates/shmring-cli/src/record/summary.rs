//! What a run says at its end: the `{"recorded":..}` line on stdout and the human
//! summary on stderr.

use std::io::Write;

use serde_json::json;
use shmring::{Stats, TetherInfo};

use super::source::Source;
use super::{emit, handoff_json, Read};
use crate::record::recorder::{StreamReport, Summary, MAX_STREAMS, STREAMS_PER_SLOT};
use crate::{mb, procinfo};

/// The run's figures, taken when the receiving ended.
pub(super) struct Totals {
    pub elapsed: f64,
    pub read: Read,
    /// The ring's counters.
    pub st: Stats,
    /// Resets the consumer made, counted by itself.
    pub consumer_resets: u64,
    pub line: Option<TetherInfo>,
    pub peak: crate::procinfo::PeakMemory,
    pub owner_gone: bool,
}

/// This process's CPU use.
struct Cpu {
    seconds: f64,
    max_rss_kb: u64,
}

impl Cpu {
    /// This process's CPU time and peak memory so far.
    fn now() -> Cpu {
        let (seconds, max_rss_kb) = procinfo::own_usage();
        Cpu {
            seconds,
            max_rss_kb,
        }
    }
    /// Puts the run's time, CPU time and use, and peak memory into `j`.
    fn stamp(&self, j: &mut serde_json::Value, elapsed: f64) {
        j["elapsed_s"] = json!(elapsed);
        j["cpu_s"] = json!(self.seconds);
        j["cpu_percent"] = json!(self.percent(elapsed));
        j["max_rss_kb"] = json!(self.max_rss_kb);
    }
    fn percent(&self, elapsed: f64) -> f64 {
        if elapsed > 0.0 {
            100.0 * self.seconds / elapsed
        } else {
            0.0
        }
    }
}

/// Emits the `{"recorded":..}` line and writes the human summary.
pub(super) fn report(src: &Source, summary: &Summary, t: &Totals) {
    let cpu = Cpu::now();
    emit(json!({ "recorded": recorded_json(src, summary, t, &cpu) }));
    let e = &mut std::io::stderr().lock();
    print_head(e, src, t);
    for s in &summary.streams {
        print_stream(e, s);
    }
    print_tail(e, src, summary, t, &cpu);
}

/// The end of a `--websocket` run: the same `{"recorded":..}` line, with
/// `websocket` (what was read, from how many connections) in place of `ring`, and
/// the human summary.
pub(super) fn report_websocket(
    addr: &str,
    summary: &Summary,
    elapsed: f64,
    read: Read,
    conns: super::websocket::Connections,
) {
    let cpu = Cpu::now();
    let mut j = summary.to_json();
    j["websocket"] = json!({
        "address": addr, "records_consumed": read.records, "bytes_consumed": read.bytes,
        "connections": conns.accepted, "connections_failed": conns.failed,
        "connections_refused": conns.refused,
    });
    cpu.stamp(&mut j, elapsed);
    emit(json!({ "recorded": j }));
    let e = &mut std::io::stderr().lock();
    let _ = writeln!(
        e,
        "shmring record: WebSocket on {addr} for {elapsed:.1} s: {} records ({:.1} MB) read \
         from {} connections ({} failed)",
        read.records,
        mb(read.bytes),
        conns.accepted,
        conns.failed
    );
    for s in &summary.streams {
        print_stream(e, s);
    }
    let _ = writeln!(
        e,
        "  CPU {:.2} s ({:.1}%)",
        cpu.seconds,
        cpu.percent(elapsed)
    );
}

fn recorded_json(src: &Source, summary: &Summary, t: &Totals, cpu: &Cpu) -> serde_json::Value {
    let st = &t.st;
    let mut j = summary.to_json();
    j["ring"] = json!({
        "name": src.label, "records_consumed": t.read.records,
        "bytes_consumed": t.read.bytes, "records_committed": st.records_committed,
        "tether": t.line.as_ref().map(crate::stat::tether_json),
        "drops_full": st.drops_full, "abandoned": st.abandoned, "corruption": st.corruption,
        "resets": t.consumer_resets, "stalled_claims": st.stalled_claims,
        "peak_occupancy": st.peak_occupancy,
    });
    if let Some(l) = &src.listener {
        j["handoff"] = handoff_json(&l.stats());
    }
    cpu.stamp(&mut j, t.elapsed);
    j["peak_private_rss_kb"] = json!(t.peak.private_kb);
    j["peak_rss_kb"] = json!(t.peak.rss_kb);
    j["peak_rss_anon_kb"] = json!(t.peak.anon_kb);
    j
}

/// What was read, and how the recording ended if its ring's consumer did.
fn print_head(e: &mut impl Write, src: &Source, t: &Totals) {
    let _ = writeln!(
        e,
        "shmring record: ring {} for {:.1} s: {} records ({:.1} MB) read{}",
        src.seg.name(),
        t.elapsed,
        t.read.records,
        mb(t.read.bytes),
        match t.line {
            Some(line) => format!(
                " as tethered consumer (line {}; {} lost to ring resets)",
                line.line, line.lost
            ),
            None => String::new(),
        }
    );
    if t.owner_gone {
        let _ = writeln!(
            e,
            "  the ring's consumer ended, so the recording ends: nothing more can arrive"
        );
    }
}

/// One stream and the files it was written to.
fn print_stream(e: &mut impl Write, s: &StreamReport) {
    let _ = writeln!(
        e,
        "  {} stream {}: {} records, {} lost upstream, {} malformed{}{}{}",
        s.kind,
        s.stream,
        s.received,
        s.gaps,
        s.malformed,
        if s.restarts > 0 {
            format!(", sequence restarted {} times", s.restarts)
        } else {
            String::new()
        },
        if s.foreign > 0 {
            format!(", {} foreign", s.foreign)
        } else {
            String::new()
        },
        if s.dropped > 0 {
            format!(", {} dropped (the encoder fell behind)", s.dropped)
        } else {
            String::new()
        }
    );
    for f in &s.files {
        let unit = if s.kind == "video" {
            "frames"
        } else {
            "samples"
        };
        let _ = writeln!(
            e,
            "    {}: {} {unit}, {:.1} MB{}",
            f.path.display(),
            f.units,
            mb(f.bytes),
            f.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
    }
}

/// What went wrong on the way, the writes, the CPU and memory, the hand-off.
fn print_tail(e: &mut impl Write, src: &Source, summary: &Summary, t: &Totals, cpu: &Cpu) {
    if summary.malformed > 0 {
        let _ = writeln!(
            e,
            "  {} malformed media headers skipped (first: {})",
            summary.malformed,
            summary.first_malformed.as_deref().unwrap_or("?")
        );
    }
    if summary.refused_foreign > 0 {
        let _ = writeln!(
            e,
            "  {} records refused as foreign: another producer slot wrote to a stream that \
             belongs to a live one (counted per stream)",
            summary.refused_foreign
        );
    }
    if summary.refused_streams > 0 {
        let _ = writeln!(
            e,
            "  {} records of streams refused for lack of room ({} streams per producer slot, \
             {} in all)",
            summary.refused_streams, STREAMS_PER_SLOT, MAX_STREAMS
        );
    }
    if summary.streams_unlisted > 0 {
        let _ = writeln!(
            e,
            "  {} more streams ended and left the table without being listed here",
            summary.streams_unlisted
        );
    }
    if summary.unattributed > 0 {
        let _ = writeln!(
            e,
            "  {} records refused: their claim named no producer slot when read (the ring's \
             claim log was written by a peer)",
            summary.unattributed
        );
    }
    if t.st.abandoned > 0 {
        let _ = writeln!(
            e,
            "  the ring reports {} records abandoned by producers that died mid-write",
            t.st.abandoned
        );
    }
    // The recorder's own writes (Y4M and WAV); an encoded file is written by its
    // muxer's sink, which the recorder does not count.
    if summary.writes.calls > 0 {
        let _ = writeln!(
            e,
            "  {} write calls, {:.0} KiB per write on average, {:.0} KiB at most",
            summary.writes.calls,
            summary.writes.average() as f64 / 1024.0,
            summary.writes.max as f64 / 1024.0
        );
    }
    let _ = writeln!(
        e,
        "  CPU {:.2} s ({:.1}%); peak memory, the ring not counted: {:.1} MiB resident, \
         {:.1} MiB private (mapped by no other process), {:.1} MiB heap and stacks",
        cpu.seconds,
        cpu.percent(t.elapsed),
        t.peak.rss_kb as f64 / 1024.0,
        t.peak.private_kb as f64 / 1024.0,
        t.peak.anon_kb as f64 / 1024.0
    );
    if let Some(l) = &src.listener {
        let h = l.stats();
        let _ = writeln!(
            e,
            "  hand-off on {}: {} producers, {} observers, {} refused ({} by uid/gid), {} failed",
            src.label,
            h.producers,
            h.observers,
            h.refused(),
            h.refused_credentials,
            h.failed
        );
    }
}
