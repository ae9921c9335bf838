//! shmringsrc and shmringsink in real pipelines: in one process, and across
//! processes (the sink side runs in `gst-shmring-launch` children).

mod common;

use std::time::Duration;

use common::*;
use gst::prelude::*;
use gst_video::prelude::*;
use shmring::media::{kind, Format, MediaHeader};
use shmring::{Address, Config, Meta, Segment};

const LIMIT: Duration = Duration::from_secs(120);

fn video(pattern: &str, n: usize, format: &str, w: u32, h: u32) -> String {
    format!(
        "videotestsrc pattern={pattern} num-buffers={n} ! video/x-raw,format={format},width={w},height={h},framerate=30/1"
    )
}

fn src(ring: &RingName, extra: &str) -> Pipeline {
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true timestamp-mode=stream {extra} ! appsink name=out sync=false max-buffers=4",
        ring.0
    ));
    p.play();
    assert!(ring.exists(), "the source created the ring");
    p
}

fn assert_same(got: &[Got], want: &[Got]) {
    assert_eq!(got.len(), want.len(), "buffer count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.size, w.size, "buffer {i}: size");
        assert_eq!(g.sum, w.sum, "buffer {i}: bytes differ");
        assert_eq!(g.pts, w.pts, "buffer {i}: PTS");
    }
}

fn inside(addr: usize, maps: &[(usize, usize)]) -> bool {
    maps.iter().any(|&(a, b)| addr >= a && addr < b)
}

#[test]
fn two_processes_video_byte_for_byte_zero_copy_both_sides() {
    const N: usize = 30;
    let ring = RingName::new("gst", "video");
    let desc = video("ball", N, "I420", 1920, 1080);
    let want = reference(&desc, N);
    // A ring that lets the appsink's queue, its last sample and the frame being
    // checked stay in place (128 MiB: 20 1080p frames within max-held).
    let p = src(&ring, "eos-after=2000 capacity=134217728");
    let child = ChildPipeline::spawn(&format!("{desc} ! shmringsink ring={}", ring.0));
    let got = pull(&p.appsink("out"), N, LIMIT);
    let (ok, out, err) = child.finish(LIMIT);
    assert!(ok, "sink process failed: {err}");
    assert_same(&got, &want);
    for g in &got {
        assert!(g.caps.contains("format=(string)I420"), "{}", g.caps);
        assert!(g.caps.contains("width=(int)1920") && g.caps.contains("height=(int)1080"));
    }
    // The source's buffers are the ring's frames, in the ring's mapping.
    let maps = mapping_of(&ring.0);
    assert!(!maps.is_empty(), "the ring is mapped");
    for (i, g) in got.iter().enumerate() {
        assert!(
            inside(g.addr, &maps),
            "buffer {i} at {:#x} is not in the ring",
            g.addr
        );
    }
    assert_eq!(p.u64("src", "copies"), 0);
    // videotestsrc wrote every frame straight into the ring through the sink's pool.
    assert_eq!(counter(&out, "shmringsink0", "in-place"), N as u64);
    assert_eq!(counter(&out, "shmringsink0", "copies"), 0);
    // The producer left: the source ends the stream.
    p.wait_eos(LIMIT).expect("EOS after the producer left");
}

#[test]
fn two_processes_audio_byte_for_byte() {
    const N: usize = 20;
    let ring = RingName::new("gst", "audio");
    let desc = format!(
        "audiotestsrc num-buffers={N} samplesperbuffer=480 freq=440 ! audio/x-raw,format=S16LE,rate=48000,channels=2,layout=interleaved"
    );
    let want = reference(&desc, N);
    let p = src(&ring, "kind=audio eos-after=2000");
    let child = ChildPipeline::spawn(&format!("{desc} ! shmringsink ring={}", ring.0));
    let got = pull(&p.appsink("out"), N, LIMIT);
    let (ok, _, err) = child.finish(LIMIT);
    assert!(ok, "sink process failed: {err}");
    assert_same(&got, &want);
    for g in &got {
        assert!(g.caps.contains("format=(string)S16LE"), "{}", g.caps);
        assert!(g.caps.contains("rate=(int)48000") && g.caps.contains("channels=(int)2"));
    }
    p.wait_eos(LIMIT).expect("EOS after the producer left");
}

