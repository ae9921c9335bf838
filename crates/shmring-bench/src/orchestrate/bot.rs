//! `--workload bot`: the whole meeting bot, WebSocket against the ring. For each
//! transport and run: the real `shmring record --encode` as the receiver (a child,
//! into a temporary directory), then one producer worker in the role of the
//! browser (`crate::bot`) for --seconds, then SIGINT to the recorder and its
//! `{"recorded":..}` summary. The receiver's CPU is counted from the producer's
//! start to the recorder's exit (the frames still in its encoders are encoded
//! then); the producer's over its sending loop.
//!
//! The Python rows (`py-shmring`, `py-websocket`) have the same producer and, as
//! the receiver, the story's Python process (`python/bench/py_bot_receiver.py`:
//! numpy views over every frame, no encode), which speaks the recorder's lines.
//!
//! Every child is killed and reaped on the way out, the ring of a recorder that
//! was killed is removed, and the temporary directory with it.

use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring_host::cpu_ns;
use shmring_host::status::StatusLine;

use super::tables::{col, combine, median, opt, print_rows, range, span, Col};
use super::worker::{program, Worker};
use super::{nth_run, progress, write_out, GIB};
use crate::args::BenchArgs;
use crate::bot::{FPS, HEIGHT, MAX_PARTICIPANTS, WIDTH};
use crate::meeting::VIDEO_BYTES;
use crate::report::Row;
use crate::transport::{Set, Transport};

/// How long the recorder may take to say it is ready, and to finish its files
/// after SIGINT.
const READY: Duration = Duration::from_secs(30);
const FINISH: Duration = Duration::from_secs(120);

/// What every run of the workload does.
struct Bot {
    participants: u32,
    seconds: f64,
    frames: Option<u64>,
    ring_mib: u64,
}

pub(super) fn run(a: &BenchArgs) -> i32 {
    if a.participants > MAX_PARTICIPANTS {
        eprintln!(
            "shmring bench: --workload bot: --participants must be from 1 to {MAX_PARTICIPANTS}, \
             not {} (the browser's WebSocket carries 32 streams into one recorder)",
            a.participants
        );
        return 2;
    }
    if a.scale.is_some() || a.plot.is_some() {
        eprintln!("shmring bench: --workload bot takes neither --scale nor --plot");
        return 2;
    }
    let mut transports = Vec::new();
    for name in a.transports.iter().flatten().map(|s| s.trim()) {
        match name.parse::<Transport>() {
            Ok(t) if !BOT_ROWS.contains(&t) => {
                eprintln!(
                    "shmring bench: --workload bot runs shmring, websocket, py-shmring and \
                     py-websocket only, not {name:?}"
                );
                return 2;
            }
            Ok(t) if !transports.contains(&t) => transports.push(t),
            Ok(_) => {}
            Err(e) => {
                eprintln!("shmring bench: --workload bot: {e}");
                return 2;
            }
        }
    }
    if transports.is_empty() {
        transports = vec![Transport::Shmring, Transport::WebSocket];
    }
    let mut receivers = Receivers::default();
    if transports.iter().any(|&t| !is_python(t)) {
        match program("shmring", "shmring-cli") {
            Ok(p) => receivers.record = Some(p),
            Err(e) => {
                eprintln!("shmring bench: --workload bot runs `shmring record`: {e}");
                return 1;
            }
        }
    }
    if transports.iter().any(|&t| is_python(t)) {
        match crate::python::bot_receiver() {
            Ok(p) => receivers.python = Some(p),
            Err(e) => {
                eprintln!("shmring bench: --workload bot: {e}");
                return 1;
            }
        }
    }
    let bot = Bot {
        participants: a.participants,
        seconds: a.seconds.unwrap_or(if a.quick { 5.0 } else { 20.0 }),
        frames: a.frames,
        ring_mib: a.ring_mib,
    };
    let repeat = a.repeat;
    if repeat > 1 {
        println!(
            "shmring bench: every transport {repeat} times, interleaved; each figure is the \
             median of the runs, with the range of the whole bot's CPU beside it"
        );
    }
    let total = transports.len() as u64 * u64::from(repeat);
    let per_run_ms = (bot.seconds * 1000.0) as u64;
    let mut bar = progress(total, per_run_ms);
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); transports.len()];
    let mut failed = false;
    let mut done = 0u64;
    for rep in 0..repeat {
        for (i, &t) in transports.iter().enumerate() {
            let nth = nth_run(rep, repeat);
            bar.set(
                format!(
                    "run {} of {total}: {t} bot, {} participants{nth}",
                    done + 1,
                    bot.participants
                ),
                true,
            );
            let row = run_one(t, &bot, &receivers, (&bar, done * per_run_ms, per_run_ms));
            done += 1;
            bar.set_position(done * per_run_ms);
            if let Some(e) = &row.error {
                bar.suspend(|| eprintln!("shmring bench: {t} (bot{nth}): {e}"));
                failed = true;
            }
            runs[i].push(row);
        }
    }
    bar.finish();
    let mut rows: Vec<Row> = runs.into_iter().map(combine_bot).collect();
    add_savings(&mut rows);
    print_bot(&rows, &bot, repeat > 1);
    failed |= !write_out(a, &rows, String::new());
    i32::from(failed)
}

