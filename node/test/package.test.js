'use strict';
// One version, from one place: the add-on's version is the workspace's (Cargo.toml),
// and package.json says the same; the layout version is the core's constant.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const shmring = require('..');

const root = path.resolve(__dirname, '..', '..');

test('the version is the workspace version, in the add-on and in package.json', () => {
  const cargo = fs.readFileSync(path.join(root, 'Cargo.toml'), 'utf8');
  const section = cargo.split('[workspace.package]')[1].split('\n[')[0];
  const workspace = section.match(/^version\s*=\s*"([^"]+)"/m)[1];
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8'));
  assert.equal(shmring.version, workspace);
  assert.equal(pkg.version, workspace);
});

test('the layout version is the core constant', () => {
  const layout = fs.readFileSync(path.join(root, 'crates', 'shmring', 'src', 'layout.rs'), 'utf8');
  const core = Number(layout.match(/pub const LAYOUT_VERSION: u32 = (\d+);/)[1]);
  assert.equal(shmring.layoutVersion, core);
  assert.ok(Number.isInteger(shmring.layoutVersion) && shmring.layoutVersion > 0);
});