#[test]
fn caps_change_mid_stream_renegotiates_in_one_process() {
    let ring = RingName::new("gst", "caps");
    let a = video("ball", 5, "I420", 320, 240);
    let b = video("smpte", 5, "RGBA", 642, 100);
    let mut want = reference(&a, 5);
    want.extend(reference(&b, 5));
    let p = src(&ring, "");
    // One producer whose caps change mid-stream (concat plays a, then b): a
    // producer that ends ends its stream, so two sink pipelines in a row would
    // end the source's.
    let s = Pipeline::launch(&format!(
        "concat name=c ! shmringsink name=sink ring={} {a} ! c. {b} ! c.",
        ring.0
    ));
    s.play();
    s.wait_eos(LIMIT).expect("sink pipeline ends");
    let got = pull(&p.appsink("out"), 10, LIMIT);
    assert_same(&got, &want);
    assert!(got[..5]
        .iter()
        .all(|g| g.caps.contains("width=(int)320") && g.caps.contains("I420")));
    assert!(got[5..]
        .iter()
        .all(|g| g.caps.contains("width=(int)642") && g.caps.contains("RGBA")));
    assert!(p.error().is_none());
}

#[test]
fn two_sink_processes_feed_one_source() {
    const N: usize = 20;
    let ring = RingName::new("gst", "two");
    let a = video("ball", N, "I420", 320, 240);
    let b = video("smpte", N, "I420", 320, 240);
    let mut want: Vec<u64> = reference(&a, N)
        .iter()
        .chain(&reference(&b, N))
        .map(|g| g.sum)
        .collect();
    let p = src(&ring, "eos-after=2000");
    let ca = ChildPipeline::spawn(&format!("{a} ! shmringsink ring={} stream=1", ring.0));
    let cb = ChildPipeline::spawn(&format!("{b} ! shmringsink ring={} stream=2", ring.0));
    let got = pull(&p.appsink("out"), 2 * N, LIMIT);
    for c in [ca, cb] {
        let (ok, _, err) = c.finish(LIMIT);
        assert!(ok, "sink process failed: {err}");
    }
    let mut sums: Vec<u64> = got.iter().map(|g| g.sum).collect();
    sums.sort_unstable();
    want.sort_unstable();
    assert_eq!(sums, want, "every frame of both producers, once");
    p.wait_eos(LIMIT).expect("EOS after both producers left");
}

#[test]
fn killing_a_sink_process_leaves_the_source_running() {
    let ring = RingName::new("gst", "kill");
    let p = src(&ring, "eos-after=3000");
    let live = ChildPipeline::spawn(&format!(
        "videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! shmringsink ring={} stream=1 full-policy=drop",
        ring.0
    ));
    let sink = p.appsink("out");
    assert_eq!(pull(&sink, 5, LIMIT).len(), 5);
    live.kill();
    let desc = video("smpte", 10, "I420", 320, 240);
    let want: Vec<u64> = reference(&desc, 10).iter().map(|g| g.sum).collect();
    let next = ChildPipeline::spawn(&format!("{desc} ! shmringsink ring={} stream=2", ring.0));
    let (ok, _, err) = next.finish(LIMIT);
    assert!(ok, "second sink process failed: {err}");
    // Whatever the killed process had committed, then the new producer's 10 frames.
    let mut rest = vec![];
    while let Some(s) = sink.try_pull_sample(gst::ClockTime::from_seconds(10)) {
        let b = s
            .buffer()
            .expect("buffer")
            .map_readable()
            .expect("readable");
        rest.push(checksum(&b));
    }
    assert!(rest.len() >= 10, "{} buffers after the kill", rest.len());
    assert_eq!(
        rest[rest.len() - 10..],
        want[..],
        "the new producer's frames, in order"
    );
    assert!(p.error().is_none(), "the source failed: {:?}", p.error());
    assert!(sink.is_eos(), "EOS once no producer is left");
}

