//! `shmring record` against producers that lie about streams: a stream belongs to
//! the producer slot that started it, and each slot has room of its own. The
//! producers here are in this process, one slot each (`Segment::producer`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;
use shmring::media::{kind, Format, MediaHeader, SEQUENCE_AUTO};
use shmring::{Address, FullPolicy, Meta, Producer, Segment};

const SIGINT: i32 = 2;

/// `shmring record --create RING --out DIR`, ready.
fn recorder(ring: &Ring, dir: &Path) -> Proc {
    let out = dir.to_str().unwrap();
    let p = Proc::spawn(&["record", "--create", &ring.0, "--out", out]);
    p.expect("ready");
    p
}

/// A producer of `seg` that waits for space rather than drop.
fn producer(seg: &std::sync::Arc<Segment>) -> Producer {
    let mut p = seg.producer().expect("a producer slot");
    p.set_policy(FullPolicy::Block(Duration::from_secs(30)));
    p
}

/// 10 ms of 48 kHz stereo, numbered by the producer.
fn packet() -> Vec<u8> {
    let hd = MediaHeader::audio(Format::PcmS16, 48000, 2, 480, 0, SEQUENCE_AUTO).unwrap();
    let mut b = vec![0u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

/// A 64x48 I420 frame, numbered by the producer.
fn frame() -> Vec<u8> {
    let hd = MediaHeader::video(Format::I420, 64, 48, 0, SEQUENCE_AUTO).unwrap();
    let mut b = vec![0x80u8; hd.payload_len()];
    hd.write_to(&mut b).unwrap();
    b
}

/// The summary's entry for `kind` stream `id`.
fn stream<'a>(done: &'a Value, k: &str, id: u64) -> &'a Value {
    done["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == k && s["stream"] == id)
        .unwrap_or_else(|| panic!("no {k} stream {id} in {done}"))
}

/// Another producer's 300 end-of-stream records on a stream it did not start
/// (interleaved with the stream's own packets) are refused and counted: the
/// stream's owner keeps one file with every packet, and the message names the
/// slot that sent them.
#[test]
fn ends_from_another_slot_are_refused_and_counted() {
    let ring = ring_name("forged-ends");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path());
    let seg = Address::named(&ring.0).open().unwrap();
    let (mut owner, mut forger) = (producer(&seg), producer(&seg));
    let pcm = packet();
    for _ in 0..300 {
        owner.send(&pcm, Meta::new(0, kind::AUDIO)).unwrap();
        forger.end_stream(0, kind::AUDIO).unwrap();
    }
    owner.send(&pcm, Meta::new(0, kind::AUDIO)).unwrap();
    owner.end_stream(0, kind::AUDIO).unwrap();
    let forger_slot = forger.slot();
    // The producers stay attached until the recorder has read everything: a
    // stream whose owner is gone passes to the next slot that writes it.
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    drop((owner, forger, seg));
    let s = stream(&done, "audio", 0);
    assert_eq!(s["received"], 301, "every packet of the owner: {err}");
    assert_eq!(s["ends"], 1, "the owner's own end: {err}");
    assert_eq!(s["foreign"], 300, "{err}");
    assert_eq!(done["refused_foreign"], 300, "{err}");
    let files = s["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{err}");
    assert_eq!(files[0]["units"], 301 * 480);
    assert!(dir.path().join("audio-0.wav").exists());
    assert!(!dir.path().join("audio-0-2.wav").exists());
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("shmring record: refused"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {err}");
    assert!(
        said[0].contains(&format!("slot {forger_slot}")),
        "names the slot that sent them: {err}"
    );
    all_play(dir.path());
}

/// One producer starting 200 stream ids uses its own room only: a producer that
/// starts later is still recorded, and the streams refused are counted.
#[test]
fn one_slots_junk_streams_leave_room_for_others() {
    let ring = ring_name("junk-ids");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path());
    let seg = Address::named(&ring.0).open().unwrap();
    let mut junk = producer(&seg);
    let pcm = packet();
    for id in 1000..1200 {
        junk.send(&pcm, Meta::new(id, kind::AUDIO)).unwrap();
    }
    let mut late = producer(&seg);
    let v = frame();
    for _ in 0..10 {
        late.send(&v, Meta::new(0, kind::VIDEO)).unwrap();
        late.send(&pcm, Meta::new(0, kind::AUDIO)).unwrap();
    }
    late.end_stream(0, kind::VIDEO).unwrap();
    late.end_stream(0, kind::AUDIO).unwrap();
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    drop((junk, late, seg));
    assert_eq!(stream(&done, "video", 0)["received"], 10, "{err}");
    assert_eq!(stream(&done, "audio", 0)["received"], 10, "{err}");
    let room = done["streams_per_slot"]
        .as_u64()
        .expect("the room per slot");
    assert!(room < 200);
    assert_eq!(done["refused_streams"], 200 - room, "{err}");
    let junk_streams = done["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stream"].as_u64().unwrap() >= 1000)
        .count() as u64;
    assert_eq!(junk_streams, room, "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("new streams refused"))
            .count(),
        1,
        "said once: {err}"
    );
    all_play(dir.path());
}

