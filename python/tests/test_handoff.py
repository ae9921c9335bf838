"""The secure hand-off: a consumer serves its memfd ring on a Unix socket
(``shmring.Listener``); producers connect (``Producer.connect``), observers get a
read-only view (``Observer.connect``); a uid not on the allow-list is refused
with the rule named; the asyncio consumer works with ``shmring produce --connect``."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Children, find_cli, receive

import shmring


@pytest.fixture
def sock() -> Iterator[str]:
    """A socket path in a private directory, removed after the test."""
    with tempfile.TemporaryDirectory(prefix="shmring-pytest-") as d:
        os.chmod(d, 0o755)  # another uid (the refusal test) must reach the socket
        yield str(Path(d) / "ring.sock")


def test_producer_connects_from_another_process(sock: str, children: Children) -> None:
    ring = shmring.Consumer("pytest-handoff", create=True, memfd=True, capacity=1 << 22)
    with shmring.Listener(ring, sock) as listener:
        assert listener.socket == sock
        n = 200
        proc = children.producer("--connect", sock, "--count", str(n), "--max", "100000")
        assert receive(ring, n, proc) == list(range(n))
        assert proc.wait(timeout=30) == 0
        st = listener.stats()
        assert (st["producers"], st["refused"]) == (1, 0)
    assert listener.closed and not Path(sock).exists()
    ring.close()


OBSERVER = """
import errno, mmap, os, sys
import shmring
obs = shmring.Observer.connect(sys.argv[1])
st = obs.stats()
fd = obs.fileno()
flags = __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL)
try:
    mmap.mmap(fd, obs.geometry()["segment_size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    res = "mapped"
except OSError as e:
    res = errno.errorcode[e.errno]
print(st["records_committed"], flags & os.O_ACCMODE == os.O_RDONLY, res)
"""


def test_observer_is_read_only(sock: str) -> None:
    ring = shmring.Consumer("pytest-observe", create=True, memfd=True, capacity=1 << 20)
    p = shmring.Producer(ring=ring)
    p.send(b"x" * 100)
    p.send(b"y" * 100)
    with shmring.Listener(ring, sock) as listener:
        # In its own process: the descriptor it gets is the only one it has.
        out = subprocess.run(
            [sys.executable, "-c", OBSERVER, sock], capture_output=True, timeout=60, check=True
        )
        assert out.stdout.split() == [b"2", b"True", b"EACCES"]
        obs = shmring.Observer.connect(sock)
        assert obs.stats()["records_committed"] == 2
        assert obs.stats()["consumer_attached"]
        assert obs.geometry()["capacity"] == 1 << 20
        obs.close()
        with pytest.raises(shmring.Closed):
            obs.stats()
        assert listener.stats()["observers"] == 2
    ring.close()


def test_refused_role_gets_the_rule(sock: str) -> None:
    ring = shmring.Consumer("pytest-refuse", create=True, memfd=True, capacity=1 << 20)
    with shmring.Listener(ring, sock, allow_uids=[4242], observers=False) as listener:
        with pytest.raises(shmring.Refused, match=r"rule: role.*takes no observers"):
            shmring.Observer.connect(sock)
        assert listener.stats()["refused_role"] == 1
    ring.close()


def test_refused_uid_gets_the_rule(sock: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("running a peer under another uid needs root")
    ring = shmring.Consumer("pytest-refuse-uid", create=True, memfd=True, capacity=1 << 20)
    with shmring.Listener(ring, sock, allow_uids=[4242]) as listener:
        code = "import shmring, sys; shmring.Producer.connect(sys.argv[1])"

        def as_uid(uid: int) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(
                [sys.executable, "-c", code, sock],
                user=uid,
                group=uid,
                capture_output=True,
                timeout=60,
            )

        try:
            ok = as_uid(4242)
        except PermissionError:
            pytest.skip(f"{sys.executable} cannot be run by another uid here")
        assert ok.returncode == 0, ok.stderr
        bad = as_uid(4243)
        assert bad.returncode != 0
        assert b"shmring.Refused" in bad.stderr and b"peer-credentials" in bad.stderr
        st = listener.stats()
        assert (st["producers"], st["refused_credentials"]) == (1, 1)
    ring.close()


def test_no_consumer_and_bad_paths(sock: str) -> None:
    with pytest.raises(shmring.NotFound):
        shmring.Producer.connect(sock, connect_timeout=1.0)
    ring = shmring.Consumer("pytest-named", create=True, memfd=True, capacity=1 << 16)
    with pytest.raises(shmring.ConfigError, match="hello_timeout"):
        shmring.Listener(ring, sock, hello_timeout=-1.0)
    with pytest.raises(shmring.ConfigError, match="max_pending"):
        shmring.Listener(ring, sock, max_pending=0)
    ring.close()


def test_a_socket_is_called_a_socket_and_os_errors_are_oserrors(sock: str) -> None:
    """No socket at the path: NotFound, a FileNotFoundError with ENOENT; a socket
    that cannot be bound: OSFailure, an OSError with its errno. Both name the
    socket as a socket (never "segment")."""
    with pytest.raises(FileNotFoundError) as e:
        shmring.Producer.connect(sock, connect_timeout=1.0)
    assert isinstance(e.value, shmring.NotFound) and e.value.errno == errno.ENOENT
    assert f"socket {sock} does not exist" in str(e.value) and "segment" not in str(e.value)
    with pytest.raises(shmring.NotFound, match=f"socket {sock}"):
        shmring.Observer.connect(sock)
    ring = shmring.Consumer(create=True, memfd=True, capacity=1 << 16)
    nowhere = str(Path(sock).parent / "no-such-dir" / "ring.sock")
    with pytest.raises(OSError) as e:
        shmring.Listener(ring, nowhere)
    assert isinstance(e.value, shmring.OSFailure) and e.value.errno == errno.ENOENT
    assert f"bind failed for socket {nowhere}" in str(e.value), str(e.value)
    assert "segment" not in str(e.value)
    ring.close()
    # A named ring that is not there is a FileNotFoundError too.
    with pytest.raises(FileNotFoundError, match="segment /shmring-pytest-no-such-ring"):
        shmring.Consumer("shmring-pytest-no-such-ring")
    # Exceptions a caller catches as OSError, as shmring.Error, or both.
    assert issubclass(shmring.OSFailure, OSError) and issubclass(shmring.OSFailure, shmring.Error)
    assert issubclass(shmring.NotFound, shmring.Error)


def test_asyncio_consumer_with_the_cli_producer(sock: str, children: Children) -> None:
    """The README's asyncio example end to end: the CLI producer connects to the
    socket and gets the eventfd with the memfd, so frames() wakes up."""
    cli = find_cli()
    if cli is None:
        pytest.skip("the shmring command is not built")
    help_text = subprocess.run([cli, "produce", "--help"], capture_output=True).stdout
    if b"--connect" not in help_text:
        pytest.skip(f"{cli} predates produce --connect")
    ring = shmring.Consumer(
        "pytest-async-cli", create=True, memfd=True, eventfd=True, capacity=16 << 20
    )
    with shmring.Listener(ring, sock):
        proc = children.spawn(
            [
                cli,
                "produce",
                "--connect",
                sock,
                "--video",
                "320x240@50",
                "--audio",
                "none",
                "--seconds",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        async def frames(n: int) -> list[int]:
            got = []
            async for frame in ring.frames():
                with frame:
                    assert frame.is_video and (frame.width, frame.height) == (320, 240)
                    got.append(frame.sequence)
                if len(got) == n:
                    break
            return got

        got = asyncio.run(asyncio.wait_for(frames(50), 60))
        assert got == list(range(50))
        assert proc.wait(timeout=60) == 0
    assert ring.stats()["producer_wakes"] > 0  # woken through the eventfd
    ring.close()
