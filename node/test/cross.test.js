'use strict';
// Across processes and languages: a Rust producer into a Node consumer (for await,
// the event loop kept running), a Node producer into a Python consumer.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { spawn } = require('node:child_process');
const { Consumer, Producer } = require('..');
const { root, ringPeer, crc32, fillRecord, recordIndex, ringName, guardChild, exited } = require('./helpers');

test('Rust producer -> Node consumer: for await over 1,000 frames in order, every byte checked, the loop never blocked', async (t) => {
  assert.ok(fs.existsSync(ringPeer), `${ringPeer} is missing: run node scripts/build.js --with-peer`);
  assert.equal(crc32(Buffer.from('123456789')), 0xcbf43926, "the checked record's CRC-32 is zlib's");
  const c = new Consumer({ memfd: true, create: true, capacity: 1 << 22, eventfd: true });
  t.after(() => c.close());
  const count = 1000;
  // The child gets the ring's descriptors (segment, lock file, eventfd) as fds 3, 4, 5.
  assert.equal(c.descriptors.length, 3);
  const child = guardChild(t, spawn(ringPeer, ['3,4,5', String(count), '200'], {
    stdio: ['ignore', 'inherit', 'inherit', ...c.descriptors],
  }));
  const done = exited(child);

  // Ticks of a timer, stamped with how many frames had arrived by then.
  let received = 0;
  const tickedAt = new Set();
  const iv = setInterval(() => tickedAt.add(received), 1);
  t.after(() => clearInterval(iv));

  let bytes = 0;
  for await (const f of c) {
    const d = f.data;
    assert.equal(f.flags, received, 'frames arrive in order');
    assert.equal(f.stream, 1);
    assert.equal(recordIndex(d), received, `checksum and index of frame ${received}`);
    bytes += d.length;
    f.release();
    received++;
    if (received === count) break;
  }
  clearInterval(iv);
  assert.equal(received, count);
  assert.ok(bytes > count * 64);
  assert.deepEqual(await done, { code: 0, signal: null });
  // The timer fired while the loop waited for frames, at many points of the stream.
  assert.ok(tickedAt.size >= 2, `the interval fired at ${tickedAt.size} distinct points`);
  assert.ok([...tickedAt].some((n) => n > 0 && n < count), 'the interval fired in the middle of the stream');
  assert.equal(c.stats().records_consumed, count);
});

function venvPython() {
  const p = process.env.SHMRING_PYTHON || path.join(root, '.venv', 'bin', 'python');
  return fs.existsSync(p) ? p : null;
}

test('Node producer -> Python consumer: every byte checked', async (t) => {
  const py = venvPython();
  if (!py) {
    t.skip('no Python with the shmring package: run `make venv` (or set SHMRING_PYTHON)');
    return;
  }
  const name = ringName(t);
  const count = 300;
  const child = guardChild(t, spawn(py, [path.join(__dirname, 'py_consumer.py'), name, String(count)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  }));
  const done = exited(child);
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  assert.equal((await lines.next()).value, 'ready');

  const p = Producer.open(name, { onFull: 'block', timeoutMs: 10000 });
  t.after(() => p.close());
  let sent = 0;
  for (let i = 0; i < count; i++) {
    const len = 64 + ((i * 7919) % 20000);
    const r = p.reserve(len);
    fillRecord(r.data, i);
    r.commit({ stream: 4, flags: i });
    sent += len;
  }
  const summary = JSON.parse((await lines.next()).value);
  assert.deepEqual(summary, { records: count, bytes: sent, bad: 0, order_ok: true });
  assert.deepEqual(await done, { code: 0, signal: null });
});

test('Node producer connects over the consumer\'s socket (Python listener); no consumer on a path is a coded error', async (t) => {
  const py = venvPython();
  if (!py) {
    t.skip('no Python with the shmring package: run `make venv` (or set SHMRING_PYTHON)');
    return;
  }
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'shmring-node-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const serve = async (sock, count) => {
    const child = guardChild(t, spawn(py, [path.join(__dirname, 'py_listener.py'), sock, String(count)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }));
    const done = exited(child);
    const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    assert.equal((await lines.next()).value, 'ready');
    return { child, done, lines };
  };

  const sock = path.join(dir, 'ring.sock');
  const ok = await serve(sock, 50);
  const p = Producer.connect(sock, { onFull: 'block', timeoutMs: 10000 });
  for (let i = 0; i < 50; i++) p.send(new Uint8Array(1000).fill(i & 0xff), { stream: 3 });
  p.close();
  const report = JSON.parse((await ok.lines.next()).value);
  assert.deepEqual(report, { records: 50, bytes: 50000, refused: 0 });
  assert.deepEqual(await ok.done, { code: 0, signal: null });

  // No consumer on a path: a coded error, not a crash.
  assert.throws(() => Producer.connect(path.join(dir, 'nobody.sock')), (e) => typeof e.code === 'string' && e.code.startsWith('SHMRING_'));
});
