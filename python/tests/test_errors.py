"""Bad input gives the exception named after what happened, with a message that
says what and where."""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import pytest

import shmring


def shm_path(name: str) -> Path:
    return Path("/dev/shm") / name


def test_missing_ring(ring_name: str) -> None:
    with pytest.raises(shmring.NotFound, match=ring_name):
        shmring.Consumer(ring_name)
    with pytest.raises(shmring.NotFound, match=ring_name):
        shmring.Producer(ring_name)
    assert issubclass(shmring.NotFound, shmring.Error)


def test_existing_ring(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    with pytest.raises(shmring.Exists, match=ring_name):
        shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    ring.close()
    assert not shm_path(ring_name).exists()  # unlinked with its creator


def test_bad_config_and_arguments(ring_name: str) -> None:
    with pytest.raises(shmring.ConfigError, match="capacity"):
        shmring.Consumer(ring_name, create=True, capacity=1000)
    with pytest.raises(shmring.ConfigError):
        shmring.Consumer(ring_name, create=True, capacity=1 << 16, liveness_interval=-1)
    # The core's rule for durations: math.inf turns off what is optional, and only that.
    off = {"overtake_after": math.inf, "latency_budget": math.inf, "claim_timeout": math.inf}
    shmring.Consumer(ring_name, create=True, memfd=True, capacity=1 << 16, **off).close()
    with pytest.raises(shmring.ConfigError, match="liveness_interval cannot be never"):
        shmring.Consumer(ring_name, create=True, memfd=True, liveness_interval=math.inf)
    with pytest.raises(shmring.ConfigError, match="name"):
        shmring.Consumer()
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    with pytest.raises(shmring.ConfigError, match="on_full"):
        shmring.Producer(ring=ring, on_full="sometimes")
    p = shmring.Producer(ring=ring)
    with pytest.raises(shmring.ConfigError, match="format"):
        p.reserve_video(64, 64, format="yuv9")
    with pytest.raises(shmring.ConfigError):
        p.reserve_audio(100, format="i420")


def test_integer_arguments_are_checked_and_named(ring_name: str) -> None:
    """An integer out of its range (negative, too large, beyond 64 bits) raises
    ConfigError naming the argument, its range and the value; a non-integer (a
    float, a str) raises TypeError naming it. Nothing wraps."""
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring)
    u32 = "an integer from 0 to 4294967295"
    for call, name, value in [
        (lambda: p.send(b"x", stream=-1), "stream", "-1"),
        (lambda: p.send(b"x", kind=2**32 + 1), "kind", str(2**32 + 1)),
        (lambda: p.send(b"x", flags=2**40 + 7), "flags", str(2**40 + 7)),
        (lambda: p.reserve(10, stream=-5), "stream", "-5"),
        (lambda: p.reserve_video(-2, 16), "width", "-2"),
        (lambda: p.reserve_video(16, 16, fps=(30, -1)), r"fps\[1\]", "-1"),
        (lambda: p.reserve_audio(10, channels=2**33), "channels", str(2**33)),
        (lambda: p.end_stream(stream=-1), "stream", "-1"),
        (lambda: shmring.Consumer(ring_name, stream=-1), "stream", "-1"),
        (lambda: shmring.Consumer(ring_name, spin=2**32), "spin", str(2**32)),
        (lambda: shmring.Tap(ring_name, every=-1), "every", "-1"),
        (lambda: shmring.Tap(ring_name, kind=2**32), "kind", str(2**32)),
    ]:
        with pytest.raises(shmring.ConfigError, match=f"^{name} must be {u32}, got {value}$"):
            call()
    u64 = "an integer from 0 to 18446744073709551615"
    for call, name, value in [
        (lambda: p.send(b"x", timestamp=-1), "timestamp", "-1"),
        (lambda: p.reserve(-1), "n", "-1"),
        (lambda: p.reserve_video(16, 16, sequence=2**64), "sequence", str(2**64)),
        (lambda: shmring.Consumer("x", create=True, capacity=-1), "capacity", "-1"),
        (lambda: shmring.Consumer("x", create=True, capacity=2**200), "capacity", str(2**200)),
    ]:
        with pytest.raises(shmring.ConfigError, match=f"^{name} must be {u64}, got {value}$"):
            call()
    fd = "an integer from 0 to 2147483647"
    for call, name, value in [
        (lambda: shmring.Consumer(fd=-1), "fd", "-1"),
        (lambda: shmring.Producer(fds=[0, 2**31]), r"fds\[1\]", str(2**31)),
        (lambda: shmring.Tap(fd=-3), "fd", "-3"),
        (lambda: shmring.Producer("x", eventfd_fd=-1), "eventfd_fd", "-1"),
    ]:
        with pytest.raises(shmring.ConfigError, match=f"^{name} must be {fd}, got {value}$"):
            call()
    with pytest.raises(shmring.ConfigError, match=r"^allow_uids\[0\] must be"):
        shmring.Listener(ring, "unused.sock", allow_uids=[-1])
    for call, name in [
        (lambda: p.send(b"x", stream=1.5), "stream"),
        (lambda: p.reserve_video(16.0, 16), "width"),
        (lambda: p.send(b"x", kind="video"), "kind"),
        (lambda: shmring.Consumer("x", create=True, capacity=float("nan")), "capacity"),
    ]:
        with pytest.raises(TypeError, match=f"^{name} must be an integer"):
            call()
    # Nothing was sent, nothing left open.
    assert ring.try_next() is None
    assert p.reserve(1).abort() is None
    p.close()
    ring.close()


