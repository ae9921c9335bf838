// Type declarations for the `shmring` package (Node.js >= 18, Electron).

/** Stable `code` of every error the package throws. */
export type ErrorCode =
  | 'SHMRING_OS'
  | 'SHMRING_CONFIG'
  | 'SHMRING_EXISTS'
  | 'SHMRING_NOT_FOUND'
  | 'SHMRING_LAYOUT_MISMATCH'
  | 'SHMRING_UNSEALED'
  | 'SHMRING_FULL'
  | 'SHMRING_TIMEOUT'
  | 'SHMRING_TOO_LARGE'
  | 'SHMRING_NO_SLOT'
  | 'SHMRING_CONSUMER_BUSY'
  | 'SHMRING_NO_CONSUMER'
  | 'SHMRING_CORRUPT'
  | 'SHMRING_TRUNCATED'
  | 'SHMRING_ABANDONED'
  | 'SHMRING_TOO_MANY_HELD'
  | 'SHMRING_NOT_HELD'
  | 'SHMRING_RESERVATION_OPEN'
  | 'SHMRING_NO_RESERVATION'
  | 'SHMRING_EVENTFD_REQUIRED'
  | 'SHMRING_DESCRIPTORS'
  | 'SHMRING_DETACHED'
  | 'SHMRING_NO_TETHER_LINE'
  | 'SHMRING_REFUSED'
  | 'SHMRING_HANDOFF'
  | 'SHMRING_NO_SPACE'
  | 'SHMRING_INVALID_ARG'
  | 'SHMRING_RELEASED'
  | 'SHMRING_CLOSED'
  | 'SHMRING_BAD_MEDIA_HEADER'
  | 'SHMRING_BUSY';

/** An error thrown by shmring: `message` says what failed and where. */
export interface ShmringError extends Error {
  code: ErrorCode;
}

/** True when frames and reservations are views into the ring (no copy); false
 * where V8 forbids external array buffers (Electron's memory cage) or when
 * `SHMRING_NODE_FORCE_COPY=1` is set. */
export const zeroCopy: boolean;
/** The package's version (the add-on's; the same as package.json's). */
export const version: string;
/** The shared-memory layout version this add-on reads and writes: processes built
 * from different releases share a ring when it is equal. */
export const layoutVersion: number;
export const KIND_RAW: 0;
export const KIND_VIDEO: 1;
export const KIND_AUDIO: 2;

/** Nanoseconds of CLOCK_MONOTONIC, the clock record timestamps use by default. */
export function nowNs(): bigint;
/** Address of a typed array's first byte in this process. */
export function addressOf(view: ArrayBufferView): number;

export type VideoFormat = 'i420' | 'nv12' | 'rgba';
export type AudioFormat = 'pcm_s16' | 'pcm_f32';

/** The shared media header at the start of video and audio records. */
export interface MediaHeader {
  format: VideoFormat | AudioFormat;
  width: number;
  height: number;
  sampleRate: number;
  channels: number;
  samples: number;
  ptsNs: bigint;
  /** Per stream id and kind: 0, 1, 2, ... */
  sequence: bigint;
  /** Video's nominal frame rate fpsNum / fpsDen; 0/1: variable. */
  fpsNum: number;
  fpsDen: number;
  planes: { offset: number; stride: number; size: number }[];
}

/** Counters of the ring, named as the core's `Stats::fields()` (snake_case). */
export type Stats = Record<string, number | boolean>;

export interface Geometry {
  capacity: number;
  maxRecord: number;
  logEntries: number;
  maxProducers: number;
  eventfd: boolean;
  segmentSize: number;
}

export interface Health {
  resets: number;
  lastCorruption: string | null;
  stalledClaims: number;
  oldestPending: { slot: number; ms: number } | null;
}

/**
 * Options of `new Consumer()`. Anything absent is the core's default; any other key
 * is an error (`SHMRING_INVALID_ARG`), as in every options object of the package.
 * Integers are checked, never wrapped: out of range, fractional, NaN or beyond
 * `Number.MAX_SAFE_INTEGER` is `SHMRING_INVALID_ARG` naming the option.
 */
