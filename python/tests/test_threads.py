"""Every object from any thread: producers, reservations, consumers, frames, views,
taps, observers and listeners used, released and garbage-collected on threads other
than the one that made them (plain threads, `queue.Queue` workers,
`concurrent.futures`); and what a process created is gone after `close()` and after
its exit, whatever threads still hold."""

from __future__ import annotations

import concurrent.futures
import gc
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import shmring


def drain_queued(ring: shmring.Consumer) -> None:
    """Lets the consumer apply releases queued by other threads (any call does)."""
    assert ring.try_next() is None


def test_one_producer_from_many_threads(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)

    def send(worker: int) -> int:
        for i in range(50):
            p.send(bytes([worker, i]) * 32, stream=worker)
        with p.reserve(64, stream=worker, kind=7) as buf:
            buf[:] = bytes([worker]) * 64
        return worker

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(send, range(4))) == [0, 1, 2, 3]
    got: dict[int, list[int]] = {w: [] for w in range(4)}
    raw = 0
    while (f := ring.try_next()) is not None:
        with f:
            data = f.tobytes()
            if f.kind == 7:
                raw += 1
                assert data == bytes([f.stream]) * 64
                continue
            assert data == bytes([f.stream, data[1]]) * 32
            got[f.stream].append(data[1])
    assert raw == 4
    # Each thread's records arrive whole and in its order.
    assert all(v == list(range(50)) for v in got.values()), got
    p.close()
    ring.close()


