//! `shmringsink`: a GStreamer sink that is a producer of a ring.
//!
//! Its implementation, in parts:
//! - `imp`: the element, its state while started, and its GStreamer virtual
//!   methods (start and stop, caps, the allocation query, render); its module
//!   doc says how the sink starts before its ring, follows its consumer and ends;
//! - `properties`: the settings, and the properties that set them and show the
//!   counters;
//! - `connection`: the ring the sink writes into, found and checked for a
//!   consumer;
//! - `render`: writing a buffer (in place or one copy) or dropping it, and the
//!   end-of-stream record;
//! - `pool`: the buffer pool through which upstream writes into the ring.

use gst::glib;
use gst::prelude::*;

mod connection;
mod imp;
mod pool;
mod properties;
mod render;

pub use properties::FullMode;

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
