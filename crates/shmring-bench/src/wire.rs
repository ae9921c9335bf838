//! What travels on the stream transports (Unix socket, pipe, TCP, WebSocket): a
//! 64-byte header before every frame, and the WebSocket framed as a browser frames
//! it (masked, in 131,000-byte fragments). Public for `shmring record --websocket`,
//! the receiver of the bot workload's WebSocket row.

use std::net::{TcpListener, TcpStream};

use crate::args::WorkerArgs;
use crate::kit::{fd_arg, ready, Res};

/// A whole WebSocket message as received (its fragments joined, unmasked).
pub use bytes::Bytes;

/// A WebSocket on a loopback TCP connection.
pub type Ws = tungstenite::WebSocket<TcpStream>;

/// Bytes of the per-frame header on stream transports (keeps the frame 64-byte aligned).
pub const HDR: usize = 64;
const MAGIC: u32 = 0x424d_4853; // "SHMB"
/// Header / Meta flag: end of stream.
pub const END: u32 = 1;
/// Header flag: the last frame of a producer process (the meeting's connections).
pub const END_ALL: u32 = 2;
/// Chromium splits WebSocket messages into frames of this many bytes.
pub const WS_FRAGMENT: usize = 131_000;

/// Writes a frame header, stamped now: flags, sequence, payload length, stream
/// (the record's kind and capture time: [`WsFrames::set_meta`]).
pub fn put_header(h: &mut [u8], flags: u32, seq: u64, len: usize, stream: u32) {
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&flags.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&shmring::now_ns().to_le_bytes());
    h[24..32].copy_from_slice(&(len as u64).to_le_bytes());
    h[32..36].copy_from_slice(&stream.to_le_bytes());
}

/// A frame header as read.
pub struct Header {
    pub flags: u32,
    pub seq: u64,
    pub ts: u64,
    pub len: u64,
    pub stream: u32,
    /// The record's kind (`shmring::media::kind`), where the sender gives one.
    pub kind: u32,
}

