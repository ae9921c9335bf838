//! `shmringsink`: a GStreamer sink that is a producer of a ring.

use gst::glib;
use gst::prelude::*;

mod imp;
mod pool;

pub use imp::FullMode;

glib::wrapper! {
    /// The `shmringsink` element.
    pub struct ShmRingSink(ObjectSubclass<imp::ShmRingSink>) @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `shmringsink` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "shmringsink",
        gst::Rank::NONE,
        ShmRingSink::static_type(),
    )
}
