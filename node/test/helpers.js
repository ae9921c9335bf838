'use strict';
// Shared by the tests: the Rust peer, checksums, cleanup guards.
const fs = require('node:fs');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');

const root = path.resolve(__dirname, '..', '..');
const targetDir = process.env.CARGO_TARGET_DIR ? path.resolve(root, process.env.CARGO_TARGET_DIR) : path.join(root, 'target');
const ringPeer = path.join(targetDir, 'release', 'ring-peer');

// The checked record of every cross-process test, in every language (the Rust
// shmring_testkit::record, which ring-peer writes; python/tests/_record.py;
// go/record_test.go): bytes 0..4 the record's index (u32, little-endian), 4..8 the
// CRC-32 (IEEE, zlib's) of every byte after them, then the body, here a xorshift32
// stream seeded by the index.
const RECORD_HEADER = 8;
const CRC_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes, start = 0) {
  let c = 0xffffffff;
  for (let i = start; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** Writes checked record `index` over all of `d` (a Uint8Array of at least 8 bytes). */
function fillRecord(d, index) {
  let x = (0x9e3779b9 ^ Math.imul(index, 0x85ebca6b)) >>> 0;
  for (let k = RECORD_HEADER; k < d.length; k++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    d[k] = x & 0xff;
  }
  const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
  view.setUint32(0, index, true);
  view.setUint32(4, crc32(d, RECORD_HEADER), true);
}

/** The index of a checked record whose checksum holds, else null. */
function recordIndex(d) {
  if (d.length < RECORD_HEADER) return null;
  const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return view.getUint32(4, true) === crc32(d, RECORD_HEADER) ? view.getUint32(0, true) : null;
}

/** A full garbage collection, run twice with a turn of the loop between (so
 * Node-API finalizers queued by the first have run). */
v8.setFlagsFromString('--expose-gc');
const gcFn = vm.runInNewContext('gc');
async function collect() {
  for (let i = 0; i < 3; i++) {
    gcFn();
    await new Promise((r) => setImmediate(r));
  }
}

/** A unique ring name, and removal of /dev/shm/NAME whatever happens. */
function ringName(t) {
  const name = `shmring-node-test-${process.pid}-${Math.random().toString(16).slice(2)}`;
  t.after(() => fs.rmSync(`/dev/shm/${name}`, { force: true }));
  return name;
}

/** Kills and reaps a child at the end of the test, whatever happens. */
function guardChild(t, child) {
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return child;
}

function exited(child) {
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
}

module.exports = { root, ringPeer, crc32, fillRecord, recordIndex, collect, ringName, guardChild, exited };
