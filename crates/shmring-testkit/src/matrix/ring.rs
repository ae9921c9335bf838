//! A fresh small ring per case, brought into one of the states the matrix starts
//! from, and the honest records that flow through it (checksummed, numbered per
//! producer, so loss, duplication and reordering are seen).

use std::sync::Arc;
use std::time::Duration;

use shmring::layout::record_units;
use shmring::{
    Address, Config, Consumer, ConsumerOptions, FullPolicy, Meta, Producer, RawFrame, Result,
    Segment,
};

use crate::{checksum, mix, Rng};

/// Data ring bytes: the smallest ring.
pub const CAPACITY: u64 = 64 << 10;
/// Claim log entries: the smallest log.
pub const LOG_ENTRIES: u32 = 16;
/// Producer slots.
pub const MAX_PRODUCERS: u32 = 4;
/// How often the consumer looks after the ring (and so how soon it finds a
/// scribble): small, so a case costs milliseconds.
pub const LIVENESS: Duration = Duration::from_millis(5);

/// Data ring bytes of [`State::Placed`]: the smallest ring whose consumer places
/// records at its start (`shmring::protocol::place_window`).
pub const PLACED_CAPACITY: u64 = 1 << 20;

/// The ring every case but [`State::Placed`]'s builds.
pub fn config() -> Config {
    Config {
        capacity: CAPACITY,
        log_entries: Some(LOG_ENTRIES),
        max_producers: MAX_PRODUCERS,
        ..Config::default()
    }
}

/// The options of both consumers.
pub fn options() -> ConsumerOptions {
    ConsumerOptions {
        liveness_interval: LIVENESS,
        spin: 0,
        tether_stall_limit: Duration::from_millis(100),
        ..ConsumerOptions::default()
    }
}

/// The honest producers, by the stream number their records carry.
pub const A: u32 = 0;
pub const B: u32 = 1;
/// Writes large records: brings the cursors near the end of the ring before a
/// case, and fills it for [`State::Full`].
pub const FILLER: u32 = 2;
/// Attaches after the write (a new producer).
pub const NEWCOMER: u32 = 3;
/// Attaches from a new mapping of the segment once the ring recovered.
pub const LATE: u32 = 4;
pub const PRODUCERS: usize = 5;

/// Payload length of record `i` of producer `id`.
pub fn len(id: u32, i: u64) -> usize {
    if id == FILLER {
        6000 + (i % 3) as usize * 64
    } else {
        100 + (mix(((id as u64) << 40) ^ i) % 220) as usize
    }
}

/// Units of a typical record of producers A and B (header included).
pub fn typical_units() -> u64 {
    record_units(210)
}

/// The payload of record `i` of producer `id`.
pub fn payload(id: u32, i: u64) -> Vec<u8> {
    let n = len(id, i);
    let mut r = Rng(mix(((id as u64) << 48) ^ i ^ 0x6d61_7472_6978));
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(n);
    v
}

/// The metadata of record `i` of producer `id`, for a payload `p`.
pub fn meta(id: u32, i: u64, p: &[u8]) -> Meta {
    Meta {
        stream: id,
        kind: i as u32,
        timestamp_ns: checksum(p),
        flags: p.len() as u32,
    }
}

/// What a delivered record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Record `i` of producer `id`, intact.
    Intact(u32, u64),
    /// Its header says record `i` of producer `id` and its length fits, but its
    /// bytes changed after the commit.
    Corrupted(u32, u64),
    /// Nothing an honest producer committed.
    Garbage,
}

/// Which honest record this is, and whether it is intact.
pub fn identify(p: &[u8], m: Meta) -> Seen {
    let (id, i) = (m.stream, m.kind as u64);
    if id as usize >= PRODUCERS || p.len() != len(id, i) || m.flags as usize != p.len() {
        return Seen::Garbage;
    }
    if checksum(p) == m.timestamp_ns && p == payload(id, i).as_slice() {
        Seen::Intact(id, i)
    } else {
        Seen::Corrupted(id, i)
    }
}

/// One honest producer and how many records it has sent.
pub struct Honest {
    pub id: u32,
    pub p: Producer,
    pub sent: u64,
}

impl Honest {
    pub fn new(seg: &Arc<Segment>, id: u32) -> Result<Honest> {
        let mut p = seg.producer()?;
        p.set_policy(FullPolicy::Fail);
        Ok(Honest { id, p, sent: 0 })
    }

    /// Sends its next record (full ring: fails at once).
    pub fn send(&mut self) -> Result<()> {
        let b = payload(self.id, self.sent);
        self.p.send(&b, meta(self.id, self.sent, &b))?;
        self.sent += 1;
        Ok(())
    }
}

