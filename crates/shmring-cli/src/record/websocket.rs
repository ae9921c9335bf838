//! The recorder fed by WebSocket connections instead of a ring (`--websocket
//! HOST:PORT`): the receiver of `shmring bench --workload bot`'s
//! WebSocket row, doing the same work as the ring's recorder after the transport.
//!
//! Each connection is read by a thread of its own, as a server reads a browser's
//! WebSocket: tungstenite joins the fragments of a message and unmasks them. A
//! message is the bench's 64-byte frame header ([`shmring_bench::wire`]: stream
//! id, kind, capture time) and a media record; the message goes, as it is, to the
//! main thread, which gives it to [`Recorder::process`] as the ring's recorder
//! gives a record (each connection stands for one producer slot). The run ends
//! once every connection has ended (its closing message, or the peer closing it),
//! or at SIGINT or SIGTERM or `--seconds` after recording what the connections
//! still hold (as the ring's recorder drains its ring), and prints the same
//! `{"recorded":..}` line, with `websocket` in place of `ring`.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::layout::MAX_PRODUCERS;
use shmring::Meta;
use shmring_bench::wire::{parse_header, ws_accept, ws_read, Bytes, END_ALL, HDR};

use super::recorder::Recorder;
use super::{emit, summary, Read};
use crate::{fail, CmdError};

/// Messages on their way from the reading threads to the recorder.
const QUEUE: usize = 8;
/// After the stop: the longest pause of the connections, and the longest time,
/// before the recording ends.
const DRAIN_IDLE: Duration = Duration::from_millis(500);
const DRAIN_MAX: Duration = Duration::from_secs(10);

/// From a connection's thread to the recorder.
enum Msg {
    /// A record of connection `slot`: the whole message (header and record).
    Record(u32, Meta, Bytes),
    /// Connection `slot` ended: cleanly, or with this error.
    Done(u32, Option<String>),
}

/// What the connections did, for the summary.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Connections {
    pub accepted: u32,
    pub ended: u32,
    pub failed: u32,
    pub refused: u32,
}

/// Records the WebSocket connections to `addr` until the run ends.
pub(super) fn run(
    addr: &str,
    mut rec: Recorder,
    stop: &AtomicBool,
    seconds: Option<f64>,
) -> Result<(), CmdError> {
    let listener = TcpListener::bind(addr).map_err(|e| {
        fail(
            1,
            format!("cannot listen for WebSocket connections on {addr}: {e}"),
        )
    })?;
    let local = listener
        .local_addr()
        .and_then(|l| listener.set_nonblocking(true).map(|()| l))
        .map_err(|e| fail(1, format!("WebSocket listener on {addr}: {e}")))?;
    emit(
        json!({"ready": {"websocket": local.to_string(), "port": local.port(),
        "pid": std::process::id()}}),
    );
    let start = Instant::now();
    let deadline = seconds.map(|s| start + Duration::from_secs_f64(s.max(0.0)));
    let (tx, rx) = sync_channel::<Msg>(QUEUE);
    let mut conns = Connections::default();
    let mut read = Read::default();
    let mut write_error = None;
    // From the stop on, what the connections still hold is recorded too, until
    // every one has ended or none sends for DRAIN_IDLE (a producer still sending
    // keeps it at most DRAIN_MAX).
    let mut draining: Option<Instant> = None;
    loop {
        if draining.is_none()
            && (stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d))
        {
            draining = Some(Instant::now() + DRAIN_MAX);
        }
        if draining.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if draining.is_none() {
            accept(&listener, &tx, &mut conns);
        }
        let wait = if draining.is_some() {
            DRAIN_IDLE
        } else {
            Duration::from_millis(50)
        };
        match rx.recv_timeout(wait) {
            Ok(Msg::Record(slot, meta, b)) => {
                write_error = take(&mut rec, &mut read, slot, meta, &b);
                if write_error.is_some() {
                    break;
                }
            }
            Ok(Msg::Done(slot, why)) => {
                conns.ended += 1;
                if let Some(e) = why {
                    conns.failed += 1;
                    eprintln!("shmring record: WebSocket connection {slot}: {e}");
                }
                if conns.ended == conns.accepted {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) if draining.is_some() => break,
            Err(RecvTimeoutError::Timeout) => rec.poll(),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let sum = rec.finish(write_error.as_ref());
    summary::report_websocket(&local.to_string(), &sum, elapsed, read, conns);
    match write_error {
        Some(w) => Err(fail(
            1,
            format!("{w}; recording stopped, files cut back to their last whole frame"),
        )),
        None => Ok(()),
    }
}

/// Gives connection `slot`'s record (the message `b`) to the recorder; a write
/// error ends the recording.
fn take(
    rec: &mut Recorder,
    read: &mut Read,
    slot: u32,
    meta: Meta,
    b: &Bytes,
) -> Option<super::recorder::WriteError> {
    read.add(b.len() - HDR);
    rec.process(meta, Some(slot), &b[HDR..]).err()
}

/// Takes the connections waiting on `listener`, a reading thread each.
fn accept(listener: &TcpListener, tx: &SyncSender<Msg>, conns: &mut Connections) {
    loop {
        match listener.accept() {
            Ok((s, _)) if conns.accepted >= MAX_PRODUCERS => {
                drop(s);
                conns.refused += 1;
            }
            Ok((s, _)) => {
                let (tx, slot) = (tx.clone(), conns.accepted);
                conns.accepted += 1;
                std::thread::spawn(move || {
                    let why = read_connection(s, slot, &tx).err();
                    let _ = tx.send(Msg::Done(slot, why));
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                eprintln!("shmring record: accepting a WebSocket connection: {e}");
                return;
            }
        }
    }
}

/// Reads connection `slot` to its end, every record to `tx`.
fn read_connection(s: TcpStream, slot: u32, tx: &SyncSender<Msg>) -> Result<(), String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let mut ws = ws_accept(s)?;
    while let Some(b) = ws_read(&mut ws)? {
        let h = parse_header(&b)?;
        if h.flags & END_ALL != 0 {
            return Ok(());
        }
        if b.len() != HDR + h.len as usize {
            return Err(format!(
                "a message of {} bytes whose header says {} bytes of record",
                b.len(),
                h.len
            ));
        }
        let meta = Meta {
            stream: h.stream,
            kind: h.kind,
            timestamp_ns: h.ts,
            flags: 0,
        };
        if tx.send(Msg::Record(slot, meta, b)).is_err() {
            // The recording has ended.
            return Ok(());
        }
    }
    Ok(())
}
