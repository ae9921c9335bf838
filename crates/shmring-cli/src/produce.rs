//! `shmring produce`: a synthetic capture process. Each video stream and the audio
//! run on their own thread with their own producer, paced in real time; frames are
//! drawn in place in the ring (reserve, fill, commit) with no per-frame allocation.
//!
//! The last stdout line is `{"produced": ...}` with what was attempted, sent and
//! dropped per stream.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::media::{kind, Format, MediaHeader, MAX_DIMENSION};
use shmring::{FullPolicy, Meta, Segment};

use crate::cli::{Policy, ProduceArgs};
use crate::pattern::{Pattern, Tone};
use crate::{fail, procinfo, stop_flag, CmdError};

/// Frame rates `produce` paces.
const FPS: std::ops::RangeInclusive<u32> = 1..=1000;

/// `WIDTHxHEIGHT@FPS`; a bad value says which part is wrong.
pub fn parse_video(s: &str) -> Result<Option<(u32, u32, u32)>, String> {
    if s == "none" {
        return Ok(None);
    }
    let bad = |why: String| format!("--video {s:?}: {why}");
    let form = || bad("expected WIDTHxHEIGHT@FPS like 1920x1080@30, or none".into());
    let (size, fps) = s.split_once('@').ok_or_else(form)?;
    let (w, h) = size.split_once('x').ok_or_else(form)?;
    let side = |what: &str, v: &str| -> Result<u32, String> {
        match v.parse::<u32>() {
            Ok(n) if (1..=MAX_DIMENSION).contains(&n) => Ok(n),
            _ => Err(bad(format!(
                "{what} {v:?} is not a whole number from 1 to {MAX_DIMENSION}"
            ))),
        }
    };
    let (w, h) = (side("width", w)?, side("height", h)?);
    let fps: u32 = match fps.parse::<u32>() {
        Ok(n) if FPS.contains(&n) => n,
        _ => {
            return Err(bad(format!(
                "frame rate {fps:?} is not a whole number from {} to {}",
                FPS.start(),
                FPS.end()
            )))
        }
    };
    Pattern::new(w, h).map_err(bad)?;
    Ok(Some((w, h, fps)))
}

/// `RATExCHANNELS`.
pub fn parse_audio(s: &str) -> Result<Option<(u32, u32)>, String> {
    if s == "none" {
        return Ok(None);
    }
    let bad = || {
        format!(
            "--audio {s:?}: expected RATExCHANNELS like 48000x2 (rate a multiple of 100), or none"
        )
    };
    let (r, c) = s.split_once('x').ok_or_else(bad)?;
    let (r, c): (u32, u32) = (r.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?);
    if !(1000..=768_000).contains(&r) || r % 100 != 0 || !(1..=64).contains(&c) {
        return Err(bad());
    }
    Ok(Some((r, c)))
}

