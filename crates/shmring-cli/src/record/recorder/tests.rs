//! The recorder's tests: records in, files out.

use super::*;
use shmring::media::MediaHeader;

fn rec(dir: &Path) -> Recorder {
    Recorder::new(RecorderOptions {
        dir: dir.to_path_buf(),
        fps: (25, 1),
        encode: false,
        preset: Default::default(),
        verbose: false,
    })
    .unwrap()
}

fn frame(format: Format, w: u32, h: u32, seq: u64, fill: u8) -> Vec<u8> {
    let hd = MediaHeader::video(format, w, h, 0, seq).unwrap();
    let mut b = vec![fill; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

#[test]
fn malformed_headers_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    let m = Meta::new(3, kind::VIDEO);
    assert_eq!(
        r.process(m, Some(0), &frame(Format::I420, 64, 32, 0, 9))
            .unwrap(),
        Outcome::Written
    );
    let mut bad = frame(Format::I420, 64, 32, 1, 9);
    bad[0] = b'X';
    assert_eq!(r.process(m, Some(0), &bad).unwrap(), Outcome::Malformed);
    assert_eq!(
        r.process(m, Some(0), &[0u8; 100]).unwrap(),
        Outcome::Malformed
    );
    // A plane pointing outside the payload, with bytes otherwise identical to
    // the previous header's.
    let mut bad = frame(Format::I420, 64, 32, 2, 9);
    bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(r.process(m, Some(0), &bad).unwrap(), Outcome::Malformed);
    let good = frame(Format::I420, 64, 32, 3, 9);
    assert_eq!(
        r.process(m, Some(0), &good[..good.len() - 1]).unwrap(),
        Outcome::Malformed
    );
    // An audio format on a video record.
    let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 10, 0, 0).unwrap();
    let mut a = vec![0u8; hd.payload_len()];
    hd.write_to(&mut a).unwrap();
    assert_eq!(r.process(m, Some(0), &a).unwrap(), Outcome::Malformed);
    assert_eq!(r.process(m, Some(0), &good).unwrap(), Outcome::Written);
    assert_eq!(
        r.process(Meta::new(0, kind::RAW), Some(0), &good).unwrap(),
        Outcome::Skipped
    );
    let s = r.finish(None);
    assert_eq!(s.malformed, 5);
    assert!(s.first_malformed.unwrap().contains("magic"));
    assert_eq!(s.streams[0].received, 2);
    assert_eq!(s.streams[0].gaps, 2); // sequences 1 and 2 never arrived intact
    let y4m = std::fs::read(dir.path().join("video-3.y4m")).unwrap();
    assert_eq!(
        y4m.len(),
        "YUV4MPEG2 W64 H32 F25:1 Ip A1:1 C420jpeg\n".len() + 2 * (6 + 64 * 32 * 3 / 2)
    );
}

#[test]
fn a_format_change_starts_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    let m = Meta::new(0, kind::VIDEO);
    r.process(m, Some(0), &frame(Format::I420, 64, 32, 0, 1))
        .unwrap();
    r.process(m, Some(0), &frame(Format::I420, 128, 64, 1, 2))
        .unwrap();
    r.process(m, Some(0), &frame(Format::I420, 128, 64, 2, 2))
        .unwrap();
    let s = r.finish(None);
    let files: Vec<_> = s.streams[0]
        .files
        .iter()
        .map(|f| (f.path.clone(), f.units))
        .collect();
    assert_eq!(
        files,
        vec![
            (dir.path().join("video-0.y4m"), 1),
            (dir.path().join("video-0-2.y4m"), 2)
        ]
    );
    let two = std::fs::read(dir.path().join("video-0-2.y4m")).unwrap();
    assert!(two.starts_with(b"YUV4MPEG2 W128 H64 "));
    assert!(!dir.path().join("video-0.y4m.part").exists());
}

#[test]
fn a_stream_flipping_formats_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    let m = Meta::new(0, kind::VIDEO);
    for i in 0..MAX_PARTS as u64 + 10 {
        let w = if i % 2 == 0 { 64 } else { 128 };
        r.process(m, Some(0), &frame(Format::I420, w, 16, i, 0))
            .unwrap();
    }
    let s = r.finish(None);
    assert_eq!(s.streams[0].files.len(), MAX_PARTS as usize);
    // Records in the last file's format still go in; the others are skipped.
    assert_eq!(s.streams[0].unsupported, 5);
    assert_eq!(s.streams[0].received, MAX_PARTS as u64 + 5);
}

