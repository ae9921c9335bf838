"""Shared fixtures: unique ring names with /dev/shm clean-up, child processes that
are always killed, the test producer script and the check of its records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import _record
import pytest

import shmring

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PRODUCER = HERE / "_producer.py"


def record_index(data: bytes | memoryview | shmring.Frame) -> int:
    """Verifies a checked record (_record.py) and returns its index."""
    index = _record.index_of(data)
    assert index is not None, "checksum mismatch"
    return index


def receive(ring: shmring.Consumer, count: int, proc: subprocess.Popen[bytes]) -> list[int]:
    """The indexes of the next `count` records from the producer process `proc`."""
    got: list[int] = []
    while len(got) < count:
        f = ring.next(timeout=0.5)
        if f is None:
            assert proc.poll() in (None, 0), f"producer exited with {proc.returncode}"
            continue
        with f:
            got.append(record_index(f))
    return got


@pytest.fixture
def ring_name() -> Iterator[str]:
    """A fresh ring name; its /dev/shm file is removed after the test."""
    name = f"shmring-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    path = Path("/dev/shm") / name
    if path.exists():
        path.unlink()


class Children:
    """Child processes killed and reaped at teardown, even when a test fails."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(args, **kw)  # type: ignore[call-overload]
        self.procs.append(p)
        return p

    def producer(self, *args: str, **kw: object) -> subprocess.Popen[bytes]:
        return self.spawn([sys.executable, str(PRODUCER), *args], **kw)

    def producer_of(
        self, fds: list[int], count: int, max_size: int, *args: str
    ) -> subprocess.Popen[bytes]:
        """A producer process of `count` records of up to `max_size` bytes on the ring
        whose descriptors (Consumer.descriptors() order) it inherits."""
        fd_list = ",".join(map(str, fds))
        return self.producer(
            "--fds", fd_list, "--count", str(count), "--max", str(max_size), *args, pass_fds=fds
        )

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def children() -> Iterator[Children]:
    c = Children()
    try:
        yield c
    finally:
        c.close()


def find_cli() -> str | None:
    """The `shmring` command: $SHMRING_BIN, the workspace's target dirs, PATH, or
    built with cargo as a last resort."""
    env = os.environ.get("SHMRING_BIN")
    if env:
        return env
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if "CARGO_TARGET_DIR" in os.environ else []
    targets.append(REPO / "target")
    candidates = [t / profile / "shmring" for t in targets for profile in ("release", "debug")]
    on_path = shutil.which("shmring")
    if on_path:
        candidates.append(Path(on_path))
    for exe in candidates:
        if exe.is_file() and os.access(exe, os.X_OK) and _has_produce(exe):
            return str(exe)
    cargo = shutil.which("cargo")
    if cargo and (REPO / "crates" / "shmring-cli").is_dir():
        r = subprocess.run(
            [cargo, "build", "--release", "-p", "shmring-cli"], cwd=REPO, capture_output=True
        )
        if r.returncode == 0:
            for t in targets:
                exe = t / "release" / "shmring"
                if exe.is_file() and _has_produce(exe):
                    return str(exe)
    return None


def _has_produce(exe: Path) -> bool:
    """A build recent enough to have `shmring produce`."""
    r = subprocess.run([str(exe), "produce", "--help"], capture_output=True, timeout=30)
    return r.returncode == 0 and b"--video" in r.stdout
