//! The elements as GStreamer's own tests look at elements: with gstreamer-check's
//! `Harness` where an element has static pads (the source and the sink), in
//! pipelines where it has not (`shmringdemux`'s sometimes pads): state cycling,
//! live preroll, LATENCY, ALLOCATION, either start order, EOS across the ring, a
//! consumer that crashes and restarts, a producer that disappears, A/V from one
//! ring, the frame rate, two producers on one stream id, and a look-ahead encoder.

mod common;

use std::time::Duration;

use common::*;
use gst::prelude::*;
use gst_check::Harness;
use shmring::media::{self, kind, Format, MediaHeader, MediaRecord, SEQUENCE_AUTO};
use shmring::{Address, Config, FullPolicy, Meta};

const LIMIT: Duration = Duration::from_secs(120);

/// A video record (I420 `w`x`h`, `fps` nominal, 0: variable) captured at `ts`.
fn video_record(w: u32, h: u32, fps: u32, fill: u8) -> Vec<u8> {
    let hd = MediaHeader::video(Format::I420, w, h, 0, SEQUENCE_AUTO)
        .unwrap()
        .with_frame_rate(fps, 1)
        .unwrap();
    let mut b = vec![fill; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

/// An audio record: 10 ms of 48 kHz stereo.
fn audio_record() -> Vec<u8> {
    let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, SEQUENCE_AUTO).unwrap();
    let mut b = vec![0u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

/// Waits (bounded by LIMIT) until `done`.
fn until(what: &str, done: impl Fn() -> bool) {
    wait_until(what, LIMIT, done);
}

/// A harness around one source with `props`, playing.
fn src_harness(props: &str) -> Harness {
    init();
    let mut h = Harness::new_parse(&format!("shmringsrc {props}"));
    h.play();
    h
}

/// A harness around one sink with `props`, its upstream caps `caps`.
fn sink_harness(props: &str, caps: &str) -> Harness {
    init();
    let mut h = Harness::new_parse(&format!("shmringsink {props}"));
    h.set_src_caps_str(caps);
    h.play();
    h
}

const I420: &str = "video/x-raw,format=I420,width=64,height=48,framerate=25/1";
const S16: &str = "audio/x-raw,format=S16LE,rate=48000,channels=2,layout=interleaved";

fn timed(size: usize, i: u64, frame: gst::ClockTime) -> gst::Buffer {
    let mut b = gst::Buffer::with_size(size).unwrap();
    {
        let b = b.get_mut().unwrap();
        b.set_pts(frame * i);
        b.set_duration(frame);
    }
    b
}

#[test]
fn state_cycling_leaves_no_ring_and_no_error() {
    init();
    for desc in [
        "shmringsrc name=e ring={} create=true ! fakesink",
        "shmringdemux name=e ring={} create=true",
    ] {
        let ring = RingName::new("gst", "cycle");
        let p = Pipeline::launch(&desc.replace("{}", &ring.0));
        for _ in 0..3 {
            for s in [
                gst::State::Ready,
                gst::State::Paused,
                gst::State::Playing,
                gst::State::Paused,
                gst::State::Ready,
                gst::State::Null,
            ] {
                p.0.set_state(s)
                    .unwrap_or_else(|e| panic!("{desc}: {s:?}: {e}"));
                if s == gst::State::Paused || s == gst::State::Playing {
                    assert!(ring.exists(), "{desc}: the ring exists from PAUSED on");
                }
            }
            assert!(!ring.exists(), "{desc}: the ring is removed at NULL");
        }
        assert!(p.error().is_none(), "{desc}: {:?}", p.error());
    }
    // The sink cycles too, with or without its ring.
    let ring = RingName::new("gst", "cycle-sink");
    let p = Pipeline::launch(&format!(
        "videotestsrc ! {I420} ! shmringsink ring={}",
        ring.0
    ));
    for _ in 0..3 {
        for s in [gst::State::Paused, gst::State::Playing, gst::State::Null] {
            p.0.set_state(s).unwrap();
        }
    }
}

#[test]
fn sources_are_live_and_do_not_preroll() {
    init();
    for desc in [
        "shmringsrc ring={} create=true ! fakesink",
        "shmringdemux ring={} create=true",
    ] {
        let ring = RingName::new("gst", "preroll");
        let p = Pipeline::launch(&desc.replace("{}", &ring.0));
        assert_eq!(
            p.0.set_state(gst::State::Paused),
            Ok(gst::StateChangeSuccess::NoPreroll),
            "{desc}"
        );
        p.0.set_state(gst::State::Playing).unwrap();
        assert_eq!(
            p.0.set_state(gst::State::Paused),
            Ok(gst::StateChangeSuccess::NoPreroll),
            "{desc}"
        );
    }
}

#[test]
fn latency_is_live_with_a_frame_and_what_the_ring_holds() {
    let ring = RingName::new("gst", "latency");
    let mut h = src_harness(&format!("ring={} create=true", ring.0));
    let seg = Address::named(&ring.0).open().unwrap();
    let mut p = seg.producer().unwrap();
    for _ in 0..3 {
        p.send(&video_record(64, 48, 25, 1), Meta::new(0, kind::VIDEO))
            .unwrap();
        h.pull().expect("a buffer");
    }
    let mut q = gst::query::Latency::new();
    assert!(h
        .element()
        .unwrap()
        .static_pad("src")
        .unwrap()
        .query(&mut q));
    let (live, min, max) = q.result();
    assert!(live);
    // At least one frame at 25 fps; at most that plus what the ring holds.
    assert!(min >= gst::ClockTime::from_mseconds(40), "min {min}");
    let max = max.expect("the ring bounds it");
    assert!(max > min, "max {max} min {min}");
    assert_eq!(h.query_latency(), Some(min));
}

#[test]
fn allocation_offers_the_ring_pool_for_video_and_no_video_meta_for_audio() {
    let ring = RingName::new("gst", "alloc");
    let owner = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! fakesink",
        ring.0
    ));
    owner.play();
    for (caps, video) in [(I420, true), (S16, false)] {
        let h = sink_harness(&format!("ring={}", ring.0), caps);
        let caps: gst::Caps = caps.parse().unwrap();
        let mut q = gst::query::Allocation::new(Some(&caps), true);
        let srcpad = h.srcpad().unwrap();
        assert!(srcpad.peer_query(&mut q));
        let has_meta = q
            .allocation_metas()
            .any(|(api, _)| api == gst_video::VideoMeta::meta_api());
        assert_eq!(has_meta, video, "{caps}: GstVideoMeta offered");
        let pools: Vec<_> = q.allocation_pools().collect();
        assert_eq!(!pools.is_empty(), video, "{caps}: a pool of ring buffers");
        if let Some((Some(pool), size, _, max)) = pools.first() {
            assert!(*size >= 64 * 48 * 3 / 2);
            // As many buffers as half the ring holds (capped): queue ! sink fits.
            assert!(*max >= 2, "max {max}");
            assert!(pool.is::<gst::BufferPool>());
        }
    }
}

#[test]
fn queue_before_the_sink_still_writes_every_frame_in_place() {
    let ring = RingName::new("gst", "queue");
    let owner = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! fakesink sync=false",
        ring.0
    ));
    owner.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=30 ! video/x-raw,format=I420,width=640,height=360 ! queue ! shmringsink name=sink ring={}",
        ring.0
    ));
    s.play();
    s.wait_eos(LIMIT).expect("the sink pipeline ends");
    assert_eq!(s.u64("sink", "in-place"), 30);
    assert_eq!(s.u64("sink", "copies"), 0);
}