/// The rows of the workload: the encoding recorder's and the Python receiver's,
/// each over the ring and over the WebSocket.
const BOT_ROWS: [Transport; 4] = [
    Transport::Shmring,
    Transport::WebSocket,
    Transport::PyShmring,
    Transport::PyWebsocket,
];

/// Is it a row of the Python receiver?
fn is_python(t: Transport) -> bool {
    t.set() == Set::Python
}

/// What the producer sends over in row `t` (the Python rows' producer is the same).
fn wire(t: Transport) -> Transport {
    match t {
        Transport::PyShmring => Transport::Shmring,
        Transport::PyWebsocket => Transport::WebSocket,
        t => t,
    }
}

/// The receivers' programs: `shmring record`, and the Python interpreter with
/// its script, those the rows need.
#[derive(Default)]
struct Receivers {
    record: Option<PathBuf>,
    python: Option<(PathBuf, PathBuf)>,
}

/// One run of transport `t`; its failure is the row's error.
fn run_one(
    t: Transport,
    bot: &Bot,
    receivers: &Receivers,
    progress: (&StatusLine, u64, u64),
) -> Row {
    let mut row = Row::empty(t, "bot", "rated", VIDEO_BYTES as u64);
    row.participants = Some(bot.participants);
    match measure(t, bot, receivers, progress) {
        Ok(m) => fill(&mut row, &m, bot),
        Err(e) => row.error = Some(e),
    }
    row
}

/// What one run measured.
struct Measured {
    producer: crate::report::WorkerReport,
    /// The recorder's CPU seconds from the producer's start to its own exit.
    receiver_cpu_s: f64,
    /// Its `{"recorded":..}` summary.
    recorded: Value,
    t: Transport,
}