/// ffprobe's view of `path`: its streams' codecs, or the error it printed.
fn probe_codecs(path: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("ffprobe runs (install ffmpeg)");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// ffprobe reads every file in `dir` (and none is left unfinished).
fn all_play(dir: &Path) {
    for f in std::fs::read_dir(dir).unwrap() {
        let f = f.unwrap().path();
        assert!(!f.to_string_lossy().ends_with(".part"), "{}", f.display());
        probe_codecs(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// A recorder killed with SIGKILL leaves `NAME.part` files; the next recorder on
/// the same directory finishes them (whole frames, WAV sizes patched, renamed)
/// and writes its own files beside them, not over them.
#[test]
fn the_next_recorder_finishes_what_a_killed_one_left() {
    let (ring, next) = (ring_name("killed"), ring_name("after-kill"));
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path());
    let seg = Address::named(&ring.0).open().unwrap();
    let mut p = producer(&seg);
    let (v, pcm) = (frame(), packet());
    for _ in 0..100 {
        p.send(&v, Meta::new(0, kind::VIDEO)).unwrap();
        p.send(&pcm, Meta::new(0, kind::AUDIO)).unwrap();
    }
    let (y4m, wav) = (
        dir.path().join("video-0.y4m"),
        dir.path().join("audio-0.wav"),
    );
    let part =
        |p: &Path| p.with_extension(format!("{}.part", p.extension().unwrap().to_str().unwrap()));
    // Past the first 64 KiB buffer of each: some of it is on disk.
    wait_for("the recorder's first writes", || {
        size(&part(&y4m)) >= 64 << 10 && size(&part(&wav)) >= 64 << 10
    });
    rec.kill();
    drop((p, seg));
    assert!(!y4m.exists() && !wav.exists());
    let out = dir.path().to_str().unwrap();
    let mut again = Proc::spawn(&["record", "--create", &next.0, "--out", out]);
    again.expect("ready");
    let seg = Address::named(&next.0).open().unwrap();
    let mut p = producer(&seg);
    p.send(&v, Meta::new(0, kind::VIDEO)).unwrap();
    p.end_stream(0, kind::VIDEO).unwrap();
    again.signal(SIGINT);
    let (_, err) = again.finish("recorded");
    drop((p, seg));
    assert!(err.contains("finished 2 file(s)"), "{err}");
    assert!(!part(&y4m).exists() && !part(&wav).exists(), "{err}");
    let header = "YUV4MPEG2 W64 H48 F30:1 Ip A1:1 C420jpeg\n".len() as u64;
    let frame_len = 6 + 64 * 48 * 3 / 2;
    let frames = (size(&y4m) - header) / frame_len;
    assert!(frames >= 1, "{err}");
    assert_eq!(size(&y4m), header + frames * frame_len, "whole frames only");
    let w = std::fs::read(&wav).unwrap();
    let le = |i: usize| u32::from_le_bytes(w[i..i + 4].try_into().unwrap()) as usize;
    assert_eq!(
        (le(4), le(40)),
        (w.len() - 8, w.len() - 44),
        "sizes patched"
    );
    assert_eq!(le(40) % 4, 0, "whole sample frames");
    // The new recording went beside it.
    let newer = dir.path().join("video-0-2.y4m");
    assert_eq!(size(&newer), header + frame_len, "{err}");
    for f in [&y4m, &wav, &newer] {
        let codecs = probe_codecs(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(codecs.len(), 1, "{}", f.display());
    }
}

/// The summary names what it measures: resident memory without the ring, the
/// private part of it (pages no other process maps: less, since the program's
/// libraries are shared) and heap and stacks; "private" was the resident figure.
#[test]
fn the_summary_says_which_memory_it_measured() {
    let ring = ring_name("memory");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = recorder(&ring, dir.path());
    let seg = Address::named(&ring.0).open().unwrap();
    let mut p = producer(&seg);
    for _ in 0..50 {
        p.send(&frame(), Meta::new(0, kind::VIDEO)).unwrap();
    }
    rec.signal(SIGINT);
    let (done, err) = rec.finish("recorded");
    drop((p, seg));
    let kb = |k: &str| done[k].as_u64().unwrap_or_else(|| panic!("{k}: {done}"));
    let (rss, private, anon) = (
        kb("peak_rss_kb"),
        kb("peak_private_rss_kb"),
        kb("peak_rss_anon_kb"),
    );
    assert!(
        0 < anon && anon <= private && private < rss,
        "{rss} {private} {anon}"
    );
    assert!(
        err.contains("MiB resident") && err.contains("MiB private (mapped by no other process)"),
        "{err}"
    );
    all_play(dir.path());
}
