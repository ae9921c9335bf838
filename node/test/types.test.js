'use strict';
// index.d.ts declares what index.js exports (names of the module and of each
// class's members), so the declarations cannot drift from the add-on silently.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const shmring = require('..');

const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');

function declaredMembers(cls) {
  const body = dts.split(`export class ${cls}`)[1].split('\n}\n')[0];
  return new Set([...body.matchAll(/^\s+(?:static |readonly )?([a-zA-Z]+)[(?:]/gm)].map((m) => m[1]));
}

test('every export is declared', () => {
  for (const name of Object.keys(shmring)) {
    assert.match(dts, new RegExp(`export (const|function|class) ${name}\\b`), name);
  }
});

for (const cls of ['Consumer', 'Producer', 'Frame', 'Reservation']) {
  test(`${cls}: every member is declared`, () => {
    const declared = declaredMembers(cls);
    const proto = shmring[cls].prototype;
    const actual = Object.getOwnPropertyNames(proto).filter((n) => n !== 'constructor');
    if (cls === 'Producer') actual.push(...Object.getOwnPropertyNames(shmring.Producer).filter((n) => !['length', 'name', 'prototype', 'arguments', 'caller'].includes(n)));
    for (const n of actual) assert.ok(declared.has(n), `${cls}.${n} is missing from index.d.ts`);
    for (const n of declared) {
      if (n !== 'constructor') assert.ok(actual.includes(n), `index.d.ts declares ${cls}.${n}, which does not exist`);
    }
  });
}
