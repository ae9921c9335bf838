//! `record --websocket` (hidden; the receiver of `shmring bench --workload bot`):
//! the recorder fed by a WebSocket sent as a browser sends it (masked, in
//! 131,000-byte fragments) makes the same MP4s as from a ring.

use super::*;
use shmring::media::EndOfStream;
use shmring_bench::wire::{ws_client, WsFrames, END_ALL};

/// Two participants' video and audio over one WebSocket: an MP4 each with every
/// frame, H.264 and AAC; the recorder ends by itself once the sender has.
#[test]
fn a_websocket_is_recorded_as_a_ring_is() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let mut rec = Proc::spawn(&[
        "record",
        "--encode",
        "--preset",
        "ultrafast",
        "--websocket",
        "127.0.0.1:0",
        "--out",
        out,
    ]);
    let port = rec.expect("ready")["port"].as_u64().unwrap() as u16;
    let mut ws = ws_client(port).unwrap();
    // Frames larger than a fragment, so messages arrive in pieces.
    let (w, h, frames) = (320, 240, 30u64);
    let vhd = MediaHeader::video(Format::I420, w, h, 0, 0)
        .unwrap()
        .with_frame_rate(30, 1)
        .unwrap();
    let ahd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, 0).unwrap();
    let mut video = WsFrames::new(vhd.payload_len());
    let mut audio = WsFrames::new(ahd.payload_len());
    let base = shmring::now_ns();
    let mut records = 0u64;
    for k in 0..frames {
        for id in [1u32, 2] {
            let ts = base + k * 33_333_333;
            video.prepare((0, k, id), vhd.payload_len(), |b| {
                let hd = MediaHeader {
                    pts_ns: ts - base,
                    sequence: k,
                    ..vhd
                };
                hd.write_to(b).unwrap();
                // A moving bar, so frames differ.
                let o = hd.offset[0] as usize;
                b[o..o + (w * h) as usize].fill(16);
                for r in 0..h as usize {
                    b[o + r * w as usize + (k as usize * 5) % w as usize] = 235;
                }
            });
            video.set_meta(kind::VIDEO, ts);
            video.write(&mut ws).unwrap();
            for j in 0..3 {
                let (seq, ats) = (k * 3 + j, ts + j * 10_000_000);
                audio.prepare((0, seq, id), ahd.payload_len(), |b| {
                    let hd = MediaHeader {
                        pts_ns: ats - base,
                        sequence: seq,
                        ..ahd
                    };
                    hd.write_to(b).unwrap();
                });
                audio.set_meta(kind::AUDIO, ats);
                audio.write(&mut ws).unwrap();
            }
            records += 4;
        }
    }
    for id in [1u32, 2] {
        for (k, n) in [(kind::VIDEO, frames), (kind::AUDIO, 3 * frames)] {
            let end = EndOfStream {
                pts_ns: 0,
                sequence: n,
            }
            .to_bytes();
            let mut f = WsFrames::new(end.len());
            f.prepare((0, n, id), end.len(), |b| b.copy_from_slice(&end));
            f.set_meta(k, shmring::now_ns());
            f.write(&mut ws).unwrap();
            records += 1;
        }
    }
    WsFrames::new(0)
        .send(&mut ws, (END_ALL, 0, 0), 0, |_| {})
        .unwrap();
    let (done, err) = rec.finish("recorded");
    assert_eq!(done["websocket"]["records_consumed"], records, "{err}");
    assert_eq!(done["websocket"]["connections"], 1, "{err}");
    for id in [1, 2] {
        let path = dir.path().join(format!("stream-{id}.mp4"));
        let p = probe(&path).unwrap_or_else(|e| panic!("{e}; {err}"));
        assert_eq!(
            (p[0].codec.as_str(), p[0].frames),
            ("h264", frames),
            "{err}"
        );
        assert_eq!(p[1].codec, "aac", "{err}");
    }
}

/// An address it cannot listen on is refused with the address and the cause.
#[test]
fn an_address_it_cannot_listen_on_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = run(&[
        "record",
        "--encode",
        "--websocket",
        "not-an-address",
        "--out",
        out,
    ]);
    assert_fails(&o, &["not-an-address", "WebSocket"]);
}
