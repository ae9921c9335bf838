'use strict';
// Every argument is checked before it is used: integers against their range (a
// JavaScript number never wraps: not -1, NaN, 1.5, 2**40 + 7 or anything beyond
// 2**53 - 1), values against their type, option objects against the names the
// call takes (a misspelt option is an error, not a default). Every error thrown
// carries a code that index.d.ts and the README list.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const shmring = require('..');
const { Consumer, Producer } = shmring;
const { ringName } = require('./helpers');

const U32 = 'an integer from 0 to 4294967295';
const U64 = 'an integer from 0 to 9007199254740991';
const FD = 'an integer from 0 to 2147483647';

const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
const documented = new Set(
  [...dts.split('export type ErrorCode =')[1].split(';')[0].matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]),
);

/** Runs `f`, which must throw; the error's code must be documented. */
function thrown(f) {
  try {
    f();
  } catch (e) {
    assert.ok(documented.has(e.code), `code ${e.code} of "${e.message}" is not in index.d.ts`);
    return e;
  }
  assert.fail('no error thrown');
}

function invalid(f, message) {
  const e = thrown(f);
  assert.equal(e.code, 'SHMRING_INVALID_ARG', e.message);
  assert.match(e.message, message);
}

function ring(t, opts = {}) {
  const c = new Consumer({ memfd: true, create: true, capacity: 1 << 16, ...opts });
  t.after(() => c.close());
  return c;
}

test('integers never wrap: each is refused with its name, range and value', (t) => {
  const c = ring(t);
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  t.after(() => p.close());
  const bytes = new Uint8Array(8);
  for (const [name, value, shown] of [
    ['stream', -1, '-1'],
    ['stream', 2 ** 40 + 7, '1099511627783'],
    ['stream', NaN, 'NaN'],
    ['stream', 1.5, '1.5'],
    ['stream', '1', 'a string'],
    ['kind', 2 ** 32 + 1, '4294967297'],
    ['flags', Infinity, 'Infinity'],
  ]) {
    const want = new RegExp(`^${name} must be ${U32}, got ${shown}$`);
    invalid(() => p.send(bytes, { [name]: value }), want);
    const r = p.reserve(8);
    invalid(() => r.commit({ [name]: value }), want);
    r.abort(); // a commit refused for its arguments leaves the claim open
    invalid(() => new Consumer({ memfd: true, create: true, [name === 'flags' ? 'spin' : name]: value }),
      new RegExp(`must be ${U32}, got ${shown}$`));
  }
  invalid(() => p.reserve(-1), new RegExp(`^length must be ${U64}, got -1$`));
  invalid(() => p.reserve(2 ** 53 + 2), /^length must be .*Number.MAX_SAFE_INTEGER.*, got 9007199254740994$/);
  invalid(() => p.reserve(NaN), /^length must be .*, got NaN$/);
  invalid(() => p.reserveVideo({ width: -1, height: 16 }), new RegExp(`^width must be ${U32}, got -1$`));
  invalid(() => p.reserveVideo({ width: 16, height: 2 ** 32 }), new RegExp(`^height must be ${U32}`));
  invalid(() => p.reserveVideo({ width: 16, height: 16, fps: [30, -1] }), new RegExp(`^fps\\[1\\] must be ${U32}`));
  invalid(() => p.reserveVideo({ width: 16, height: 16, ptsNs: -1n }), /^ptsNs must be a bigint from 0n/);
  invalid(() => p.reserveVideo({ width: 16, height: 16, sequence: 2n ** 64n }), /^sequence must be a bigint/);
  invalid(() => p.reserveVideo({ width: 16, height: 16, ptsNs: 5 }), /^ptsNs must be a bigint .*, got 5$/);
  invalid(() => p.reserveAudio({ samples: 10, channels: 2 ** 32 + 2, sampleRate: 48000 }), /^channels must be/);
  invalid(() => p.reserveVideo({ height: 16 }), /^reserveVideo: width is required$/);
  invalid(() => p.endStream(-1, shmring.KIND_VIDEO), new RegExp(`^stream must be ${U32}, got -1$`));
  invalid(() => p.endStream(0, 2 ** 32 + 1), new RegExp(`^kind must be ${U32}, got 4294967297$`));
  invalid(() => p.send(bytes, { timestampNs: -1n }), /^timestampNs must be a bigint/);
  invalid(() => p.send('text'), /^bytes must be a Uint8Array/);
  invalid(() => c.next('soon'), /^timeoutMs must be a number, got a string$/);
  invalid(() => p.setPolicy('block', NaN), /timeoutMs/);
  // Sizes: a number beyond 2**53 - 1 is refused for what it is, not called negative.
  invalid(() => new Consumer({ memfd: true, create: true, capacity: 2 ** 60 }),
    /^capacity must be an integer from 0 to 9007199254740991 \(Number.MAX_SAFE_INTEGER: larger numbers are not exact\), got 1152921504606846976$/);
  invalid(() => new Consumer({ memfd: true, create: true, logEntries: 1.5 }), /^logEntries must be/);
  invalid(() => new Consumer({ memfd: true, create: true, maxProducers: -1 }), /^maxProducers must be/);
  // Descriptors: 2**32 + 1 is not descriptor 1.
  invalid(() => Producer.fromFd(2 ** 32 + 1), new RegExp(`^fd must be ${FD}, got 4294967297$`));
  invalid(() => Producer.fromFds([0, -1]), new RegExp(`^fds\\[1\\] must be ${FD}, got -1$`));
  invalid(() => new Consumer({ fds: [2 ** 31] }), new RegExp(`^fds\\[0\\] must be ${FD}`));
  invalid(() => Producer.open(ringName(t), { eventfdFd: -1 }), /^eventfdFd must be/);
  // Nothing reached the ring, and the process's descriptors 0 to 2 are intact.
  assert.equal(c.tryNext(), null);
  assert.equal(c.stats().records_committed, 0);
  for (const fd of [0, 1, 2]) fs.fstatSync(fd);
});

