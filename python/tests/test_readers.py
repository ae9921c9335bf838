"""Further readers of a ring: tethered consumers (every record, space held until
they release, detached when stuck) and taps (read-only copies, never torn, losses
counted)."""

from __future__ import annotations

import os
import threading

import _record
import pytest
from conftest import Children, receive, record_index

import shmring

# Bound of the loops that wait for something the library does by itself: far above
# what it needs, so only a failure reaches it.
PATIENCE = 2000


def record(i: int, n: int) -> bytes:
    return bytes((i + j) & 0xFF for j in range(n))


def take(ring: shmring.Consumer) -> tuple[int, bytes]:
    f = ring.next(timeout=1.0)
    assert f is not None
    with f:
        return f.stream, f.tobytes()


def test_tethered_consumer_gets_every_record(ring_name: str) -> None:
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    tc = shmring.Consumer(ring_name, role="tethered")
    assert tc.is_tethered and not owner.is_tethered
    assert owner.try_next() is None  # the ring's consumer adopts it when it looks
    p = shmring.Producer(ring_name, on_full="fail")
    # 30 rounds of 25 records of 1,000 bytes: about 12 times round the 64 KiB ring.
    i = 0
    for _ in range(30):
        for k in range(25):
            p.send(record(i + k, 1000), stream=i + k)
        for k in range(25):
            assert take(owner) == (i + k, record(i + k, 1000))
        for k in range(25):
            assert take(tc) == (i + k, record(i + k, 1000))
        i += 25
    assert tc.try_next() is None
    [line] = owner.tethers()
    assert line["pid"] == os.getpid() and not line["requested"]
    assert line["records_consumed"] == i and line["lag_records"] == 0
    assert owner.stats()["tethered_consumers"] == 1
    tc.close()
    assert owner.tethers() == []
    p.close()
    owner.close()


def test_tethered_consumer_holds_space_until_it_releases(ring_name: str) -> None:
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    tc = shmring.Consumer(ring_name, role="tethered")
    owner.try_next()
    p = shmring.Producer(ring=owner, on_full="fail")
    sent = 0
    with pytest.raises(shmring.Full):
        while sent < PATIENCE:
            p.send(record(sent, 1000), stream=sent)
            assert take(owner)[0] == sent  # the ring's consumer alone frees nothing
            sent += 1
    assert sent > 0
    for k in range(sent):
        assert take(tc) == (k, record(k, 1000))
    assert owner.next(timeout=0.001) is None  # it looks (as when a producer wakes it)
    p.send(b"room again", stream=1)
    p.close()
    tc.close()
    owner.close()


def test_tethered_consumer_and_owner_with_a_producer_process(
    ring_name: str, children: Children
) -> None:
    count = 600
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 18)
    tc = shmring.Consumer(ring_name, role="tethered")
    owner.try_next()
    proc = children.producer("--name", ring_name, "--count", str(count), "--max", "8192")
    got: dict[str, list[int]] = {"owner": [], "tethered": []}
    for _ in range(PATIENCE * 10):
        if all(len(v) == count for v in got.values()):
            break
        for key, ring in (("owner", owner), ("tethered", tc)):
            f = ring.next(timeout=0.01)
            if f is not None:
                with f:
                    got[key].append(record_index(f))
        assert proc.poll() in (None, 0), f"producer exited with {proc.returncode}"
    assert got["owner"] == list(range(count))
    assert got["tethered"] == list(range(count))
    assert proc.wait(timeout=30) == 0
    tc.close()
    owner.close()


def test_stuck_tethered_consumer_is_detached(ring_name: str) -> None:
    owner = shmring.Consumer(
        ring_name, create=True, capacity=1 << 16, tether_stall_limit=0.02, liveness_interval=0.005
    )
    tc = shmring.Consumer(ring_name, role="tethered")
    owner.try_next()
    p = shmring.Producer(ring=owner)
    p.send(b"first", stream=1)
    held = tc.next(timeout=1.0)  # and never released
    assert held is not None
    assert take(owner) == (1, b"first")
    for _ in range(PATIENCE):
        if owner.stats()["tethers_detached"] == 1:
            break
        assert owner.next(timeout=0.005) is None
    assert owner.stats()["tethers_detached"] == 1
    # It believes it once its line has read detached for a few of its liveness
    # intervals (a peer's forgery of that state is repaired before then).
    with pytest.raises(shmring.Detached, match="detached"):
        for _ in range(PATIENCE):
            assert tc.next(timeout=0.005) is None
    held.release()
    tc.close()
    # Attaching again works.
    tc = shmring.Consumer(ring_name, role="tethered")
    owner.try_next()
    p.send(b"again", stream=2)
    assert take(tc) == (2, b"again")
    assert take(owner) == (2, b"again")
    tc.close()
    p.close()
    owner.close()