def _persisted_ring(name: str) -> None:
    ring = shmring.Consumer(name, create=True, capacity=1 << 16, persist=True)
    ring.close()


# The identity line (control block line 0) and its two copies (lines 19 and 20):
# whoever attaches takes what two of the three say, so a ring of another layout is
# written into all three.
IDENTITY_LINES = (0, 19 * 64, 20 * 64)


def _scribble_identity(name: str, offset: int, data: bytes) -> None:
    with open(shm_path(name), "r+b") as f:
        for line in IDENTITY_LINES:
            f.seek(line + offset)
            f.write(data)


def test_corrupt_magic_is_a_layout_mismatch(ring_name: str) -> None:
    _persisted_ring(ring_name)
    _scribble_identity(ring_name, 0, b"NOTARING")
    with pytest.raises(shmring.LayoutMismatch, match=r"magic.*expected"):
        shmring.Consumer(ring_name)
    with pytest.raises(shmring.LayoutMismatch, match=ring_name):
        shmring.Producer(ring_name)


def test_wrong_layout_version(ring_name: str) -> None:
    _persisted_ring(ring_name)
    _scribble_identity(ring_name, 8, struct.pack("<I", 99))
    with pytest.raises(shmring.LayoutMismatch, match=r"layout version.*expected \d+, found 99"):
        shmring.Consumer(ring_name)


def test_scribbled_geometry_and_truncated_file(ring_name: str) -> None:
    _persisted_ring(ring_name)
    _scribble_identity(ring_name, 16, struct.pack("<Q", 12345))  # capacity: not a power of two
    with pytest.raises(shmring.LayoutMismatch, match="geometry"):
        shmring.Consumer(ring_name)
    os.truncate(shm_path(ring_name), 100)
    with pytest.raises(shmring.LayoutMismatch, match=r"not a shmring ring \(the file is 100 bytes"):
        shmring.Consumer(ring_name)


def test_ring_truncated_under_the_consumer(ring_name: str) -> None:
    # A peer shrinks the file under a live consumer: no SIGBUS, an exception.
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring_name)
    p.send(b"lost", stream=1)
    os.truncate(shm_path(ring_name), 4096)
    with pytest.raises(shmring.Corrupt, match="truncated by a peer"):
        ring.next(timeout=0.1)
    with pytest.raises(shmring.Corrupt, match="truncated by a peer"):
        p.send(b"more", stream=1)


