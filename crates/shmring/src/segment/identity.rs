//! The ring's identity lines (its geometry, written three times): validated when
//! attaching (two of three decide), written at creation, checked and restored by
//! the consumer, and the claim log checked against them before a writer trusts them.

use std::os::fd::AsFd;

use rustix::mm::ProtFlags;

use super::Segment;
use crate::error::{Error, Result};
use crate::layout::{
    Control, Geometry, Identity, LogEntry, CONTROL_SIZE, FLAG_EVENTFD, FLAG_HUGE_PAGES,
    FLAG_LOCK_FILE, LAYOUT_VERSION, MAGIC,
};
use crate::sync::Ordering;

/// How long a writer attaching to a ring whose claim log contradicts its identity
/// line waits for the consumer to repair the line (several liveness intervals).
const GEOMETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

impl Segment {
    /// A writer's last check before it trusts the geometry it read: the identity
    /// line is believed at attach, and a peer may have written one that describes
    /// a ring of the same size with another claim log or slot table (the consumer
    /// repairs it within a liveness interval). So the claim log must agree with the
    /// cursors under this geometry; while it does not, the identity line is watched
    /// for up to [`GEOMETRY_WAIT`]: once the consumer rewrites it, the ring is
    /// mapped again with the geometry it gives. A log that stays inconsistent under
    /// an unchanged line is the ring's own state (the consumer resets it): accepted.
    pub(super) fn settle_geometry(mut self) -> Result<Segment> {
        let start = std::time::Instant::now();
        loop {
            if self.log_agrees() {
                return Ok(self);
            }
            if !self.identity_intact() {
                let (locks, data) = (self.locks.take(), self.data.take());
                let (name, backing) = (std::mem::take(&mut self.name), self.backing.clone());
                drop(self);
                let locks = locks.expect("a writer's segment has a lock file");
                let fd = match &data {
                    Some(d) => d.as_fd(),
                    None => locks.writable().expect("checked at attach"),
                };
                let prot = ProtFlags::READ | ProtFlags::WRITE;
                let geo = Self::probe(fd, &name, &backing, prot)?;
                self = Self::map_file(Some(locks), data, geo, name, backing, prot)?;
                continue;
            }
            if start.elapsed() >= GEOMETRY_WAIT {
                return Ok(self);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Does the claim log agree with the ring's cursors under our geometry? Every
    /// entry from the read cursor to the write cursor holds its claim, every one
    /// after holds its previous generation (or a claim made since). A few looks, as
    /// claims move on while we read.
    fn log_agrees(&self) -> bool {
        let sh = self.shared();
        let n = self.geo.log_entries as u64;
        (0..3).any(|_| {
            // Acquire, as the consumer's audit.
            let r = sh.read.load(Ordering::Acquire);
            let w = sh.write.load(Ordering::Acquire);
            let (rs, ws) = (crate::layout::cursor_seq(r), crate::layout::cursor_seq(w));
            let in_flight = crate::layout::seq_diff(ws, rs);
            if in_flight > n
                || crate::layout::pos_diff(
                    crate::layout::cursor_pos(w),
                    crate::layout::cursor_pos(r),
                ) > sh.cap_units
            {
                return false;
            }
            (0..n).all(|d| {
                let j = (rs + d) & crate::layout::SEQ_MASK;
                let stamp = LogEntry::unpack(sh.entry(j).load(Ordering::Acquire)).stamp;
                stamp == j
                    || (d >= in_flight && stamp == j.wrapping_sub(n) & crate::layout::SEQ_MASK)
            })
        })
    }

    /// The geometry at least two of the three identity lines give (a peer's one
    /// write changes at most one line), each line validated on its own; with no two
    /// agreeing, the first line's own error (or, all three valid and different,
    /// that they disagree).
    pub(super) fn validate(c: &Control, file_size: u64, name: &str) -> Result<Geometry> {
        let lines = [
            &c.identity.0,
            &c.identity_copies[0].0,
            &c.identity_copies[1].0,
        ];
        let [a, b, d] = lines.map(|id| Self::validate_line(id, file_size, name));
        let agree = |x: &Result<Geometry>, y: &Result<Geometry>| match (x, y) {
            (Ok(g), Ok(h)) => (g == h).then_some(*g),
            _ => None,
        };
        if let Some(g) = agree(&a, &b).or(agree(&a, &d)).or(agree(&b, &d)) {
            return Ok(g);
        }
        a?;
        Err(Error::LayoutMismatch {
            segment: name.into(),
            field: "identity lines",
            expected: "two of the three identity lines agreeing".into(),
            found: "three different geometries".into(),
        })
    }

    /// Validates one identity line against the file's size.
    fn validate_line(id: &Identity, file_size: u64, name: &str) -> Result<Geometry> {
        let mismatch = |field, expected: String, found: String| Error::LayoutMismatch {
            segment: name.into(),
            field,
            expected,
            found,
        };
        // Acquire: pairs with the creator's Release store of the magic, written last.
        let magic = id.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(mismatch(
                "magic",
                format!("{MAGIC:#x}"),
                format!("{magic:#x}"),
            ));
        }
        // Each field is read once (Relaxed: the Acquire load of the magic above
        // orders them after the creator's writes) and only the local copy is checked.
        let version = id.version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(mismatch(
                "layout version",
                LAYOUT_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let control_size = id.control_size.load(Ordering::Relaxed);
        if control_size as u64 != CONTROL_SIZE {
            return Err(mismatch(
                "control block size",
                CONTROL_SIZE.to_string(),
                control_size.to_string(),
            ));
        }
        let geo = Geometry::new(
            id.capacity.load(Ordering::Relaxed),
            id.max_record.load(Ordering::Relaxed),
            id.log_entries.load(Ordering::Relaxed),
            id.max_producers.load(Ordering::Relaxed),
            id.flags.load(Ordering::Relaxed),
        )
        .map_err(|e| mismatch("geometry", "a valid configuration".into(), e))?;
        if geo.flags & !(FLAG_EVENTFD | FLAG_HUGE_PAGES | FLAG_LOCK_FILE) != 0 {
            return Err(mismatch(
                "flags",
                format!(
                    "a subset of {:#x}",
                    FLAG_EVENTFD | FLAG_HUGE_PAGES | FLAG_LOCK_FILE
                ),
                format!("{:#x}", geo.flags),
            ));
        }
        let data_offset = id.data_offset.load(Ordering::Relaxed);
        if data_offset != geo.data_offset {
            return Err(mismatch(
                "data offset",
                geo.data_offset.to_string(),
                data_offset.to_string(),
            ));
        }
        let total = id.total_size.load(Ordering::Relaxed);
        if total != geo.total_size {
            return Err(mismatch(
                "segment size",
                geo.total_size.to_string(),
                format!(
                    "the header is inconsistent: its geometry makes a segment of {} bytes, \
                     its size field says {total}",
                    geo.total_size
                ),
            ));
        }
        if file_size != geo.total_size {
            return Err(mismatch(
                "segment size",
                geo.total_size.to_string(),
                format!(
                    "the file is {file_size} bytes but its header describes a ring of {} bytes \
                     (truncated or resized by another program, or not a finished ring)",
                    geo.total_size
                ),
            ));
        }
        Ok(geo)
    }

    /// Writes a fresh control block, slots and claim log. Only the creator calls
    /// this, before the segment is visible to anyone else; the magic goes last.
    pub(super) fn init(&self) {
        let n = self.geo.log_entries as u64;
        for (i, e) in self.log().iter().enumerate() {
            e.store(LogEntry::initial(i as u64, n), Ordering::Relaxed);
        }
        // The magic goes last (Release): everything above is visible to whoever sees it.
        self.restore_identity();
    }

    /// Rewrites the three identity lines from our validated
    /// geometry: at creation, and when the consumer finds a peer changed one.
    /// Relaxed stores: the creator publishes them with its Release store of the
    /// magic; at a repair, a peer that attaches concurrently reads each field once
    /// and gets either value (and two of three lines decide).
    fn write_identity(&self) {
        for id in self.identities() {
            write_identity_fields(id, &self.geo);
        }
    }

    fn identities(&self) -> [&Identity; 3] {
        let c = self.control();
        [
            &c.identity.0,
            &c.identity_copies[0].0,
            &c.identity_copies[1].0,
        ]
    }

    /// Do all three identity lines still describe our geometry? (Each field loaded
    /// once.)
    pub(crate) fn identity_intact(&self) -> bool {
        self.identities().iter().all(|id| {
            id.magic.load(Ordering::Relaxed) == MAGIC && identity_fields_are(id, &self.geo)
        })
    }

    /// The largest payload a producer of this mapping may reserve.
    pub(crate) fn max_record(&self) -> u64 {
        self.max_record.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A producer refused as too large looks again: `max_record` is the one
    /// identity field no offset depends on, so a line a peer wrote before we
    /// attached (then repaired by the consumer) cannot be told from the real one
    /// at attach. If the line now says more, and every other field is ours, that
    /// is taken (within the ring's limit). Returns the limit now.
    pub(crate) fn refresh_max_record(&self) -> u64 {
        let id = &self.control().identity.0;
        let g = &self.geo;
        // Each field loaded once (Relaxed after the magic's Acquire).
        let same = id.magic.load(Ordering::Acquire) == MAGIC
            && id.version.load(Ordering::Relaxed) == LAYOUT_VERSION
            && id.capacity.load(Ordering::Relaxed) == g.capacity
            && id.log_entries.load(Ordering::Relaxed) == g.log_entries
            && id.max_producers.load(Ordering::Relaxed) == g.max_producers
            && id.flags.load(Ordering::Relaxed) == g.flags
            && id.data_offset.load(Ordering::Relaxed) == g.data_offset
            && id.total_size.load(Ordering::Relaxed) == g.total_size;
        let line = id.max_record.load(Ordering::Relaxed);
        let copies = &self.control().identity_copies;
        if same
            && copies
                .iter()
                .all(|c| c.0.max_record.load(Ordering::Relaxed) == line)
            && line <= Geometry::largest_record(g.capacity)
            && line > self.max_record()
        {
            self.max_record
                .store(line, std::sync::atomic::Ordering::Relaxed);
        }
        self.max_record()
    }

    /// Rewrites the identity lines, each magic last (Release, as at creation).
    pub(crate) fn restore_identity(&self) {
        self.write_identity();
        for id in self.identities() {
            id.magic.store(MAGIC, Ordering::Release);
        }
    }
}

/// Writes the fields of an identity line from `g` (the magic is the caller's).
fn write_identity_fields(id: &Identity, g: &Geometry) {
    id.version.store(LAYOUT_VERSION, Ordering::Relaxed);
    id.control_size
        .store(CONTROL_SIZE as u32, Ordering::Relaxed);
    id.capacity.store(g.capacity, Ordering::Relaxed);
    id.max_record.store(g.max_record, Ordering::Relaxed);
    id.log_entries.store(g.log_entries, Ordering::Relaxed);
    id.max_producers.store(g.max_producers, Ordering::Relaxed);
    id.flags.store(g.flags, Ordering::Relaxed);
    id.data_offset.store(g.data_offset, Ordering::Relaxed);
    id.total_size.store(g.total_size, Ordering::Relaxed);
}

/// Does an identity line's every field (magic aside) describe `g`? Each loaded once.
fn identity_fields_are(id: &Identity, g: &Geometry) -> bool {
    id.version.load(Ordering::Relaxed) == LAYOUT_VERSION
        && id.control_size.load(Ordering::Relaxed) as u64 == CONTROL_SIZE
        && id.capacity.load(Ordering::Relaxed) == g.capacity
        && id.max_record.load(Ordering::Relaxed) == g.max_record
        && id.log_entries.load(Ordering::Relaxed) == g.log_entries
        && id.max_producers.load(Ordering::Relaxed) == g.max_producers
        && id.flags.load(Ordering::Relaxed) == g.flags
        && id.data_offset.load(Ordering::Relaxed) == g.data_offset
        && id.total_size.load(Ordering::Relaxed) == g.total_size
}
