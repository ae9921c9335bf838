//! What `gst-inspect-1.0` and the debug log show of the elements: properties
//! whose ranges are the core's limits, every property (inherited ones included)
//! documented in the guide (docs/GUIDE.md), debug lines and messages that name a function, not
//! a Rust path, and ring names judged by the core's address parser.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use gst::prelude::*;
use shmring::layout::{MAX_CAPACITY, MIN_CAPACITY};

const LIMIT: Duration = Duration::from_secs(60);
const ELEMENTS: [&str; 3] = ["shmringsrc", "shmringdemux", "shmringsink"];

#[test]
fn capacity_says_the_cores_limits_and_the_default_ring() {
    init();
    for name in ["shmringsrc", "shmringdemux"] {
        let el = gst::ElementFactory::make(name).build().unwrap();
        let spec = el
            .find_property("capacity")
            .unwrap()
            .downcast::<gst::glib::ParamSpecUInt64>()
            .unwrap();
        assert_eq!(
            (spec.minimum(), spec.maximum()),
            (MIN_CAPACITY, MAX_CAPACITY),
            "{name}"
        );
        // 32 MiB: the smallest ring whose records may be a 1920x1080 RGBA frame.
        assert_eq!(spec.default_value(), 32 << 20, "{name}");
        assert_eq!(el.property::<u64>("capacity"), 32 << 20, "{name}");
    }
}

/// The guide's property tables (docs/GUIDE.md): for each element, the property names of the
/// rows that apply to it (`all`, `sources`, or rows naming it).
fn documented() -> Vec<(String, BTreeSet<String>)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/GUIDE.md"))
            .expect("docs/GUIDE.md");
    ELEMENTS
        .iter()
        .map(|&el| {
            let mut names = BTreeSet::new();
            for line in readme.lines().filter(|l| l.starts_with("| ")) {
                let cells: Vec<&str> = line.split(" | ").collect();
                if cells.len() < 3 {
                    continue;
                }
                let who = cells[0].trim_start_matches("| ");
                let applies = who == "all"
                    || (who == "sources" && el != "shmringsink")
                    || who.contains(&format!("`{el}`"));
                if applies {
                    names.extend(cells[1].split('`').skip(1).step_by(2).map(str::to_string));
                }
            }
            (el.to_string(), names)
        })
        .collect()
}

#[test]
fn every_property_gst_inspect_lists_is_documented() {
    init();
    for (el, names) in documented() {
        let e = gst::ElementFactory::make(&el).build().unwrap();
        let listed: BTreeSet<String> = e
            .list_properties()
            .iter()
            .map(|p| p.name().to_string())
            // Every GStreamer object's.
            .filter(|n| n != "name" && n != "parent")
            .collect();
        let missing: Vec<_> = listed.difference(&names).collect();
        assert!(
            missing.is_empty(),
            "{el}: not in docs/GUIDE.md: {missing:?}"
        );
    }
}

#[test]
fn debug_lines_and_messages_name_the_function_alone() {
    init();
    let functions = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = functions.clone();
    let log = gst::log::add_log_function(move |cat, _, _, function, _, _, _| {
        if cat.name().starts_with("shmring") {
            seen.lock().unwrap().insert(function.to_string());
        }
    });
    gst::log::remove_default_log_function();
    gst::log::set_threshold_for_name("shmring*", gst::DebugLevel::Debug);
    let ring = RingName::new("gst", "debug");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=3 ! video/x-raw,format=I420,width=64,height=48 ! shmringsink ring={}",
        ring.0
    ));
    s.play();
    assert_eq!(pull(&p.appsink("out"), 3, LIMIT).len(), 3);
    s.wait_eos(LIMIT).unwrap();
    p.wait_eos(LIMIT).unwrap();
    // An element error: its debug text names the function too.
    let bad = Pipeline::launch("shmringsrc ring=fd:3,x ! fakesink");
    let _ = bad.0.set_state(gst::State::Playing);
    let e = bad.wait_eos(LIMIT).expect_err("a bad address is an error");
    gst::log::remove_log_function(log);
    gst::log::set_threshold_for_name("shmring*", gst::DebugLevel::None);
    let functions = functions.lock().unwrap();
    assert!(!functions.is_empty());
    for f in functions.iter() {
        assert!(
            !f.contains("::") && f.len() < 40,
            "debug line's function: {f}"
        );
    }
    let debug = e.split(" (Some(").nth(1).expect("debug text");
    assert!(!debug.contains("::"), "{e}");
    assert!(debug.contains("ring.rs"), "{e}");
}

/// What a valid ring name is belongs to the core's address parser: the elements
/// report its verdict, naming the ring.
#[test]
fn ring_names_are_judged_by_the_cores_address_parser() {
    init();
    for desc in [
        "shmringsrc ring=\" cam\" create=true ! fakesink",
        "videotestsrc ! shmringsink ring=\" cam\"",
    ] {
        let p = Pipeline::launch(desc);
        let _ = p.0.set_state(gst::State::Playing);
        let e = p.wait_eos(LIMIT).expect_err("refused");
        let core = " cam".parse::<shmring::Address>().unwrap_err().to_string();
        assert!(e.contains(&core), "{desc}: {e}");
    }
}
