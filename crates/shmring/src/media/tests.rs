//! The media header's unit tests.

use super::numbering::NUMBERED_STREAMS;
use super::*;

#[test]
fn video_round_trip_and_layout() {
    let h = MediaHeader::video(Format::I420, 1920, 1080, 5, 6).unwrap();
    assert_eq!(h.offset[0], 128);
    assert_eq!(h.size[0], 1920 * 1080);
    assert_eq!(h.stride[1], 960);
    assert_eq!(h.offset[1] % 64, 0);
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
    // 1080p I420 payload is the frame plus the header (planes are 64-aligned).
    assert_eq!(h.payload_len(), 128 + 3_110_400);
}

#[test]
fn video_with_layout_checks_and_round_trips() {
    // GStreamer's I420 layout for 322x2: strides rounded up to 4.
    let h = MediaHeader::video_with_layout(
        Format::I420,
        322,
        2,
        &[324, 164, 164],
        &[128, 128 + 648, 128 + 648 + 164],
        1,
        2,
    )
    .unwrap();
    assert_eq!(h.size, [648, 164, 164, 0]);
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
    let narrow = MediaHeader::video_with_layout(
        Format::I420,
        322,
        2,
        &[320, 164, 164],
        &[128, 800, 1000],
        0,
        0,
    );
    assert!(narrow.unwrap_err().0.contains("plane 0"));
    let planes = MediaHeader::video_with_layout(Format::Nv12, 4, 4, &[4], &[128], 0, 0);
    assert!(planes.unwrap_err().0.contains("2 planes"));
    let inside = MediaHeader::video_with_layout(Format::Rgba, 4, 4, &[16], &[64], 0, 0);
    assert!(inside.is_err());
}

#[test]
fn audio_round_trip() {
    let h = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 1, 2).unwrap();
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    let p = MediaHeader::parse(&buf).unwrap();
    assert_eq!(p, h);
    assert_eq!(p.plane(&buf, 0).len(), 480 * 4);
}