def test_tethered_consumer_misuse(ring_name: str) -> None:
    with pytest.raises(shmring.ConfigError, match="role"):
        shmring.Consumer(ring_name, create=True, role="reader")
    with pytest.raises(shmring.ConfigError, match="shmring.Tap"):
        shmring.Consumer(ring_name, role="tap")
    with pytest.raises(shmring.ConfigError, match="tethered"):
        shmring.Consumer(ring_name, create=True, role="tethered")
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16, persist=True)
    ring.close()
    with pytest.raises(shmring.NoConsumer):
        shmring.Consumer(ring_name, role="tethered")
    owner = shmring.Consumer(ring_name, role="consumer")
    tc = shmring.Consumer(ring_name, role="tethered")
    with pytest.raises(shmring.ConfigError, match="tethered"):
        tc.arm()
    with pytest.raises(shmring.ConfigError, match="tethered"):
        tc.frames()
    with pytest.raises(shmring.ConfigError, match="reset"):
        tc.reset()
    more = []
    with pytest.raises(shmring.NoTetherLine) as e:
        while len(more) < 64:
            more.append(shmring.Consumer(ring_name, role="tethered"))
    assert isinstance(e.value, shmring.NoSlot) and more
    for c in more:
        c.close()
    tc.close()
    owner.close()


def test_consumer_filter_releases_other_streams_unread(ring_name: str) -> None:
    # The tap's filter names: only stream 2's records are handed out; the others go
    # back to producers at once, so many rings' worth of them never fill the ring.
    c = shmring.Consumer(ring_name, create=True, capacity=1 << 16, stream=2)
    p = shmring.Producer(ring=c, on_full="fail")
    got = []
    for i in range(200):
        p.send(bytes(2000), stream=i % 3)  # 200 x 2 KB: six rings' worth
        f = c.next(timeout=0)
        if f is not None:
            got.append(f.stream)
            f.release()
    assert got == [2] * 66
    s = c.stats()
    assert (s["records_consumed"], s["records_filtered"], s["drops_full"]) == (66, 134, 0)
    with pytest.raises(shmring.ConfigError, match="kind"):
        shmring.Consumer(ring_name, kind=-1)
    p.close()
    c.close()


def test_tap_copies_records(ring_name: str) -> None:
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=owner)
    p.send(b"before", stream=9)  # before the tap: not seen
    with shmring.Tap(ring_name) as tap:
        assert tap.next(timeout=0) is None
        for i in range(1, 4):
            p.send(record(i, 100 * i), stream=i, kind=5, timestamp=1000 + i, flags=i)
        for i in range(1, 4):
            f = tap.next(timeout=1.0)
            assert f is not None
            assert (f.stream, f.kind, f.timestamp, f.flags) == (i, 5, 1000 + i, i)
            assert f.data == record(i, 100 * i) and bytes(f) == f.data and len(f) == 100 * i
        assert tap.stats() == {
            "delivered": 3,
            "lost": 0,
            "torn": 0,
            "filtered": 0,
            "skips": 0,
            "lag": 0,
        }
    assert tap.closed
    with pytest.raises(shmring.Closed):
        tap.next(timeout=0)
    # The tap took nothing from the ring's consumer.
    assert [take(owner)[0] for _ in range(4)] == [9, 1, 2, 3]
    assert owner.stats()["records_consumed"] == 4
    p.close()
    owner.close()