def test_a_reservation_ends_on_another_thread(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    res = p.reserve_video(64, 32, stream=2)
    y, _, _ = res.planes()
    y[:] = 9
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(res.commit).result()
        # The producer's next reservation, made and aborted over there.
        pool.submit(lambda: p.reserve(10).abort()).result()
    assert not y.flags.writeable
    f = ring.next(timeout=1.0)
    assert f is not None and f.is_video and (f.planes()[0] == 9).all()
    f.release()
    # While one is open, another thread's send waits for it to end, then goes on.
    res = p.reserve(10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = pool.submit(p.send, b"x")
        time.sleep(0.05)
        assert not sent.done(), "a send waits while another thread's reservation is open"
        res.abort()
        sent.result(timeout=30)
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"x"
    f.release()
    # On the thread that opened it, at once (it would wait for itself); a producer
    # that never waits (on_full="fail") refuses other threads at once too.
    res = p.reserve(10)
    with pytest.raises(shmring.Error, match="open reservation"):
        p.send(b"y")
    res.abort()
    q = shmring.Producer(ring=ring, on_full="fail")
    res = q.reserve(10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with pytest.raises(shmring.Error, match="another thread's"):
            pool.submit(q.send, b"z").result()
    res.abort()
    q.close()
    p.close()
    ring.close()


def test_frames_released_on_other_threads(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring)
    frames = []
    for i in range(8):
        p.send(bytes([i]) * 100)
        f = ring.next(timeout=1.0)
        assert f is not None
        frames.append(f)
    view = np.frombuffer(frames[0], np.uint8)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert list(pool.map(lambda f: f.tobytes()[0], frames)) == list(range(8))
        list(pool.map(lambda f: f.release(), frames))
    drain_queued(ring)
    # The first is pinned by its view (deferred release), the rest are back.
    assert frames[0].released and ring.frames_alive == 1 and (view == 0).all()
    # The view's last reference goes on another thread too.
    box = [view]
    del view
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    drain_queued(ring)
    assert ring.frames_alive == 0 and ring.outstanding() == 0
    p.close()
    ring.close()


def test_frames_dropped_by_a_queue_worker_return_to_the_ring(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    p = shmring.Producer(ring=ring, on_full="fail")
    work: queue.Queue[shmring.Frame | None] = queue.Queue()
    sums: list[int] = []

    def worker() -> None:
        while (f := work.get()) is not None:
            sums.append(int(np.frombuffer(f, np.uint8).sum()))
            del f  # the last reference: released here

    t = threading.Thread(target=worker)
    t.start()
    # Several rings' worth: it only works if the worker's drops give space back.
    for _ in range(200):
        p.send(bytes([1]) * 4000, timeout=10.0)
        f = ring.next(timeout=1.0)
        assert f is not None
        work.put(f)
        del f
    work.put(None)
    t.join()
    gc.collect()
    drain_queued(ring)
    assert sums == [4000] * 200
    assert ring.outstanding() == 0 and ring.frames_alive == 0
    p.close()
    ring.close()


def test_a_consumer_receives_on_any_thread(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    count, readers, stop = 400, 2, 9

    def receive(_: int) -> list[int]:
        """Records until a stop record (one per reader: a reader takes one, then leaves)."""
        got: list[int] = []
        while True:
            f = ring.next(timeout=30.0)
            assert f is not None, "no record in 30 s"
            with f:
                if f.kind == stop:
                    return got
                got.append(int.from_bytes(f.tobytes()[:4], "little"))

    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
        running = [pool.submit(receive, n) for n in range(readers)]
        for i in range(count):
            p.send(i.to_bytes(4, "little") * 8)
        for _ in range(readers):
            p.send(b"stop", kind=stop)
        got = [n for r in running for n in r.result()]
    # Every record exactly once, whichever thread took it.
    assert sorted(got) == list(range(count))
    assert ring.stats()["records_consumed"] == count + readers
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(ring.close).result()
    assert ring.closed
    with pytest.raises(shmring.Closed):
        ring.try_next()
    p.close()


def test_a_tap_closed_while_another_thread_waits_in_it(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    tap = shmring.Tap(ring_name)
    obs = shmring.Observer.open(ring_name)
    started = threading.Event()
    outcome: list[object] = []

    def wait() -> None:
        started.set()
        try:
            outcome.append(tap.next(timeout=5.0))
        except shmring.Error as e:  # documented: Closed
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    started.wait()
    time.sleep(0.3)  # most likely waiting in next() by now (either order must work)
    tap.close()
    t.join()
    assert tap.closed
    assert len(outcome) == 1 and isinstance(outcome[0], shmring.Closed), outcome
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(obs.stats).result()["records_committed"] == 0
        pool.submit(obs.close).result()
    assert obs.closed
    ring.close()


CHILD = r"""
import os, queue, sys, threading, time
import numpy as np
import shmring

name, sock = sys.argv[1], sys.argv[2]
ring = shmring.Consumer(name, create=True, capacity=1 << 16)
served = shmring.Consumer(create=True, memfd=True, capacity=1 << 16)
listener = shmring.Listener(served, sock)
p = shmring.Producer(ring=ring)
work = queue.Queue()

def worker():
    while (f := work.get()) is not None:
        np.frombuffer(f, np.uint8).sum()
        del f

t = threading.Thread(target=worker)
t.start()
for i in range(20):
    p.send(bytes([i]) * 1000)
    work.put(ring.next(timeout=10.0))
# A frame, a view and the listener held for ever by a daemon thread: no finaliser
# ever runs for them.
p.send(b"kept")
kept = ring.next(timeout=10.0)
view = memoryview(kept)
held = threading.Event()
threading.Thread(
    target=lambda *a: (held.set(), time.sleep(600)), args=(kept, view, listener), daemon=True
).start()
held.wait()
del kept, view, listener
work.put(None)
t.join()
if sys.argv[3] == "close":
    ring.close()
    assert not os.path.exists("/dev/shm/" + name), "close() left the ring's name"
print("done", flush=True)
"""


@pytest.mark.parametrize("how", ["close", "exit"])
def test_close_and_exit_remove_what_the_process_created(
    ring_name: str, tmp_path: Path, how: str
) -> None:
    sock = tmp_path / "ring.sock"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, ring_name, str(sock), how],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stdout + r.stderr
    assert "Error" not in r.stderr and "panicked" not in r.stderr, r.stderr
    assert not Path("/dev/shm", ring_name).exists(), "the named ring was left behind"
    assert not sock.exists(), "the listener's socket was left behind"
    # The next run creates it again.
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    ring.close()
    assert not Path("/dev/shm", ring_name).exists()
