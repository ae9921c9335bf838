'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const shmring = require('..');
const { addressOf, Consumer, Producer } = shmring;
const { collect } = require('./helpers');

function ring(opts = {}) {
  return new Consumer({ memfd: true, create: true, capacity: 1 << 20, ...opts });
}

function inMapping(c, addr, len) {
  const [base, size] = c.mapping();
  return addr >= base && addr + len <= base + size;
}

test('frames and reservations are views into the ring (zero copy), or copies when forced', (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  const r = p.reserve(4096);
  assert.ok(inMapping(c, r.address, 4096), 'the claim lies in the mapping');
  const data = r.data;
  assert.ok(data instanceof Uint8Array);
  assert.equal(data.length, 4096);
  for (let i = 0; i < data.length; i++) data[i] = i & 0xff;
  if (shmring.zeroCopy) {
    assert.equal(addressOf(data), r.address, 'the reservation view is the ring memory');
  } else {
    assert.ok(!inMapping(c, addressOf(data), 4096), 'copy path: the view is in the JS heap');
  }
  r.commit({ stream: 5, kind: 0, flags: 9, timestampNs: 123n });
  assert.equal(r.open, false);
  assert.equal(data.length, 0, 'commit detaches the view: later writes reach nothing');

  const f = c.tryNext();
  assert.ok(f);
  assert.equal(f.stream, 5);
  assert.equal(f.flags, 9);
  assert.equal(f.timestampNs, 123n);
  assert.equal(f.length, 4096);
  assert.equal(f.address, r.address);
  const d = f.data;
  assert.equal(f.data, d, 'the same view while it is held');
  if (process.env.SHMRING_NODE_FORCE_COPY) assert.equal(shmring.zeroCopy, false);
  if (shmring.zeroCopy) {
    assert.equal(addressOf(d), f.address, 'the frame view is the ring memory');
  } else {
    assert.ok(!inMapping(c, addressOf(d), 4096));
  }
  for (let i = 0; i < d.length; i++) assert.equal(d[i], i & 0xff);
  f.release();
  assert.throws(() => f.data, { code: 'SHMRING_RELEASED' });
});

test('send() copies bytes in as one record', (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  p.send(Buffer.from('hello'), { stream: 2 });
  p.send(new Uint8Array([1, 2, 3]));
  const a = c.tryNext();
  assert.equal(Buffer.from(a.data).toString(), 'hello');
  assert.equal(a.stream, 2);
  const b = c.tryNext();
  assert.deepEqual([...b.data], [1, 2, 3]);
  assert.equal(c.tryNext(), null);
  assert.equal(c.stats().records_committed, 2);
  p.close();
});

test('video and audio records carry the shared media header', (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  const r = p.reserveVideo({ width: 64, height: 48, format: 'i420', ptsNs: 77n, sequence: 3n });
  const planes = r.planes();
  assert.deepEqual(planes.map((x) => x.length), [64 * 48, 32 * 24, 32 * 24]);
  planes.forEach((pl, i) => pl.fill(16 + i));
  r.commit({ stream: 1 });
  const a = p.reserveAudio({ samples: 480, channels: 2, sampleRate: 48000 });
  const s = a.samples();
  assert.ok(s instanceof Int16Array);
  assert.equal(s.length, 960);
  s.fill(-5);
  a.commit();

  const v = c.tryNext();
  assert.equal(v.kind, shmring.KIND_VIDEO);
  assert.equal(v.mediaError, null);
  const m = v.media;
  assert.equal(m.format, 'i420');
  assert.equal(m.width, 64);
  assert.equal(m.ptsNs, 77n);
  assert.equal(m.sequence, 3n);
  v.planes().forEach((pl, i) => assert.ok(pl.every((x) => x === 16 + i)));
  assert.throws(() => v.samples(), { code: 'SHMRING_BAD_MEDIA_HEADER' });
  const au = c.tryNext();
  assert.equal(au.kind, shmring.KIND_AUDIO);
  assert.equal(au.media.sampleRate, 48000);
  assert.ok(au.samples().every((x) => x === -5));
  assert.throws(() => au.planes(), { code: 'SHMRING_BAD_MEDIA_HEADER' });
  p.close();
});

