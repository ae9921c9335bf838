//! What the source elements count, and the hold depth the reader learns from
//! buffers coming back.

use super::*;
use gst::glib;

#[derive(Default)]
pub struct Counters {
    pub frames: AtomicU64,
    pub copies: AtomicU64,
    pub malformed: AtomicU64,
    pub resets: AtomicU64,
    pub skipped: AtomicU64,
    pub lost: AtomicU64,
    pub missing: AtomicU64,
}

impl Counters {
    /// The value of a counter property, if `name` is one.
    pub fn property(&self, name: &str) -> Option<glib::Value> {
        let c = match name {
            "frames" => &self.frames,
            "copies" => &self.copies,
            "malformed" => &self.malformed,
            "resets" => &self.resets,
            "skipped" => &self.skipped,
            "lost" => &self.lost,
            "missing" => &self.missing,
            _ => return None,
        };
        Some(c.load(Ordering::Relaxed).to_value())
    }

    /// The counter properties (read-only), documented for gst-inspect-1.0.
    pub fn properties() -> Vec<glib::ParamSpec> {
        [
            ("frames", "Frames", "Buffers output"),
            ("copies", "Copies", "Buffers output as copies instead of the ring's memory, because downstream keeps frames longer than the ring can carry (see max-held) or is an encoder whose look-ahead was not measured yet"),
            ("malformed", "Malformed", "Records dropped because their media header was malformed"),
            ("resets", "Resets", "Times the ring was reset after corruption"),
            ("skipped", "Skipped", "Records not output: other streams or kinds than the filters take, a kind downstream does not accept, or older than max-age"),
            ("lost", "Lost", "Mode tap: records lost (overwritten while read, or passed by the producers); 0 in the other modes, which lose nothing"),
            ("missing", "Missing", "Records missing from their stream's numbering: dropped by their producer before they reached the ring (a full ring, no consumer; shmringsink's dropped). The next buffer is DISCONT; a QoS message and a warning (at most one a second) say so"),
        ]
        .into_iter()
        .map(|(name, nick, blurb)| {
            glib::ParamSpecUInt64::builder(name)
                .nick(nick)
                .blurb(blurb)
                .read_only()
                .build()
        })
        .collect()
    }
}

/// How long one output's downstream (a pad's) keeps buffers, learned from the
/// buffers it gives back. Each pad has its own: an audio encoder gives its input
/// back at once while a video encoder beside it keeps fifty frames.
///
/// What is learned holds for one set of caps (a *generation*): at a caps change an
/// encoder drains (gives back every frame it kept at once, which would teach a
/// hold far shorter than its look-ahead) and the frames change size (a depth
/// learned in bytes of small frames says nothing of large ones), so the lane
/// starts again: copies until a buffer of the new caps comes back, and buffers of
/// the old caps teach nothing.
#[derive(Default)]
pub struct Lane {
    /// Largest ring traffic (bytes) seen to pass while downstream held a buffer of
    /// this generation, decaying slowly (1/64 per buffer returned).
    pub(crate) depth: AtomicU64,
    /// A buffer of this generation came back.
    pub(crate) returned: AtomicBool,
    pub(crate) generation: AtomicU64,
}

impl Lane {
    /// A buffer of generation `generation`, output when `at` bytes had been read,
    /// came back, `now` read since.
    pub(crate) fn returned(&self, generation: u64, at: u64, now: u64) {
        // Relaxed: statistics guiding a choice, never memory safety. (A buffer
        // returning while the caps change may teach the new generation once: the
        // next returns correct it.)
        if generation != self.generation.load(Ordering::Relaxed) {
            return;
        }
        let span = now.saturating_sub(at);
        let _ = self
            .depth
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(span.max(d - d / 64))
            });
        self.returned.store(true, Ordering::Relaxed);
    }

    /// New caps: forget what was learned (see the type's documentation).
    pub fn restart(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.returned.store(false, Ordering::Relaxed);
        self.depth.store(0, Ordering::Relaxed);
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Downstream's hold depth in bytes, if a buffer came back yet.
    pub fn depth(&self) -> Option<u64> {
        self.returned
            .load(Ordering::Relaxed)
            .then(|| self.depth.load(Ordering::Relaxed))
    }
}

/// The ring's side of what downstream holds, shared with every buffer handed out.
pub struct Tracker {
    /// Bytes of records read from the ring so far (every record, output or not).
    pub(crate) consumed: AtomicU64,
    /// Frames handed out in place and not yet returned, and their bytes.
    pub(crate) held_frames: AtomicU64,
    pub(crate) held_bytes: AtomicU64,
    /// One flag per place in the reader's list of frames held in place: set when
    /// that frame came back.
    pub(crate) back: Box<[AtomicBool]>,
}

impl Tracker {
    pub(crate) fn new(places: usize) -> Tracker {
        Tracker {
            consumed: AtomicU64::new(0),
            held_frames: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            back: (0..places).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// A buffer of `lane`'s `generation` output when `at` bytes had been read
    /// came back.
    pub(crate) fn returned(&self, lane: &Lane, generation: u64, at: u64) {
        lane.returned(generation, at, self.consumed.load(Ordering::Relaxed));
    }
}
