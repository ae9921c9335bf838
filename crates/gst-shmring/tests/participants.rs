//! Participants who leave and come back: a source over every stream that keeps
//! running (`keep-running`), and `shmringdemux` giving a participant back after
//! its end a pad again: new pads by default, the same pads with `keep-running`.

mod common;

use std::time::Duration;

use common::*;
use gst::prelude::*;
use shmring::media::{kind, Format};
use shmring::{Address, Segment};

const LIMIT: Duration = Duration::from_secs(60);
const SMALL: (Format, u32, u32, u32) = (Format::I420, 64, 48, 25);

/// Three frames of `stream`, then its end.
fn visit(seg: &std::sync::Arc<Segment>, stream: u32, fill: u8) {
    let mut p = seg.producer().unwrap();
    for _ in 0..3 {
        send_video(&mut p, stream, SMALL, None, fill, 0).unwrap();
    }
    p.end_stream(stream, kind::VIDEO).unwrap();
}

#[test]
fn a_source_over_every_stream_keeps_running_while_participants_come_and_go() {
    init();
    let ring = RingName::new("gst", "come-and-go");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true keep-running=true eos-after=300 ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let out = p.appsink("out");
    // A alone, then leaves: every stream output has ended, and the source goes on.
    visit(&seg, 0, 1);
    let a = pull(&out, 3, LIMIT);
    // B joins after A left; then A comes back.
    visit(&seg, 1, 2);
    visit(&seg, 0, 3);
    let rest = pull(&out, 6, LIMIT);
    assert_eq!(a.len() + rest.len(), 9, "every participant's frames");
    let discont: Vec<bool> = rest.iter().map(|g| g.discont).collect();
    // B's first frame starts a stream; A's first frame back starts it again.
    assert_eq!(discont, [false, false, false, true, false, false]);
    // Nobody left, nothing for eos-after: the source ends.
    p.wait_eos(LIMIT).expect("EOS by eos-after");
}

/// Pads the demuxer added, as they come: (name, appsink) linked by the handler.
fn link_new_pads(p: &Pipeline, demux: &str) {
    let bin = p.0.clone().downcast::<gst::Bin>().unwrap();
    p.by_name(demux).connect_pad_added(move |_, pad| {
        let name = pad.name().to_string();
        if bin.by_name(&name).is_some() || pad.is_linked() {
            return;
        }
        let sink = gst::ElementFactory::make("appsink")
            .name(&name)
            .property("sync", false)
            .build()
            .unwrap();
        bin.add(&sink).unwrap();
        sink.sync_state_with_parent().unwrap();
        pad.link(&sink.static_pad("sink").unwrap()).unwrap();
    });
}

#[test]
fn a_participant_back_after_its_end_gets_new_pads_from_the_demuxer() {
    init();
    let ring = RingName::new("gst", "rejoin");
    let p = Pipeline::launch(&format!(
        "shmringdemux name=d ring={} create=true d.video_0 ! appsink name=first sync=false",
        ring.0
    ));
    link_new_pads(&p, "d");
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    visit(&seg, 0, 1);
    let first = pull(&p.appsink("first"), 3, LIMIT);
    assert_eq!(first.len(), 3);
    assert!(
        pull(&p.appsink("first"), 1, LIMIT).is_empty(),
        "EOS on video_0"
    );
    visit(&seg, 0, 2);
    wait_until("pad video_0_2", LIMIT, || {
        p.0.downcast_ref::<gst::Bin>()
            .unwrap()
            .by_name("video_0_2")
            .is_some()
    });
    let back = pull(&p.appsink("video_0_2"), 3, LIMIT);
    assert_eq!(
        back.len(),
        3,
        "the participant back: its frames on its new pad"
    );
    assert!(back[0].discont);
    assert!(back.iter().all(|g| g.caps.starts_with("video/x-raw")));
    assert!(p.error().is_none(), "{:?}", p.error());
}

#[test]
fn with_keep_running_a_participant_back_continues_on_its_pads() {
    init();
    let ring = RingName::new("gst", "rejoin-keep");
    let p = Pipeline::launch(&format!(
        "shmringdemux name=d ring={} create=true keep-running=true d.video_0 ! appsink name=v0 sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let v0 = p.appsink("v0");
    visit(&seg, 0, 1);
    visit(&seg, 0, 2);
    let got = pull(&v0, 6, LIMIT);
    assert_eq!(got.len(), 6, "both visits on video_0");
    let discont: Vec<bool> = got.iter().map(|g| g.discont).collect();
    assert_eq!(discont, [true, false, false, true, false, false]);
    assert!(!v0.is_eos(), "no EOS while the meeting goes on");
    // The application ends the recording (what gst-launch-1.0 -e does).
    assert!(p.0.send_event(gst::event::Eos::new()));
    p.wait_eos(LIMIT).expect("EOS on every pad");
}

#[test]
fn a_pad_nobody_links_is_said_not_dropped_silently() {
    init();
    let ring = RingName::new("gst", "unlinked");
    let p = Pipeline::launch(&format!(
        "shmringdemux name=d ring={} create=true d.video_0 ! appsink name=v0 sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    visit(&seg, 0, 1);
    assert_eq!(pull(&p.appsink("v0"), 3, LIMIT).len(), 3);
    // Back after its end: video_0_2, which this launch line does not link.
    visit(&seg, 0, 2);
    wait_until("the demuxer skips the new pad's frames", LIMIT, || {
        p.u64("d", "skipped") >= 3
    });
    let warnings = p.messages(gst::MessageType::Warning);
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(
        warnings[0].contains("video_0_2") && warnings[0].contains("back after its end"),
        "{warnings:?}"
    );
}