export interface ConsumerInit {
  name?: string;
  /**
   * The ring's address, the text every binding and the `shmring` command take:
   * `NAME`, `unix:PATH` (a consumer's socket), `fd:SEG[,LOCK][,EVENTFD]` (taken
   * over, as `fds`), `create:NAME[,OPTION...]` (a stale ring of that name is
   * replaced; `stale=refuse` throws SHMRING_EXISTS), `memfd:[LABEL][,OPTION...]`;
   * `NAME,eventfd=FD` (a named eventfd ring with its eventfd, taken over);
   * OPTIONs: capacity=SIZE, max_record=SIZE, log_entries=N, max_producers=N,
   * eventfd, huge_pages. Excludes name, create, memfd, the sizes and descriptors.
   */
  address?: string;
  /**
   * Create the ring: `name` (a ring of that name whose consumer is gone is
   * replaced, as creating does in every binding; one whose consumer is alive
   * throws SHMRING_EXISTS; `replaceStale: false`: a stale one throws too), or
   * with `memfd` an anonymous one
   * (`name`, if given, its label). The sizes, `memfd` and `replaceStale` go with it.
   */
  create?: boolean;
  memfd?: boolean;
  replaceStale?: boolean;
  capacity?: number;
  maxRecord?: number;
  logEntries?: number;
  maxProducers?: number;
  eventfd?: boolean;
  persist?: boolean;
  /** A named ring's file received as a descriptor (with `eventfdFd` for an eventfd ring). */
  fd?: number;
  /** An eventfd ring's eventfd, with `name` or `fd` (taken over). */
  eventfdFd?: number;
  /** A ring received as its descriptors, in the order `consumer.descriptors` lists them. */
  fds?: number[];
  /**
   * The core's consumer options, by the names every binding uses. Durations in
   * milliseconds: absent or 0 is the library's default; Infinity turns off what is
   * optional (overtakeAfterMs, latencyBudgetMs, claimTimeoutMs).
   */
  livenessIntervalMs?: number;
  spin?: number;
  /** Deliver committed records behind a reservation open this long (absent: the library's default; Infinity: never, strict claim order). */
  overtakeAfterMs?: number;
  /** Report SHMRING_CORRUPT and wait for reset() instead of resetting by itself. */
  manualReset?: boolean;
  /** Expel a tethered consumer that stays behind without releasing this long. */
  tetherStallLimitMs?: number;
  /** Let a record wait up to this long, so one wake-up serves many (default: never). */
  latencyBudgetMs?: number;
  /** Take back a reservation still open this long (Infinity: never, trusted producers). */
  claimTimeoutMs?: number;
  /** Release unread (counted in `records_filtered`) a record older than this, by its timestamp (absent: every record): a live viewer that fell behind skips to fresh ones. */
  maxAgeMs?: number;
  /**
   * The consumer's filter: only records of this kind / of this stream (absent: any).
   * The others are released at once, unread (their space returns to producers), and
   * counted in `stats().records_filtered`, not in `records_consumed`.
   */
  kind?: number;
  stream?: number;
}

export class Consumer implements AsyncIterable<Frame> {
  constructor(init: ConsumerInit);
  /** Blocks this thread up to `timeoutMs` (absent: forever); null on timeout. */
  next(timeoutMs?: number): Frame | null;
  tryNext(): Frame | null;
  /** Waits in the event loop (eventfd rings); null on timeout or close. */
  nextAsync(timeoutMs?: number): Promise<Frame | null>;
  [Symbol.asyncIterator](): AsyncIterator<Frame>;
  arm(): boolean;
  disarm(): void;
  watch(callback: (status: number) => void): void;
  unwatch(): void;
  stats(): Stats;
  health(): Health;
  geometry(): Geometry;
  /** [address, length] of the mapping in this process. */
  mapping(): [number, number];
  persist(): void;
  close(): void;
  readonly resets: number;
  readonly livenessIntervalMs: number;
  readonly name: string;
  readonly fd: number;
  /** The ring's descriptors, in the order `Producer.fromFds` takes them. */
  readonly descriptors: number[];
  readonly eventfdFd: number | null;
  readonly outstanding: number;
  readonly closed: boolean;
}

