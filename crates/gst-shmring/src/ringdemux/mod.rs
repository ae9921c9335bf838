//! `shmringdemux`: one reader of a ring with a pad per stream and kind, as a
//! demuxer has: `video_ID` and `audio_ID` appear as each stream id's records
//! arrive, so one pipeline serves a whole meeting (each participant's video and
//! audio muxed into a file of its own, in one `gst-launch-1.0` line).
//!
//! Its implementation, in parts:
//! - `imp`: the element, its state while started, its properties and its
//!   GStreamer virtual methods (state changes, start and stop, the reading
//!   task's start and pause); its module doc says how the pads and their
//!   threads work and which locks are held where;
//! - `reading`: the reading task, one record per iteration, queued for its pad;
//! - `pads`: the output pads, their queries and events, and the streaming
//!   thread that pushes each one's queue;
//! - `queue`: a pad's bounded queue between the reading thread and its pad's
//!   thread.

use gst::glib;
use gst::prelude::*;

mod imp;
mod pads;
mod queue;
mod reading;

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