#[test]
fn the_sink_starts_before_its_consumer_either_way() {
    // Dropping (the default): buffers before the ring exists are dropped at once
    // and said once; once the consumer is there, they arrive.
    let ring = RingName::new("gst", "order");
    let s = Pipeline::launch(&format!(
        "videotestsrc is-live=true num-buffers=200 ! {I420} ! shmringsink name=sink ring={}",
        ring.0
    ));
    s.play();
    until("the sink drops what comes before the ring", || {
        s.u64("sink", "dropped") > 0
    });
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let got = pull(&p.appsink("out"), 5, LIMIT);
    assert_eq!(got.len(), 5);
    let warnings = s.messages(gst::MessageType::Warning);
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(warnings[0].contains("does not exist yet"), "{warnings:?}");
    s.wait_eos(LIMIT).unwrap();
    drop(p);
    // Waiting: a non-live producer started first loses nothing.
    let ring = RingName::new("gst", "order-wait");
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=20 ! {I420} ! shmringsink name=sink wait-for-consumer=true ring={}",
        ring.0
    ));
    s.play();
    std::thread::sleep(Duration::from_millis(300));
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    assert_eq!(pull(&p.appsink("out"), 20, LIMIT).len(), 20);
    s.wait_eos(LIMIT).unwrap();
    assert_eq!(s.u64("sink", "dropped"), 0);
}