#[test]
fn a_reader_restarts_while_a_producer_keeps_running() {
    let ring = RingName::new("gst", "restart");
    let seg = Address::create(&ring.0, Config::default()).open().unwrap();
    let live = ChildPipeline::spawn(&format!(
        "videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! shmringsink ring={} full-policy=drop",
        ring.0
    ));
    let reader = format!(
        "shmringsrc name=src ring={} ! appsink name=out sync=false max-buffers=4",
        ring.0
    );
    for round in 0..2 {
        let p = Pipeline::launch(&reader);
        p.play();
        let got = pull(&p.appsink("out"), 5, LIMIT);
        assert_eq!(got.len(), 5, "round {round}");
        assert!(got[0].discont, "round {round}: the first buffer is DISCONT");
        assert!(p.error().is_none());
    }
    live.kill();
    drop(seg);
}

#[test]
fn hostile_producer_headers_are_dropped_counted_and_warned() {
    let ring = RingName::new("gst", "hostile");
    let p = src(&ring, "");
    let seg = Address::named(&ring.0).open().expect("open");
    let mut producer = seg.producer().expect("producer");
    let good = MediaHeader::video(Format::I420, 64, 64, 0, 0).unwrap();
    let mut payload = vec![0u8; good.payload_len()];
    let mut send = |bytes: &[u8]| {
        producer
            .send(bytes, Meta::new(0, kind::VIDEO))
            .expect("send")
    };
    for (i, fill) in [1u8, 2, 3].iter().enumerate() {
        payload.fill(*fill);
        MediaHeader::video(Format::I420, 64, 64, i as u64, i as u64)
            .unwrap()
            .write_to(&mut payload)
            .unwrap();
        send(&payload);
        if i == 0 {
            // Garbage, then a header whose plane lies outside the payload, then a
            // truncated record.
            send(&vec![0xa5; payload.len()]);
            let mut bad = payload.clone();
            bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
            send(&bad);
            send(&payload[..100]);
            // Well-formed headers a video record must not carry: an audio format,
            // and a width of 0 (the core's parse_for refuses both).
            let audio = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
            let mut abuf = vec![0u8; audio.payload_len()];
            audio.write_to(&mut abuf).unwrap();
            send(&abuf);
            let mut empty = payload.clone();
            empty[12..16].copy_from_slice(&0u32.to_le_bytes());
            assert!(MediaHeader::parse(&empty).is_ok());
            send(&empty);
        }
    }
    let got = pull(&p.appsink("out"), 3, LIMIT);
    assert_eq!(got.len(), 3);
    assert_eq!(p.u64("src", "malformed"), 5);
    let warnings = p.messages(gst::MessageType::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("record dropped")),
        "a warning on the bus: {warnings:?}"
    );
    assert!(p.error().is_none());
    assert!(got[1].discont, "the frame after dropped records is DISCONT");
}

#[test]
fn max_held_zero_copies_every_buffer() {
    let ring = RingName::new("gst", "copy");
    let desc = video("ball", 5, "NV12", 320, 240);
    let want = reference(&desc, 5);
    let p = src(&ring, "max-held=0");
    let s = Pipeline::launch(&format!("{desc} ! shmringsink name=sink ring={}", ring.0));
    s.play();
    s.wait_eos(LIMIT).expect("sink pipeline ends");
    let got = pull(&p.appsink("out"), 5, LIMIT);
    assert_same(&got, &want);
    let maps = mapping_of(&ring.0);
    assert!(
        got.iter().all(|g| !inside(g.addr, &maps)),
        "copies live outside the ring"
    );
    assert_eq!(p.u64("src", "copies"), 5);
    assert_eq!(
        s.u64("sink", "in-place"),
        5,
        "the sink still wrote in place"
    );
}

