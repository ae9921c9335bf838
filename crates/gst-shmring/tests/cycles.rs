//! State cycles in one process, back to back, with the other side running: a
//! `create=true` source cycled while a producer keeps writing, and a sink cycled
//! while its consumer keeps reading, 100 times each (gstreamer-check's Harness).

mod common;

use std::time::Duration;

use common::*;
use gst::prelude::*;
use gst_check::Harness;

const LIMIT: Duration = Duration::from_secs(60);
const CYCLES: usize = 100;

fn set(element: &gst::Element, state: gst::State, what: &str) {
    element
        .set_state(state)
        .unwrap_or_else(|e| panic!("{what}: {state:?}: {e}"));
}

/// Each cycle's source creates a new ring of the same name; the producer moves
/// to it. Its buffer pool must move too: the first ring's pool kept reserving
/// in a ring nobody read any more, which (full after a few cycles) made every
/// buffer wait the full-ring timeout: no frames from the fifth cycle on.
#[test]
fn a_create_true_source_restarted_100_times_gets_frames_in_place_every_time() {
    init();
    let ring = RingName::new("gst", "cycle-src");
    let producer = Pipeline::launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,format=I420,width=320,height=240,framerate=60/1 ! shmringsink name=sink ring={}",
        ring.0
    ));
    // 1 MiB: nine 320x240 frames fill a ring nobody reads.
    let mut h = Harness::new_parse(&format!(
        "shmringsrc ring={} create=true capacity=1048576",
        ring.0
    ));
    let src = h.element().expect("the harness's element");
    for cycle in 0..CYCLES {
        set(&src, gst::State::Playing, &format!("cycle {cycle}"));
        if cycle == 0 {
            producer.play();
        }
        let in_place = producer.u64("sink", "in-place");
        let mut frames = 0;
        // Frames, and frames the producer wrote in place into this cycle's ring.
        wait_until(
            &format!("cycle {cycle}: frames written in place into the new ring"),
            LIMIT,
            || {
                while h.try_pull().is_some() {
                    frames += 1;
                }
                frames >= 3 && producer.u64("sink", "in-place") > in_place
            },
        );
        set(&src, gst::State::Null, &format!("cycle {cycle}"));
        // Frames still queued in the harness hold the old ring: give them back.
        while h.try_pull().is_some() {}
    }
    assert!(producer.error().is_none(), "{:?}", producer.error());
}

/// A sink cycled while its consumer keeps reading: every cycle's frames arrive.
#[test]
fn a_sink_restarted_100_times_writes_every_time() {
    init();
    let ring = RingName::new("gst", "cycle-sink");
    let consumer = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    consumer.play();
    let caps = "video/x-raw,format=I420,width=64,height=48,framerate=30/1";
    let mut h = Harness::new_parse(&format!("shmringsink ring={}", ring.0));
    h.set_src_caps_str(caps);
    let sink = h.element().expect("the harness's element");
    let out = consumer.appsink("out");
    for cycle in 0..CYCLES {
        set(&sink, gst::State::Playing, &format!("cycle {cycle}"));
        for i in 0..3u64 {
            let mut b = gst::Buffer::with_size(64 * 48 * 3 / 2).unwrap();
            b.get_mut()
                .unwrap()
                .set_pts(gst::ClockTime::from_mseconds(33 * i));
            h.push(b)
                .unwrap_or_else(|e| panic!("cycle {cycle}: buffer {i}: {e}"));
        }
        let got = pull(&out, 3, LIMIT);
        assert_eq!(got.len(), 3, "cycle {cycle}");
        set(&sink, gst::State::Null, &format!("cycle {cycle}"));
    }
    assert!(consumer.error().is_none(), "{:?}", consumer.error());
}
