//! One stream's state: its shape, its file, who may write it.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Video {
        format: Format,
        w: u32,
        h: u32,
        fps: (u32, u32),
    },
    Audio {
        format: Format,
        rate: u32,
        channels: u32,
    },
}

pub(crate) struct Stream {
    pub(crate) kind: u32,
    pub(crate) id: u32,
    /// The producer slot the stream belongs to (`None`: ended, anyone may start it).
    pub(crate) owner: Option<u32>,
    /// When the owner was last seen alive by a record from another slot.
    pub(crate) owner_seen: Option<Instant>,
    pub(crate) shape: Option<Shape>,
    pub(crate) out: Option<OutFile>,
    pub(crate) parts: u32,
    pub(crate) received: u64,
    pub(crate) gaps: u64,
    pub(crate) restarts: u64,
    pub(crate) ends: u64,
    pub(crate) last_seq: Option<u64>,
    pub(crate) malformed: u64,
    pub(crate) unsupported: u64,
    pub(crate) foreign: u64,
    pub(crate) dropped: u64,
    pub(crate) files: Vec<FileReport>,
}

impl Stream {
    pub(crate) fn new(kind: u32, id: u32) -> Stream {
        Stream {
            kind,
            id,
            owner: None,
            owner_seen: None,
            shape: None,
            out: None,
            parts: 0,
            received: 0,
            gaps: 0,
            restarts: 0,
            ends: 0,
            last_seq: None,
            malformed: 0,
            unsupported: 0,
            foreign: 0,
            dropped: 0,
            files: Vec::new(),
        }
    }

    /// Counts a gap (records lost) or a step back (a producer that started again).
    pub(crate) fn count_sequence(&mut self, seq: u64) {
        if let Some(last) = self.last_seq {
            if seq > last {
                self.gaps += seq - last - 1;
            } else {
                self.restarts += 1;
            }
        }
        self.last_seq = Some(seq);
    }

    pub(crate) fn report(&mut self) -> StreamReport {
        StreamReport {
            kind: kind_name(self.kind),
            stream: self.id,
            received: self.received,
            gaps: self.gaps,
            restarts: self.restarts,
            ends: self.ends,
            malformed: self.malformed,
            unsupported: self.unsupported,
            foreign: self.foreign,
            dropped: self.dropped,
            files: std::mem::take(&mut self.files),
        }
    }
}