#[test]
fn a_missing_ring_is_an_error_naming_it() {
    init();
    let p = Pipeline::launch("shmringsrc ring=gst-test-no-such-ring ! fakesink");
    let started = p.0.set_state(gst::State::Playing);
    let err = match started {
        Err(_) => p.error(),
        Ok(_) => p.wait_eos(LIMIT).err(),
    }
    .expect("no error");
    assert!(
        err.contains("gst-test-no-such-ring") && err.contains("does not exist"),
        "{err}"
    );
    // The sink waits for its ring (its consumer creates it): until then it drops
    // what comes, and says so, naming the ring.
    let p = Pipeline::launch(
        "videotestsrc num-buffers=1 ! shmringsink name=sink ring=gst-test-no-such-ring",
    );
    p.play();
    p.wait_eos(LIMIT).expect("the sink drops and goes on");
    let warnings = p.messages(gst::MessageType::Warning);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("gst-test-no-such-ring") && warnings[0].contains("does not exist"),
        "{warnings:?}"
    );
    assert_eq!(p.u64("sink", "dropped"), 1);
}

#[test]
fn an_unsupported_format_is_not_negotiated_and_named() {
    let ring = RingName::new("gst", "yuy2");
    let _p = src(&ring, "");
    let s = Pipeline::launch(&format!(
        "videotestsrc num-buffers=3 ! video/x-raw,format=YUY2,width=64,height=64 ! shmringsink ring={}",
        ring.0
    ));
    s.play();
    let err = s.wait_eos(LIMIT).expect_err("YUY2 is refused");
    assert!(
        err.contains("YUY2") && err.contains("not supported"),
        "{err}"
    );
}

#[test]
fn encodes_from_the_ring_into_an_mp4_with_every_frame() {
    const N: usize = 30;
    let ring = RingName::new("gst", "mp4");
    let file = std::env::temp_dir().join(format!("{}.mp4", ring.0));
    struct Rm(std::path::PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(file.clone());
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true eos-after=1000 timestamp-mode=stream ! x264enc speed-preset=ultrafast ! mp4mux ! filesink location={}",
        ring.0,
        file.display()
    ));
    p.play();
    let child = ChildPipeline::spawn(&format!(
        "{} ! shmringsink ring={}",
        video("ball", N, "I420", 320, 240),
        ring.0
    ));
    let (ok, _, err) = child.finish(LIMIT);
    assert!(ok, "sink process failed: {err}");
    p.wait_eos(LIMIT).expect("the encoder pipeline ends");
    drop(p);
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=nb_read_frames,codec_name",
            "-of",
            "csv=p=0",
        ])
        .arg(&file)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    let out = String::from_utf8_lossy(&probe.stdout);
    assert_eq!(out.trim(), format!("h264,{N}"), "ffprobe: {out}");
}

#[test]
fn inherited_descriptors_work_for_both_elements() {
    use std::os::fd::AsRawFd;
    let seg = Address::memfd("gst-fd", Config::default()).open().unwrap();
    let fds = seg.descriptors();
    let (fd, lock) = (fds[0].as_raw_fd(), fds[1].as_raw_fd());
    let desc = video("ball", 5, "I420", 320, 240);
    let want = reference(&desc, 5);
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src fd={fd} lock-fd={lock} timestamp-mode=stream ! appsink name=out sync=false max-buffers=4"
    ));
    p.play();
    let s = Pipeline::launch(&format!(
        "{desc} ! shmringsink name=sink fd={fd} lock-fd={lock}"
    ));
    s.play();
    s.wait_eos(LIMIT).expect("sink pipeline ends");
    assert_same(&pull(&p.appsink("out"), 5, LIMIT), &want);
    assert_eq!(s.u64("sink", "in-place"), 5);
    drop(p);
    drop(s);
    let bad = Pipeline::launch("shmringsrc fd=1000000 ! fakesink");
    assert!(bad.0.set_state(gst::State::Playing).is_err());
    let err = bad.error().expect("an error");
    assert!(err.contains("descriptor 1000000"), "{err}");
}

