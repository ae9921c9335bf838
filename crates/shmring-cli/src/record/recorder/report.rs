//! What a recording run reports: every stream's figures, and the whole.

use super::*;

/// Per-stream results.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub kind: &'static str,
    pub stream: u32,
    /// Records written to files.
    pub received: u64,
    /// Sequence numbers missing between consecutive records (records lost upstream).
    pub gaps: u64,
    /// Times the sequence went backwards (a producer restarted).
    pub restarts: u64,
    /// End-of-stream records (the producer ended the stream).
    pub ends: u64,
    pub malformed: u64,
    pub unsupported: u64,
    /// Records and ends of stream refused: they came from a slot other than the
    /// stream's owner while the owner was alive.
    pub foreign: u64,
    /// Video frames dropped because the encoder fell behind (`--encode`).
    pub dropped: u64,
    pub files: Vec<FileReport>,
}

/// Everything the recorder did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub streams: Vec<StreamReport>,
    /// Streams that left the table and did not fit in `streams` either.
    pub streams_unlisted: u64,
    pub malformed: u64,
    pub first_malformed: Option<String>,
    pub other_kinds: u64,
    /// Records of a new stream refused: its slot had no room left, or the table
    /// was full of live streams.
    pub refused_streams: u64,
    /// Records refused because another slot owns their stream (the sum of the
    /// streams' `foreign`).
    pub refused_foreign: u64,
    /// Records whose claim names no producer slot any more (a peer rewrote the
    /// claim log): refused.
    pub unattributed: u64,
    pub writes: WriteCounters,
    pub error: Option<String>,
}

impl Summary {
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let streams: Vec<_> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "kind": s.kind, "stream": s.stream, "received": s.received,
                    "gaps": s.gaps, "restarts": s.restarts, "ends": s.ends,
                    "malformed": s.malformed,
                    "unsupported": s.unsupported,
                    "foreign": s.foreign,
                    "dropped": s.dropped,
                    "files": s.files.iter().map(|f| json!({
                        "path": f.path.display().to_string(), "units": f.units,
                        "bytes": f.bytes, "note": f.note, "write_calls": f.writes.calls,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "streams": streams,
            "streams_unlisted": self.streams_unlisted,
            "malformed": self.malformed,
            "first_malformed": self.first_malformed,
            "other_kinds": self.other_kinds,
            "refused_streams": self.refused_streams,
            "refused_foreign": self.refused_foreign,
            "unattributed": self.unattributed,
            "streams_per_slot": STREAMS_PER_SLOT,
            "parts_per_stream": MAX_PARTS,
            "write_calls": self.writes.calls,
            "bytes_written": self.writes.bytes,
            "bytes_per_write_avg": self.writes.average(),
            "bytes_per_write_max": self.writes.max,
            "error": self.error,
        })
    }
}
