"""asyncio: frames() waits on the eventfd through the loop's reader."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest
from conftest import Children, record_index

import shmring


async def consume(ring: shmring.Consumer, count: int) -> tuple[list[int], int]:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.001)
            ticks += 1

    t = asyncio.create_task(ticker())
    got: list[int] = []
    ticks_while_waiting = 0
    async for frame in ring.frames():
        with frame:
            got.append(record_index(frame))
        if len(got) == 1:
            ticks_while_waiting = ticks
        if len(got) == count:
            break
    done.set()
    await t
    return got, ticks - ticks_while_waiting


def test_async_consumer_gets_every_frame_in_order(children: Children) -> None:
    ring = shmring.Consumer("pytest-async", create=True, memfd=True, eventfd=True, capacity=1 << 22)
    fds = ring.descriptors()
    assert len(fds) == 3 and fds[-1] == ring.eventfd_fileno()
    n = 200
    proc = children.producer_of(fds, n, 100000, "--interval", "0.002")
    got, ticks = asyncio.run(asyncio.wait_for(consume(ring, n), 60))
    assert got == list(range(n))
    # The loop kept running other tasks while frames() waited for data.
    assert ticks >= 20
    assert proc.wait(timeout=30) == 0
    ring.close()


def test_async_consumer_skips_dead_producer(ring_name: str, children: Children) -> None:
    ring = shmring.Consumer(
        ring_name, create=True, eventfd=True, capacity=1 << 20, liveness_interval=0.02
    )
    efd = ring.eventfd_fileno()
    assert efd is not None
    holder = children.producer(
        "--name", ring_name, "--efd", str(efd), "--hold", stdout=subprocess.PIPE, pass_fds=(efd,)
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    sender = children.producer(
        "--name",
        ring_name,
        "--efd",
        str(efd),
        "--count",
        "5",
        "--max",
        "1000",
        "--interval",
        "0.01",
        pass_fds=(efd,),
    )
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    got, _ = asyncio.run(asyncio.wait_for(consume(ring, 5), 30))
    assert got == list(range(5))
    assert sender.wait(timeout=30) == 0
    assert ring.stats()["abandoned"] >= 1
    ring.close()


def test_frames_needs_an_eventfd_ring(ring_name: str) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)

    async def first() -> None:
        async for _ in ring.frames():
            break

    with pytest.raises(shmring.EventfdRequired, match="eventfd"):
        asyncio.run(first())
    ring.close()