export class Frame {
  private constructor();
  /** The payload: a view into the ring (or a copy, see `zeroCopy`). */
  readonly data: Uint8Array;
  /** Gives the record back now and detaches its views. Idempotent. */
  release(): void;
  readonly released: boolean;
  readonly seq: number;
  readonly length: number;
  readonly stream: number;
  readonly kind: number;
  readonly flags: number;
  readonly timestampNs: bigint;
  readonly address: number;
  readonly media: MediaHeader | null;
  /** An end-of-stream record (the producer ended this stream of this kind), else null. */
  readonly end: { sequence: bigint; ptsNs: bigint } | null;
  readonly mediaError: string | null;
  /** Video: one Uint8Array per plane. */
  planes(): Uint8Array[];
  /** Audio: interleaved samples. */
  samples(): Int16Array | Float32Array;
}

export interface ProducerInit {
  eventfdFd?: number;
  onFull?: 'block' | 'fail';
  timeoutMs?: number;
}

export interface Meta {
  stream?: number;
  kind?: number;
  timestampNs?: bigint;
  flags?: number;
}

export interface WaitInit {
  /** Absent: the producer's policy; 0: fail at once if full; > 0: wait that long. */
  timeoutMs?: number;
}

export interface VideoInit extends WaitInit {
  width: number;
  height: number;
  format?: VideoFormat;
  ptsNs?: bigint;
  /** Absent: the producer numbers the stream's frames 0, 1, 2, ... */
  sequence?: bigint;
  /** Nominal frame rate [numerator, denominator]; absent: variable. */
  fps?: [number, number];
}

export interface AudioInit extends WaitInit {
  samples: number;
  channels: number;
  sampleRate: number;
  format?: AudioFormat;
  ptsNs?: bigint;
  /** Absent: the producer numbers the stream's packets 0, 1, 2, ... */
  sequence?: bigint;
}

export class Producer {
  private constructor();
  static open(name: string, init?: ProducerInit): Producer;
  /** A named ring's file received as a descriptor. */
  static fromFd(fd: number, init?: ProducerInit): Producer;
  /** A ring received as its descriptors (`consumer.descriptors`, in order). */
  static fromFds(fds: number[], init?: ProducerInit): Producer;
  /** Connects to a consumer serving its ring on a Unix socket (`shmring record --listen PATH`). */
  static connect(path: string, init?: ProducerInit): Producer;
  /** The ring an address names (see `ConsumerInit.address`): `NAME`, `unix:PATH`, `fd:...`, ... */
  static fromAddress(address: string, init?: ProducerInit): Producer;
  static forConsumer(consumer: Consumer, init?: ProducerInit): Producer;
  reserve(length: number, opts?: WaitInit): Reservation;
  reserveVideo(init: VideoInit): Reservation;
  reserveAudio(init: AudioInit): Reservation;
  /** Ends stream `stream` of `kind` (KIND_VIDEO or KIND_AUDIO): readers see `frame.end`. */
  endStream(stream: number, kind: number): void;
  /** One copy: the bytes are copied into the ring as one record. */
  send(bytes: Uint8Array, meta?: Meta, opts?: WaitInit): void;
  setPolicy(onFull: 'block' | 'fail', timeoutMs?: number): void;
  policy(): { onFull: 'block' | 'fail'; timeoutMs: number };
  stats(): Stats;
  geometry(): Geometry;
  mapping(): [number, number];
  close(): void;
  readonly slot: number;
  readonly closed: boolean;
}

export class Reservation {
  private constructor();
  /** The bytes to fill (in the ring, or a buffer `commit` copies in). */
  readonly data: Uint8Array;
  commit(meta?: Meta): void;
  abort(): void;
  readonly open: boolean;
  readonly length: number;
  readonly address: number;
  readonly media: MediaHeader | null;
  planes(): Uint8Array[];
  samples(): Int16Array | Float32Array;
}
