"""Frame lifetime: deferred release, use after release, release paths."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import shmring


def fill_until_full(p: shmring.Producer, size: int, value: int) -> int:
    n = 0
    while True:
        try:
            with p.reserve(size, timeout=0) as buf:
                buf[:] = bytes([value]) * size
        except shmring.Full:
            return n
        n += 1


def drain(ring: shmring.Consumer) -> int:
    n = 0
    while (f := ring.try_next()) is not None:
        f.release()
        n += 1
    return n


def test_view_kept_after_release_never_sees_recycled_memory(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring)
    size = 4000
    p.send(bytes([0x11]) * size, stream=1)
    f = ring.next(timeout=1.0)
    assert f is not None
    view = np.frombuffer(f, np.uint8)
    mv = memoryview(f)
    y = f.array()
    assert f.views == 3
    f.release()
    assert f.released
    # Use after release raises and never reads the payload.
    with pytest.raises(shmring.Released):
        memoryview(f)
    with pytest.raises(shmring.Released):
        np.frombuffer(f, np.uint8)
    with pytest.raises(shmring.Released):
        f.tobytes()
    with pytest.raises(shmring.Released):
        f.array()
    # The record is still held: producers fill the rest of the ring but cannot
    # wrap over it, so the old views keep their bytes.
    written = fill_until_full(p, size, 0x80)
    assert written > 0
    assert (view == 0x11).all() and mv[0] == 0x11 and (y == 0x11).all()
    assert drain(ring) == written
    # Space after it does not come back while it is held (the ring is FIFO).
    assert fill_until_full(p, size, 0x81) == 0
    assert (view == 0x11).all()
    # The record goes back to the ring only when the last view is dropped.
    assert ring.frames_alive == 1
    del view
    assert ring.frames_alive == 1
    mv.release()
    assert ring.frames_alive == 1
    del y
    gc.collect()
    assert ring.frames_alive == 0 and f.views == 0
    # Now the whole ring is usable again.
    assert fill_until_full(p, size, 0x22) > 0


def test_planes_pin_the_frame_until_dropped(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    with p.reserve_video(32, 16) as (yy, _u, _v):
        yy[:] = 5
    f = ring.next(timeout=1.0)
    assert f is not None
    y, u, v = f.planes()
    del u, v
    with f:
        pass
    assert f.released and ring.frames_alive == 1
    assert (y == 5).all()
    with pytest.raises(shmring.Released):
        f.planes()
    del y
    assert ring.frames_alive == 0


def test_release_paths_and_any_order(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    for i in range(4):
        p.send(bytes([i]) * 10, stream=i)
    a, b, c, d = (ring.next(timeout=1.0) for _ in range(4))
    assert ring.frames_alive == 4
    c.release()  # out of order
    c.release()  # idempotent
    assert ring.frames_alive == 3
    with b:
        pass
    del d  # garbage: released too
    gc.collect()
    assert ring.frames_alive == 1
    assert a is not None and a.tobytes() == b"\x00" * 10
    a.release()
    assert ring.frames_alive == 0 and ring.outstanding() == 0
    # Metadata stays readable after release (copied at receive time).
    assert (a.stream, len(a)) == (0, 10)


def test_close_with_frames_alive_keeps_them_valid(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    p.send(b"abc")
    f = ring.next(timeout=1.0)
    assert f is not None
    ring.close()
    assert f.tobytes() == b"abc"
    with pytest.raises(shmring.Closed):
        ring.try_next()
    f.release()


def test_reservation_arrays_become_read_only(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    with p.reserve_audio(100, channels=1) as pcm:
        pcm[:] = 3
    assert not pcm.flags.writeable
    with pytest.raises(ValueError):
        pcm[0] = 1
    with pytest.raises(ValueError):
        pcm.flags.writeable = True
    f = ring.next(timeout=1.0)
    assert f is not None and (f.samples() == 3).all()
    f.release()