/// The state of the ring when the word is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Nothing in flight.
    Empty,
    /// Records committed and not read yet.
    PartlyFull,
    /// Producers get `Full` (bytes and claims).
    Full,
    /// A reservation held open, with records committed behind it.
    ClaimPending,
    /// Frames the consumer received and holds (released after the write).
    FramesHeld,
    /// A tethered consumer attached and behind the ring's consumer.
    Tethered,
    /// The writer is a producer in another process holding a claim (records
    /// committed behind it); it writes the word and exits, its claim pending.
    WriterDied,
    /// A ring of [`PLACED_CAPACITY`] whose consumer just placed: a padding (an
    /// abandoned claim of its own to the ring's end) in the claim log, the
    /// cursors past it at the ring's start, and records committed there.
    Placed,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Empty,
        State::PartlyFull,
        State::Full,
        State::ClaimPending,
        State::FramesHeld,
        State::Tethered,
        State::WriterDied,
        State::Placed,
    ];

    /// The ring this state's cases build (and whose geometry their words and
    /// values are taken from: [`crate::matrix::Matrix::for_state`]).
    pub fn config(self) -> Config {
        match self {
            State::Placed => Config {
                capacity: PLACED_CAPACITY,
                ..config()
            },
            _ => config(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "empty",
            State::PartlyFull => "partly-full",
            State::Full => "full",
            State::ClaimPending => "claim-pending",
            State::FramesHeld => "frames-held",
            State::Tethered => "tethered",
            State::WriterDied => "writer-died",
            State::Placed => "placed",
        }
    }

    pub fn from_name(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.name() == s)
    }
}

/// A ring in a [`State`], with its consumers and honest producers.
pub struct Ring {
    pub seg: Arc<Segment>,
    pub owner: Consumer,
    pub tether: Option<Consumer>,
    /// A, B, and (in [`State::Full`]) the filler.
    pub producers: Vec<Honest>,
    /// Frames the owner holds ([`State::FramesHeld`]).
    pub held: Vec<RawFrame>,
    /// B's open reservation ([`State::ClaimPending`]): its record's index.
    pub pending: Option<u64>,
    /// The writer's process ([`State::WriterDied`]).
    pub writer: Option<Writer>,
    /// Per producer, the index of the first record the owner had not been handed
    /// when the state was set up (those before it were read, or are held).
    pub delivered: [u64; PRODUCERS],
}

/// What the owner hands out, noted in `delivered`.
fn note(delivered: &mut [u64; PRODUCERS], payload: &[u8], meta: Meta) {
    if let Seen::Intact(id, i) = identify(payload, meta) {
        delivered[id as usize] = i + 1;
    }
}

fn take_all(c: &Consumer, delivered: &mut [u64; PRODUCERS]) -> Result<u64> {
    let mut n = 0;
    while let Some(f) = c.try_next()? {
        note(delivered, f.payload(), f.meta());
        drop(f);
        n += 1;
    }
    Ok(n)
}

impl Ring {
    /// A fresh ring in `state`. Setting up uses the library as an application
    /// would; any error here is a harness failure, not a finding.
    pub fn new(state: State) -> Result<Ring> {
        let seg = Address::memfd("matrix", state.config()).open()?;
        let owner = Consumer::with_options(seg.clone(), options())?;
        let mut a = Honest::new(&seg, A)?;
        let mut b = Honest::new(&seg, B)?;
        // Bring the cursors near the end of the ring, so the records of the state
        // wrap (a padded claim) and no cursor is at zero.
        let mut filler = Honest::new(&seg, FILLER)?;
        let mut delivered = [0; PRODUCERS];
        for _ in 0..10 {
            filler.send()?;
            take_all(&owner, &mut delivered)?;
        }
        for _ in 0..3 {
            a.send()?;
            b.send()?;
        }
        take_all(&owner, &mut delivered)?;
        let mut ring = Ring {
            seg,
            owner,
            tether: None,
            producers: vec![],
            held: vec![],
            pending: None,
            writer: None,
            delivered,
        };
        match state {
            State::Empty => {}
            State::PartlyFull => {
                for _ in 0..3 {
                    a.send()?;
                }
                b.send()?;
                b.send()?;
            }
            State::Full => {
                while filler.send().is_ok() {}
                while a.send().is_ok() {}
            }
            State::ClaimPending => {
                a.send()?;
                let i = b.sent;
                let p = payload(B, i);
                let r = b.p.reserve_raw(p.len(), FullPolicy::Fail)?;
                // SAFETY: the reservation gives us `r.len` writable bytes at `r.ptr`
                // until we commit or abort it.
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), r.ptr, r.len) };
                ring.pending = Some(i);
                a.send()?;
                a.send()?;
            }
            State::FramesHeld => {
                for _ in 0..5 {
                    a.send()?;
                }
                for _ in 0..3 {
                    let f = ring
                        .owner
                        .next_raw(Some(Duration::ZERO))?
                        .expect("a committed record");
                    // SAFETY: a frame just handed out and not released: its bytes
                    // lie inside the ring.
                    let bytes = unsafe { std::slice::from_raw_parts(f.ptr, f.len) };
                    note(&mut ring.delivered, bytes, f.meta);
                    ring.held.push(f);
                }
            }
            State::Tethered => {
                let t = Consumer::tethered(ring.seg.clone(), options())?;
                // The owner adopts it at its next poll.
                take_all(&ring.owner, &mut ring.delivered)?;
                assert!(t.adopted()?, "the owner adopted the tethered consumer");
                for _ in 0..3 {
                    a.send()?;
                }
                take_all(&ring.owner, &mut ring.delivered)?;
                drop(t.try_next()?.expect("a record for the tethered consumer"));
                b.send()?;
                ring.tether = Some(t);
            }
            State::WriterDied => {
                a.send()?;
                a.send()?;
                ring.writer = Some(Writer::spawn(&ring.seg)?);
                a.send()?;
                a.send()?;
            }
            State::Placed => {
                // Records the consumer keeps up with until its release leaves the
                // ring empty past the placement window: it pads to the ring's end.
                let placed = ring.seg.stats().placements;
                while ring.seg.stats().placements == placed {
                    filler.send()?;
                    take_all(&ring.owner, &mut ring.delivered)?;
                }
                a.send()?;
                b.send()?;
            }
        }
        ring.producers.push(a);
        ring.producers.push(b);
        if state == State::Full {
            ring.producers.push(filler);
        }
        // The write comes just after the consumers' audits, as an attacker who
        // aims would time it: what it breaks stays unseen for a whole interval.
        ring.owner.audit()?;
        if let Some(t) = &ring.tether {
            t.audit()?;
        }
        Ok(ring)
    }
}