#[test]
fn without_a_consumer_the_sink_drops_at_once_instead_of_waiting_for_room() {
    let ring = RingName::new("gst", "noconsumer");
    // A ring whose consumer is gone (a crash): created, then its consumer dropped.
    let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    drop(seg.consumer().unwrap());
    // 1 MiB: a few 640x360 frames fill it; with a consumer the sink would then wait
    // up to its timeout per buffer.
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=60 ! video/x-raw,format=I420,width=640,height=360 ! shmringsink name=sink ring={}",
        ring.0
    ));
    s.play();
    s.wait_eos(LIMIT).expect("the sink pipeline ends");
    assert_eq!(s.u64("sink", "dropped"), 60);
    // Nobody waited for space: dropped at once.
    assert_eq!(seg.stats().producer_waits, 0);
    let warnings = s.messages(gst::MessageType::Warning);
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(warnings[0].contains("has no consumer"), "{warnings:?}");
}

#[test]
fn eos_travels_across_the_ring_as_an_end_of_stream_record() {
    let ring = RingName::new("gst", "eos");
    let seg = Address::create(&ring.0, Config::default()).open().unwrap();
    let consumer = seg.consumer().unwrap();
    let mut h = sink_harness(&format!("ring={}", ring.0), I420);
    let frame = gst::ClockTime::from_mseconds(40);
    for i in 0..3 {
        h.push(timed(64 * 48 * 3 / 2, i, frame)).unwrap();
    }
    assert!(h.push_event(gst::event::Eos::new()));
    let mut got = vec![];
    while let Some(f) = consumer.next_timeout(Some(Duration::from_secs(5))).unwrap() {
        got.push(match media::read(f.kind(), f.payload()).unwrap() {
            MediaRecord::Frame(hd) => (hd.sequence, false, (hd.fps_num, hd.fps_den)),
            MediaRecord::End(e) => (e.sequence, true, (0, 0)),
        });
        if got.last().unwrap().1 {
            break;
        }
    }
    assert_eq!(
        got,
        [
            (0, false, (25, 1)),
            (1, false, (25, 1)),
            (2, false, (25, 1)),
            (3, true, (0, 0))
        ]
    );
    // And on the other side: the source ends its stream there.
    let ring = RingName::new("gst", "eos2");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=5 ! {I420} ! shmringsink ring={}",
        ring.0
    ));
    s.play();
    s.wait_eos(LIMIT).unwrap();
    // (appsink posts its EOS once its buffers are taken.)
    assert_eq!(pull(&p.appsink("out"), 5, LIMIT).len(), 5);
    p.wait_eos(LIMIT)
        .expect("EOS from the producer's end of stream");
}