#[test]
fn rejects_planes_outside_payload_and_bad_fields() {
    let h = MediaHeader::video(Format::I420, 64, 64, 0, 0).unwrap();
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    assert!(MediaHeader::parse(&buf[..buf.len() - 1]).is_err());
    let mut bad = buf.clone();
    bad[0] = b'X';
    assert!(MediaHeader::parse(&bad).unwrap_err().0.contains("magic"));
    let mut bad = buf.clone();
    bad[8..12].copy_from_slice(&99u32.to_le_bytes());
    assert!(MediaHeader::parse(&bad).unwrap_err().0.contains("format"));
    let mut bad = buf.clone();
    bad[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(MediaHeader::parse(&bad).is_err());
    let mut bad = buf;
    bad[12..16].copy_from_slice(&1_000_000u32.to_le_bytes()); // width no longer fits
    assert!(MediaHeader::parse(&bad).is_err());
}

#[test]
fn constructors_refuse_bad_shapes_instead_of_truncating() {
    let too_big = MAX_DIMENSION + 1;
    for (w, h) in [
        (0, 1),
        (1, 0),
        (too_big, 1),
        (1, too_big),
        (u32::MAX, u32::MAX),
    ] {
        let e = MediaHeader::video(Format::Rgba, w, h, 0, 0).unwrap_err();
        assert!(e.0.contains(&format!("{w}x{h}")), "{e}");
    }
    let big = MediaHeader::video(Format::Rgba, MAX_DIMENSION, MAX_DIMENSION, 0, 0).unwrap();
    assert_eq!(big.size[0] as u64, 4 * (MAX_DIMENSION as u64).pow(2));
    let e = MediaHeader::video(Format::PcmF32, 64, 64, 0, 0).unwrap_err();
    assert!(e.0.contains("not a video format"), "{e}");
    let e = MediaHeader::audio(Format::I420, 48000, 2, 480, 0, 0).unwrap_err();
    assert!(e.0.contains("not an audio format"), "{e}");
    for (rate, ch, n) in [
        (48000, 0, 1),
        (48000, 65, 1),
        (0, 2, 1),
        (48000, 2, MAX_SAMPLES + 1),
    ] {
        assert!(MediaHeader::audio(Format::PcmS16, rate, ch, n, 0, 0).is_err());
    }
    // The largest packet: 64 channels of f32 x 2^24 samples is 4 GiB: refused.
    let e = MediaHeader::audio(Format::PcmF32, 48000, MAX_CHANNELS, MAX_SAMPLES, 0, 0).unwrap_err();
    assert!(e.0.contains("4 GiB"), "{e}");
}

#[test]
fn parse_for_checks_the_kind_and_the_limits() {
    let v = MediaHeader::video(Format::Nv12, 64, 32, 0, 0).unwrap();
    let mut buf = vec![0u8; v.payload_len()];
    v.write_to(&mut buf).unwrap();
    assert_eq!(MediaHeader::parse_for(kind::VIDEO, &buf).unwrap(), v);
    let e = MediaHeader::parse_for(kind::AUDIO, &buf).unwrap_err();
    assert!(e.0.contains("audio record carries video format"), "{e}");
    assert!(MediaHeader::parse_for(kind::RAW, &buf).is_err());
    let a = MediaHeader::audio(Format::PcmS16, 48000, 2, 10, 0, 0).unwrap();
    let mut abuf = vec![0u8; a.payload_len()];
    a.write_to(&mut abuf).unwrap();
    assert_eq!(MediaHeader::parse_for(kind::AUDIO, &abuf).unwrap(), a);
    // A header that parse() accepts but whose rate is outside the limits.
    abuf[20..24].copy_from_slice(&5u32.to_le_bytes());
    assert!(MediaHeader::parse(&abuf).is_ok());
    assert!(MediaHeader::parse_for(kind::AUDIO, &abuf).is_err());
}

#[test]
fn version_1_headers_are_read_without_rate_or_flags() {
    let h = MediaHeader::video(Format::I420, 64, 32, 7, 8)
        .unwrap()
        .with_frame_rate(25, 1)
        .unwrap();
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    assert_eq!(u16::from_le_bytes([buf[4], buf[5]]), MEDIA_VERSION);
    assert_eq!(MediaHeader::parse(&buf).unwrap(), h);
    // The same bytes as version 1: what followed was reserved, so it is ignored.
    buf[4..6].copy_from_slice(&MEDIA_VERSION_1.to_le_bytes());
    buf[52] = 0xff;
    let v1 = MediaHeader::parse(&buf).unwrap();
    assert_eq!((v1.fps_num, v1.fps_den), (0, 1));
    assert_eq!(v1.sequence, 8);
    buf[4..6].copy_from_slice(&3u16.to_le_bytes());
    assert!(MediaHeader::parse(&buf)
        .unwrap_err()
        .0
        .contains("version 3"));
}

#[test]
fn frame_rates_are_checked() {
    let v = MediaHeader::video(Format::Nv12, 64, 32, 0, 0).unwrap();
    assert!(v.with_frame_rate(0, 0).is_ok());
    assert!(v.with_frame_rate(1000, 1).is_ok());
    assert!(v.with_frame_rate(1001, 1).is_err());
    assert!(v.with_frame_rate(30, 0).is_err());
    let a = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
    assert!(a.with_frame_rate(30, 1).is_err());
    let mut buf = vec![0u8; v.payload_len()];
    v.write_to(&mut buf).unwrap();
    buf[104..108].copy_from_slice(&30u32.to_le_bytes());
    buf[108..112].copy_from_slice(&0u32.to_le_bytes()); // 30/0
    assert!(MediaHeader::parse(&buf)
        .unwrap_err()
        .0
        .contains("frame rate"));
}

#[test]
fn end_of_stream_is_read_apart_from_frames() {
    let end = EndOfStream {
        pts_ns: 1,
        sequence: 2,
    };
    let b = end.to_bytes();
    assert_eq!(read(kind::AUDIO, &b).unwrap(), MediaRecord::End(end));
    assert!(read(kind::RAW, &b).is_err());
    assert!(MediaHeader::parse(&b)
        .unwrap_err()
        .0
        .contains("end-of-stream"));
    let mut bad = b;
    bad[48] = 1; // planes
    assert!(read(kind::VIDEO, &bad).is_err());
    let mut bad = b;
    bad[52] = 2; // an unknown flag
    assert!(read(kind::VIDEO, &bad).unwrap_err().0.contains("flags"));
    // A frame reads as one.
    let h = MediaHeader::audio(Format::PcmS16, 48000, 1, 4, 0, 5).unwrap();
    let mut buf = vec![0u8; h.payload_len()];
    h.write_to(&mut buf).unwrap();
    assert_eq!(read(kind::AUDIO, &buf).unwrap(), MediaRecord::Frame(h));
    assert!(read(kind::VIDEO, &buf).is_err());
}

#[test]
fn numbering_fills_auto_sequences_per_stream_and_kind() {
    let mut n = Numbering::default();
    let header = |seq: u64| {
        let h = MediaHeader::audio(Format::PcmS16, 48000, 1, 4, 0, seq).unwrap();
        let mut b = vec![0u8; h.payload_len()];
        h.write_to(&mut b).unwrap();
        b
    };
    let seq = |b: &[u8]| u64::from_le_bytes(b[40..48].try_into().unwrap());
    let mut got = vec![];
    for (stream, k, given) in [
        (0, kind::AUDIO, SEQUENCE_AUTO),
        (0, kind::AUDIO, SEQUENCE_AUTO),
        (0, kind::VIDEO, SEQUENCE_AUTO), // video is numbered apart
        (1, kind::AUDIO, SEQUENCE_AUTO), // so is another stream
        (0, kind::AUDIO, 10),            // given: kept, and followed
        (0, kind::AUDIO, SEQUENCE_AUTO),
        (0, kind::RAW, SEQUENCE_AUTO), // not media: untouched
    ] {
        let mut b = header(given);
        n.number(stream, k, &mut b);
        got.push(seq(&b));
    }
    assert_eq!(got, vec![0, 1, 0, 0, 10, 11, SEQUENCE_AUTO]);
    let mut end = EndOfStream {
        pts_ns: 0,
        sequence: SEQUENCE_AUTO,
    }
    .to_bytes();
    n.number(0, kind::AUDIO, &mut end);
    assert_eq!(seq(&end), 12);
    // More streams than the table holds: the one written longest ago starts again.
    for s in 2..2 + NUMBERED_STREAMS as u32 {
        let mut b = header(SEQUENCE_AUTO);
        n.number(s, kind::AUDIO, &mut b);
    }
    let mut b = header(SEQUENCE_AUTO);
    n.number(0, kind::VIDEO, &mut b);
    assert_eq!(seq(&b), 0);
}

#[test]
fn plane_table_of_every_format_at_odd_sizes() {
    for (w, h) in [
        (1u32, 1u32),
        (3, 5),
        (7, 2),
        (2, 9),
        (1921, 1081),
        (16384, 16383),
    ] {
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        for f in Format::ALL {
            let t = f.plane_table(w, h);
            let want: Vec<(u32, u32, u32, u32)> = match f {
                Format::I420 => vec![(w, h, 1, 1), (cw, ch, 1, 1), (cw, ch, 1, 1)],
                Format::Nv12 => vec![(w, h, 1, 1), (cw, ch, 2, 1)],
                Format::Rgba => vec![(w, h, 4, 1)],
                // Audio: w channels x h samples.
                Format::PcmS16 => vec![(w, h, 1, 2)],
                Format::PcmF32 => vec![(w, h, 1, 4)],
            };
            let got: Vec<_> = t
                .iter()
                .map(|p| (p.columns, p.rows, p.components, p.component_bytes))
                .collect();
            assert_eq!(got, want, "{f} {w}x{h}");
            let tight: u64 = want
                .iter()
                .map(|&(c, r, n, b)| c as u64 * r as u64 * n as u64 * b as u64)
                .sum();
            assert_eq!(t.bytes(), tight, "{f} {w}x{h}");
            for p in t.iter() {
                assert_eq!(
                    p.row_bytes(),
                    p.columns as u64 * p.element_bytes(),
                    "{f} {w}x{h}"
                );
            }
            // The headers built for the size are laid out by the table.
            let hd = if f.is_video() {
                MediaHeader::video(f, w, h, 0, 0).unwrap()
            } else if w <= MAX_CHANNELS {
                MediaHeader::audio(f, 48000, w, h, 0, 0).unwrap()
            } else {
                continue;
            };
            assert_eq!(hd.plane_table(), t);
            assert_eq!(hd.planes as usize, t.len());
            for (i, p) in t.iter().enumerate() {
                assert_eq!(hd.stride[i] as u64, p.row_bytes(), "{f} {w}x{h} plane {i}");
                assert_eq!(hd.size[i] as u64, p.bytes(), "{f} {w}x{h} plane {i}");
            }
            let mut buf = vec![0u8; hd.payload_len()];
            hd.write_to(&mut buf).unwrap();
            assert_eq!(MediaHeader::parse(&buf).unwrap(), hd);
        }
    }
    // 1080p I420 by the table: the familiar 3 110 400 bytes.
    assert_eq!(Format::I420.plane_table(1920, 1080).bytes(), 3_110_400);
}

#[test]
fn a_stride_below_the_tables_row_is_refused_when_parsed() {
    // NV12 5x3: the UV plane's row is 3 elements of 2 bytes.
    let hd = MediaHeader::video(Format::Nv12, 5, 3, 0, 0).unwrap();
    assert_eq!((hd.stride[1], hd.size[1]), (6, 12));
    let mut buf = vec![0u8; hd.payload_len()];
    hd.write_to(&mut buf).unwrap();
    buf[60..64].copy_from_slice(&5u32.to_le_bytes()); // stride 5
    buf[92..96].copy_from_slice(&10u32.to_le_bytes()); // size 5 x 2
    let e = MediaHeader::parse(&buf).unwrap_err();
    assert!(e.0.contains("plane 1"), "{e}");
}

#[test]
fn names_round_trip_over_every_format() {
    let names: Vec<_> = Format::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["i420", "nv12", "rgba", "pcm_s16", "pcm_f32"]);
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>(), Ok(f));
        assert_eq!(f.name().to_uppercase().parse::<Format>(), Ok(f));
        assert_eq!(f.to_string(), f.name());
        assert_eq!(Format::from_u32(f as u32), Some(f));
        for a in f.aliases() {
            assert_eq!(a.parse::<Format>(), Ok(f));
        }
    }
    assert_eq!(Format::from_u32(0), None);
    assert_eq!(Format::from_u32(4), None);
}

#[test]
fn aliases_and_the_unknown_name_error() {
    assert_eq!("s16".parse::<Format>(), Ok(Format::PcmS16));
    assert_eq!("F32".parse::<Format>(), Ok(Format::PcmF32));
    assert_eq!("Pcm_S16".parse::<Format>(), Ok(Format::PcmS16));
    assert_eq!(Format::PcmS16.aliases().collect::<Vec<_>>(), ["s16"]);
    assert_eq!(Format::I420.aliases().count(), 0);
    for bad in ["", "yuv9", "i 420", "pcm", "S16LE"] {
        let e = bad.parse::<Format>().unwrap_err();
        assert_eq!(e, UnknownFormat(bad.to_string()));
        assert_eq!(
            e.to_string(),
            format!(
                "unknown media format {bad:?}: expected one of i420, nv12, rgba, \
                 pcm_s16 (or s16), pcm_f32 (or f32)"
            )
        );
    }
}
