#!/usr/bin/env node
// Node receiving raw 1080p I420 video: a local WebSocket (the `ws` package) vs
// shmring. Also the sending side: filling a reservation from a JS Uint8Array (one
// copy, as an Electron renderer copies a decoded VideoFrame) vs sending the same
// bytes over a WebSocket.
//
//   node bench/transport.js [--seconds 5] [--rate-mbps 150]
//        [--transports node-websocket,node-shmring] [--workloads rated,unthrottled]
//
// * node-websocket: a `ws` server in the receiving process; the sender, another
//   Node process, is a `ws` client sending each 3,110,400-byte frame as one binary
//   message fragmented at 131,000 bytes and masked (as every client must, and as
//   Chromium fragments).
// * node-shmring: a Consumer (eventfd ring, `for await`) in the receiving process
//   taking zero-copy plane views (frame.planes()) and releasing the frame; the
//   sender reserves a video record (reserveVideo), copies the picture in from a
//   Uint8Array (one copy) and commits.
//
// The receiver does nothing else with the frames, so the figures are the cost of
// the transport. CPU is user+system time (process.cpuUsage) of each process
// between its first and last frame. One JSON line per run on stdout.
// Needs: the add-on built (npm run build) and `ws` (npm install).
'use strict';

const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const WIDTH = 1920;
const HEIGHT = 1080;
const FRAME = (WIDTH * HEIGHT * 3) / 2; // 3,110,400 bytes of I420
const FRAGMENT = 131000;
const GIB = 1 << 30;

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

function cpuS() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** Counts frames after the first and the CPU spent meanwhile. */
class Meter {
  constructor() {
    this.frames = 0;
    this.bytes = 0;
    this.started = false;
  }
  frame(n) {
    if (!this.started) {
      this.started = true;
      this.t0 = performance.now();
      this.c0 = cpuS();
      return;
    }
    this.frames++;
    this.bytes += n;
    this.t1 = performance.now();
    this.c1 = cpuS();
  }
  result() {
    const seconds = (this.t1 - this.t0) / 1000;
    const cpu = this.c1 - this.c0;
    return {
      frames: this.frames,
      bytes: this.bytes,
      seconds: +seconds.toFixed(3),
      mb_per_s: +(this.bytes / seconds / 1e6).toFixed(1),
      cpu_s_per_gib: +(cpu / (this.bytes / GIB)).toFixed(4),
      cpu_pct: +((100 * cpu) / seconds).toFixed(2),
    };
  }
}

/** Paces frames at `rate` bytes/s (null: as fast as possible). */
function pacer(rateBps) {
  const start = performance.now();
  let n = 0;
  return async () => {
    n++;
    if (!rateBps) return;
    const due = start + (n * FRAME * 1000) / rateBps;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
  };
}

/** The source picture: what a decoder would hand over, in the JS heap. */
function picture() {
  const y = new Uint8Array(WIDTH * HEIGHT);
  const u = new Uint8Array((WIDTH / 2) * (HEIGHT / 2));
  const v = new Uint8Array((WIDTH / 2) * (HEIGHT / 2));
  for (let i = 0; i < y.length; i++) y[i] = i & 0xff;
  u.fill(128);
  v.fill(64);
  return { y, u, v, all: Buffer.concat([y, u, v]) };
}

function report(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// ---- roles ------------------------------------------------------------------

async function shmRecv(seconds, rateBps, workload) {
  const shmring = require('..');
  const c = new shmring.Consumer({ memfd: true, create: true, capacity: 32 << 20, eventfd: true });
  const sender = spawn(process.execPath, [__filename, '--role', 'shm-send', '--seconds', String(seconds), '--rate', String(rateBps || 0)], {
    stdio: ['ignore', 'pipe', 'inherit', ...c.descriptors],
  });
  const senderOut = readline.createInterface({ input: sender.stdout })[Symbol.asyncIterator]();
  const m = new Meter();
  for await (const f of c) {
    if (f.kind === shmring.KIND_RAW) {
      f.release();
      break; // end of stream
    }
    const planes = f.planes(); // zero-copy views of Y, U, V
    m.frame(planes[0].length + planes[1].length + planes[2].length);
    f.release();
  }
  const s = JSON.parse((await senderOut.next()).value);
  c.close();
  report({ transport: 'node-shmring', workload, zero_copy: shmring.zeroCopy, receiver: m.result(), sender: s });
}

async function shmSend(seconds, rateBps) {
  const shmring = require('..');
  const p = shmring.Producer.fromFds([3, 4, 5], { onFull: 'block', timeoutMs: 5000 });
  const pic = picture();
  const m = new Meter();
  const pace = pacer(rateBps);
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const r = p.reserveVideo({ width: WIDTH, height: HEIGHT });
    const [y, u, v] = r.planes();
    y.set(pic.y); // the one copy
    u.set(pic.u);
    v.set(pic.v);
    r.commit();
    m.frame(FRAME);
    await pace();
  }
  p.send(new Uint8Array(8), { kind: shmring.KIND_RAW });
  report(m.result());
}