test('unknown option names are errors naming the option and the ones there are', (t) => {
  const c = ring(t);
  const p = Producer.forConsumer(c);
  t.after(() => p.close());
  const bytes = new Uint8Array(8);
  // The consumer's options are the core's table's (camelCase, durations in ms).
  const e = thrown(() => new Consumer({ memfd: true, create: true, livenessIntervalMS: 5 }));
  assert.equal(e.code, 'SHMRING_INVALID_ARG');
  assert.match(e.message, /^new Consumer\(\): unknown option "livenessIntervalMS"; the options are /);
  for (const name of ['livenessIntervalMs', 'spin', 'overtakeAfterMs', 'manualReset', 'tetherStallLimitMs',
    'latencyBudgetMs', 'claimTimeoutMs', 'kind', 'stream', 'capacity', 'eventfd', 'fds']) {
    assert.match(e.message, new RegExp(`\\b${name}\\b`), name);
  }
  invalid(() => Producer.forConsumer(c, { onfull: 'fail' }), /^Producer.forConsumer\(\): unknown option "onfull"/);
  invalid(() => p.send(bytes, { strem: 1 }), /^send\(\): unknown option "strem"; the options are stream, kind, timestampNs, flags$/);
  invalid(() => p.send(bytes, {}, { timeout: 5 }), /^send\(\): unknown option "timeout"; the options are timeoutMs$/);
  invalid(() => p.reserve(8, { timeoutMS: 5 }), /^reserve\(\): unknown option "timeoutMS"/);
  invalid(() => p.reserveVideo({ width: 16, height: 16, fmt: 'nv12' }), /^reserveVideo\(\): unknown option "fmt"/);
  invalid(() => p.reserveAudio({ samples: 10, channels: 2, sampleRate: 48000, rate: 1 }), /unknown option "rate"/);
  const r = p.reserve(8);
  invalid(() => r.commit({ knd: 1, strem: 2 }), /^commit\(\): unknown options "knd", "strem"/);
  r.abort();
  invalid(() => new Consumer({ memfd: true, create: true, capacity: 1 << 16, eventFd: true }), /unknown option "eventFd"/);
  invalid(() => new Consumer(5), /^new Consumer\(\)'s options must be an object, got 5$/);
  // Wrong types are refused the same way.
  invalid(() => new Consumer({ memfd: 'yes', create: true }), /^memfd must be a boolean, got a string$/);
  invalid(() => Producer.forConsumer(c, { onFull: 1 }), /^onFull must be a string/);
  assert.equal(c.tryNext(), null);
});

test('every error code thrown is documented in index.d.ts and the README', (t) => {
  // Every code the add-on and index.js can throw (the core's errors' codes, the
  // binding's own) is listed in index.d.ts's ErrorCode, and that list in the README.
  const sources = fs.readdirSync(path.join(__dirname, '..', 'src'))
    .map((f) => fs.readFileSync(path.join(__dirname, '..', 'src', f), 'utf8'))
    .concat(fs.readFileSync(path.join(__dirname, '..', 'index.js'), 'utf8'))
    .join('\n');
  const thrownCodes = new Set(
    [...sources.matchAll(/(?:=> |const [A-Z_]+(?<!_ENV): &str = |codeError\(|error\(\s*env,\s*)["'](SHMRING_[A-Z_]+)["']/g)].map((m) => m[1]),
  );
  assert.ok(thrownCodes.size >= 25, [...thrownCodes].join(' '));
  for (const code of thrownCodes) assert.ok(documented.has(code), `${code} is thrown but not in index.d.ts`);
  for (const code of documented) assert.match(readme, new RegExp(`\\b${code}\\b`), `${code} is not in the README`);
  const c = ring(t);
  const p = Producer.forConsumer(c, { onFull: 'fail' });
  t.after(() => p.close());
  // Misuse of every kind: each code it throws is a documented one (thrown() checks).
  const calls = [
    () => p.reserve('a lot'),
    () => p.reserve(1e12),
    () => p.reserveVideo(null),
    () => p.reserveVideo({ width: 16, height: 16, format: 'h264' }),
    () => p.setPolicy('sometimes'),
    () => p.setPolicy(),
    () => Producer.open(),
    () => Producer.open(ringName(t)),
    () => Producer.fromAddress(42),
    () => Producer.fromAddress('create:'),
    () => Producer.fromFds('3,4'),
    () => new Consumer(),
    () => new Consumer({}),
    () => new Consumer({ memfd: true, create: true, capacity: 1000 }),
    () => c.watch('not a function'),
    () => shmring.addressOf([1, 2, 3]),
    () => c.next(-1),
    () => p.endStream(0, shmring.KIND_RAW),
  ];
  for (const call of calls) thrown(call);
  // A socket is called a socket, not a segment.
  const sock = `/tmp/shmring-node-test-no-socket-${process.pid}`;
  const e = thrown(() => Producer.connect(sock));
  assert.equal(e.code, 'SHMRING_NOT_FOUND');
  assert.equal(e.message, `socket ${sock} does not exist`);
  const r = p.reserve(8);
  thrown(() => p.reserve(8));
  r.abort();
  thrown(() => r.commit());
});