#[test]
fn capture_timestamps_keep_the_producers_spacing() {
    let ring = RingName::new("gst", "capture");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! appsink name=out sync=false max-buffers=4",
        ring.0
    ));
    p.play();
    let s = Pipeline::launch(&format!(
        "videotestsrc is-live=true num-buffers=10 ! video/x-raw,format=I420,width=160,height=120,framerate=30/1 ! shmringsink name=sink ring={}",
        ring.0
    ));
    s.play();
    let got = pull(&p.appsink("out"), 10, LIMIT);
    s.wait_eos(LIMIT).expect("sink pipeline ends");
    assert_eq!(got.len(), 10);
    // Producer PTS are 1/30 s apart; mapped through the monotonic clock onto this
    // pipeline's, they stay so (within the skew of reading two clocks).
    for pair in got.windows(2) {
        let (a, b) = (pair[0].pts.expect("PTS"), pair[1].pts.expect("PTS"));
        let gap = b.nseconds() as i64 - a.nseconds() as i64;
        assert!(
            (gap - 33_333_333).abs() < 5_000_000,
            "PTS {a} then {b}: not 1/30 s apart"
        );
    }
}

#[test]
fn a_corrupted_record_resets_the_ring_and_the_source_goes_on() {
    let ring = RingName::new("gst", "corrupt");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true timestamp-mode=stream ! appsink name=out sync=false max-buffers=8",
        ring.0
    ));
    // Paused, a live source creates its ring but reads nothing yet.
    assert!(p.0.set_state(gst::State::Paused).is_ok());
    let seg = Address::named(&ring.0).open().expect("open");
    let mut producer = seg.producer().expect("producer");
    let frame = |fill: u8, seq: u64| {
        let h = MediaHeader::video(Format::I420, 64, 64, seq, seq).unwrap();
        let mut b = vec![fill; h.payload_len()];
        h.write_to(&mut b).unwrap();
        b
    };
    producer
        .send(&frame(1, 0), Meta::new(0, kind::VIDEO))
        .unwrap();
    // A hostile producer rewrites its record's length after the commit.
    let bad = frame(2, 1);
    let r = producer
        .reserve_raw(bad.len(), shmring::FullPolicy::Fail)
        .unwrap();
    // SAFETY: the reservation spans bad.len() bytes; the record header is the 64
    // bytes before the payload, inside the same mapping.
    unsafe {
        std::ptr::copy_nonoverlapping(bad.as_ptr(), r.ptr, bad.len());
        producer
            .commit_raw(bad.len(), Meta::new(0, kind::VIDEO))
            .unwrap();
        std::ptr::write_volatile(r.ptr.sub(64) as *mut u64, u64::MAX);
    }
    p.play();
    let first = pull(&p.appsink("out"), 1, LIMIT);
    assert_eq!(first[0].sum, checksum(&frame(1, 0)[128..]));
    // After the damage, a new record still arrives.
    let again = pull_after_sending(&p, &mut producer, &frame(3, 2));
    assert_eq!(again, checksum(&frame(3, 2)[128..]));
    assert!(p.error().is_none(), "{:?}", p.error());
    let resets = p.u64("src", "resets");
    let warnings = p.messages(gst::MessageType::Warning);
    assert!(
        resets == 0 || warnings.iter().any(|w| w.contains("corrupted")),
        "{resets} resets, warnings {warnings:?}"
    );
}

/// Sends `bytes` until a buffer with their checksum arrives (records sent before
/// a reset completes may be dropped with it).
fn pull_after_sending(p: &Pipeline, producer: &mut shmring::Producer, bytes: &[u8]) -> u64 {
    let want = checksum(&bytes[128..]);
    let sink = p.appsink("out");
    let start = std::time::Instant::now();
    loop {
        assert!(
            start.elapsed() < LIMIT,
            "no record arrived after the damage"
        );
        let _ = producer.send(bytes, Meta::new(0, kind::VIDEO));
        if let Some(s) = sink.try_pull_sample(gst::ClockTime::from_mseconds(200)) {
            let b = s
                .buffer()
                .expect("buffer")
                .map_readable()
                .expect("readable");
            let sum = checksum(&b);
            if sum == want {
                return sum;
            }
        }
    }
}