#[test]
fn eos_after_counts_from_the_last_producer_not_from_the_start() {
    let ring = RingName::new("gst", "eosafter");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true eos-after=300 ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    // Longer than eos-after before the first producer comes: still waiting.
    std::thread::sleep(Duration::from_millis(800));
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    for _ in 0..3 {
        prod.send(&video_record(64, 48, 25, 3), Meta::new(0, kind::VIDEO))
            .unwrap();
    }
    drop(prod);
    assert_eq!(pull(&p.appsink("out"), 3, LIMIT).len(), 3);
    p.wait_eos(LIMIT).expect("EOS once the producer is gone");
}

#[test]
fn caps_carry_the_frame_rate_and_a_variable_one_fixates_to_downstream() {
    let ring = RingName::new("gst", "rate");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! video/x-raw,framerate=30/1 ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    // Variable rate (0): downstream asks 30/1 and gets it.
    prod.send(&video_record(64, 48, 0, 1), Meta::new(0, kind::VIDEO))
        .unwrap();
    let got = pull(&p.appsink("out"), 1, LIMIT);
    assert!(
        got[0].caps.contains("framerate=(fraction)30/1"),
        "{}",
        got[0].caps
    );
    drop(p);
    // A nominal rate is in the caps.
    let ring = RingName::new("gst", "rate2");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    prod.send(&video_record(64, 48, 15, 1), Meta::new(0, kind::VIDEO))
        .unwrap();
    let got = pull(&p.appsink("out"), 1, LIMIT);
    assert!(
        got[0].caps.contains("framerate=(fraction)15/1"),
        "{}",
        got[0].caps
    );
}

#[test]
fn a_video_only_pipeline_skips_the_audio_of_its_ring() {
    let ring = RingName::new("gst", "videoonly");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! videoconvert ! appsink name=out sync=false caps=video/x-raw",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    for _ in 0..5 {
        prod.send(&audio_record(), Meta::new(0, kind::AUDIO))
            .unwrap();
        prod.send(&video_record(64, 48, 25, 9), Meta::new(0, kind::VIDEO))
            .unwrap();
    }
    assert_eq!(pull(&p.appsink("out"), 5, LIMIT).len(), 5);
    assert!(p.error().is_none(), "{:?}", p.error());
    assert_eq!(p.u64("src", "skipped"), 5);
}

#[test]
fn two_producers_of_one_stream_id_are_warned_about() {
    let ring = RingName::new("gst", "twoprod");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let (mut a, mut b) = (seg.producer().unwrap(), seg.producer().unwrap());
    for _ in 0..4 {
        for prod in [&mut a, &mut b] {
            prod.send(&video_record(64, 48, 25, 1), Meta::new(0, kind::VIDEO))
                .unwrap();
        }
    }
    pull(&p.appsink("out"), 8, LIMIT);
    let warnings = p.messages(gst::MessageType::Warning);
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(
        warnings[0].contains("two producers write stream 0"),
        "{warnings:?}"
    );
}

#[test]
fn an_unsupported_format_is_an_error_posted_once() {
    let ring = RingName::new("gst", "once");
    let _owner = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! fakesink",
        ring.0
    ));
    _owner.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=3 ! video/x-raw,format=YUY2,width=64,height=64 ! shmringsink ring={}",
        ring.0
    ));
    let _ = s.0.set_state(gst::State::Playing);
    let _ = s.wait_eos(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let errors = s.messages(gst::MessageType::Error);
    let named: Vec<_> = errors.iter().filter(|e| e.contains("YUY2")).collect();
    assert_eq!(named.len(), 1, "{errors:?}");
}

#[test]
fn a_consumer_that_crashes_is_replaced_and_the_producer_reconnects() {
    let ring = RingName::new("gst", "crash");
    // The consumer in a child process, killed.
    let child = ChildPipeline::spawn(&format!(
        "shmringsrc ring={} create=true ! fakesink",
        ring.0
    ));
    until("the child created its ring", || ring.exists());
    let s = Pipeline::launch(&format!(
        "videotestsrc is-live=true ! {I420} ! shmringsink name=sink ring={}",
        ring.0
    ));
    s.play();
    until("the producer writes", || s.u64("sink", "committed") > 3);
    child.kill();
    assert!(ring.exists(), "the crash leaves the ring");
    // create=true replaces the stale ring; the producer finds the new one.
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    assert!(p.error().is_none(), "{:?}", p.error());
    assert_eq!(pull(&p.appsink("out"), 5, LIMIT).len(), 5);
    assert!(s.error().is_none(), "{:?}", s.error());
}

