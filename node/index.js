'use strict';
// shmring for Node.js and Electron: the native add-on (shmring.node, napi-rs over
// Node-API) plus the parts that are plain JavaScript: waiting in the event loop
// (`nextAsync`, `for await`), and plane/sample views of media records.

const native = (() => {
  try {
    return require('./shmring.node');
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes('shmring.node')) throw e;
    // A checkout (or a folder installed from one) whose add-on was never built.
    e.message = `shmring: the native add-on ${require('node:path').join(__dirname, 'shmring.node')} is not built: `
      + 'run `npm run build` in the package folder (node/ of a checkout; Rust needed), '
      + 'or install the packed package (`make dist`: npm install ./dist/shmring-*.tgz)';
    throw e;
  }
})();

const { Consumer, Producer, Frame, Reservation } = native;

/** True when frames and reservations are views into the ring (no copy). */
const zeroCopy = native.zeroCopy();

function codeError(code, message) {
  const e = new Error(message);
  e.code = code;
  return e;
}

const kWake = Symbol('shmring.wake');
const kWaiting = Symbol('shmring.waiting');

/** Views of each plane of a video payload, or the samples of an audio one. */
function planesOf(what, media, data) {
  if (!media) throw codeError('SHMRING_BAD_MEDIA_HEADER', `${what}: not a media record with a valid header`);
  if (!['i420', 'nv12', 'rgba'].includes(media.format)) {
    throw codeError('SHMRING_BAD_MEDIA_HEADER', `${what}: a ${media.format} record has no video planes (use samples())`);
  }
  return media.planes.map((p) => data.subarray(p.offset, p.offset + p.size));
}

function samplesOf(what, media, data) {
  if (!media || !media.format.startsWith('pcm_')) {
    throw codeError('SHMRING_BAD_MEDIA_HEADER', `${what}: not an audio record (use planes())`);
  }
  const p = media.planes[0];
  const Ctor = media.format === 'pcm_f32' ? Float32Array : Int16Array;
  return new Ctor(data.buffer, data.byteOffset + p.offset, p.size / Ctor.BYTES_PER_ELEMENT);
}

Object.defineProperties(Frame.prototype, {
  /** Video: a Uint8Array per plane (Y, U, V for i420; Y, UV for nv12; RGBA). */
  planes: {
    value: function planes() {
      return planesOf(`frame ${this.seq}`, this.media, this.data);
    },
  },
  /** Audio: an Int16Array (pcm_s16) or Float32Array (pcm_f32) of interleaved samples. */
  samples: {
    value: function samples() {
      return samplesOf(`frame ${this.seq}`, this.media, this.data);
    },
  },
});

Object.defineProperties(Reservation.prototype, {
  planes: {
    value: function planes() {
      return planesOf('reservation', this.media, this.data);
    },
  },
  samples: {
    value: function samples() {
      return samplesOf('reservation', this.media, this.data);
    },
  },
});

const nativeClose = Consumer.prototype.close;

Object.defineProperties(Consumer.prototype, {
  /**
   * The next frame, waiting in the event loop (never blocking it) for the ring's
   * eventfd, up to `timeoutMs` (absent: forever). Resolves to null on timeout or
   * when the consumer is closed. Needs a ring created with `eventfd: true`.
   */
  nextAsync: {
    value: async function nextAsync(timeoutMs) {
      if (timeoutMs !== undefined && timeoutMs !== null && !(typeof timeoutMs === 'number' && timeoutMs >= 0)) {
        throw codeError('SHMRING_INVALID_ARG', `timeoutMs must be a non-negative number, got ${timeoutMs}`);
      }
      if (this[kWaiting]) {
        throw codeError('SHMRING_BUSY', 'another nextAsync() or for-await on this consumer is waiting');
      }
      const deadline = timeoutMs == null ? Infinity : performance.now() + timeoutMs;
      // Look again at least every liveness interval, so the consumer can skip a dead
      // producer's claim while it waits.
      const every = this.livenessIntervalMs;
      for (;;) {
        if (this.closed) return null;
        const f = this.tryNext();
        if (f) return f;
        const left = deadline - performance.now();
        if (left <= 0) return null;
        if (this.arm()) continue;
        this[kWaiting] = true;
        let timer;
        try {
          await new Promise((resolve, reject) => {
            this[kWake] = (status) => (status < 0 ? reject(codeError('SHMRING_OS', `polling the eventfd failed (libuv status ${status})`)) : resolve());
            timer = setTimeout(resolve, Math.min(left, every));
            this.watch((status) => this[kWake] && this[kWake](status));
          });
        } finally {
          clearTimeout(timer);
          this[kWake] = null;
          this[kWaiting] = false;
          if (!this.closed) {
            this.unwatch();
            this.disarm();
          }
        }
      }
    },
  },
  /** `for await (const frame of consumer)`: frames until the consumer is closed. */
  [Symbol.asyncIterator]: {
    value: async function* frames() {
      // Frames already in the ring come out without a pass through the event
      // loop; so that timers and I/O still run while a fast stream keeps the ring
      // full, the loop gives the event loop a turn at least every millisecond.
      let turn = performance.now();
      for (;;) {
        if (performance.now() - turn >= 1) {
          await new Promise((resolve) => setImmediate(resolve));
          turn = performance.now();
        }
        const f = await this.nextAsync();
        if (f === null) return;
        yield f;
      }
    },
  },
  close: {
    value: function close() {
      const wake = this[kWake];
      nativeClose.call(this);
      if (wake) wake(0);
    },
  },
});

module.exports = {
  Consumer,
  Producer,
  Frame,
  Reservation,
  zeroCopy,
  nowNs: native.nowNs,
  addressOf: native.addressOf,
  version: native.version(),
  layoutVersion: native.layoutVersion(),
  KIND_RAW: 0,
  KIND_VIDEO: 1,
  KIND_AUDIO: 2,
};
