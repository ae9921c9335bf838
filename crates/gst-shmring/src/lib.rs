//! GStreamer elements for shmring: `shmringsrc` (a ring's consumer, or a tethered
//! consumer or read-only tap beside it: a live source whose buffers are the ring's
//! frames in place, or copies where downstream keeps frames or for a tap),
//! `shmringdemux` (the same reader with a pad per stream id and kind, as a demuxer
//! has) and `shmringsink` (a producer whose buffer pool hands upstream ring
//! reservations to write into).
//!
//! Build `libgstshmring.so` with `make gst-plugin` (it lands alone in
//! `target/gst-plugin/`) and point `GST_PLUGIN_PATH` there, or register the
//! elements in a process of your own with [`plugin_register_static`].

use std::sync::{Mutex, MutexGuard};

use gst::glib;

/// `ElementImpl::metadata` of one of our elements: its long name, class and
/// description, as `gst-inspect-1.0` shows them (author: shmring).
macro_rules! element_metadata {
    ($name:expr, $class:expr, $description:expr) => {
        fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
            static META: std::sync::LazyLock<gst::subclass::ElementMetadata> =
                std::sync::LazyLock::new(|| {
                    gst::subclass::ElementMetadata::new($name, $class, $description, "shmring")
                });
            Some(&*META)
        }
    };
}

mod media;
mod reader;
mod ring;
pub mod ringdemux;
pub mod ringsink;
pub mod ringsrc;

/// The mutex's value, even if a thread panicked while holding it (the elements'
/// state stays consistent at every unlock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    ringsrc::register(plugin)?;
    ringdemux::register(plugin)?;
    ringsink::register(plugin)?;
    Ok(())
}

// The licence: GStreamer loads only plugins whose licence is one of the names it
// knows (LGPL, GPL, QPL, GPL/QPL, MPL, BSD, MIT/X11, Proprietary); the crate is MIT OR
// Apache-2.0 (LICENSE-MIT, LICENSE-APACHE), and "MIT/X11" is GStreamer's name for the
// first. The origin is the workspace's `repository` (see build.rs).
gst::plugin_define!(
    shmring,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    concat!(env!("CARGO_PKG_VERSION"), "-", env!("COMMIT_ID")),
    "MIT/X11",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("PLUGIN_ORIGIN"),
    env!("BUILD_REL_DATE")
);