fn measure(
    t: Transport,
    bot: &Bot,
    receivers: &Receivers,
    (bar, base_ms, per_run_ms): (&StatusLine, u64, u64),
) -> Result<Measured, String> {
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("shmring-bench-bot-{}-{n}", std::process::id());
    // Dropped last: the recorder is gone by then.
    let out = tempfile::Builder::new()
        .prefix(&tag)
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let _ring = (wire(t) == Transport::Shmring).then(|| LeftRing(tag.clone()));
    let (exe, mut args): (&Path, Vec<String>) = match (is_python(t), receivers) {
        (
            false,
            Receivers {
                record: Some(exe), ..
            },
        ) => {
            let mut args: Vec<String> = ["record", "--encode", "--preset", "ultrafast", "--out"]
                .map(String::from)
                .into();
            args.push(out.path().display().to_string());
            (exe, args)
        }
        (
            true,
            Receivers {
                python: Some((exe, script)),
                ..
            },
        ) => (exe, vec![script.display().to_string()]),
        _ => return Err(format!("no receiver for {t}")),
    };
    match wire(t) {
        Transport::Shmring => args.extend([
            "--create".into(),
            tag.clone(),
            "--capacity-mib".into(),
            bot.ring_mib.to_string(),
        ]),
        _ => args.extend(["--websocket".into(), "127.0.0.1:0".into()]),
    }
    let mut rec = Recorder::spawn(exe, &args)?;
    let ready = rec.line("ready", READY)?;
    let mut prod_args: Vec<String> = vec![
        "--transport".into(),
        wire(t).name().into(),
        "--role".into(),
        "producer".into(),
        "--size".into(),
        VIDEO_BYTES.to_string(),
        "--seconds".into(),
        bot.seconds.to_string(),
        "--frames".into(),
        bot.frames.unwrap_or(0).to_string(),
        "--bot".into(),
        bot.participants.to_string(),
    ];
    match wire(t) {
        Transport::Shmring => prod_args.extend(["--ring".into(), tag.clone()]),
        _ => {
            let port = ready["port"]
                .as_u64()
                .ok_or_else(|| format!("the recorder's ready line has no port: {ready}"))?;
            prod_args.extend(["--port".into(), port.to_string()]);
        }
    }
    let pid = rec.0.pid();
    let cpu0 = cpu_ns(pid).ok_or("cannot read the recorder's CPU time")? as f64 / 1e9;
    let mut prod = Worker::spawn(&prod_args)?;
    let start = Instant::now();
    let limit = Duration::from_secs_f64(bot.seconds * 3.0 + 30.0);
    while !prod.poll() {
        // The WebSocket's recorder ends by itself once the producer has: only a
        // failure is one.
        if let Some(st) = rec.0.exited().filter(|s| !s.success()) {
            prod.kill();
            return Err(format!(
                "the recorder ended ({st}) while the producer ran: {}",
                rec.0.failure()
            ));
        }
        if start.elapsed() > limit {
            prod.kill();
            return Err(format!(
                "the producer did not end in {:.0} s",
                limit.as_secs_f64()
            ));
        }
        bar.set_position(base_ms + (start.elapsed().as_millis() as u64).min(per_run_ms));
        std::thread::sleep(Duration::from_millis(100));
    }
    if !prod.ok() {
        return Err(format!("producer: {}", prod.failure()));
    }
    let producer = prod.report.clone().ok_or("producer: no report")?;
    rec.0.interrupt();
    let recorded = rec.line("recorded", FINISH)?;
    match rec.wait(FINISH) {
        Some(st) if st.success() => {}
        Some(st) => return Err(format!("the recorder failed ({st}): {}", rec.0.failure())),
        None => return Err(format!("the recorder did not exit: {}", rec.0.failure())),
    }
    let total = recorded["cpu_s"]
        .as_f64()
        .ok_or("the recorder's summary has no cpu_s")?;
    Ok(Measured {
        producer,
        receiver_cpu_s: (total - cpu0).max(0.0),
        recorded,
        t,
    })
}

/// The row's figures from one run.
fn fill(row: &mut Row, m: &Measured, bot: &Bot) {
    let p = &m.producer;
    let wall = p.end_ns.saturating_sub(p.start_ns) as f64 / 1e9;
    let prod = if p.loop_cpu_s > 0.0 {
        p.loop_cpu_s
    } else {
        p.utime_s + p.stime_s
    };
    let recv = m.receiver_cpu_s;
    row.frames = p.frames;
    row.bytes = p.bytes;
    row.seconds = wall;
    if wall > 0.0 {
        row.gbps = p.bytes as f64 / wall / 1e9;
        row.frames_per_s = p.frames as f64 / wall;
        let per_min = |c: f64| Some(c / (wall / 60.0));
        row.cpu_s_per_bot_minute_producer = per_min(prod);
        row.cpu_s_per_bot_minute_receiver = per_min(recv);
        row.cpu_s_per_bot_minute = per_min(prod + recv);
        row.cpu_pct_producer = Some(prod / wall * 100.0);
        row.cpu_pct_receiver = Some(recv / wall * 100.0);
        row.cpu_pct_at_rate = (prod + recv) / wall * 100.0;
    }
    row.cpu_s_producer = prod;
    row.cpu_s_consumer = recv;
    if p.bytes > 0 {
        row.cpu_s_per_gib = (prod + recv) / (p.bytes as f64 / GIB);
    }
    row.allocs_per_frame_producer = p.allocs.map(|n| n as f64 / p.frames.max(1) as f64);
    row.rss_producer_kib = Some(p.maxrss_kib);
    row.rss_consumer_kib = m.recorded["max_rss_kb"].as_u64();
    let read = match wire(m.t) {
        Transport::Shmring => &m.recorded["ring"],
        _ => &m.recorded["websocket"],
    };
    let video = || {
        m.recorded["streams"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["kind"] == "video")
    };
    let (taken, dropped) = if is_python(m.t) {
        let received = read["frames_received"].as_u64().unwrap_or(0);
        row.frames_received = Some(received);
        (received, 0)
    } else {
        let encoded: u64 = video()
            .flat_map(|s| s["files"].as_array().into_iter().flatten())
            .filter_map(|f| f["units"].as_u64())
            .sum();
        let dropped: u64 = video().filter_map(|s| s["dropped"].as_u64()).sum();
        row.frames_encoded = Some(encoded);
        row.frames_dropped = Some(dropped);
        (encoded, dropped)
    };
    let mut notes = Vec::new();
    // Every frame made reached the receiver (checked below): taken (encoded or
    // received) or dropped.
    let made = taken + dropped;
    let due = (f64::from(bot.participants * FPS) * wall) as u64;
    if bot.frames.is_none() && made + u64::from(bot.participants) < due {
        notes.push(format!(
            "the producer fell behind the real rate: {made} of {due} video frames made in \
             {wall:.1} s"
        ));
    }
    if dropped > 0 {
        notes.push(format!(
            "the encoders fell behind: {dropped} of {made} frames dropped (more participants \
             than this host encodes in real time; --participants runs fewer)"
        ));
    }
    row.note = (!notes.is_empty()).then(|| notes.join("; "));
    // Every record sent, and each stream's end, reached the receiver.
    let read = &read["records_consumed"];
    let sent = p.frames + 2 * u64::from(bot.participants);
    if read.as_u64() != Some(sent) {
        row.error = Some(format!(
            "{sent} records sent (with the ends of stream), {read} read by the receiver"
        ));
    } else if taken == 0 && is_python(m.t) {
        row.error = Some("the receiver received no video frame".into());
    } else if taken == 0 {
        row.error = Some("the recorder encoded no frame".into());
    }
}

