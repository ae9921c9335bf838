'use strict';
// Nothing a peer writes into the shared segment may crash the Node process: a
// scribbled ring gives exceptions with codes (or is reset by the consumer), never a
// crash or a hang.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { Consumer, Producer } = require('..');
const { ringName } = require('./helpers');

/** Deterministic garbage over everything but the data ring (control block, producer
 * slots, claim log), written through the file as a hostile peer would. */
function scribble(name, c, seed) {
  const g = c.geometry();
  const meta = g.segmentSize - g.capacity;
  const buf = Buffer.alloc(meta);
  let x = seed >>> 0;
  for (let i = 0; i < meta; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    buf[i] = x & 0xff;
  }
  const fd = fs.openSync(`/dev/shm/${name}`, 'r+');
  try {
    fs.writeSync(fd, buf, 0, meta, 0);
  } finally {
    fs.closeSync(fd);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('a scribbled ring with manualReset: SHMRING_CORRUPT exceptions, no crash', async (t) => {
  const name = ringName(t);
  const c = new Consumer({ name, create: true, capacity: 1 << 20, maxProducers: 4, manualReset: true, livenessIntervalMs: 1 });
  t.after(() => c.close());
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  for (let i = 0; i < 20; i++) p.send(Buffer.alloc(1000, i));
  const held = c.tryNext();
  scribble(name, c, 12345);
  const codes = new Set();
  for (let i = 0; i < 200; i++) {
    try {
      const f = c.tryNext();
      if (f) f.release();
    } catch (e) {
      assert.match(e.code, /^SHMRING_/);
      assert.ok(e.message.length > 0);
      codes.add(e.code);
    }
    try {
      p.send(Buffer.alloc(64));
    } catch (e) {
      assert.match(e.code, /^SHMRING_/);
    }
    await sleep(1);
  }
  assert.ok(codes.has('SHMRING_CORRUPT'), `codes seen: ${[...codes]}`);
  assert.equal(held.data[999], 0, 'a frame held across the corruption stays readable');
  held.release();
  p.close();
});

test('a scribbled ring without manualReset: the consumer resets it and records flow again', async (t) => {
  const name = ringName(t);
  const c = new Consumer({ name, create: true, capacity: 1 << 20, maxProducers: 4, livenessIntervalMs: 1 });
  t.after(() => c.close());
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  for (let i = 0; i < 20; i++) p.send(Buffer.alloc(1000, i));
  p.close();
  scribble(name, c, 777);
  for (let i = 0; i < 200 && c.resets === 0; i++) {
    const f = c.tryNext();
    if (f) f.release();
    await sleep(1);
  }
  assert.ok(c.resets >= 1, 'the consumer reset the ring');
  assert.ok(c.health().lastCorruption);
  // Drain whatever survived, then new records arrive intact.
  for (let f = c.tryNext(); f; f = c.tryNext()) f.release();
  const q = Producer.open(name, { onFull: 'fail' });
  t.after(() => q.close());
  for (let i = 0; i < 10; i++) q.send(Buffer.alloc(500, 40 + i), { stream: 9 });
  const got = [];
  for (let i = 0; i < 100 && got.length < 10; i++) {
    const f = c.tryNext();
    if (f) {
      got.push([f.stream, f.length, f.data[0], f.data[499]]);
      f.release();
    } else {
      await sleep(1);
    }
  }
  assert.deepEqual(got, Array.from({ length: 10 }, (_, i) => [9, 500, 40 + i, 40 + i]));
});
