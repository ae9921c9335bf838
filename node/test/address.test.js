'use strict';
// Ring addresses: the one text form every binding and the `shmring` command take,
// parsed by the core. One ring reached by each form; a stale ring replaced, a live
// one refused; bad text named.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { Consumer, Producer } = require('..');

const name = () => `shmring-node-address-${process.pid}-${Math.random().toString(16).slice(2, 10)}`;

test('one ring reached by its name, its file, its descriptors', (t) => {
  const ring = name();
  const c = new Consumer({ address: `create:${ring},capacity=1M,max_producers=8` });
  t.after(() => c.close());
  assert.equal(c.geometry().capacity, 1 << 20);
  assert.equal(c.geometry().maxProducers, 8);
  const fds = c.descriptors.map((f) => fs.openSync(`/proc/self/fd/${f}`, 'r+'));
  const producers = [
    Producer.fromAddress(ring),
    Producer.fromAddress(`shm:${ring}`),
    Producer.fromAddress(`/dev/shm/${ring}`),
    Producer.fromAddress(`fd:${fds.join(',')}`),
  ];
  producers.forEach((p, i) => {
    p.send(Buffer.from('x'.repeat(i + 1)), { stream: i });
    p.close();
  });
  for (let i = 0; i < producers.length; i++) {
    const f = c.tryNext();
    assert.ok(f, `record ${i}`);
    assert.equal(f.stream, i);
    assert.equal(f.length, i + 1);
    f.release();
  }
});

test('a stale ring is replaced, a live one refused', (t) => {
  const ring = name();
  // A consumer whose process ends without closing its ring (as a crash would).
  const child = spawnSync(process.execPath, ['-e', `
    const { Consumer } = require(${JSON.stringify(path.join(__dirname, '..'))});
    globalThis.keep = new Consumer({ address: 'create:${ring},capacity=64K' });
    process.reallyExit(0);
  `]);
  assert.equal(child.status, 0, String(child.stderr));
  t.after(() => fs.rmSync(`/dev/shm/${ring}`, { force: true }));
  assert.ok(fs.existsSync(`/dev/shm/${ring}`), 'left behind');
  assert.throws(() => new Consumer({ address: `create:${ring},stale=refuse` }), {
    code: 'SHMRING_EXISTS',
    message: /its consumer is gone/,
  });
  assert.throws(() => new Consumer({ name: ring, create: true, replaceStale: false }), {
    code: 'SHMRING_EXISTS',
    message: /its consumer is gone/,
  });
  // `create: true` means what `create:NAME` does: the stale ring is replaced.
  const c = new Consumer({ name: ring, create: true });
  assert.equal(c.stats().records_committed, 0);
  for (const init of [{ address: `create:${ring}` }, { name: ring, create: true }]) {
    assert.throws(() => new Consumer(init), {
      code: 'SHMRING_EXISTS',
      message: /its consumer is alive/,
    });
  }
  c.close();
  assert.ok(!fs.existsSync(`/dev/shm/${ring}`));
});

test('bad text says what is wrong; an address excludes the other ways', () => {
  for (const [text, what] of [
    ['', /empty/],
    ['cam:0', /shm:cam:0/],
    ['fd:3,x', /"x" is not a descriptor number/],
    ['create:x,colour=red', /unknown option "colour"/],
  ]) {
    assert.throws(() => Producer.fromAddress(text), { code: 'SHMRING_CONFIG', message: what });
  }
  assert.throws(() => new Consumer({ address: 'memfd:', create: true }), { code: 'SHMRING_INVALID_ARG' });
  assert.throws(() => Producer.fromAddress('x', { eventfdFd: 3 }), { code: 'SHMRING_INVALID_ARG' });
  const missing = path.join(os.tmpdir(), `shmring-node-none-${process.pid}.sock`);
  assert.throws(() => Producer.fromAddress(`unix:${missing}`), { code: 'SHMRING_NOT_FOUND' });
});
