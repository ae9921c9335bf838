#!/usr/bin/env node
// Run by `npm pack` (and `npm publish`): the package carries the prebuilt add-on
// (shmring.node, from `npm run build`) and the licence files. Refuses to pack an
// add-on of another version than package.json's: the version is the workspace's
// (Cargo.toml), and the add-on reports the version it was built as.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const root = path.resolve(here, '..');
const pkg = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
const addon = path.join(here, 'shmring.node');
if (!fs.existsSync(addon)) {
  console.error('prepack: no shmring.node: run `npm run build` first');
  process.exit(1);
}
const built = require(addon).version();
if (built !== pkg.version) {
  console.error(`prepack: shmring.node is version ${built}, package.json says ${pkg.version}: rebuild, or set the workspace version in both`);
  process.exit(1);
}
for (const f of ['LICENSE-MIT', 'LICENSE-APACHE']) fs.copyFileSync(path.join(root, f), path.join(here, f));
console.log(`prepack: shmring ${pkg.version} (layout version ${require(addon).layoutVersion()})`);
