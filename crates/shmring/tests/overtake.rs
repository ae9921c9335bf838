//! Head-of-line isolation: a producer that holds a reservation (a capture thread
//! stuck on a lock, or a hostile one) must not stop the other streams when the
//! consumer allows overtaking; with the default, records stay in claim order.

use std::time::Duration;

use shmring::{Config, Consumer, ConsumerOptions, Meta, Segment};

const VIDEO: u32 = 1;
const AUDIO: u32 = 2;

fn ring(name: &str, overtake: Option<Duration>) -> (std::sync::Arc<Segment>, Consumer) {
    let seg = Segment::create_memfd(name, &Config::with_capacity(1 << 20)).unwrap();
    let opts = ConsumerOptions {
        overtake_after: overtake,
        liveness_interval: Duration::from_millis(5),
        ..Default::default()
    };
    let c = Consumer::with_options(seg.clone(), opts).unwrap();
    (seg, c)
}

#[test]
fn audio_flows_past_a_held_video_reservation() {
    let (seg, consumer) = ring("overtake-on", Some(Duration::from_millis(20)));
    let mut video = seg.producer().unwrap();
    let mut audio = seg.producer().unwrap();
    let video_slot = video.slot();
    let mut held = video.reserve(100_000).unwrap();
    held.payload().fill(0x11);
    for i in 0..10u8 {
        audio.send(&[i; 4096], Meta::new(AUDIO, 0)).unwrap();
    }
    // Delivered while the video reservation stays open.
    for i in 0..10u8 {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("audio delivered during the hold");
        assert_eq!((f.stream(), f.payload()[0]), (AUDIO, i));
    }
    // The held claim is reported: counted, with its slot and holder.
    let st = seg.stats();
    assert_eq!(st.stalled_claims, 1, "{st:?}");
    assert!(
        st.oldest_pending_age_ns > 0,
        "the open reservation is reported"
    );
    assert_eq!(
        (st.oldest_pending_slot, st.oldest_pending_pid),
        (video_slot, std::process::id())
    );
    let h = consumer.health();
    assert_eq!(h.stalled_claims, 1);
    assert_eq!(h.oldest_pending.map(|(slot, _)| slot), Some(video_slot));

    // The holder commits: its record comes out before its later ones.
    held.commit(Meta::new(VIDEO, 0)).unwrap();
    for i in 0..3u8 {
        video
            .send(&[i; 10], Meta::new(VIDEO, 0).with_flags(1))
            .unwrap();
    }
    let f = consumer
        .next_timeout(Some(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!((f.stream(), f.len(), f.meta().flags), (VIDEO, 100_000, 0));
    drop(f);
    for i in 0..3u8 {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .unwrap();
        assert_eq!((f.stream(), f.meta().flags, f.payload()[0]), (VIDEO, 1, i));
    }
    assert!(consumer.try_next().unwrap().is_none());
    assert_eq!(seg.stats().oldest_pending_age_ns, 0);
    // All space came back: the ring takes records as large as it did at first.
    for _ in 0..20 {
        audio.send(&[0; 60_000], Meta::new(AUDIO, 0)).unwrap();
        drop(consumer.try_next().unwrap().unwrap());
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "its 200 ms wait overshoots the claim timeout on Miri's clock (5 us a step)"
)]
fn without_overtaking_records_wait_in_claim_order() {
    let (seg, consumer) = ring("overtake-off", None);
    let mut video = seg.producer().unwrap();
    let mut audio = seg.producer().unwrap();
    let held = video.reserve(1000).unwrap();
    for i in 0..10u8 {
        audio.send(&[i; 4096], Meta::new(AUDIO, 0)).unwrap();
    }
    // Total order: nothing passes the open reservation.
    assert!(consumer
        .next_timeout(Some(Duration::from_millis(200)))
        .unwrap()
        .is_none());
    assert!(seg.stats().oldest_pending_age_ns > 0);
    held.commit(Meta::new(VIDEO, 0)).unwrap();
    let f = consumer
        .next_timeout(Some(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!(f.stream(), VIDEO);
    drop(f);
    for i in 0..10u8 {
        let f = consumer
            .next_timeout(Some(Duration::from_secs(10)))
            .unwrap()
            .unwrap();
        assert_eq!((f.stream(), f.payload()[0]), (AUDIO, i));
    }
    assert_eq!(seg.stats().stalled_claims, 0);
}

#[test]
fn an_overtaken_claim_aborted_or_abandoned_gives_its_space_back() {
    let (seg, consumer) = ring("overtake-abort", Some(Duration::from_millis(10)));
    let mut video = seg.producer().unwrap();
    let mut audio = seg.producer().unwrap();
    let held = video.reserve(200_000).unwrap();
    audio.send(b"a", Meta::new(AUDIO, 0)).unwrap();
    let f = consumer
        .next_timeout(Some(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!(f.payload(), b"a");
    drop(f);
    held.abort();
    // The aborted claim is stepped over; the ring can be filled again completely.
    for _ in 0..40 {
        audio.send(&[1; 100_000], Meta::new(AUDIO, 0)).unwrap();
        drop(
            consumer
                .next_timeout(Some(Duration::from_secs(10)))
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(seg.stats().oldest_pending_age_ns, 0);
    assert_eq!(consumer.outstanding(), 0);
}
