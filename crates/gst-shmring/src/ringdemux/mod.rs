//! `shmringdemux`: one reader of a ring with a pad per stream and kind, as a
//! demuxer has: `video_ID` and `audio_ID` appear as each stream id's records
//! arrive, so one pipeline serves a whole meeting (each participant's video and
//! audio muxed into a file of its own, in one `gst-launch-1.0` line).

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `shmringdemux` element.
    pub struct ShmRingDemux(ObjectSubclass<imp::ShmRingDemux>) @extends gst::Element, gst::Object;
}

/// Registers `shmringdemux` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "shmringdemux",
        gst::Rank::NONE,
        ShmRingDemux::static_type(),
    )
}