#[test]
fn a_full_ring_drops_and_counts_with_either_policy() {
    for policy in ["full-policy=drop", "full-policy=block timeout=20"] {
        let ring = RingName::new("gst", "full");
        let p = Pipeline::launch(&format!(
            "shmringsrc ring={} create=true capacity={} ! fakesink",
            ring.0,
            1 << 20
        ));
        // Paused, the live source holds the ring but reads nothing: it fills.
        assert!(p.0.set_state(gst::State::Paused).is_ok());
        let s = Pipeline::launch(&format!(
            "{} ! shmringsink name=sink ring={} {policy}",
            video("ball", 30, "I420", 320, 240),
            ring.0
        ));
        s.play();
        s.wait_eos(LIMIT).expect("the sink pipeline ends");
        let (committed, dropped) = (s.u64("sink", "committed"), s.u64("sink", "dropped"));
        assert!(dropped > 0, "{policy}: nothing dropped");
        assert_eq!(
            committed + dropped,
            30,
            "{policy}: every buffer committed or dropped"
        );
        assert!(s.error().is_none(), "{policy}: {:?}", s.error());
    }
}

#[test]
fn strides_other_than_gstreamers_travel_as_video_meta() {
    let ring = RingName::new("gst", "stride");
    let p = src(&ring, "");
    let seg = Address::named(&ring.0).open().expect("open");
    let mut producer = seg.producer().expect("producer");
    // The core's layout: tight strides (322 and 161), where GStreamer's default for
    // I420 322x4 is 324 and 164.
    let hd = MediaHeader::video(Format::I420, 322, 4, 0, 0).unwrap();
    let mut payload = vec![0u8; hd.payload_len()];
    hd.write_to(&mut payload).unwrap();
    for p in 0..3 {
        let (o, n) = (hd.offset[p] as usize, hd.size[p] as usize);
        for (i, b) in payload[o..o + n].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7).wrapping_add(p as u8);
        }
    }
    producer.send(&payload, Meta::new(0, kind::VIDEO)).unwrap();
    let sample = p
        .appsink("out")
        .try_pull_sample(gst::ClockTime::from_seconds(60))
        .expect("a sample");
    let info = gst_video::VideoInfo::from_caps(sample.caps().expect("caps")).expect("video caps");
    let buffer = sample.buffer_owned().expect("buffer");
    let meta = buffer.meta::<gst_video::VideoMeta>().expect("a video meta");
    assert_eq!(meta.stride()[..3], [322, 161, 161]);
    let frame = gst_video::VideoFrame::from_buffer_readable(buffer, &info).expect("mappable");
    for p in 0..3u32 {
        let (w, h) = if p == 0 { (322, 4) } else { (161, 2) };
        let stride = frame.plane_stride()[p as usize] as usize;
        let data = frame.plane_data(p).expect("plane");
        let want = hd.plane(&payload, p as usize);
        for r in 0..h {
            assert_eq!(
                data[r * stride..r * stride + w],
                want[r * w..r * w + w],
                "plane {p} row {r}"
            );
        }
    }
}

/// Waits (bounded by LIMIT) until `done` holds for `seg`.
fn until(seg: &Segment, what: &str, done: impl Fn(&Segment) -> bool) {
    let start = std::time::Instant::now();
    while !done(seg) {
        assert!(start.elapsed() < LIMIT, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The ring's consumer: a source that creates `ring` with `props` and reads it
/// into a fakesink, playing.
fn owner_into_fakesink(ring: &RingName, props: &str) -> Pipeline {
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} create=true {props} ! fakesink sync=false",
        ring.0
    ));
    p.play();
    p
}

/// Waits until the ring's consumer has taken a tethered consumer on.
fn taken_on(seg: &Segment) {
    until(seg, "a tethered source is taken on", |s| {
        s.tethers().iter().any(|t| !t.requested)
    });
}

/// A second source on `ring` in `mode`, playing.
fn reader(ring: &RingName, mode: &str, max_buffers: u32) -> Pipeline {
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} mode={mode} timestamp-mode=stream ! appsink name=out sync=false max-buffers={max_buffers}",
        ring.0
    ));
    p.play();
    p
}