#[test]
fn nv12_and_padded_strides_become_tight_i420() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    // NV12 4x2: Y = 1..8, UV row = (10,20),(11,21)
    let mut hd = MediaHeader::video(Format::Nv12, 4, 2, 0, 0).unwrap();
    let mut b = vec![0u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    let (y0, c0) = (hd.offset[0] as usize, hd.offset[1] as usize);
    b[y0..y0 + 8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    b[c0..c0 + 4].copy_from_slice(&[10, 20, 11, 21]);
    r.process(Meta::new(1, kind::VIDEO), Some(0), &b).unwrap();
    // I420 4x2 with a luma stride of 8.
    hd = MediaHeader::video(Format::I420, 4, 2, 0, 0).unwrap();
    hd.stride[0] = 8;
    hd.size[0] = 16;
    hd.offset[1] = 256;
    hd.offset[2] = 320;
    let mut b = vec![0u8; 384];
    hd.write_to(&mut b).unwrap();
    b[128..144].copy_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8, 0, 0, 0, 0]);
    b[256..258].copy_from_slice(&[10, 11]);
    b[320..322].copy_from_slice(&[20, 21]);
    r.process(Meta::new(2, kind::VIDEO), Some(0), &b).unwrap();
    r.finish(None);
    let want: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 20, 21];
    for s in [1, 2] {
        let f = std::fs::read(dir.path().join(format!("video-{s}.y4m"))).unwrap();
        let body = &f[f.iter().position(|&c| c == b'\n').unwrap() + 1..];
        assert_eq!(&body[..6], b"FRAME\n");
        assert_eq!(&body[6..], want, "stream {s}");
    }
}

#[test]
fn float_audio_gets_an_ieee_float_wav() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    let hd = MediaHeader::audio(Format::PcmF32, 44100, 1, 100, 0, 0).unwrap();
    let mut b = vec![0u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    for _ in 0..3 {
        r.process(Meta::new(0, kind::AUDIO), Some(0), &b).unwrap();
    }
    r.finish(None);
    let w = std::fs::read(dir.path().join("audio-0.wav")).unwrap();
    assert_eq!(w.len(), 56 + 1200);
    assert_eq!(&w[0..4], b"RIFF");
    assert_eq!(
        u32::from_le_bytes(w[4..8].try_into().unwrap()) as usize,
        w.len() - 8
    );
    assert_eq!(u16::from_le_bytes([w[20], w[21]]), 3);
    assert_eq!(&w[36..40], b"fact");
    assert_eq!(u32::from_le_bytes(w[44..48].try_into().unwrap()), 300);
    assert_eq!(&w[48..52], b"data");
    assert_eq!(u32::from_le_bytes(w[52..56].try_into().unwrap()), 1200);
}

#[test]
fn unusable_output_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let e = check_output_dir(&file.join("sub")).unwrap_err();
    assert!(e.contains("plain-file/sub"), "{e}");
}

fn end() -> Vec<u8> {
    shmring::media::EndOfStream {
        pts_ns: 0,
        sequence: 0,
    }
    .to_bytes()
    .to_vec()
}

/// Slots `dead` are gone; every other slot is alive.
fn with_dead(r: &mut Recorder, dead: &'static std::sync::Mutex<Vec<u32>>) {
    r.set_liveness(move |s| !dead.lock().unwrap().contains(&s));
}