test("a media header is checked by the core's rules for its record's kind", (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  // A well-formed audio header whose sample rate the core refuses (1 Hz).
  const a = p.reserveAudio({ samples: 4, channels: 1, sampleRate: 48000 });
  const bytes = Uint8Array.from(a.data);
  a.abort();
  new DataView(bytes.buffer).setUint32(20, 1, true);
  p.send(bytes, { kind: shmring.KIND_AUDIO });
  const f = c.tryNext();
  assert.equal(f.media, null);
  assert.match(f.mediaError, /1 Hz/);
  f.release();
  // The same bytes as a raw record: no media header is looked for.
  p.send(bytes, { kind: 0 });
  const raw = c.tryNext();
  assert.equal(raw.media, null);
  assert.equal(raw.mediaError, null);
  raw.release();
});

test('a reservation aborted explicitly or dropped and collected is never seen', async (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  const r = p.reserve(100);
  r.data.fill(1);
  r.abort();
  assert.equal(r.open, false);
  assert.throws(() => r.commit(), { code: 'SHMRING_RELEASED' });

  (() => {
    const dropped = p.reserve(200);
    dropped.data.fill(2); // a view too: both must be collected
  })();
  assert.throws(() => p.reserve(10), { code: 'SHMRING_RESERVATION_OPEN' });
  await collect();
  const ok = p.reserve(300);
  ok.data.fill(3);
  ok.commit();
  const f = c.tryNext();
  assert.equal(f.length, 300, 'only the committed record arrives');
  assert.equal(c.tryNext(), null);
  const s = c.stats();
  assert.equal(s.records_aborted, 2);
  assert.equal(s.skipped_aborted, 2);
  p.close();
});

test('release() gives the record back at once and detaches its views', async (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  p.send(Buffer.alloc(1000, 7));
  const f = c.tryNext();
  const view = f.data;
  const plane = view.subarray(10, 20);
  assert.equal(view[999], 7);
  assert.equal(c.outstanding, 1);
  f.release();
  assert.equal(f.released, true);
  assert.equal(c.outstanding, 0, 'given back now, not at the next garbage collection');
  if (shmring.zeroCopy) {
    assert.equal(view.length, 0, 'the view is detached');
    assert.equal(plane.length, 0, 'and so is every typed array over it');
    assert.equal(view[999], undefined);
  }
  f.release(); // idempotent
});

test('a frame dropped without release() goes back once it and its views are collected', async (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  p.send(Buffer.alloc(1000, 7));
  let view = (() => c.tryNext().data)(); // the frame itself is unreachable at once
  await collect();
  if (shmring.zeroCopy) {
    assert.equal(c.outstanding, 1, 'the live view keeps the record (deferred release)');
    assert.equal(view[999], 7);
  }
  view = null;
  await collect();
  assert.equal(c.outstanding, 0, 'released once the view is gone');
});

test('bad arguments and misuse throw errors with stable codes', (t) => {
  const c = ring({ maxProducers: 1 });
  t.after(() => c.close());
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  assert.throws(() => p.reserve(-1), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.reserve(1.5), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.reserve(NaN), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.reserve('a lot'));
  assert.throws(() => p.reserve(1e12), { code: 'SHMRING_TOO_LARGE', message: /exceeds max_record/ });
  assert.throws(() => p.reserveVideo({ width: 0, height: 10 }), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.reserveVideo({ width: 10, height: 10, format: 'h264' }), {
    code: 'SHMRING_INVALID_ARG',
    message: /unknown media format "h264": expected one of i420, nv12, rgba, pcm_s16/,
  });
  assert.throws(() => p.reserveVideo({ width: 4e9, height: 4e9 }), { code: /SHMRING_(INVALID_ARG|TOO_LARGE)/ });
  assert.throws(() => p.reserveAudio({ samples: 10, channels: 0, sampleRate: 1 }), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.setPolicy('sometimes'), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => Producer.forConsumer(c), { code: 'SHMRING_NO_SLOT' });
  assert.throws(() => Producer.open('shmring-node-test-no-such-ring'), { code: 'SHMRING_NOT_FOUND' });
  assert.throws(() => Producer.fromFd(-3), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => new Consumer({}), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => new Consumer({ memfd: true, create: true, capacity: 1000 }), { code: 'SHMRING_CONFIG' });
  assert.throws(() => c.next(-1), { code: 'SHMRING_INVALID_ARG' });
  assert.rejects(() => c.nextAsync(-1), { code: 'SHMRING_INVALID_ARG' });

  // Full, with the "fail" policy: SHMRING_FULL names the ring and the cause.
  const big = c.geometry().maxRecord;
  assert.throws(() => {
    for (;;) p.send(new Uint8Array(big));
  }, { code: 'SHMRING_FULL', message: /is full/ });
  assert.ok(c.stats().drops_full >= 1);
  p.close();
  assert.throws(() => p.reserve(1), { code: 'SHMRING_CLOSED' });
});