def _scribble_record_length(ring_name: str) -> None:
    """Commits a record and "next", then rewrites the first record's length."""
    p = shmring.Producer(ring_name)
    base, _ = p.mapping()  # the producer's own mapping of the file
    res = p.reserve(256, stream=1)
    header_offset = res.address - 64 - base  # the record header precedes the payload
    res.commit()
    p.send(b"next", stream=2)
    fd = os.open(shm_path(ring_name), os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", 1 << 40), header_offset)
    finally:
        os.close(fd)


def test_corrupt_record_header_is_skipped(ring_name: str) -> None:
    # By default the consumer skips the bad record (counted) and carries on.
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    _scribble_record_length(ring_name)
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"next"
    f.release()
    assert ring.stats()["corruption"] == 1
    assert ring.resets == 0  # one bad record needs no reset


def test_corrupt_record_header(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16, manual_reset=True)
    _scribble_record_length(ring_name)
    with pytest.raises(shmring.Corrupt, match=r"corruption detected at claim 0: record length"):
        ring.next(timeout=1.0)
    assert ring.stats()["corruption"] == 1
    # The bad record was skipped; the ring goes on.
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"next"
    f.release()


def test_bad_media_header(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring)
    p.send(b"\x00" * 300, kind=shmring.KIND_VIDEO)
    f = ring.next(timeout=1.0)
    assert f is not None
    assert f.format is None and f.media_error is not None and "magic" in f.media_error
    with pytest.raises(shmring.BadMediaHeader, match="magic"):
        f.planes()
    assert f.tobytes() == b"\x00" * 300  # the payload is still there
    f.release()
    # A header whose planes point outside the payload is rejected too.
    with p.reserve_video(64, 32) as (y, _u, _v):
        y[:] = 1
    good = ring.next(timeout=1.0)
    assert good is not None
    data = bytearray(good.tobytes())
    good.release()
    data[72:76] = struct.pack("<I", 1 << 30)  # plane 0 offset
    p.send(data, kind=shmring.KIND_VIDEO)
    f = ring.next(timeout=1.0)
    assert f is not None
    with pytest.raises(shmring.BadMediaHeader, match="outside"):
        f.planes()
    f.release()


def test_second_consumer_and_no_consumer(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16, persist=True)
    with pytest.raises(shmring.ConsumerBusy, match="another consumer"):
        shmring.Consumer(ring_name)
    ring.close()
    p = shmring.Producer(ring_name, timeout=0.05)
    with pytest.raises(shmring.NoConsumer, match="no live consumer"):
        while True:
            p.send(bytes(4000))


def test_eventfd_ring_needs_its_eventfd(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16, eventfd=True)
    assert ring.eventfd_fileno() is not None and ring.geometry()["eventfd"]
    with pytest.raises(shmring.EventfdRequired, match="eventfd"):
        shmring.Producer(ring_name)
    ring.close()


def test_consumer_recovers_by_itself_and_says_so(
    ring_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A peer overwrites the shared write cursor: the consumer resets the ring by
    # itself, logs a warning on the "shmring" logger, and records flow again; a
    # frame held across the reset stays valid.
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring_name)
    p.send(b"held", stream=1)
    held = ring.next(timeout=1.0)
    assert held is not None
    fd = os.open(shm_path(ring_name), os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", 2**64 - 1), 64)  # the write cursor's line
    finally:
        os.close(fd)
    with caplog.at_level("WARNING", logger="shmring"):
        assert ring.next(timeout=0.3) is None
    assert ring.resets == 1
    assert ring.last_reset_cause is not None and "write cursor" in ring.last_reset_cause
    assert any("the ring was reset" in r.getMessage() for r in caplog.records)
    assert held.tobytes() == b"held"
    held.release()
    p.send(b"after", stream=1)
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"after"
    f.release()
    assert ring.stats()["resets"] == 1