async function wsRecv(seconds, rateBps, workload) {
  const { WebSocketServer } = require('ws');
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 64 << 20, perMessageDeflate: false });
  await new Promise((r) => wss.on('listening', r));
  const port = wss.address().port;
  const m = new Meter();
  const done = new Promise((resolve) => {
    wss.on('connection', (ws) => {
      ws.on('message', (data, isBinary) => {
        if (!isBinary || data.length < 64) return resolve();
        m.frame(data.length);
      });
    });
  });
  const sender = spawn(process.execPath, [__filename, '--role', 'ws-send', '--port', String(port), '--seconds', String(seconds), '--rate', String(rateBps || 0)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const senderOut = readline.createInterface({ input: sender.stdout })[Symbol.asyncIterator]();
  await done;
  const s = JSON.parse((await senderOut.next()).value);
  wss.close();
  for (const c of wss.clients) c.terminate();
  report({ transport: 'node-websocket', workload, receiver: m.result(), sender: s });
}

async function wsSend(port, seconds, rateBps) {
  const WebSocket = require('ws');
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
  await new Promise((r, j) => {
    ws.on('open', r);
    ws.on('error', j);
  });
  const pic = picture();
  const m = new Meter();
  const pace = pacer(rateBps);
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    // One message, fragmented at 131,000 bytes; the client masks every fragment.
    let sent;
    for (let off = 0; off < FRAME; off += FRAGMENT) {
      const fin = off + FRAGMENT >= FRAME;
      const chunk = pic.all.subarray(off, Math.min(FRAME, off + FRAGMENT));
      if (fin) sent = new Promise((r) => ws.send(chunk, { binary: true, fin: true, mask: true }, r));
      else ws.send(chunk, { binary: true, fin: false, mask: true });
    }
    // Back-pressure: at most a few frames queued in the client.
    if (ws.bufferedAmount > 2 * FRAME) await sent;
    m.frame(FRAME);
    await pace();
  }
  await new Promise((r) => ws.send(Buffer.alloc(8), { binary: true }, r));
  report(m.result());
  ws.close();
}

// ---- driver -----------------------------------------------------------------

async function runPair(transport, workload, seconds, rateMbps) {
  const rate = workload === 'rated' ? rateMbps * 1e6 : 0;
  const role = transport === 'node-shmring' ? 'shm-recv' : 'ws-recv';
  const child = spawn(process.execPath, [__filename, '--role', role, '--seconds', String(seconds), '--rate', String(rate), '--workload', workload], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const code = await new Promise((r) => child.on('close', r));
  if (code !== 0) throw new Error(`${transport} ${workload}: receiver exited with ${code}`);
  return out.trim();
}

async function main() {
  const role = arg('role', null);
  const seconds = Number(arg('seconds', '5'));
  const rate = Number(arg('rate', '0')) || null;
  if (role === 'shm-recv') return shmRecv(seconds, rate, arg('workload', '?'));
  if (role === 'shm-send') return shmSend(seconds, rate);
  if (role === 'ws-recv') return wsRecv(seconds, rate, arg('workload', '?'));
  if (role === 'ws-send') return wsSend(Number(arg('port')), seconds, rate);
  if (role) throw new Error(`unknown role ${role}`);
  const transports = arg('transports', 'node-websocket,node-shmring').split(',');
  const workloads = arg('workloads', 'rated,unthrottled').split(',');
  const rateMbps = Number(arg('rate-mbps', '150'));
  for (const w of workloads) {
    for (const t of transports) {
      if (!['node-websocket', 'node-shmring'].includes(t)) throw new Error(`unknown transport ${t}`);
      if (!['rated', 'unthrottled'].includes(w)) throw new Error(`unknown workload ${w}`);
      const label = w === 'rated' ? `1080p-i420@${rateMbps}MB/s` : '1080p-i420 unthrottled';
      console.log((await runPair(t, w, seconds, rateMbps)).replace(`"workload":"${w}"`, `"workload":"${label}"`));
    }
  }
}

main().catch((e) => {
  console.error(`transport.js: ${e.stack || e}`);
  process.exit(1);
});