pub fn parse_header(h: &[u8]) -> Res<Header> {
    if h.len() < HDR {
        return Err("stream out of step: short frame header".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
    if u32_at(0) != MAGIC {
        return Err("stream out of step: bad frame header".into());
    }
    Ok(Header {
        flags: u32_at(4),
        seq: u64_at(8),
        ts: u64_at(16),
        len: u64_at(24),
        stream: u32_at(32),
        kind: u32_at(36),
    })
}

/// (flags, seq, timestamp) of a frame header of a `size`-byte frame.
pub fn get_header(h: &[u8], size: usize) -> Res<(u32, u64, u64)> {
    let hd = parse_header(h)?;
    if hd.flags & END == 0 && hd.len != size as u64 {
        return Err(format!("frame of {} bytes, expected {size}", hd.len));
    }
    Ok((hd.flags, hd.seq, hd.ts))
}

pub(crate) fn tcp_connect(a: &WorkerArgs) -> Res<TcpStream> {
    tcp_client(a.port.ok_or("--port is required")?)
}

fn tcp_client(port: u16) -> Res<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

pub(crate) fn tcp_accept(a: &WorkerArgs) -> Res<TcpStream> {
    let l = TcpListener::from(fd_arg(a)?);
    ready();
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

// ---- WebSocket, as a browser sends it: masked, in 131,000-byte fragments ----

fn ws_config() -> tungstenite::protocol::WebSocketConfig {
    tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(256 << 20))
        .max_frame_size(Some(16 << 20))
}

/// The client side of a WebSocket to the consumer's port.
pub(crate) fn ws_connect(a: &WorkerArgs) -> Res<Ws> {
    ws_client(a.port.ok_or("--port is required")?)
}

/// The client side of a WebSocket to loopback port `port`.
pub fn ws_client(port: u16) -> Res<Ws> {
    let s = tcp_client(port)?;
    let url = format!("ws://127.0.0.1:{port}/");
    let (ws, _) = tungstenite::client::client_with_config(url.as_str(), s, Some(ws_config()))
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(ws)
}

/// The server side of a WebSocket on an accepted connection.
pub fn ws_accept(s: TcpStream) -> Res<Ws> {
    tungstenite::accept_with_config(s, Some(ws_config())).map_err(|e| format!("handshake: {e}"))
}

/// The next binary message, whole (fragments joined and unmasked by tungstenite);
/// None once the peer closed the connection.
pub fn ws_read(ws: &mut Ws) -> Res<Option<Bytes>> {
    use tungstenite::{Error, Message};
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) => return Ok(Some(b)),
            Ok(Message::Close(_)) | Err(Error::ConnectionClosed | Error::AlreadyClosed) => {
                return Ok(None)
            }
            Ok(_) => continue,
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// One WebSocket shared by a producer process's sending threads: a frame is
/// sent whole under the lock.
pub(crate) struct SharedWs(std::sync::Mutex<Ws>);

impl SharedWs {
    /// The client side to the consumer's port (see [`ws_connect`]).
    pub(crate) fn connect(a: &WorkerArgs) -> Res<SharedWs> {
        Ok(SharedWs(std::sync::Mutex::new(ws_connect(a)?)))
    }
    pub(crate) fn lock(&self) -> Res<std::sync::MutexGuard<'_, Ws>> {
        self.0
            .lock()
            .map_err(|_| "a sending thread panicked".to_string())
    }
}

/// Sends frames as a browser does: masked, in [`WS_FRAGMENT`]-byte fragments, from
/// one frame buffer reused for every frame.
pub struct WsFrames {
    spare: bytes::BytesMut,
}

impl WsFrames {
    pub fn new(body: usize) -> WsFrames {
        WsFrames {
            spare: bytes::BytesMut::zeroed(HDR + body),
        }
    }
    /// One frame of `body` bytes after the header, written by `fill`; an end marker
    /// (`flags` END or END_ALL) says its length is 0.
    pub fn send(
        &mut self,
        ws: &mut tungstenite::WebSocket<TcpStream>,
        head: (u32, u64, u32),
        body: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Res<()> {
        self.prepare(head, body, fill);
        self.write(ws)
    }
    /// Makes the next frame (see [`WsFrames::send`]) without sending it.
    pub fn prepare(
        &mut self,
        (flags, seq, stream): (u32, u64, u32),
        body: usize,
        fill: impl FnOnce(&mut [u8]),
    ) {
        if self.spare.len() != HDR + body {
            self.spare = bytes::BytesMut::zeroed(HDR + body);
        }
        fill(&mut self.spare[HDR..]);
        let len = if flags & (END | END_ALL) != 0 {
            0
        } else {
            body
        };
        put_header(&mut self.spare[..HDR], flags, seq, len, stream);
    }
    /// Writes the record's kind and capture time (CLOCK_MONOTONIC ns) into the
    /// header of the frame made by [`WsFrames::prepare`] (what a ring's record
    /// meta carries).
    pub fn set_meta(&mut self, kind: u32, timestamp_ns: u64) {
        self.spare[16..24].copy_from_slice(&timestamp_ns.to_le_bytes());
        self.spare[36..40].copy_from_slice(&kind.to_le_bytes());
    }
    /// Sends the frame made by [`WsFrames::prepare`].
    pub fn write(&mut self, ws: &mut tungstenite::WebSocket<TcpStream>) -> Res<()> {
        use tungstenite::protocol::frame::coding::{Data, OpCode};
        use tungstenite::protocol::frame::Frame;
        use tungstenite::Message;
        let msg = std::mem::take(&mut self.spare).freeze();
        let total = msg.len();
        let mut off = 0;
        while off < total {
            let end = (off + WS_FRAGMENT).min(total);
            let op = if off == 0 {
                OpCode::Data(Data::Binary)
            } else {
                OpCode::Data(Data::Continue)
            };
            let f = Frame::message(msg.slice(off..end), op, end == total);
            ws.write(Message::Frame(f)).map_err(|e| e.to_string())?;
            off = end;
        }
        ws.flush().map_err(|e| e.to_string())?;
        // Every fragment has been copied (and masked) into the socket buffer: take the
        // frame buffer back for the next frame.
        if let Ok(b) = msg.try_into_mut() {
            self.spare = b;
        }
        Ok(())
    }
}
