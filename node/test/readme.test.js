'use strict';
// Every JavaScript snippet of node/README.md, the top-level README and docs/GUIDE.md runs as
// written (in a child process, with `require('shmring')` resolving to this package).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const pkg = path.join(__dirname, '..');
const readmes = [path.join(pkg, 'README.md'), path.join(pkg, '..', 'README.md'), path.join(pkg, '..', 'docs', 'GUIDE.md')];
const snippets = readmes.flatMap((f) =>
  [...fs.readFileSync(f, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]));

test('the README has JavaScript snippets', () => {
  assert.ok(snippets.length >= 3);
});

snippets.forEach((code, i) => {
  test(`README snippet ${i + 1} runs`, () => {
    const r = spawnSync(process.execPath, ['-e', code], { cwd: pkg, encoding: 'utf8', timeout: 30000 });
    assert.equal(r.status, 0, `snippet ${i + 1} failed:\n${r.stderr}`);
  });
});