/// What one thread did.
#[derive(Debug, Default, Clone)]
pub struct StreamResult {
    pub stream: u32,
    pub attempted: u64,
    pub sent: u64,
    pub dropped: u64,
    /// Audio: sample frames in the packets sent.
    pub samples_sent: u64,
    /// Records not made because --seconds (wall time) ran out first: the producer
    /// could not keep up with the rate.
    pub missed: u64,
    /// The stream's end-of-stream record was committed.
    pub ended: bool,
    pub error: Option<String>,
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

struct Pace {
    start: Instant,
    period: Duration,
}

impl Pace {
    fn due(&self, i: u64) -> Instant {
        self.start + self.period.mul_f64(i as f64)
    }
}

/// Is this a failure of one record that the next may not have (the record is
/// dropped and counted, and producing goes on)? A full ring; a claim taken away by
/// a reset; a ring a peer scribbled on, which the consumer resets by itself.
fn is_drop(e: &shmring::Error) -> bool {
    matches!(
        e,
        shmring::Error::Full { .. }
            | shmring::Error::Timeout { .. }
            | shmring::Error::Abandoned { .. }
            | shmring::Error::Corrupt { .. }
    )
}

/// Records committed while no consumer is alive would be counted as sent and
/// never read: the producer stops instead (one `fcntl` per record).
fn consumer_gone(seg: &Segment, what: &str, stream: u32, res: &StreamResult) -> Option<String> {
    (!seg.consumer_alive()).then(|| {
        format!(
            "{what} stream {stream}: ring {} has no live consumer any more (the recorder is \
             gone); stopped after {} sent",
            seg.name(),
            res.sent
        )
    })
}

fn video_thread(
    seg: Arc<Segment>,
    stream: u32,
    (w, h, fps): (u32, u32, u32),
    frames: u64,
    policy: FullPolicy,
    stop: Arc<AtomicBool>,
    span: (Instant, Instant),
) -> StreamResult {
    let pattern = Pattern::new(w, h).expect("size checked by parse_video");
    let plan = Plan {
        stream,
        kind: kind::VIDEO,
        what: "video",
        base: MediaHeader::video(Format::I420, w, h, 0, 0)
            .and_then(|hd| hd.with_frame_rate(fps, 1)),
        count: frames,
        period: Duration::from_secs(1) / fps,
        policy,
    };
    run_stream(seg, plan, stop, span, |i, hd, p| pattern.draw(i, hd, p))
}

fn audio_thread(
    seg: Arc<Segment>,
    stream: u32,
    (rate, channels): (u32, u32),
    packets: u64,
    policy: FullPolicy,
    stop: Arc<AtomicBool>,
    span: (Instant, Instant),
) -> StreamResult {
    let samples = rate / 100;
    let mut tone = Tone::new(440.0, rate);
    let plan = Plan {
        stream,
        kind: kind::AUDIO,
        what: "audio",
        base: MediaHeader::audio(Format::PcmS16, rate, channels, samples, 0, 0),
        count: packets,
        period: Duration::from_millis(10),
        policy,
    };
    let mut res = run_stream(seg, plan, stop, span, |_, hd, p| {
        let (o, s) = (hd.offset[0] as usize, hd.size[0] as usize);
        tone.fill_s16(&mut p[o..o + s], channels as usize);
    });
    res.samples_sent = res.sent * samples as u64;
    res
}

/// One stream's records: what they are, how many, how often.
struct Plan {
    stream: u32,
    kind: u32,
    what: &'static str,
    /// The media header of every record, but for its timestamp and sequence.
    base: Result<MediaHeader, shmring::media::MediaError>,
    count: u64,
    period: Duration,
    policy: FullPolicy,
}

/// Produces one stream: a record every period from `start`, until its count,
/// `end` or `stop`; `fill` draws record `i` after its header. Ends the stream.
fn run_stream(
    seg: Arc<Segment>,
    plan: Plan,
    stop: Arc<AtomicBool>,
    (start, end): (Instant, Instant),
    mut fill: impl FnMut(u64, &MediaHeader, &mut [u8]),
) -> StreamResult {
    let (stream, what) = (plan.stream, plan.what);
    let mut res = StreamResult {
        stream,
        ..Default::default()
    };
    let mut prod = match seg.producer() {
        Ok(p) => p,
        Err(e) => {
            res.error = Some(format!("{what} stream {stream}: {e}"));
            return res;
        }
    };
    prod.set_policy(plan.policy);
    let base = match plan.base {
        Ok(hd) => hd,
        Err(e) => {
            res.error = Some(format!("{what} stream {stream}: {e}"));
            return res;
        }
    };
    let len = base.payload_len();
    let pace = Pace {
        start,
        period: plan.period,
    };
    for i in 0..plan.count {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if pace.due(i) >= end || Instant::now() >= end {
            res.missed = plan.count - i;
            break;
        }
        sleep_until(pace.due(i));
        if let Some(e) = consumer_gone(&seg, what, stream, &res) {
            res.error = Some(e);
            break;
        }
        res.attempted += 1;
        let pts = shmring::now_ns();
        let mut r = match prod.reserve(len) {
            Ok(r) => r,
            Err(e) if is_drop(&e) => {
                res.dropped += 1;
                continue;
            }
            Err(e) => {
                res.dropped += 1;
                res.error = Some(format!("{what} stream {stream}: {e}"));
                break;
            }
        };
        let hd = MediaHeader {
            pts_ns: pts,
            sequence: i,
            ..base
        };
        let p = r.payload();
        hd.write_to(p).expect("reserved the header's payload_len");
        fill(i, &hd, p);
        match r.commit(Meta::new(stream, plan.kind).with_timestamp(pts)) {
            Ok(()) => res.sent += 1,
            Err(e) => {
                res.dropped += 1;
                if !is_drop(&e) {
                    res.error = Some(format!("{what} stream {stream}: {e}"));
                    break;
                }
            }
        }
    }
    end_stream(&mut prod, stream, plan.kind, &mut res);
    res
}

/// Ends the stream (readers close its file, or send EOS) unless the ring failed.
fn end_stream(prod: &mut shmring::Producer, stream: u32, k: u32, res: &mut StreamResult) {
    if res.error.is_some() {
        return;
    }
    match prod.end_stream(stream, k) {
        Ok(()) => res.ended = true,
        Err(e) if is_drop(&e) => {}
        Err(e) => res.error = Some(format!("stream {stream}: its end of stream: {e}")),
    }
}

fn missed_note(missed: u64) -> String {
    if missed == 0 {
        String::new()
    } else {
        format!(", {missed} not made in time (the producer fell behind the rate)")
    }
}

fn result_json(r: &StreamResult) -> serde_json::Value {
    json!({"stream": r.stream, "attempted": r.attempted, "sent": r.sent,
           "dropped": r.dropped, "samples_sent": r.samples_sent, "missed": r.missed,
           "ended": r.ended, "error": r.error})
}

pub fn run(a: ProduceArgs) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    let video = parse_video(&a.media.video).map_err(|m| fail(2, m))?;
    let audio = parse_audio(&a.media.audio).map_err(|m| fail(2, m))?;
    if video.is_none() && audio.is_none() {
        return Err(fail(
            2,
            "--video none and --audio none: nothing to produce; give a video size or an audio rate",
        ));
    }
    if !(a.seconds > 0.0 && a.seconds <= 1e6) {
        return Err(fail(
            2,
            format!(
                "--seconds {}: expected more than 0, at most 1000000",
                a.seconds
            ),
        ));
    }
    if a.media.streams == 0 || a.media.streams > 32 {
        return Err(fail(
            2,
            format!("--streams {}: expected 1 to 32", a.media.streams),
        ));
    }
    if a.participants.is_some_and(|n| n == 0 || n > 32) {
        return Err(fail(
            2,
            format!(
                "--participants {}: expected 1 to 32",
                a.participants.unwrap_or(0)
            ),
        ));
    }
    // Stream ids of the video threads, and of the audio threads.
    let (video_ids, audio_ids): (Vec<u32>, Vec<u32>) = match a.participants {
        Some(n) => {
            let ids: Vec<u32> = (0..n).map(|i| a.first_stream.saturating_add(i)).collect();
            (ids.clone(), ids)
        }
        None => ((0..a.media.streams).collect(), vec![0]),
    };
    if a.ring.is_none() && a.connect.is_none() {
        return Err(fail(2, "give --ring NAME or --connect PATH"));
    }
    let address =
        crate::ringref::address(a.ring.as_deref(), a.connect.as_deref()).map_err(|m| fail(2, m))?;
    let reached = crate::ringref::Reached::of(&address);
    let label = reached.label();
    let seg = crate::ringref::open(address).map_err(|m| fail(1, m))?;
    if let Some((w, h, _)) = video {
        let len = MediaHeader::video(Format::I420, w, h, 0, 0)
            .map_err(|e| fail(2, format!("--video: {e}")))?
            .payload_len() as u64;
        let max = seg.geometry().max_record;
        if len > max {
            return Err(fail(
                1,
                format!(
                    "ring {}: a {w}x{h} frame needs {:.1} MiB ({len} bytes); this ring takes \
                     records of at most {:.1} MiB ({max} bytes)",
                    seg.name(),
                    len as f64 / (1 << 20) as f64,
                    max as f64 / (1 << 20) as f64
                ),
            ));
        }
    }
    if !seg.consumer_alive() {
        let hint = match &reached {
            crate::ringref::Reached::Named(r) => format!(
                "start `shmring record --create {r}` first; a ring left by a killed recorder \
                 is removed with `shmring rm {r}`"
            ),
            crate::ringref::Reached::Socket(_) => {
                "the consumer that served this socket is gone; connect to a new one".into()
            }
            crate::ringref::Reached::Other(_) => "start the ring's consumer first".into(),
        };
        return Err(fail(
            1,
            format!("ring {}: no live consumer is attached ({hint})", seg.name()),
        ));
    }
    let policy = match a.policy {
        Policy::Block => FullPolicy::Block(Duration::from_millis(a.block_ms)),
        Policy::Drop => FullPolicy::Fail,
    };
    let start = Instant::now();
    // --seconds is wall time: every thread stops at `end`, caught up or not.
    let end = start + Duration::from_secs_f64(a.seconds);
    let mut vids = Vec::new();
    if let Some(v) = video {
        let frames = (a.seconds * v.2 as f64).round() as u64;
        for &s in &video_ids {
            let (seg, stop) = (seg.clone(), stop.clone());
            vids.push(std::thread::spawn(move || {
                video_thread(seg, s, v, frames, policy, stop, (start, end))
            }));
        }
    }
    let mut auds = Vec::new();
    if let Some(au) = audio {
        let packets = (a.seconds * 100.0).round() as u64;
        for &s in &audio_ids {
            let (seg, stop) = (seg.clone(), stop.clone());
            auds.push(std::thread::spawn(move || {
                audio_thread(seg, s, au, packets, policy, stop, (start, end))
            }));
        }
    }
    let vres: Vec<StreamResult> = vids
        .into_iter()
        .map(|h| h.join().expect("video thread panicked"))
        .collect();
    let all_audio: Vec<StreamResult> = auds
        .into_iter()
        .map(|h| h.join().expect("audio thread panicked"))
        .collect();
    let ares = if a.participants.is_some() {
        None
    } else {
        all_audio.first().cloned()
    };
    let elapsed = start.elapsed().as_secs_f64();
    let (cpu_s, max_rss_kb) = procinfo::own_usage();
    let out = json!({"produced": {
        "ring": label,
        "video": vres.iter().map(result_json).collect::<Vec<_>>(),
        "audio": if a.participants.is_some() {
            json!(all_audio.iter().map(result_json).collect::<Vec<_>>())
        } else {
            json!(ares.as_ref().map(result_json))
        },
        "elapsed_s": elapsed, "cpu_s": cpu_s,
        "cpu_percent": if elapsed > 0.0 { 100.0 * cpu_s / elapsed } else { 0.0 },
        "max_rss_kb": max_rss_kb,
    }});
    {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{out}");
        let _ = o.flush();
    }
    let e = &mut std::io::stderr().lock();
    for (r, audio) in vres
        .iter()
        .map(|r| (r, false))
        .chain(all_audio.iter().map(|r| (r, true)))
    {
        let what = if audio {
            format!(
                "audio stream {}: {} packets ({} samples)",
                r.stream, r.sent, r.samples_sent
            )
        } else {
            format!("video stream {}: {} frames", r.stream, r.sent)
        };
        let _ = writeln!(
            e,
            "shmring produce: {what} sent, {} dropped{}",
            r.dropped,
            missed_note(r.missed)
        );
    }
    let _ = writeln!(
        e,
        "shmring produce: CPU {cpu_s:.2} s over {elapsed:.1} s ({:.1}%)",
        if elapsed > 0.0 {
            100.0 * cpu_s / elapsed
        } else {
            0.0
        }
    );
    if let Some(err) = vres
        .iter()
        .chain(all_audio.iter())
        .find_map(|r| r.error.clone())
    {
        return Err(fail(1, err));
    }
    Ok(())
}
