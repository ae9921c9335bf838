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

/// The enclosing function's name alone (`render`, `buffer`), as GStreamer's debug
/// lines and messages show it: the Rust path of a trait method takes a hundred
/// characters or more.
pub(crate) fn short_name(full: &'static str) -> &'static str {
    let mut name = full;
    while let Some(outer) = name.strip_suffix("::{{closure}}") {
        name = outer;
    }
    name.rsplit("::").next().unwrap_or(name)
}

/// [`short_name`] of the function it is written in.
macro_rules! here {
    () => {
        $crate::short_name(gst::glib::function_name!())
    };
}

/// A debug line in category `$cat` at level `$level` (`Info`, `Debug`, ...) about
/// `$obj`, naming the function alone (see [`short_name`]).
macro_rules! log {
    ($cat:expr, $level:ident, $obj:expr, $($args:tt)*) => {{
        let cat: gst::DebugCategory = *$cat;
        if cat.above_threshold(gst::DebugLevel::$level) {
            let file = gst::glib::GStr::from_str_with_nul(concat!(file!(), "\0"))
                .expect("a file name has no NUL");
            cat.log(
                Some($obj),
                gst::DebugLevel::$level,
                file,
                here!(),
                line!(),
                format_args!($($args)*),
            );
        }
    }};
}

/// Posts an element message (`Error` or `Warning`) from element `$el`, with the
/// error `$err` and a formatted text, naming the function alone.
macro_rules! post {
    ($el:expr, $kind:ident, $err:expr, $($args:tt)*) => {{
        use gst::prelude::ElementExtManual;
        $el.message_full(
            gst::ElementMessageType::$kind,
            $err,
            Some(&format!($($args)*)),
            None,
            file!(),
            here!(),
            line!(),
        );
    }};
}

/// A `gst::ErrorMessage` (what `start` returns) with the error `$err` and a
/// formatted text, naming the function alone.
macro_rules! error_msg {
    ($err:expr, $($args:tt)*) => {
        gst::ErrorMessage::new(
            &$err,
            Some(&format!($($args)*)),
            None,
            file!(),
            here!(),
            line!(),
        )
    };
}

/// A `gst::LoggableError` in category `$cat`, naming the function alone.
macro_rules! loggable {
    ($cat:expr, $($args:tt)*) => {
        gst::LoggableError::new(
            *$cat,
            gst::glib::BoolError::new(format!($($args)*), file!(), here!(), line!()),
        )
    };
}

mod media;
mod notice;
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
