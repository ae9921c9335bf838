//! The stream rows: Unix socket, pipe and TCP (a header, then the frame), the
//! Unix socket with two readers, and the WebSocket.

use std::fs::File;
use std::io::{Read, Write};

use crate::args::WorkerArgs;
use crate::kit::{fd_args, produce, ready, Checker, Res};
use crate::report::WorkerReport;
use crate::wire::{get_header, put_header, ws_accept, ws_connect, WsFrames, END, HDR};

pub fn producer(a: &WorkerArgs, mut s: impl Write) -> Res<WorkerReport> {
    let mut buf = vec![0u8; HDR + a.size];
    let rep = produce(a, |pacer, seq| {
        pacer.make(&mut buf[HDR..], seq);
        put_header(&mut buf[..HDR], 0, seq, a.size, 0);
        s.write_all(&buf).map_err(|e| e.to_string())
    })?;
    // The end marker is a whole frame so the reader can always read fixed sizes.
    put_header(&mut buf[..HDR], END, 0, 0, 0);
    s.write_all(&buf)
        .and_then(|_| s.flush())
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

pub fn consumer(a: &WorkerArgs, mut s: impl Read) -> Res<WorkerReport> {
    let mut buf = vec![0u8; HDR + a.size];
    let mut ck = Checker::new(a.size);
    ck.begin();
    loop {
        s.read_exact(&mut buf).map_err(|e| format!("read: {e}"))?;
        let now = shmring::now_ns();
        let (flags, seq, ts) = get_header(&buf, a.size)?;
        if flags & END != 0 {
            break;
        }
        ck.frame(seq, u64::MAX, ts, now, &buf[HDR..]);
    }
    Ok(ck.finish())
}

/// Writes everything to both.
pub struct Both<A, B>(pub A, pub B);

impl<A: Write, B: Write> Write for Both<A, B> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.1.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

/// Two readers of the same stream, each on its own socket; the second must get
/// every frame the first got.
pub fn two_consumers(a: &WorkerArgs) -> Res<WorkerReport> {
    let mut fds = fd_args(a)?;
    if fds.len() != 2 {
        return Err("two --fd are required".into());
    }
    let second = File::from(fds.pop().expect("two"));
    let first = File::from(fds.pop().expect("two"));
    let a2 = a.clone();
    ready();
    let t = std::thread::spawn(move || consumer(&a2, second));
    let rep = consumer(a, first)?;
    let other = t
        .join()
        .map_err(|_| "the second reader panicked".to_string())??;
    // Damage the first reader found is reported as on every row.
    if rep.bad_checksums + rep.bad_sequence > 0 {
        return Ok(rep);
    }
    if other.frames != rep.frames || other.bad_checksums + other.bad_sequence > 0 {
        return Err(format!(
            "the second reader got {} frames ({} bad), the first {}",
            other.frames,
            other.bad_checksums + other.bad_sequence,
            rep.frames
        ));
    }
    Ok(rep)
}

pub fn ws_producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let mut ws = ws_connect(a)?;
    let mut frames = WsFrames::new(a.size);
    let rep = produce(a, |pacer, seq| {
        frames.send(&mut ws, (0, seq, 0), a.size, |b| pacer.make(b, seq))
    })?;
    frames
        .send(&mut ws, (END, 0, 0), a.size, |_| {})
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

pub fn ws_consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    use tungstenite::Message;
    let mut ws = ws_accept(crate::wire::tcp_accept(a)?)?;
    let mut ck = Checker::new(a.size);
    ck.begin();
    loop {
        match ws.read().map_err(|e| format!("read: {e}"))? {
            Message::Binary(b) => {
                let now = shmring::now_ns();
                let (flags, seq, ts) = get_header(&b, a.size)?;
                if flags & END != 0 {
                    break;
                }
                ck.frame(seq, u64::MAX, ts, now, &b[HDR..]);
            }
            Message::Close(_) => {
                return Err("connection closed before the end of the stream".into())
            }
            _ => {}
        }
    }
    Ok(ck.finish())
}
