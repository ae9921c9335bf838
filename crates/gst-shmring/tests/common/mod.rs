//! Helpers for the pipeline tests: guards that stop pipelines, kill and reap child
//! processes and unlink rings on drop, even when a test fails.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use gst::prelude::*;
use shmring_host::ChildGuard;

/// Initialises GStreamer and registers the elements once per process.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        gst::init().expect("GStreamer initialises");
        gstshmring::plugin_register_static().expect("elements register");
    });
}

/// A unique ring name, unlinked from /dev/shm on drop (even when a test fails):
/// the test kit's; these suites name themselves `gst`.
pub use shmring_testkit::ShmName as RingName;

/// A pipeline set to NULL on drop.
pub struct Pipeline(
    pub gst::Element,
    std::cell::RefCell<Vec<(gst::MessageType, String)>>,
);

impl Pipeline {
    pub fn launch(desc: &str) -> Pipeline {
        init();
        Pipeline(
            gst::parse::launch(desc).unwrap_or_else(|e| panic!("pipeline {desc}: {e}")),
            Default::default(),
        )
    }
    pub fn play(&self) {
        self.0
            .set_state(gst::State::Playing)
            .unwrap_or_else(|e| panic!("pipeline does not start: {e}: {:?}", self.error()));
    }
    pub fn by_name(&self, name: &str) -> gst::Element {
        self.0
            .downcast_ref::<gst::Bin>()
            .expect("a bin")
            .by_name(name)
            .unwrap_or_else(|| panic!("no element {name}"))
    }
    pub fn appsink(&self, name: &str) -> gst_app::AppSink {
        self.by_name(name)
            .downcast::<gst_app::AppSink>()
            .expect("an appsink")
    }
    pub fn u64(&self, element: &str, prop: &str) -> u64 {
        self.by_name(element).property::<u64>(prop)
    }
    /// Takes every message on the bus (without waiting) into the stash.
    fn drain(&self) {
        let Some(bus) = self.0.bus() else { return };
        let mut stash = self.1.borrow_mut();
        while let Some(msg) = bus.pop() {
            if let Some(text) = stashed(&msg) {
                stash.push((msg.type_(), text));
            }
        }
    }
    /// The QoS messages element `el` posted so far: (processed, dropped) each,
    /// in buffers.
    pub fn qos(&self, el: &str) -> Vec<(u64, u64)> {
        self.messages(gst::MessageType::Qos)
            .iter()
            .filter_map(|t| {
                let mut f = t.split(' ');
                (f.next() == Some(el)).then(|| {
                    let mut n = || f.next().and_then(|v| v.parse().ok()).expect("counts");
                    (n(), n())
                })
            })
            .collect()
    }
    /// The first error message posted so far, if any.
    pub fn error(&self) -> Option<String> {
        self.messages(gst::MessageType::Error).into_iter().next()
    }
    /// Error or warning messages posted so far.
    pub fn messages(&self, t: gst::MessageType) -> Vec<String> {
        self.drain();
        self.1
            .borrow()
            .iter()
            .filter(|(mt, _)| *mt == t)
            .map(|(_, s)| s.clone())
            .collect()
    }
    /// Waits for EOS or an error (Err) up to `limit`.
    pub fn wait_eos(&self, limit: Duration) -> Result<(), String> {
        let bus = self.0.bus().expect("bus");
        let start = Instant::now();
        loop {
            let left = limit
                .checked_sub(start.elapsed())
                .ok_or_else(|| format!("no EOS within {limit:?}"))?;
            let Some(msg) = bus.timed_pop(gst::ClockTime::from_nseconds(left.as_nanos() as u64))
            else {
                continue;
            };
            match msg.view() {
                gst::MessageView::Eos(_) => return Ok(()),
                gst::MessageView::Error(e) => {
                    let text = format!("{} ({:?})", e.error(), e.debug());
                    self.1.borrow_mut().push((msg.type_(), text.clone()));
                    return Err(text);
                }
                _ => {
                    if let Some(text) = stashed(&msg) {
                        self.1.borrow_mut().push((msg.type_(), text));
                    }
                }
            }
        }
    }
}

/// What the stash keeps of a message: an error's or warning's text, a QoS
/// message's source and counts ("NAME PROCESSED DROPPED", in buffers).
fn stashed(msg: &gst::Message) -> Option<String> {
    match msg.view() {
        gst::MessageView::Error(e) => Some(format!("{} ({:?})", e.error(), e.debug())),
        gst::MessageView::Warning(w) => Some(format!("{} ({:?})", w.error(), w.debug())),
        gst::MessageView::Qos(q) => {
            let n = |v: gst::GenericFormattedValue| match v {
                gst::GenericFormattedValue::Buffers(Some(b)) => *b,
                other => panic!("QoS counts in buffers, not {other:?}"),
            };
            let (processed, dropped) = q.stats();
            let src = msg.src().map(|s| s.name().to_string()).unwrap_or_default();
            Some(format!("{src} {} {}", n(processed), n(dropped)))
        }
        _ => None,
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.0.set_state(gst::State::Null);
    }
}

