//! What keeps frames downstream of an output, and the latency a source reports.

use super::*;

/// What keeps frames downstream of an output, as far as the element can tell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Holder {
    /// Nothing known to keep frames: in place until measured otherwise.
    #[default]
    None,
    /// An element that keeps frames (an encoder, by name): copies until the first
    /// buffer comes back, then as measured.
    Learn(String),
    /// An element that may keep frames for as long as another output makes it
    /// wait (a muxer fed by several of this element's pads): copies always.
    Always(String),
}

impl Holder {
    pub fn name(&self) -> Option<&str> {
        match self {
            Holder::None => None,
            Holder::Learn(n) | Holder::Always(n) => Some(n),
        }
    }
}

/// What keeps frames downstream of `pad`: the first encoder (factory klass
/// "Encoder", for its look-ahead) or muxer ("Muxer", which keeps one stream's
/// records while it waits for another's) on the path, and whether a muxer on
/// it (before or after an encoder) is fed from another of `siblings` too: then
/// it can keep this pad's frames for as long as the other waits (an audio pad
/// waiting behind its participant's video encoder), and nothing measured before
/// says how long. Follows single-output elements (queues, converters, parsers,
/// encoders) and every branch of a tee, a few elements deep.
pub fn downstream_holder(pad: &gst::Pad, siblings: &[gst::Pad]) -> Holder {
    fn walk(pad: &gst::Pad, depth: u32, found: &mut Vec<(gst::Element, bool)>) {
        if depth > 12 {
            return;
        }
        let Some(el) = pad.peer().and_then(|p| p.parent_element()) else {
            return;
        };
        let klass = el
            .factory()
            .map(|f| f.metadata("klass").unwrap_or_default().to_string())
            .unwrap_or_default();
        let muxer = klass.contains("Muxer");
        if muxer || klass.contains("Encoder") {
            found.push((el.clone(), muxer));
        }
        for p in el.src_pads() {
            walk(&p, depth + 1, found);
        }
    }
    let mut found = Vec::new();
    walk(pad, 0, &mut found);
    let Some((first, _)) = found.first() else {
        return Holder::None;
    };
    let shared = found.iter().filter(|(_, m)| *m).find(|(mux, _)| {
        siblings.iter().filter(|s| *s != pad).any(|s| {
            let mut theirs = Vec::new();
            walk(s, 0, &mut theirs);
            theirs.iter().any(|(e, _)| e == mux)
        })
    });
    match shared {
        Some((mux, _)) => Holder::Always(mux.name().to_string()),
        None => Holder::Learn(first.name().to_string()),
    }
}

/// The shared state of a reader's latency answer: the live records' largest age,
/// and the frame duration of what is output.
#[derive(Default)]
pub struct Latency {
    /// Largest age (capture to output) of live records, ns.
    pub age_ns: AtomicU64,
    /// Longest frame or packet duration output, ns.
    pub frame_ns: AtomicU64,
    /// Ring time at the output's byte rate, ns (how long the ring can buffer).
    pub ring_ns: AtomicU64,
}

impl Latency {
    /// (min, max) for a LATENCY answer: a frame plus the largest age seen, and
    /// that plus what the ring can hold.
    pub fn answer(&self) -> (gst::ClockTime, Option<gst::ClockTime>) {
        let min = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        let ring = self.ring_ns.load(Ordering::Relaxed);
        let min = gst::ClockTime::from_nseconds(min);
        (
            min,
            (ring > 0).then(|| min + gst::ClockTime::from_nseconds(ring)),
        )
    }

    /// Notes what was just output; true when the answer grew by more than a
    /// millisecond (time to post a LATENCY message).
    pub fn note(&self, frame_ns: u64, age_ns: u64, ring_ns: u64) -> bool {
        let before = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        self.frame_ns.fetch_max(frame_ns, Ordering::Relaxed);
        self.age_ns.fetch_max(age_ns, Ordering::Relaxed);
        self.ring_ns.store(ring_ns, Ordering::Relaxed);
        let after = self.frame_ns.load(Ordering::Relaxed) + self.age_ns.load(Ordering::Relaxed);
        after > before + 1_000_000
    }
}