/// One row for a transport's runs: the medians (and the whole bot's range).
fn combine_bot(runs: Vec<Row>) -> Row {
    let good: Vec<&Row> = runs.iter().filter(|r| r.error.is_none()).collect();
    let pool = if good.is_empty() {
        runs.iter().collect()
    } else {
        good
    };
    let vals = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
        pool.iter().filter_map(|r| f(r)).collect()
    };
    let med = |f: &dyn Fn(&Row) -> Option<f64>| median(vals(f));
    let count =
        |f: &dyn Fn(&Row) -> Option<u64>| med(&|r| f(r).map(|n| n as f64)).map(|n| n as u64);
    let producer = med(&|r| r.cpu_s_per_bot_minute_producer);
    let receiver = med(&|r| r.cpu_s_per_bot_minute_receiver);
    let whole = med(&|r| r.cpu_s_per_bot_minute);
    let whole_range = range(&vals(&|r| r.cpu_s_per_bot_minute));
    let pct = (med(&|r| r.cpu_pct_producer), med(&|r| r.cpu_pct_receiver));
    let frames = (
        count(&|r| r.frames_encoded),
        count(&|r| r.frames_dropped),
        count(&|r| r.frames_received),
    );
    let notes: Vec<String> = pool.iter().filter_map(|r| r.note.clone()).collect();
    let note = match notes.len() {
        0 => None,
        1 if runs.len() == 1 => notes.into_iter().next(),
        k => Some(format!(
            "in {k} of {} runs {}",
            runs.len(),
            notes.last().cloned().unwrap_or_default()
        )),
    };
    let mut row = combine(runs);
    row.cpu_s_per_bot_minute_producer = producer;
    row.cpu_s_per_bot_minute_receiver = receiver;
    row.cpu_s_per_bot_minute = whole;
    row.cpu_s_per_bot_minute_range = whole_range;
    (row.cpu_pct_producer, row.cpu_pct_receiver) = pct;
    (row.frames_encoded, row.frames_dropped, row.frames_received) = frames;
    row.note = note;
    row
}

/// The ring's rows: the share of CPU each saves against the WebSocket's row of
/// the same receiver (`shmring` against `websocket`, `py-shmring` against
/// `py-websocket`).
fn add_savings(rows: &mut [Row]) {
    let saved = |ring: Option<f64>, ws: Option<f64>| match (ring, ws) {
        (Some(r), Some(w)) if w > 0.0 => Some(1.0 - r / w),
        _ => None,
    };
    for (ring, ws) in [
        (Transport::Shmring, Transport::WebSocket),
        (Transport::PyShmring, Transport::PyWebsocket),
    ] {
        let Some(ws) = rows.iter().find(|r| r.is(ws)).cloned() else {
            continue;
        };
        for r in rows.iter_mut().filter(|r| r.is(ring)) {
            r.saved_receiver = saved(
                r.cpu_s_per_bot_minute_receiver,
                ws.cpu_s_per_bot_minute_receiver,
            );
            r.saved_whole = saved(r.cpu_s_per_bot_minute, ws.cpu_s_per_bot_minute);
        }
    }
}