/// The name of the test that runs [`writer_child`] in the test binary (the writer
/// process is that binary, run again for that one test).
pub const WRITER_ENTRY: &str = "child_process_entry";
/// Set in the writer process: the descriptor of the segment it inherited.
const WRITER_ENV: &str = "SHMRING_MATRIX_WRITER_FD";

/// A producer in another process that holds a claim and will write one word.
pub struct Writer {
    kid: shmring_host::ChildGuard,
    stdin: std::process::ChildStdin,
}

impl Writer {
    /// Starts the writer on `seg` and waits until it holds its claim.
    fn spawn(seg: &Arc<Segment>) -> Result<Writer> {
        use std::io::BufRead;
        use std::os::fd::AsRawFd;
        use std::process::{Command, Stdio};
        let fds: Vec<i32> = seg.descriptors().iter().map(|f| f.as_raw_fd()).collect();
        let list: Vec<String> = fds.iter().map(|f| f.to_string()).collect();
        let exe = std::env::current_exe().map_err(|e| shmring::Error::Config(e.to_string()))?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            WRITER_ENTRY,
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(WRITER_ENV, list.join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        let io = |e: std::io::Error| shmring::Error::Config(format!("writer process: {e}"));
        let mut kid = shmring_host::ChildGuard::spawn_tied(&mut cmd, &fds).map_err(io)?;
        let stdin = kid.take_stdin().expect("piped stdin");
        let out = kid.take_stdout().expect("piped stdout");
        let mut lines = std::io::BufReader::new(out).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.starts_with("@@READY") => break,
                Some(Ok(_)) => {}
                _ => return Err(io(std::io::Error::other("exited before holding its claim"))),
            }
        }
        Ok(Writer { kid, stdin })
    }

    /// Has the writer store `value` at byte `offset` of the segment, and waits
    /// until its process is gone (its claim still pending, its locks dropped).
    pub fn write(mut self, offset: usize, value: u64) -> std::io::Result<()> {
        use std::io::Write;
        writeln!(self.stdin, "{offset} {value}")?;
        match self.kid.wait_or_kill(Duration::from_secs(30)) {
            Some(st) if st.success() => Ok(()),
            st => Err(std::io::Error::other(format!(
                "writer process ended with {st:?}"
            ))),
        }
    }
}

/// The writer process's side: returns at once unless this process is a writer.
/// Attaches a producer to the inherited segment, reserves a record, says
/// `@@READY`, stores the value it is told at the offset it is told, and exits
/// without committing. Call it from a test named [`WRITER_ENTRY`].
pub fn writer_child() {
    use std::io::BufRead;
    use std::os::fd::{FromRawFd, OwnedFd};
    let Ok(fds) = std::env::var(WRITER_ENV) else {
        return;
    };
    let fds = fds
        .split(',')
        .map(|n| {
            let n: i32 = n.parse().expect("a descriptor number");
            // SAFETY: the parent left this descriptor open for us; nothing else owns it.
            unsafe { OwnedFd::from_raw_fd(n) }
        })
        .collect();
    let seg = Address::Descriptors(fds).open().expect("attach");
    let mut p = seg.producer().expect("a producer slot");
    let r = p.reserve_raw(300, FullPolicy::Fail).expect("a claim");
    // SAFETY: the reservation gives us `r.len` writable bytes at `r.ptr`.
    unsafe { std::ptr::write_bytes(r.ptr, 0x5a, r.len) };
    println!("@@READY {}", r.seq);
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("a command");
    let mut it = line
        .split_whitespace()
        .map(|w| w.parse::<u64>().expect("a number"));
    let (off, value) = (it.next().expect("offset"), it.next().expect("value"));
    crate::Peer::new(&seg)
        .at(off as usize)
        .store(value, std::sync::atomic::Ordering::SeqCst);
    // Gone without committing: the kernel drops our record locks.
    std::process::exit(0);
}
