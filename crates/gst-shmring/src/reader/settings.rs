//! The properties a source element reads by: mode, timestamps, what the reader
//! makes of them.

use super::*;

/// Which timestamp becomes a buffer's PTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcTimestampMode")]
pub enum TimestampMode {
    /// The record's capture time (the producer's monotonic clock), mapped onto this
    /// pipeline's clock.
    #[enum_value(
        name = "Capture: the producer's capture time, on this pipeline's clock",
        nick = "capture"
    )]
    Capture,
    /// When this element received the record.
    #[enum_value(name = "Arrival: when the record was received", nick = "arrival")]
    Arrival,
    /// The PTS the producer wrote in the media header, unchanged.
    #[enum_value(
        name = "Stream: the producer's own PTS from the media header, unchanged",
        nick = "stream"
    )]
    Stream,
}

/// Which of the ring's readers an element is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, glib::Enum)]
#[enum_type(name = "GstShmRingSrcMode")]
pub enum Mode {
    /// The ring's own consumer.
    #[enum_value(
        name = "Consumer: the ring's own consumer; buffers are its frames in place",
        nick = "consumer"
    )]
    Consumer,
    /// A tethered consumer beside the ring's own.
    #[enum_value(
        name = "Tethered: a further consumer beside the ring's own, which must be running; every record, frames in place, each held in the ring until this source releases it (one that releases nothing for the ring's consumer's stall limit is detached: an error)",
        nick = "tethered"
    )]
    Tethered,
    /// A read-only tap.
    #[enum_value(
        name = "Tap: read-only; copies of the records as they go by, never holding the ring; records overwritten while read are lost (counted in 'lost', next buffer DISCONT)",
        nick = "tap"
    )]
    Tap,
}

use gst::glib;

impl From<Mode> for ReaderKind {
    /// The core's reader of that name (the nicks are its names: checked below).
    fn from(m: Mode) -> ReaderKind {
        match m {
            Mode::Consumer => ReaderKind::Consumer,
            Mode::Tethered => ReaderKind::Tethered,
            Mode::Tap => ReaderKind::Tap,
        }
    }
}

/// Counters both source elements expose as properties.
/// What the reader makes of the settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub location: Location,
    pub mode: Mode,
    /// Only this stream id (records of other ids are released unread).
    pub stream: Option<u32>,
    /// Mode tap: only this kind (the tap skips the others without copying them).
    pub tap_kind: Option<u32>,
    pub timestamp_mode: TimestampMode,
    pub max_held_percent: u32,
    pub tether_stall_ms: u32,
    /// Modes consumer and tethered: release unread the records older than this
    /// (ms; 0: none), the core's `ConsumerOptions::max_age`.
    pub max_age_ms: u32,
}

/// The library's stall limit for tethered consumers, in ms.
pub(crate) fn default_tether_stall_ms() -> u32 {
    ConsumerOptions::default().tether_stall_limit.as_millis() as u32
}

/// The settings both source elements share: the ring's (see [`crate::ring`]) and
/// the reader's, with their properties.
#[derive(Debug, Clone)]
pub struct ReaderSettings {
    pub location: Location,
    pub mode: Mode,
    pub timestamp_mode: TimestampMode,
    pub max_held_percent: u32,
    pub eos_after_ms: u32,
    pub tether_stall_ms: u32,
    pub max_age_ms: u32,
    pub keep_running: bool,
}

impl Default for ReaderSettings {
    fn default() -> Self {
        ReaderSettings {
            location: Location::default(),
            mode: Mode::Consumer,
            timestamp_mode: TimestampMode::Capture,
            max_held_percent: 50,
            eos_after_ms: 0,
            tether_stall_ms: default_tether_stall_ms(),
            max_age_ms: 0,
            keep_running: false,
        }
    }
}

