//! The event logs every process of a chaos run writes: fixed 32-byte events,
//! each written with one `write(2)` to a file opened `O_APPEND` (so a process
//! killed at any instruction leaves whole events, at most missing its last one),
//! read back by the checker.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

/// What an event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// A producer's commit returned Ok: `a` commit time (ns, the record's
    /// timestamp), `b` how long its `reserve` waited (ns).
    Committed = 1,
    /// Its commit returned `Abandoned`: the claim was taken back.
    Abandoned = 2,
    /// Its `reserve` failed (the ring stayed full, no consumer): never claimed.
    Dropped = 3,
    /// Any other error: `a` is a code (see [`error_code`]).
    Failed = 4,
    /// A reader got a record that checks: `a` when (ns), `b` the record's
    /// timestamp (its commit time).
    Delivered = 10,
    /// A reader got a record that does not check (torn, or its header does not
    /// match its payload): `stream`/`seq` as its payload claims, if readable.
    Torn = 11,
    /// A reader (re)attached: a new epoch of its log.
    Attached = 12,
    /// A tethered reader was expelled (`Error::Detached`).
    Expelled = 13,
    /// A tap's own counts at its end: `a` lost, `b` torn.
    TapCounts = 14,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Committed,
            2 => Kind::Abandoned,
            3 => Kind::Dropped,
            4 => Kind::Failed,
            10 => Kind::Delivered,
            11 => Kind::Torn,
            12 => Kind::Attached,
            13 => Kind::Expelled,
            14 => Kind::TapCounts,
            _ => return None,
        })
    }
}

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    /// The producer stream: instance (process incarnation) and thread.
    pub stream: u32,
    /// The stream's record number.
    pub seq: u64,
    pub a: u64,
    pub b: u64,
}

pub const EVENT_SIZE: usize = 32;

impl Event {
    pub fn new(kind: Kind, stream: u32, seq: u64, a: u64, b: u64) -> Event {
        Event {
            kind,
            stream,
            seq,
            a,
            b,
        }
    }

    fn bytes(&self) -> [u8; EVENT_SIZE] {
        let mut b = [0u8; EVENT_SIZE];
        b[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[4..8].copy_from_slice(&self.stream.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.a.to_le_bytes());
        b[24..32].copy_from_slice(&self.b.to_le_bytes());
        b
    }

    fn parse(b: &[u8]) -> Option<Event> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        Some(Event {
            kind: Kind::from_u32(u32_at(0))?,
            stream: u32_at(4),
            seq: u64_at(8),
            a: u64_at(16),
            b: u64_at(24),
        })
    }
}

/// A log being written: one event per `write(2)`.
pub struct Writer(File);

impl Writer {
    pub fn create(path: &Path) -> std::io::Result<Writer> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Writer)
    }

    /// Writes one event (one system call: whole or not at all, even if the
    /// process is killed). A failed write ends the process: a log with holes
    /// would make the checker wrong.
    pub fn log(&self, e: Event) {
        if let Err(err) = (&self.0).write_all(&e.bytes()) {
            eprintln!("chaos: writing the event log: {err}");
            std::process::exit(4);
        }
    }
}

/// Every whole event of the log at `path` (a missing file reads empty).
pub fn read(path: &Path) -> std::io::Result<Vec<Event>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    }
    Ok(bytes
        .chunks_exact(EVENT_SIZE)
        .filter_map(Event::parse)
        .collect())
}

/// A small code for an error a producer logged as [`Kind::Failed`].
pub fn error_code(e: &shmring::Error) -> u64 {
    match e {
        shmring::Error::Corrupt { .. } => 1,
        shmring::Error::Truncated { .. } => 2,
        _ => 9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_a_torn_tail_is_ignored() {
        let dir = tempdir();
        let path = dir.join("t.log");
        let w = Writer::create(&path).unwrap();
        let e = Event::new(Kind::Delivered, 7, 42, 1, u64::MAX);
        w.log(e);
        w.log(Event::new(Kind::Attached, 0, 0, 5, 0));
        // Half an event (a write cut short) at the end is not an event.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[1, 0, 0])
            .unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], e);
        assert_eq!(got[1].kind, Kind::Attached);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("chaos-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
