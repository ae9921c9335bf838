//! Drops said as GStreamer users expect: a sink facing a full ring posts a QoS
//! message per buffer dropped (with the counts), sends QoS events upstream and
//! warns at most once a second; the ring counts each drop once (`shmring stat`'s
//! drops_full); a source finding records missing from a stream counts them and
//! says so the same way; a source's `max-age` skips old records and counts them.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use gst::prelude::*;
use shmring::media::Format;
use shmring::{Address, Config};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_sink_facing_a_full_ring_says_each_drop_and_the_ring_counts_it_once() {
    init();
    const N: u64 = 40;
    for policy in ["full-policy=drop", "full-policy=block timeout=50"] {
        let ring = RingName::new("gst", "full");
        // A consumer that reads nothing: 1 MiB takes a few 320x240 frames.
        let seg = Address::create(&ring.0, Config::with_capacity(1 << 20))
            .open()
            .unwrap();
        let _consumer = seg.consumer().unwrap();
        let s = Pipeline::launch(&format!(
            "videotestsrc num-buffers={N} ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! identity name=up ! shmringsink name=sink ring={} sync=false {policy}",
            ring.0
        ));
        // QoS events reaching upstream that say how long a dropped buffer waited.
        let late = Arc::new(AtomicU64::new(0));
        let seen = late.clone();
        s.by_name("up").static_pad("src").unwrap().add_probe(
            gst::PadProbeType::EVENT_UPSTREAM,
            move |_, info| {
                if let Some(gst::PadProbeData::Event(e)) = &info.data {
                    if let gst::EventView::Qos(q) = e.view() {
                        let (kind, _, diff, _) = q.get();
                        if kind == gst::QOSType::Overflow && diff == 50_000_000 {
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                gst::PadProbeReturn::Ok
            },
        );
        s.play();
        s.wait_eos(LIMIT).expect("the producer ends");
        let (committed, dropped) = (s.u64("sink", "committed"), s.u64("sink", "dropped"));
        assert_eq!(committed + dropped, N, "{policy}");
        assert!(
            dropped >= N / 2,
            "{policy}: {committed} committed, {dropped} dropped"
        );
        // The ring counted each drop once (the producer waited once for it).
        assert_eq!(
            seg.stats().drops_full,
            dropped,
            "{policy}: shmring stat's drops_full"
        );
        let qos = s.qos("sink");
        assert_eq!(
            qos.len() as u64,
            dropped,
            "{policy}: a QoS message per drop"
        );
        assert_eq!(qos.last(), Some(&(committed, dropped)), "{policy}");
        let waited = if policy.contains("block") { dropped } else { 0 };
        assert_eq!(
            late.load(Ordering::Relaxed),
            waited,
            "{policy}: QoS events upstream"
        );
        let warnings = s.messages(gst::MessageType::Warning);
        assert!(
            !warnings.is_empty() && (warnings.len() as u64) < dropped,
            "{policy}: rate-limited warnings: {warnings:?}"
        );
        assert!(warnings[0].contains("dropped"), "{warnings:?}");
    }
}

#[test]
fn records_missing_from_a_stream_are_counted_and_said_by_the_source() {
    init();
    let ring = RingName::new("gst", "missing");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    // Numbers 0, 1, 2, then 6, 7, then 10: 3 and 2 records the producer dropped.
    for seq in [0u64, 1, 2, 6, 7, 10] {
        send_video(&mut prod, 0, (Format::I420, 64, 48, 25), Some(seq), 1, 0).unwrap();
    }
    let got = pull(&p.appsink("out"), 6, LIMIT);
    let discont: Vec<bool> = got.iter().map(|g| g.discont).collect();
    assert_eq!(discont, [true, false, false, true, false, true]);
    assert_eq!(p.u64("src", "missing"), 5);
    let qos = p.qos("src");
    assert_eq!(qos.len(), 2, "a QoS message per gap: {qos:?}");
    assert_eq!(qos.last().unwrap().1, 5, "{qos:?}");
    let warnings = p.messages(gst::MessageType::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("missing from stream 0")),
        "{warnings:?}"
    );
}

#[test]
fn a_source_with_max_age_skips_records_older_than_it_and_counts_them() {
    init();
    let ring = RingName::new("gst", "max-age");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true max-age=1000 ! appsink name=out sync=false",
        ring.0
    ));
    p.play();
    let seg = Address::named(&ring.0).open().unwrap();
    let mut prod = seg.producer().unwrap();
    // Captured 5 s ago (64x48) or now (32x24), alternately.
    let old = shmring::now_ns() - 5_000_000_000;
    for i in 0..4u64 {
        let (shape, ts) = if i % 2 == 0 {
            ((Format::I420, 64, 48, 25), old)
        } else {
            ((Format::I420, 32, 24, 25), 0)
        };
        send_video(&mut prod, 0, shape, Some(i), 1, ts).unwrap();
    }
    let got = pull(&p.appsink("out"), 2, LIMIT);
    // An I420 frame of 32x24: 1,152 bytes.
    assert!(
        got.iter().all(|g| g.size == 32 * 24 * 3 / 2),
        "only the fresh frames: {:?}",
        got.iter().map(|g| g.size).collect::<Vec<_>>()
    );
    wait_until("the old frames counted", LIMIT, || {
        p.u64("src", "skipped") == 2
    });
    assert_eq!(seg.stats().records_filtered, 2);
}