impl ReaderSettings {
    /// The ring's and the reader's properties, documented for gst-inspect-1.0.
    pub fn properties() -> Vec<glib::ParamSpec> {
        let mut props = crate::ring::properties("consume", "", true);
        props.extend([
            glib::ParamSpecEnum::builder_with_default("mode", Mode::Consumer)
                .nick("Mode")
                .blurb("Which reader of the ring this source is: consumer (the ring's own), tethered (beside the ring's own consumer, every record in place) or tap (read-only copies, may lose records)")
                .mutable_ready()
                .build(),
            glib::ParamSpecEnum::builder_with_default("timestamp-mode", TimestampMode::Capture)
                .nick("Timestamp mode")
                .blurb("Which time becomes each buffer's PTS. capture: records captured before the pipeline started (a backlog after a restart) keep their spacing, the timeline shifted by the oldest one's age")
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-held")
                .nick("Max held")
                .blurb("Percent of the ring downstream may keep pinned by frames in place. The source measures how much ring traffic passes while downstream keeps a frame; a frame that would pin more than this share is copied (counted in 'copies', said once on the bus) and released at once, so producers never wait for it. Until that is measured, an encoder downstream (look-ahead) gets copies. 0: copy every frame")
                .minimum(0)
                .maximum(100)
                .default_value(50)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("eos-after")
                .nick("EOS after")
                .blurb("Milliseconds with no producer attached and no record, counted from the last record or producer (not from the start: a source started before its producers waits for them), after which the source sends EOS; 0: keep waiting. Producers also end their streams themselves (an end-of-stream record: shmringsink at EOS)")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("tether-stall-limit")
                .nick("Tether stall limit")
                .blurb("Mode consumer: milliseconds a tethered reader of the ring (mode=tethered, shmring record --tethered) may go without releasing a record before it is detached")
                .minimum(1)
                .default_value(default_tether_stall_ms())
                .mutable_ready()
                .build(),
            glib::ParamSpecUInt::builder("max-age")
                .nick("Max age")
                .blurb("Modes consumer and tethered: milliseconds after its capture past which a record is released unread when the source reaches it (counted in 'skipped'), so a live view that fell behind skips to fresh frames instead of playing a backlog; 0: every record, however old")
                .default_value(0)
                .mutable_ready()
                .build(),
            glib::ParamSpecBoolean::builder("keep-running")
                .nick("Keep running")
                .blurb("Participants come and go: a producer's end of stream does not end this element's output. shmringsrc then sends no EOS when every stream it output has ended, and shmringdemux sends none on a participant's pads: a participant who comes back (same stream id) continues on them, its first buffer DISCONT; eos-after, or an EOS sent to the pipeline (gst-launch-1.0 -e), ends it. false: shmringsrc sends EOS once every stream it output has ended; shmringdemux sends EOS on a participant's pads when it ends its streams, and one who comes back gets new pads (video_ID_2, audio_ID_2, then _3, ...)")
                .default_value(false)
                .mutable_ready()
                .build(),
        ]);
        props
    }

    /// Sets one of [`ReaderSettings::properties`]; false if `name` is none.
    pub fn set_property(&mut self, name: &str, value: &glib::Value) -> bool {
        const CHECKED: &str = "type checked upstream";
        if self.location.set_property(name, value) {
            return true;
        }
        match name {
            "mode" => self.mode = value.get().expect(CHECKED),
            "timestamp-mode" => self.timestamp_mode = value.get().expect(CHECKED),
            "max-held" => self.max_held_percent = value.get().expect(CHECKED),
            "eos-after" => self.eos_after_ms = value.get().expect(CHECKED),
            "tether-stall-limit" => self.tether_stall_ms = value.get().expect(CHECKED),
            "max-age" => self.max_age_ms = value.get().expect(CHECKED),
            "keep-running" => self.keep_running = value.get().expect(CHECKED),
            _ => return false,
        }
        true
    }

    /// The value of one of [`ReaderSettings::properties`].
    pub fn property(&self, name: &str) -> Option<glib::Value> {
        if let Some(v) = self.location.property(name) {
            return Some(v);
        }
        Some(match name {
            "mode" => self.mode.to_value(),
            "timestamp-mode" => self.timestamp_mode.to_value(),
            "max-held" => self.max_held_percent.to_value(),
            "eos-after" => self.eos_after_ms.to_value(),
            "tether-stall-limit" => self.tether_stall_ms.to_value(),
            "max-age" => self.max_age_ms.to_value(),
            "keep-running" => self.keep_running.to_value(),
            _ => return None,
        })
    }

    /// What the reader is opened with.
    pub fn options(&self, stream: Option<u32>, tap_kind: Option<u32>) -> Options {
        Options {
            location: self.location.clone(),
            mode: self.mode,
            stream,
            tap_kind,
            timestamp_mode: self.timestamp_mode,
            max_held_percent: self.max_held_percent,
            tether_stall_ms: self.tether_stall_ms,
            max_age_ms: self.max_age_ms,
        }
    }

    /// `eos-after`, if set.
    pub fn eos_after(&self) -> Option<Duration> {
        (self.eos_after_ms > 0).then(|| Duration::from_millis(self.eos_after_ms as u64))
    }
}

/// One stream (id and kind) whose sequence is followed.
#[cfg(test)]
mod tests {
    use super::*;
    use glib::translate::IntoGlib;

    #[test]
    fn modes_are_the_cores_readers_by_name() {
        let class = glib::EnumClass::with_type(Mode::static_type()).expect("an enum");
        assert_eq!(class.values().len(), ReaderKind::ALL.len());
        for m in [Mode::Consumer, Mode::Tethered, Mode::Tap] {
            let v = class.value(m.into_glib()).expect("a value");
            assert_eq!(v.nick(), ReaderKind::from(m).name());
        }
    }
}
