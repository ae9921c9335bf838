"""Producers in other processes: Python children and the Rust `shmring produce`."""

from __future__ import annotations

import math
import os
import signal
import subprocess

import numpy as np
import pytest
from conftest import Children, find_cli, receive

import shmring


def test_producer_process_by_name(ring_name: str, children: Children) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 22)
    n = 300
    proc = children.producer("--name", ring_name, "--count", str(n), "--max", "200000")
    assert receive(ring, n, proc) == list(range(n))
    assert proc.wait(timeout=30) == 0
    s = ring.stats()
    assert s["records_committed"] == n and s["drops_full"] == 0


def test_producer_process_by_fd_memfd_eventfd(children: Children) -> None:
    ring = shmring.Consumer("pytest-fd", create=True, memfd=True, eventfd=True, capacity=1 << 20)
    fds = ring.descriptors()
    assert len(fds) == 3 and fds[-1] == ring.eventfd_fileno()
    n = 200
    proc = children.producer_of(fds, n, 50000)
    assert receive(ring, n, proc) == list(range(n))
    assert proc.wait(timeout=30) == 0
    ring.close()


def test_video_from_python_process(ring_name: str, children: Children) -> None:
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 22)
    proc = children.producer("--name", ring_name, "--count", "20", "--video", "160x90")
    for i in range(20):
        f = ring.next(timeout=10.0)
        assert f is not None
        with f:
            assert (f.format, f.width, f.height, f.sequence) == ("i420", 160, 90, i)
            y, u, v = f.planes()
            assert (y == i % 251).all() and (u == (i * 3) % 251).all()
            assert (v == (i * 7) % 251).all()
            del y, u, v
    assert proc.wait(timeout=30) == 0


def test_dead_producer_claim_is_skipped(ring_name: str, children: Children) -> None:
    # Strict claim order (no overtaking): the records wait behind the held claim.
    ring = shmring.Consumer(
        ring_name, create=True, capacity=1 << 20, liveness_interval=0.02, overtake_after=math.inf
    )
    holder = children.producer("--name", ring_name, "--hold", stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    sender = children.producer("--name", ring_name, "--count", "5", "--max", "1000")
    assert ring.next(timeout=0.2) is None  # blocked behind the live holder's claim
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert receive(ring, 5, sender) == list(range(5))
    assert ring.stats()["abandoned"] == 1


def test_rust_cli_producer_with_media_header(ring_name: str, children: Children) -> None:
    cli = find_cli()
    if cli is None:
        pytest.skip("the shmring command is not built (cargo build --release -p shmring-cli)")
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 24)
    proc = children.spawn(
        [
            cli,
            "produce",
            "--ring",
            ring_name,
            "--video",
            "320x240@60",
            "--audio",
            "48000x2",
            "--seconds",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    video: list[int] = []
    audio: list[int] = []
    ended: list[int] = []
    while True:
        f = ring.next(timeout=0.2)
        if f is None:
            if proc.poll() is not None:
                f = ring.try_next()
                if f is None:
                    break
            else:
                continue
        with f:
            if f.is_end:
                ended.append(f.kind)
            elif f.kind == shmring.KIND_VIDEO:
                assert (f.format, f.width, f.height) == ("i420", 320, 240), f.media_error
                y, u, v = f.planes()
                assert y.shape == (240, 320) and u.shape == (120, 160) and v.shape == (120, 160)
                assert y.std() > 0  # a drawn picture, not an empty buffer
                del y, u, v
                video.append(f.sequence)
            elif f.kind == shmring.KIND_AUDIO:
                assert (f.format, f.sample_rate, f.channels) == ("pcm_s16", 48000, 2)
                s = f.samples()
                assert s.shape == (f.samples_per_channel, 2) and s.dtype == np.int16
                del s
                audio.append(f.sequence)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert len(video) >= 30 and video == list(range(len(video)))
    assert len(audio) >= 50 and audio == list(range(len(audio)))
    # produce ends each stream it sent with an end-of-stream record
    assert sorted(ended) == sorted([shmring.KIND_VIDEO, shmring.KIND_AUDIO])