/// Writes `desc` into `ring` in this process while both sources' buffers are
/// pulled (each on its own thread, so neither reader waits on the other).
fn feed_and_pull(
    ring: &RingName,
    desc: &str,
    n: usize,
    a: &Pipeline,
    b: &Pipeline,
) -> [Vec<Got>; 2] {
    let (sa, sb) = (a.appsink("out"), b.appsink("out"));
    std::thread::scope(|s| {
        let ta = s.spawn(|| pull(&sa, n, LIMIT));
        let tb = s.spawn(|| pull(&sb, n, LIMIT));
        let sink = Pipeline::launch(&format!("{desc} ! shmringsink ring={}", ring.0));
        sink.play();
        sink.wait_eos(LIMIT).expect("sink pipeline ends");
        [ta.join().expect("pulled"), tb.join().expect("pulled")]
    })
}

#[test]
fn a_tethered_source_beside_the_consumer_gets_every_frame_in_place() {
    const N: usize = 20;
    let ring = RingName::new("gst", "tethered");
    let desc = video("ball", N, "I420", 320, 240);
    let want = reference(&desc, N);
    let owner = src(&ring, "");
    let tethered = reader(&ring, "tethered", 4);
    // The ring's consumer takes the tethered one on at its next look at the ring;
    // from then on it sees every record.
    let seg = Address::named(&ring.0).open().expect("ring");
    taken_on(&seg);
    let [a, b] = feed_and_pull(&ring, &desc, N, &owner, &tethered);
    assert_same(&a, &want);
    assert_same(&b, &want);
    // Frames in place: the tethered source's buffers are in the ring's mapping.
    let maps = mapping_of(&ring.0);
    assert!(b.iter().all(|g| inside(g.addr, &maps)), "copied frames");
    assert_eq!(tethered.u64("src", "copies"), 0);
    assert_eq!(seg.stats().tethers_detached, 0);
    assert!(owner.error().is_none() && tethered.error().is_none());
    drop(tethered);
    until(&seg, "the tethered source leaves", |s| {
        s.tethers().is_empty()
    });
}

#[test]
fn a_tap_source_beside_the_consumer_gets_copies_of_every_frame() {
    const N: usize = 20;
    let ring = RingName::new("gst", "tap");
    let desc = video("smpte", N, "I420", 320, 240);
    let want = reference(&desc, N);
    let owner = src(&ring, "");
    // 20 frames fit in the ring: nothing is overwritten, so the tap loses none.
    let tap = reader(&ring, "tap", 4);
    let [a, b] = feed_and_pull(&ring, &desc, N, &owner, &tap);
    assert_same(&a, &want);
    assert_same(&b, &want);
    let maps = mapping_of(&ring.0);
    assert!(
        b.iter().all(|g| !inside(g.addr, &maps)),
        "tap buffers are copies"
    );
    assert!(b[0].discont && !b[1..].iter().any(|g| g.discont));
    assert_eq!(tap.u64("src", "lost"), 0);
    // The tap is not one of the ring's readers: the ring lists none.
    let seg = Address::named(&ring.0).open().expect("ring");
    assert!(seg.tethers().is_empty());
    assert!(owner.error().is_none() && tap.error().is_none());
}

#[test]
fn a_tap_that_falls_behind_loses_records_and_marks_the_next_buffer_discont() {
    let ring = RingName::new("gst", "taplost");
    // A ring of 1 MiB: a few 320x240 frames.
    let owner = owner_into_fakesink(&ring, "capacity=1048576");
    let tap = reader(&ring, "tap", 1);
    let live = ChildPipeline::spawn(&format!(
        "videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! shmringsink ring={} full-policy=drop",
        ring.0
    ));
    let sink = tap.appsink("out");
    assert_eq!(pull(&sink, 1, LIMIT).len(), 1);
    // The tap now waits on its appsink while the producer writes twice the ring.
    let seg = Address::named(&ring.0).open().expect("ring");
    let frame = MediaHeader::video(Format::I420, 320, 240, 0, 0)
        .unwrap()
        .payload_len() as u64;
    let lap = 2 * (seg.geometry().capacity / frame + 1);
    let from = seg.stats().records_committed;
    until(&seg, "the producer laps the tap", |s| {
        s.stats().records_committed >= from + lap
    });
    let rest = pull(&sink, 6, LIMIT);
    assert!(rest.iter().any(|g| g.discont), "no DISCONT after the loss");
    assert!(tap.u64("src", "lost") > 0);
    assert!(tap.error().is_none() && owner.error().is_none());
    live.kill();
}

