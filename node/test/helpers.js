'use strict';
// Shared by the tests: the Rust peer, checksums, cleanup guards.
const fs = require('node:fs');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');

const root = path.resolve(__dirname, '..', '..');
const targetDir = process.env.CARGO_TARGET_DIR ? path.resolve(root, process.env.CARGO_TARGET_DIR) : path.join(root, 'target');
const ringPeer = path.join(targetDir, 'release', 'examples', 'ring_peer');

/** FNV-1a, 32 bits (the Rust peer and the Python consumer use the same). */
function fnv1a(bytes, start = 0) {
  let h = 0x811c9dc5;
  for (let i = start; i < bytes.length; i++) {
    h ^= bytes[i];
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
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

module.exports = { root, ringPeer, fnv1a, collect, ringName, guardChild, exited };
