'use strict';
// The package used from outside node/: the README's commands install the folder
// into an empty project, from which `require('shmring')` works (Node finds it
// inside node/ only by the package's own name); a folder whose add-on is not
// built says how to build it.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const pkg = path.join(__dirname, '..');
const root = path.join(pkg, '..');
const readme = fs.readFileSync(path.join(pkg, 'README.md'), 'utf8');

function tmpdir(t) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'shmring-node-install-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

test("the README's install commands make require('shmring') work outside node/", (t) => {
  const block = readme.split('From a checkout, build the add-on')[1].match(/```sh\n([\s\S]*?)```/)[1];
  assert.match(block, /npm install "\$checkout\/node"/);
  const tmp = tmpdir(t);
  // As written, from the checkout's top directory; its temporary project goes
  // under `tmp` (mktemp follows TMPDIR). npm asks no registry for a folder.
  const r = spawnSync('bash', ['-euc', block], {
    cwd: root,
    encoding: 'utf8',
    timeout: 600000,
    env: { ...process.env, TMPDIR: tmp, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' },
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  assert.equal(r.stdout.trim().split('\n').pop(), version);
  // And the package works there: a frame through a ring.
  const [app] = fs.readdirSync(tmp).filter((d) => fs.existsSync(path.join(tmp, d, 'node_modules', 'shmring')));
  assert.ok(app, 'no project with node_modules/shmring');
  const code = `
    const s = require('shmring');
    const c = new s.Consumer({ memfd: true, create: true, capacity: 1 << 16 });
    s.Producer.forConsumer(c).send(new Uint8Array([7]), { stream: 3 });
    const f = c.tryNext();
    console.log(f.stream, f.data[0]);`;
  const run = spawnSync(process.execPath, ['-e', code], { cwd: path.join(tmp, app), encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), '3 7');
});

test('a package folder whose add-on is not built says how to build it', (t) => {
  const dir = tmpdir(t);
  for (const f of ['index.js', 'package.json']) fs.copyFileSync(path.join(pkg, f), path.join(dir, f));
  const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(dir)})`], { encoding: 'utf8' });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /the native add-on .*shmring\.node is not built: run `npm run build`/);
  assert.match(r.stderr, /MODULE_NOT_FOUND/);
});
