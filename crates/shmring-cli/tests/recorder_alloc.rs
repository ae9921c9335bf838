//! The recorder's steady state allocates nothing per record: measured in-process
//! with a counting global allocator (counts are per thread, so other tests running
//! in parallel do not disturb them).

use shmring::media::{kind, Format, MediaHeader};
use shmring::Meta;
use shmring_cli::pattern::{decode_frame_number, Pattern, Tone};
use shmring_cli::record::recorder::{Outcome, Recorder, RecorderOptions};
use shmring_host::thread_alloc_count as allocs;

#[global_allocator]
static GLOBAL: shmring_host::CountingAlloc = shmring_host::CountingAlloc;

#[test]
fn steady_state_records_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::new(RecorderOptions {
        dir: dir.path().to_path_buf(),
        fps: (30, 1),
        encode: false,
        preset: Default::default(),
        verbose: false,
    })
    .unwrap();
    let (w, h) = (1920, 1080);
    let pattern = Pattern::new(w, h).unwrap();
    let vhd = MediaHeader::video(Format::I420, w, h, 0, 0).unwrap();
    let mut video = vec![0u8; vhd.payload_len()];
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
    let mut audio = vec![0u8; ahd.payload_len()];
    let mut tone = Tone::new(440.0, 48000);

    let mut run = |rec: &mut Recorder, i: u64| {
        let hd = MediaHeader::video(Format::I420, w, h, i * 33_000_000, i).unwrap();
        hd.write_to(&mut video).unwrap();
        pattern.draw(i, &hd, &mut video);
        let o = rec
            .process(Meta::new(0, kind::VIDEO), Some(0), &video)
            .unwrap();
        assert_eq!(o, Outcome::Written);
        for k in 0..3 {
            let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, i * 3 + k).unwrap();
            hd.write_to(&mut audio).unwrap();
            tone.fill_s16(&mut audio[128..], 2);
            let o = rec
                .process(Meta::new(0, kind::AUDIO), Some(0), &audio)
                .unwrap();
            assert_eq!(o, Outcome::Written);
        }
    };
    // Warm-up: the first record of each stream opens its file and buffer.
    run(&mut rec, 0);
    run(&mut rec, 1);
    let before = allocs();
    for i in 2..62 {
        run(&mut rec, i);
    }
    let steady = allocs() - before;
    assert_eq!(
        steady, 0,
        "allocations in 60 video frames + 180 audio packets"
    );

    let summary = rec.finish(None);
    assert_eq!(summary.malformed, 0);
    let v = &summary.streams[0];
    assert_eq!((v.kind, v.received, v.gaps), ("video", 62, 0));
    // Few, large writes: nothing below the 64 KiB buffer except the final flush.
    assert!(
        summary.writes.average() >= 64 * 1024,
        "{:?}",
        summary.writes
    );
    // The file holds every frame, numbers intact.
    let y4m = std::fs::read(dir.path().join("video-0.y4m")).unwrap();
    let head = b"YUV4MPEG2 W1920 H1080 F30:1 Ip A1:1 C420jpeg\n";
    assert!(y4m.starts_with(head));
    let frame = 6 + 1920 * 1080 * 3 / 2;
    assert_eq!(y4m.len(), head.len() + 62 * frame);
    for i in 0..62 {
        let y = &y4m[head.len() + i * frame + 6..][..1920 * 1080];
        assert_eq!(decode_frame_number(y, w, h, w as usize), Some(i as u32));
    }
    let wav = std::fs::metadata(dir.path().join("audio-0.wav")).unwrap();
    assert_eq!(wav.len(), 44 + 62 * 3 * 480 * 4);
}

/// `MediaHeader::parse` itself allocates nothing (the recorder may call it per frame).
#[test]
fn media_header_parse_allocates_nothing() {
    let hd = MediaHeader::video(Format::I420, 64, 64, 0, 0).unwrap();
    let mut buf = vec![0u8; hd.payload_len()];
    hd.write_to(&mut buf).unwrap();
    let before = allocs();
    for _ in 0..10 {
        MediaHeader::parse(&buf).unwrap();
    }
    assert_eq!(allocs() - before, 0);
}