def test_tap_copies_are_never_torn(children: Children) -> None:
    """A producer process fills a small ring as fast as it can while a tap copies
    in a thread: every copy it returns is intact, and every record is delivered
    or counted lost. However many the tap catches while the ring races, it takes
    the last record (sent once the race is over: a tap that fell behind jumps to
    the newest record)."""
    count = 3000
    owner = shmring.Consumer("tap-torn", create=True, memfd=True, capacity=1 << 16)
    tap = shmring.Tap(fd=os.dup(owner.read_only_fileno()))
    stop = threading.Event()
    copies: list[int] = []
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            while not stop.is_set():
                f = tap.next(timeout=0.01)
                if f is not None:
                    copies.append(record_index(f.data))
                    if copies[-1] == count:
                        return
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        fds = owner.descriptors()
        proc = children.producer_of(fds, count, 8192)
        assert receive(owner, count, proc) == list(range(count))
        assert proc.wait(timeout=30) == 0
        # The last record, in the producer process's format.
        last = shmring.Producer(ring=owner)
        last.send(_record.make(count, 108))
        last.close()
        f = owner.next(timeout=5.0)
        assert f is not None and record_index(f) == count
        f.release()
        t.join(timeout=30)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert copies and copies[-1] == count, "the tap did not take the last record"
    s = tap.stats()
    assert s["delivered"] == len(copies)
    assert s["delivered"] + s["lost"] == count + 1
    assert copies == sorted(copies)
    tap.close()
    owner.close()


def test_tap_counts_losses_and_filters(ring_name: str) -> None:
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=owner, on_full="fail")
    sevens = shmring.Tap(ring_name, stream=7, every=2)
    video = shmring.Tap(ring_name, kind=shmring.KIND_VIDEO)
    slow = shmring.Tap(ring_name)
    for i in range(8):
        p.send(b"x" * 10, stream=6 + i % 2, flags=i)
        take(owner)
    got = []
    while (f := sevens.next(timeout=0)) is not None:
        got.append(f.flags)
    assert got == [1, 5]
    assert sevens.stats()["filtered"] == 6 and sevens.stats()["delivered"] == 2
    assert video.next(timeout=0) is None and video.stats()["filtered"] == 8
    # `slow` has not read yet: 200 records of 1,000 bytes go round the 64 KiB ring
    # three times. It lost what was overwritten, and says so.
    for i in range(200):
        p.send(record(i, 1000), stream=i)
        take(owner)
    assert slow.stats()["lag"] == 208
    while (f := slow.next(timeout=0)) is not None:
        assert f.data == record(f.stream, 1000)
    s = slow.stats()
    assert s["skips"] >= 1 and s["lost"] > 0 and s["torn"] == 0
    assert s["delivered"] + s["lost"] == 208 and s["lag"] == 0
    p.send(b"after", stream=500)
    f = slow.next(timeout=1.0)
    assert f is not None and (f.stream, f.data) == (500, b"after")
    take(owner)
    for t in (sevens, video, slow):
        t.close()
    p.close()
    owner.close()


def test_tap_misuse(ring_name: str) -> None:
    with pytest.raises(shmring.ConfigError, match="name"):
        shmring.Tap()
    with pytest.raises(shmring.NotFound, match=ring_name):
        shmring.Tap(ring_name)
    owner = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    with pytest.raises(shmring.ConfigError, match="kind"):
        shmring.Tap(ring_name, kind=-1)
    with pytest.raises(shmring.ConfigError, match="stream"):
        shmring.Tap(ring_name, stream=1 << 40)
    with pytest.raises(shmring.ConfigError, match="poll_interval"):
        shmring.Tap(ring_name, poll_interval=-1)
    fd = os.dup(owner.read_only_fileno())
    with pytest.raises(shmring.ConfigError, match="not both"):
        shmring.Tap(ring_name, fd=fd)
    # A named ring's descriptor is not a sealed memfd: open it by name instead.
    with pytest.raises(shmring.Unsealed):
        shmring.Tap(fd=fd)
    owner.close()


def test_max_age_releases_older_records_unread(ring_name: str) -> None:
    c = shmring.Consumer(ring_name, create=True, capacity=1 << 16, max_age=10.0)
    p = shmring.Producer(ring=c)
    p.send(b"old", timestamp=1)
    p.send(b"fresh")
    f = c.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"fresh"
    f.release()
    assert c.try_next() is None
    assert c.stats()["records_filtered"] == 1
    with pytest.raises(shmring.ConfigError, match="max_age"):
        shmring.Consumer(ring_name, max_age=-1.0)
    c.close()
