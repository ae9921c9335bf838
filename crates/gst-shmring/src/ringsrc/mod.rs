//! `shmringsrc`: a ring's consumer, a tethered consumer beside it, or a read-only
//! tap, as a live GStreamer source (property `mode`).

use gst::glib;
use gst::prelude::*;

mod imp;

pub use crate::reader::{Mode, TimestampMode};
pub use imp::KindFilter;

glib::wrapper! {
    /// The `shmringsrc` element.
    pub struct ShmRingSrc(ObjectSubclass<imp::ShmRingSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `shmringsrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "shmringsrc",
        gst::Rank::NONE,
        ShmRingSrc::static_type(),
    )
}