fn print_bot(rows: &[Row], bot: &Bot, repeated: bool) {
    let n = bot.participants;
    let has = |python: bool| rows.iter().any(|r| r.frames_received.is_some() == python);
    let into = match (has(false), has(true)) {
        (true, true) => {
            "`shmring record --encode --preset ultrafast` (H.264 + AAC, an MP4 per \
                         participant; shmring, websocket) and into a Python receiver (numpy \
                         views over every frame, no encode; py-shmring, py-websocket)"
        }
        (false, true) => "a Python receiver (numpy views over every frame, no encode)",
        _ => "`shmring record --encode --preset ultrafast` (H.264 + AAC, an MP4 per participant)",
    };
    println!(
        "\nbot: {n} participants x ({WIDTH}x{HEIGHT}@{FPS} I420 + 10 ms 48 kHz stereo S16), one \
         producer process (a thread per stream) into {into}; {} s a run",
        bot.seconds
    );
    let f = |v: Option<f64>| opt(v, 2);
    let mut cols: Vec<Col> = vec![
        col("producer s/min", 14, move |r| {
            f(r.cpu_s_per_bot_minute_producer)
        }),
        col("%core", 6, |r| opt(r.cpu_pct_producer, 1)),
        col("receiver s/min", 14, move |r| {
            f(r.cpu_s_per_bot_minute_receiver)
        }),
        col("%core", 6, |r| opt(r.cpu_pct_receiver, 1)),
        col("whole s/min", 11, move |r| f(r.cpu_s_per_bot_minute)),
        col("%core", 6, |r| format!("{:.1}", r.cpu_pct_at_rate)),
    ];
    if repeated {
        cols.push(col("whole range", 12, |r| {
            span(r.cpu_s_per_bot_minute_range, 2)
        }));
    }
    let count = |n: Option<u64>| n.map_or("-".into(), |n| n.to_string());
    if has(false) {
        cols.push(col("encoded", 8, move |r| count(r.frames_encoded)));
        cols.push(col("dropped", 8, move |r| count(r.frames_dropped)));
    }
    if has(true) {
        cols.push(col("received", 8, move |r| count(r.frames_received)));
    }
    print_rows(&cols, &rows.iter().collect::<Vec<_>>());
    for r in rows {
        if let (Some(rcv), Some(whole)) = (r.saved_receiver, r.saved_whole) {
            let ws = if r.is(Transport::PyShmring) {
                Transport::PyWebsocket
            } else {
                Transport::WebSocket
            };
            println!(
                "  {} saves {:.0}% of the receiver's CPU and {:.0}% of the whole bot's against \
                 the WebSocket ({ws})",
                r.transport,
                rcv * 100.0,
                whole * 100.0
            );
        }
        if let Some(note) = &r.note {
            println!("  {}: {note}", r.transport);
        }
    }
    println!(
        "  s/min: CPU seconds per minute of the bot's run (CPU s / wall minutes); %core: of one \
         core. The producer draws every frame in every row (the same picture); `shmring \
         record` encodes every frame it is given, the Python receiver reads every 64th byte of \
         each row of its Y plane."
    );
}

/// The recorder's ring, removed if a recorder that was killed left it.
struct LeftRing(String);

impl Drop for LeftRing {
    fn drop(&mut self) {
        let _ = shmring::remove_stale(&self.0);
    }
}

/// `shmring record` as a child (killed and reaped when dropped): its JSON lines.
struct Recorder(Worker);

impl Recorder {
    fn spawn(exe: &Path, args: &[String]) -> Result<Recorder, String> {
        Worker::spawn_program(exe, args).map(Recorder)
    }

    /// The value of the next stdout line that is a JSON object with `key`.
    fn line(&mut self, key: &str, within: Duration) -> Result<Value, String> {
        let until = Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.0.line(left) {
                Ok(l) => {
                    if let Some(v) = serde_json::from_str::<Value>(&l)
                        .ok()
                        .and_then(|v| v.get(key).cloned())
                    {
                        return Ok(v);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "no {key:?} line from the recorder in {} s: {}",
                        within.as_secs(),
                        self.0.failure()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "the recorder ended without its {key:?} line: {}",
                        self.0.failure()
                    ))
                }
            }
        }
    }

    /// Waits up to `t` for it to exit; its status.
    fn wait(&mut self, t: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + t;
        while self.0.exited().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.0.exited()
    }
}