#[test]
fn a_restarted_consumer_keeps_the_backlogs_capture_spacing() {
    let ring = RingName::new("gst", "backlog");
    // A ring with a backlog: 5 frames 40 ms apart, captured a while ago, and no
    // consumer (the one that read it crashed).
    let seg = Address::create(&ring.0, Config::default()).open().unwrap();
    let old = seg.consumer().unwrap();
    let mut prod = seg.producer().unwrap();
    let t0 = shmring::now_ns();
    for i in 0..5u64 {
        prod.send(
            &video_record(64, 48, 25, i as u8),
            Meta::new(0, kind::VIDEO).with_timestamp(t0 + i * 40_000_000),
        )
        .unwrap();
    }
    drop(old);
    std::thread::sleep(Duration::from_millis(500));
    // A consumer restarted on the ring as it is.
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let got = pull(&p.appsink("out"), 5, LIMIT);
    let pts: Vec<u64> = got.iter().map(|g| g.pts.unwrap().nseconds()).collect();
    for w in pts.windows(2) {
        let gap = w[1] as i64 - w[0] as i64;
        assert!((gap - 40_000_000).abs() < 1_000_000, "PTS {pts:?}");
    }
}

#[test]
fn one_demuxer_serves_every_participants_video_and_audio() {
    let ring = RingName::new("gst", "demux");
    let p = Pipeline::launch(&format!(
        "shmringdemux name=d ring={r} create=true \
         d.video_0 ! appsink name=v0 sync=false d.audio_0 ! appsink name=a0 sync=false \
         d.video_1 ! appsink name=v1 sync=false d.audio_1 ! appsink name=a1 sync=false",
        r = ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    for i in 0..10u8 {
        for s in 0..2 {
            prod.send(&video_record(64, 48, 25, i), Meta::new(s, kind::VIDEO))
                .unwrap();
            prod.send(&audio_record(), Meta::new(s, kind::AUDIO))
                .unwrap();
        }
    }
    for s in 0..2 {
        prod.end_stream(s, kind::VIDEO).unwrap();
        prod.end_stream(s, kind::AUDIO).unwrap();
    }
    for name in ["v0", "a0", "v1", "a1"] {
        let got = pull(&p.appsink(name), 10, LIMIT);
        assert_eq!(got.len(), 10, "{name}");
        let want = if name.starts_with('v') {
            "video/x-raw"
        } else {
            "audio/x-raw"
        };
        assert!(got.iter().all(|g| g.caps.starts_with(want)), "{name}");
    }
    // Every pad ended with its producer: the pipeline ends.
    p.wait_eos(LIMIT).expect("EOS once every stream ended");
}

#[test]
fn a_look_ahead_encoder_gets_every_frame_and_the_copy_is_said() {
    let ring = RingName::new("gst", "lookahead");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.mkv");
    // The blocker: x264enc with its defaults (a look-ahead of about 50 frames)
    // behind a 16 MiB ring of 640x360 frames (48 of them).
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! queue ! x264enc ! h264parse ! matroskamux ! filesink location={}",
        ring.0,
        file.display()
    ));
    p.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=90 ! video/x-raw,format=I420,width=640,height=360,framerate=30/1 ! shmringsink ring={}",
        ring.0
    ));
    s.play();
    s.wait_eos(LIMIT).expect("the producer never stalls");
    p.wait_eos(LIMIT).expect("the recording ends");
    let warnings = p.messages(gst::MessageType::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("copying frames")),
        "the copy is said: {warnings:?}"
    );
    assert!(p.u64("src", "copies") > 0);
    drop(p);
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=nb_read_frames,r_frame_rate",
            "-of",
            "csv=p=0",
        ])
        .arg(&file)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    assert_eq!(String::from_utf8_lossy(&probe.stdout).trim(), "30/1,90");
}

