"""The checked record of every cross-process test, in every language (the Rust
`shmring_testkit::record`, written by the `ring-peer` program; `node/test/helpers.js`;
`go/record_test.go`): bytes 0..4 the record's index (u32, little-endian), 4..8 the
CRC-32 (zlib.crc32) of every byte after them (u32, little-endian), then the body.
Any body will do (the check is the checksum); this writer's is random bytes."""

from __future__ import annotations

import random
import struct
import zlib

import shmring

HEADER = 8


def make(index: int, n: int, seed: int = 1) -> bytes:
    """Record `index`, `n` bytes long (at least HEADER)."""
    rng = random.Random(seed * 1_000_003 + index)
    body = rng.randbytes(max(0, n - HEADER))
    return struct.pack("<II", index, zlib.crc32(body)) + body


def index_of(data: bytes | memoryview | shmring.Frame) -> int | None:
    """The index of a record whose checksum holds, else None."""
    m = memoryview(data)
    try:
        if len(m) < HEADER:
            return None
        index, crc = struct.unpack_from("<II", m)
        return int(index) if zlib.crc32(m[HEADER:]) == crc else None
    finally:
        m.release()