/// One buffer as it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Got {
    pub sum: u64,
    pub pts: Option<gst::ClockTime>,
    pub caps: String,
    pub size: usize,
    /// The first byte's address (for zero-copy checks).
    pub addr: usize,
    pub discont: bool,
}

pub use shmring_testkit::checksum;

/// Pulls up to `n` samples (or until EOS) from `sink`, failing after `limit`.
pub fn pull(sink: &gst_app::AppSink, n: usize, limit: Duration) -> Vec<Got> {
    let start = Instant::now();
    let mut out = vec![];
    while out.len() < n {
        assert!(
            start.elapsed() < limit,
            "only {} of {n} buffers within {limit:?}",
            out.len()
        );
        let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(100)) else {
            if sink.is_eos() {
                break;
            }
            continue;
        };
        let buffer = sample.buffer().expect("a buffer");
        let map = buffer.map_readable().expect("readable");
        out.push(Got {
            sum: checksum(&map),
            pts: buffer.pts(),
            caps: sample.caps().map(|c| c.to_string()).unwrap_or_default(),
            size: map.len(),
            addr: map.as_ptr() as usize,
            discont: buffer.flags().contains(gst::BufferFlags::DISCONT),
        });
    }
    out
}

/// What the same source description yields in this process, without a ring.
pub fn reference(src_and_caps: &str, n: usize) -> Vec<Got> {
    let p = Pipeline::launch(&format!("{src_and_caps} ! appsink name=out sync=false"));
    p.play();
    let got = pull(&p.appsink("out"), n, Duration::from_secs(60));
    assert_eq!(
        got.len(),
        n,
        "reference pipeline gave {} buffers",
        got.len()
    );
    got
}

/// The address range this process maps `/dev/shm/NAME` at (from /proc/self/maps).
pub fn mapping_of(name: &str) -> Vec<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let needle = format!("/dev/shm/{name}");
    maps.lines()
        .filter(|l| l.ends_with(&needle))
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// A child process running a pipeline, killed and reaped on drop (the host kit's
/// [`ChildGuard`]).
pub struct ChildPipeline(ChildGuard);

impl ChildPipeline {
    pub fn spawn(desc: &str) -> ChildPipeline {
        let child = ChildGuard::spawn(
            Command::new(env!("CARGO_BIN_EXE_gst-shmring-launch"))
                .args(desc.split_whitespace())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .expect("child starts");
        ChildPipeline(child)
    }
    /// Waits for the child to end (failing after `limit`); its exit success, stdout
    /// and stderr.
    pub fn finish(mut self, limit: Duration) -> (bool, String, String) {
        let Some(status) = self.0.wait_for(limit) else {
            self.0.kill();
            panic!("child pipeline still running after {limit:?}");
        };
        let mut out = String::new();
        let mut err = String::new();
        self.0
            .take_stdout()
            .expect("piped")
            .read_to_string(&mut out)
            .expect("stdout");
        self.0
            .take_stderr()
            .expect("piped")
            .read_to_string(&mut err)
            .expect("stderr");
        (status.success(), out, err)
    }
    /// SIGKILL now.
    pub fn kill(mut self) {
        self.0.kill();
    }
}

/// The value of `element property=value` in a child's output.
pub fn counter(out: &str, element: &str, prop: &str) -> u64 {
    let key = format!("{element} {prop}=");
    out.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {out}"))
}

/// Writes one video record into the ring through `producer`: `format` at
/// `w`x`h`, nominal rate `fps`/1 (0: variable), numbered by the producer unless
/// `sequence` is given, every plane byte `fill`, captured at `ts` (0: now).
pub fn send_video(
    producer: &mut shmring::Producer,
    stream: u32,
    (format, w, h, fps): (shmring::media::Format, u32, u32, u32),
    sequence: Option<u64>,
    fill: u8,
    ts: u64,
) -> Result<(), shmring::Error> {
    use shmring::media::{kind, MediaHeader, SEQUENCE_AUTO};
    let hd = MediaHeader::video(format, w, h, 0, sequence.unwrap_or(SEQUENCE_AUTO))
        .expect("a valid shape")
        .with_frame_rate(fps, 1)
        .expect("a valid rate");
    let mut r = producer.reserve(hd.payload_len())?;
    let payload = r.payload();
    payload.fill(fill);
    hd.write_to(payload).expect("the payload holds the header");
    let meta = shmring::Meta::new(stream, kind::VIDEO);
    r.commit(if ts == 0 {
        meta
    } else {
        meta.with_timestamp(ts)
    })
}

/// Waits (bounded by `limit`) until `done`, failing with `what`.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