test("the consumer options are the core's: absent or 0 the default, Infinity off", (t) => {
  const plain = ring();
  t.after(() => plain.close());
  const c = ring({
    livenessIntervalMs: 0,
    manualReset: true,
    overtakeAfterMs: Infinity,
    tetherStallLimitMs: 20,
    latencyBudgetMs: Infinity,
    claimTimeoutMs: Infinity,
  });
  t.after(() => c.close());
  assert.equal(c.livenessIntervalMs, plain.livenessIntervalMs, '0: the default');
  const budget = ring({ latencyBudgetMs: 1, livenessIntervalMs: 5 });
  t.after(() => budget.close());
  assert.equal(budget.livenessIntervalMs, 5);
  assert.throws(() => ring({ livenessIntervalMs: Infinity }), { code: 'SHMRING_CONFIG', message: /cannot be never/ });
  assert.throws(() => ring({ latencyBudgetMs: -1 }), { code: 'SHMRING_CONFIG', message: /latencyBudgetMs must be/ });
});

test("a consumer's filter releases other streams' records unread", (t) => {
  const c = ring({ capacity: 1 << 16, stream: 2, kind: shmring.KIND_RAW });
  t.after(() => c.close());
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  const body = new Uint8Array(2000);
  const got = [];
  for (let i = 0; i < 200; i++) {
    p.send(body, { stream: i % 3 }); // six rings' worth: only the filter frees them
    const f = c.tryNext();
    if (f) {
      got.push(f.stream);
      f.release();
    }
  }
  assert.deepEqual(got, new Array(66).fill(2));
  const s = c.stats();
  assert.deepEqual([s.records_consumed, s.records_filtered, s.drops_full], [66, 134, 0]);
  assert.throws(() => ring({ stream: -1 }), { code: 'SHMRING_INVALID_ARG' });
  p.close();
});

test('maxAgeMs releases records older than the limit unread', (t) => {
  const c = ring({ capacity: 1 << 16, maxAgeMs: 10000 });
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  p.send(Buffer.from('old'), { timestampNs: 1n });
  p.send(Buffer.from('fresh'));
  const f = c.tryNext();
  assert.equal(Buffer.from(f.data).toString(), 'fresh');
  f.release();
  assert.equal(c.tryNext(), null);
  assert.equal(c.stats().records_filtered, 1);
  assert.throws(() => ring({ maxAgeMs: -1 }), { code: 'SHMRING_CONFIG', message: /maxAgeMs must be/ });
  p.close();
});

test('a producer whose consumer is gone gets SHMRING_NO_CONSUMER when the ring stays full', (t) => {
  const c = ring();
  const p = Producer.forConsumer(c, { onFull: 'block', timeoutMs: 20 });
  t.after(() => p.close());
  const big = c.geometry().maxRecord;
  c.close();
  assert.throws(() => {
    for (;;) p.send(new Uint8Array(big));
  }, { code: 'SHMRING_NO_CONSUMER' });
  assert.throws(() => c.tryNext(), { code: 'SHMRING_CLOSED' });
});

test('for await needs an eventfd ring', async (t) => {
  const c = ring();
  t.after(() => c.close());
  await assert.rejects(c.nextAsync(10), { code: 'SHMRING_EVENTFD_REQUIRED' });
});

test('frames are numbered by the producer, carry their frame rate, and streams end', (t) => {
  const c = ring();
  t.after(() => c.close());
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  for (let i = 0; i < 2; i++) {
    const r = p.reserveVideo({ width: 32, height: 16, fps: [30000, 1001] });
    r.planes().forEach((plane) => plane.fill(16));
    r.commit({ stream: 2, kind: shmring.KIND_VIDEO });
  }
  p.endStream(2, shmring.KIND_VIDEO);
  assert.throws(() => p.endStream(2, shmring.KIND_RAW), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => p.reserveVideo({ width: 32, height: 16, fps: [30, 0] }), {
    code: 'SHMRING_INVALID_ARG',
  });
  const got = [];
  for (let f = c.tryNext(); f; f = c.tryNext()) {
    got.push(
      f.end ? ['end', f.end.sequence] : [f.media.sequence, f.media.fpsNum, f.media.fpsDen],
    );
    f.release();
  }
  assert.deepEqual(got, [
    [0n, 30000, 1001],
    [1n, 30000, 1001],
    ['end', 2n],
  ]);
});