#[test]
fn the_ring_property_takes_a_ring_address() {
    // A ring created by its name, written into by its file's path and read by a
    // tap through shm:NAME: every binding's text, parsed by the core.
    let ring = RingName::new("gst", "address");
    let p = Pipeline::launch(&format!(
        "shmringsrc ring=shm:{} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    until("the source created its ring", || ring.exists());
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=5 ! {I420} ! shmringsink wait-for-consumer=true ring=/dev/shm/{}",
        ring.0
    ));
    s.play();
    assert_eq!(pull(&p.appsink("out"), 5, LIMIT).len(), 5);
    s.wait_eos(LIMIT).unwrap();
    // Bad text: the element's error names what is wrong.
    let bad = Pipeline::launch("shmringsrc ring=fd:3,x ! fakesink");
    let _ = bad.0.set_state(gst::State::Playing);
    let e = bad.wait_eos(LIMIT).expect_err("a bad address is an error");
    assert!(e.contains("\"x\" is not a descriptor number"), "{e}");
}

/// The guide's default encoder (x264enc keeps about 50 frames for its
/// look-ahead) behind a ring smaller than that look-ahead, across caps changes
/// in both directions and frame-rate changes, alone and through a tee into two
/// encoders: every frame is encoded and the producer never waits long enough to
/// drop one. (The source learned how long the encoder keeps frames for one size;
/// at a caps change the encoder gives every frame back at once and the frames
/// grow: it went back to frames in place, which the encoder kept until the ring
/// was full, and the producer stalled.)
#[test]
fn a_look_ahead_encoder_across_caps_changes_gets_every_frame() {
    init();
    // Small frames the encoder may keep in place, then frames so large that the
    // frames it keeps fill the ring many times over, and back, at two rates.
    let shapes = [
        (Format::I420, 160, 120, 30),
        (Format::I420, 1280, 720, 30),
        (Format::I420, 160, 120, 10),
        (Format::I420, 1280, 720, 10),
    ];
    const PER_SHAPE: usize = 40;
    for chain in [
        "queue ! x264enc",
        "tee name=t ! queue ! x264enc ! fakesink t. ! queue ! x264enc",
    ] {
        let ring = RingName::new("gst", "lookahead-caps");
        // The default ring: 23 frames of 1280x720, fewer than the encoder keeps.
        let mut h = Harness::new_parse(&format!(
            "shmringsrc name=src ring={} create=true ! {chain}",
            ring.0
        ));
        h.play();
        let seg = Address::named(&ring.0).open().unwrap();
        let mut prod = seg.producer().unwrap();
        // Longer than any wait for an encoder working: only a stall times out.
        prod.set_policy(FullPolicy::Block(Duration::from_secs(10)));
        let feeder = std::thread::spawn(move || {
            for (i, &shape) in shapes.iter().enumerate() {
                for n in 0..PER_SHAPE {
                    send_video(&mut prod, 0, shape, None, (i * PER_SHAPE + n) as u8, 0)
                        .unwrap_or_else(|e| panic!("{chain}: shape {i}, frame {n}: {e}"));
                }
            }
            prod.end_stream(0, kind::VIDEO).unwrap();
        });
        // Every frame encoded (the encoder gives its last ones at the producer's
        // end of stream), then EOS.
        for i in 0..shapes.len() * PER_SHAPE {
            h.pull()
                .unwrap_or_else(|e| panic!("{chain}: encoded frame {i}: {e}"));
        }
        feeder.join().expect("the producer never timed out");
        loop {
            let e = h.pull_event().expect("EOS after the last frame");
            if e.type_() == gst::EventType::Eos {
                break;
            }
        }
        assert!(
            h.try_pull().is_none(),
            "{chain}: one encoded buffer per frame"
        );
        assert_eq!(seg.stats().drops_full, 0, "{chain}: no record dropped");
    }
}