#[test]
fn a_stream_passes_to_another_slot_once_its_owner_is_gone() {
    static DEAD: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    with_dead(&mut r, &DEAD);
    let m = Meta::new(4, kind::VIDEO);
    let f = frame(Format::I420, 64, 32, 0, 1);
    assert_eq!(r.process(m, Some(1), &f).unwrap(), Outcome::Written);
    assert_eq!(r.process(m, Some(2), &f).unwrap(), Outcome::Refused);
    assert_eq!(r.process(m, Some(2), &end()).unwrap(), Outcome::Refused);
    // A record of a slot nobody can attribute is refused too.
    assert_eq!(r.process(m, None, &f).unwrap(), Outcome::Refused);
    DEAD.lock().unwrap().push(1);
    // Seen alive just now: the owner is asked again only after a while.
    std::thread::sleep(OWNER_RECHECK);
    assert_eq!(r.process(m, Some(2), &f).unwrap(), Outcome::Written);
    assert_eq!(r.process(m, Some(1), &f).unwrap(), Outcome::Refused);
    assert_eq!(r.process(m, Some(2), &end()).unwrap(), Outcome::Ended);
    // Ended: the next slot to write it starts it again.
    assert_eq!(r.process(m, Some(3), &f).unwrap(), Outcome::Written);
    let s = r.finish(None);
    assert_eq!(
        (
            s.streams[0].received,
            s.streams[0].foreign,
            s.streams[0].ends
        ),
        (3, 3, 1)
    );
    assert_eq!((s.refused_foreign, s.unattributed), (3, 1));
    assert_eq!(s.streams[0].files.len(), 2);
}

#[test]
fn a_gone_slots_room_comes_back() {
    static DEAD: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    with_dead(&mut r, &DEAD);
    let a = |seq| {
        let hd = MediaHeader::audio(Format::PcmS16, 8000, 1, 8, 0, seq).unwrap();
        let mut b = vec![0u8; hd.payload_len()];
        hd.write_to(&mut b).unwrap();
        b
    };
    for id in 0..STREAMS_PER_SLOT + 5 {
        r.process(Meta::new(id, kind::AUDIO), Some(7), &a(0))
            .unwrap();
    }
    assert_eq!(r.refused_streams, 5);
    assert_eq!(
        r.process(Meta::new(100, kind::AUDIO), Some(7), &a(0))
            .unwrap(),
        Outcome::Refused
    );
    // Another slot has room of its own.
    assert_eq!(
        r.process(Meta::new(101, kind::AUDIO), Some(8), &a(0))
            .unwrap(),
        Outcome::Written
    );
    // Slot 7's producer is gone: its streams belong to nobody, its room is
    // back for the producer that takes the slot next.
    DEAD.lock().unwrap().push(7);
    r.poll();
    DEAD.lock().unwrap().clear();
    assert_eq!(
        r.process(Meta::new(100, kind::AUDIO), Some(7), &a(0))
            .unwrap(),
        Outcome::Written
    );
    assert_eq!(
        r.process(Meta::new(0, kind::AUDIO), Some(9), &a(1))
            .unwrap(),
        Outcome::Written
    );
}

/// A producer that starts and ends stream after stream (each leaves the table
/// once it ended) cannot fill the table: others still get in, and no file of
/// a stream that left is written over when its id comes back.
#[test]
fn ended_streams_leave_room_and_keep_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rec(dir.path());
    let hd = MediaHeader::audio(Format::PcmS16, 8000, 1, 8, 0, 0).unwrap();
    let mut a = vec![0u8; hd.payload_len()];
    hd.write_to(&mut a).unwrap();
    let e = end();
    for id in 0..MAX_STREAMS as u32 + 10 {
        let m = Meta::new(id, kind::AUDIO);
        assert_eq!(r.process(m, Some(1), &a).unwrap(), Outcome::Written);
        assert_eq!(r.process(m, Some(1), &e).unwrap(), Outcome::Ended);
    }
    assert_eq!(
        r.process(
            Meta::new(0, kind::VIDEO),
            Some(2),
            &frame(Format::I420, 8, 8, 0, 3)
        )
        .unwrap(),
        Outcome::Written
    );
    // Stream 0 left the table; its first file stays as it was.
    let m = Meta::new(0, kind::AUDIO);
    assert_eq!(r.process(m, Some(3), &a).unwrap(), Outcome::Written);
    r.process(m, Some(3), &a).unwrap();
    let s = r.finish(None);
    assert_eq!(s.refused_streams, 0);
    let len = |n: &str| std::fs::metadata(dir.path().join(n)).unwrap().len();
    assert_eq!(len("audio-0.wav"), 44 + 16);
    assert_eq!(len("audio-0-2.wav"), 44 + 32);
    let listed: usize = s.streams.iter().map(|s| s.files.len()).sum();
    assert_eq!(listed, MAX_STREAMS + 10 + 2);
}
