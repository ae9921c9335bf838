//! What rings the elements make by default, and what happens to a record too
//! large for a ring: an error on both sides, naming the capacity to set.

mod common;

use std::time::Duration;

use common::*;
use shmring::media::{Format, MediaHeader};
use shmring::Address;

const LIMIT: Duration = Duration::from_secs(60);
const RGBA_1080P: &str = "video/x-raw,format=RGBA,width=1920,height=1080,framerate=30/1";

/// A screen share (1920x1080 RGBA, 8.3 MB a frame) into a source created with
/// its defaults: the ring takes it, with room for two such frames wherever its
/// write cursor is, and so for every other supported format up to that size.
#[test]
fn the_default_ring_takes_frames_of_every_format_up_to_1080p_rgba() {
    init();
    for (desc, out) in [
        (
            "shmringsrc ring={} create=true ! appsink name=out sync=false",
            "out",
        ),
        (
            "shmringdemux ring={} create=true d.video_0 ! appsink name=v0 sync=false",
            "v0",
        ),
    ] {
        let ring = RingName::new("gst", "screen");
        let desc = desc
            .replace("{}", &ring.0)
            .replace("shmringdemux", "shmringdemux name=d");
        let p = Pipeline::launch(&desc);
        p.play();
        wait_until("the ring is created", LIMIT, || ring.exists());
        let seg = Address::named(&ring.0).open().unwrap();
        let geo = *seg.geometry();
        for f in [Format::I420, Format::Nv12, Format::Rgba] {
            let len = MediaHeader::video(f, 1920, 1080, 0, 0)
                .unwrap()
                .payload_len() as u64;
            assert!(
                len <= geo.max_record,
                "{desc}: {f:?}: {len} > {}",
                geo.max_record
            );
            // Two such frames held, and one more record's padding at the ring's end.
            assert!(
                3 * len <= geo.capacity,
                "{desc}: {f:?}: ring {}",
                geo.capacity
            );
        }
        let s = Pipeline::launch(&format!(
            "videotestsrc num-buffers=5 ! {RGBA_1080P} ! shmringsink name=sink ring={}",
            ring.0
        ));
        s.play();
        let got = pull(&p.appsink(out), 5, LIMIT);
        assert_eq!(got.len(), 5, "{desc}");
        assert!(got.iter().all(|g| g.size == 1920 * 1080 * 4), "{desc}");
        s.wait_eos(LIMIT).expect("the producer ends");
        assert_eq!(s.u64("sink", "dropped"), 0, "{desc}");
        assert!(s.error().is_none(), "{desc}: {:?}", s.error());
    }
}

/// A ring too small for the producer's frames (16 MiB takes records of 4 MiB):
/// the sink stops with an error naming the capacity to create the ring with, and
/// the consumer learns it too (a notice the sink leaves in the ring) and says
/// the same, instead of waiting for records that never come.
#[test]
fn a_record_too_large_for_the_ring_is_an_error_on_both_sides_naming_the_capacity() {
    init();
    for desc in [
        "shmringsrc ring={} create=true capacity=16777216 ! fakesink",
        "shmringdemux name=d ring={} create=true capacity=16777216 d.video_0 ! fakesink",
    ] {
        let ring = RingName::new("gst", "toolarge");
        let p = Pipeline::launch(&desc.replace("{}", &ring.0));
        p.play();
        wait_until("the ring is created", LIMIT, || ring.exists());
        let s = Pipeline::launch(&format!(
            "videotestsrc num-buffers=5 ! {RGBA_1080P} ! shmringsink ring={}",
            ring.0
        ));
        s.play();
        let e = s
            .wait_eos(LIMIT)
            .expect_err("the producer stops with an error");
        assert!(
            e.contains("8294528") && e.contains("capacity=33554432"),
            "{desc}: sink: {e}"
        );
        let e = p.wait_eos(LIMIT).expect_err("the consumer learns it");
        assert!(
            e.contains("8294528") && e.contains("capacity=33554432") && e.contains(&ring.0),
            "{desc}: consumer: {e}"
        );
    }
}
