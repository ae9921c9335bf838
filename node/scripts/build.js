#!/usr/bin/env node
// Builds the native add-on with cargo and copies it next to index.js as
// shmring.node. Usage: node scripts/build.js [--debug] [--with-peer]
// --with-peer also builds the Rust producer the tests use (`ring-peer`, of the
// test kit: crates/shmring-testkit/src/bin/ring-peer.rs).
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const debug = process.argv.includes('--debug');
const root = path.resolve(__dirname, '..', '..');
const cargo = process.env.CARGO || 'cargo';
const args = ['build', '-p', 'shmring-node', '--lib', '--message-format=json-render-diagnostics'];
if (!debug) args.push('--release');
const withPeer = process.argv.includes('--with-peer');
let out;
try {
  out = execFileSync(cargo, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 64 << 20 });
} catch (e) {
  console.error(`build.js: ${cargo} ${args.join(' ')} failed (exit ${e.status})`);
  process.exit(1);
}
let lib = null;
for (const line of out.toString().split('\n')) {
  if (!line.startsWith('{')) continue;
  const m = JSON.parse(line);
  if (m.reason === 'compiler-artifact' && m.target && m.target.name === 'shmring_node') {
    lib = m.filenames.find((f) => f.endsWith('.so') || f.endsWith('.dylib'));
  }
}
if (!lib) {
  console.error('build.js: cargo did not report the shmring_node library');
  process.exit(1);
}
if (withPeer) {
  const peer = ['build', '-p', 'shmring-testkit', '--bin', 'ring-peer'];
  if (!debug) peer.push('--release');
  try {
    execFileSync(cargo, peer, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (e) {
    console.error(`build.js: ${cargo} ${peer.join(' ')} failed (exit ${e.status})`);
    process.exit(1);
  }
}
const dest = path.join(__dirname, '..', 'shmring.node');
fs.copyFileSync(lib, dest + '.tmp');
fs.renameSync(dest + '.tmp', dest);
console.log(`built ${path.relative(process.cwd(), dest)} from ${path.relative(process.cwd(), lib)}`);
