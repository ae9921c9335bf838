'use strict';
// Run by scripts/test-dist.sh in an empty project where the npm package was
// installed, with no Rust toolchain on PATH: one record through a ring.
const assert = require('node:assert/strict');
const shmring = require('shmring');

const [version, layout] = process.argv.slice(2);
assert.equal(shmring.version, version);
assert.equal(shmring.layoutVersion, Number(layout));
assert.ok(require.resolve('shmring').includes('node_modules'));

const ring = new shmring.Consumer({ memfd: true, create: true, capacity: 1 << 20 });
const cam = shmring.Producer.forConsumer(ring);
cam.send(new Uint8Array([1, 2, 3]), { stream: 5 });
const frame = ring.next(1000);
assert.ok(frame);
assert.equal(frame.stream, 5);
assert.deepEqual([...frame.data], [1, 2, 3]);
frame.release();
cam.close();
ring.close();
console.log(`shmring ${shmring.version} (layout version ${shmring.layoutVersion}, zero copy ${shmring.zeroCopy}) from ${require.resolve('shmring')}: one record`);