#[test]
fn reader_modes_refuse_to_create_a_ring_and_need_its_consumer() {
    init();
    let ring = RingName::new("gst", "modes");
    for mode in ["tethered", "tap"] {
        let p = Pipeline::launch(&format!(
            "shmringsrc ring={} create=true mode={mode} ! fakesink",
            ring.0
        ));
        assert!(p.0.set_state(gst::State::Playing).is_err(), "{mode}");
        let err = p.error().expect("an error");
        assert!(err.contains("mode=consumer"), "{mode}: {err}");
        assert!(!ring.exists(), "{mode}: no ring made");
    }
    // A ring with no consumer: a tethered source has nothing to read beside.
    let seg = Address::create(&ring.0, Config::default()).open().unwrap();
    let p = Pipeline::launch(&format!(
        "shmringsrc ring={} mode=tethered ! fakesink",
        ring.0
    ));
    assert!(p.0.set_state(gst::State::Playing).is_err());
    let err = p.error().expect("an error");
    assert!(err.contains("no live consumer"), "{err}");
    drop(seg);
}

#[test]
fn a_tethered_source_that_stops_releasing_is_detached_with_an_error() {
    let ring = RingName::new("gst", "detached");
    let owner = owner_into_fakesink(&ring, "tether-stall-limit=50");
    // Its appsink takes one buffer and is never pulled from: the source stops
    // releasing frames while the ring's consumer reads on.
    let tethered = reader(&ring, "tethered", 1);
    let seg = Address::named(&ring.0).open().expect("ring");
    taken_on(&seg);
    let sink = Pipeline::launch(&format!(
        "{} ! shmringsink ring={}",
        video("ball", 10, "I420", 320, 240),
        ring.0
    ));
    sink.play();
    sink.wait_eos(LIMIT).expect("sink pipeline ends");
    until(&seg, "the tethered source is detached", |s| {
        s.stats().tethers_detached == 1
    });
    // Once downstream takes buffers again, the source finds itself detached.
    let got = pull(&tethered.appsink("out"), 10, LIMIT);
    assert!(got.len() < 10, "{} buffers after the detach", got.len());
    let err = tethered.wait_eos(LIMIT).expect_err("an error, not EOS");
    assert!(err.contains("detached"), "{err}");
    assert!(owner.error().is_none());
}

#[test]
fn video_and_audio_of_one_stream_id_keep_their_own_sequence_numbers() {
    let ring = RingName::new("gst", "kinds");
    let p = Pipeline::launch(&format!(
        "shmringsrc name=src ring={} create=true ! appsink name=out sync=false max-buffers=8",
        ring.0
    ));
    assert!(p.0.set_state(gst::State::Paused).is_ok());
    let seg = Address::named(&ring.0).open().expect("open");
    let mut producer = seg.producer().expect("producer");
    // Stream 0 carries both: video and audio records interleaved, each kind
    // numbered from 0 without a gap.
    for seq in 0..3u64 {
        let v = MediaHeader::video(Format::I420, 64, 64, seq, seq).unwrap();
        let mut b = vec![0u8; v.payload_len()];
        v.write_to(&mut b).unwrap();
        producer.send(&b, Meta::new(0, kind::VIDEO)).unwrap();
        let a = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, seq, seq).unwrap();
        let mut b = vec![0u8; a.payload_len()];
        a.write_to(&mut b).unwrap();
        producer.send(&b, Meta::new(0, kind::AUDIO)).unwrap();
    }
    p.play();
    let got = pull(&p.appsink("out"), 6, LIMIT);
    let discont: Vec<bool> = got.iter().map(|g| g.discont).collect();
    assert_eq!(discont, [true, false, false, false, false, false]);
}
