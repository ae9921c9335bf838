"""Ring addresses: the one text form every binding and the ``shmring`` command
take (``NAME``, ``unix:PATH``, ``fd:SEG[,LOCK][,EVENTFD]``, ``create:NAME,...``,
``memfd:...``), parsed by the core; one ring reached by each form, a stale ring
replaced and a live one refused, bad text named."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import Children, find_cli

import shmring


def test_one_ring_by_every_form(ring_name: str) -> None:
    ring = shmring.Consumer(address=f"create:{ring_name},capacity=1M,max_producers=8")
    assert ring.geometry()["capacity"] == 1 << 20
    assert ring.geometry()["max_producers"] == 8
    by_name = shmring.Producer(address=ring_name)
    by_path = shmring.Producer(address=f"/dev/shm/{ring_name}")
    fds = [os.dup(f) for f in ring.descriptors()]
    by_fds = shmring.Producer(address="fd:" + ",".join(map(str, fds)))
    for i, p in enumerate((by_name, by_path, by_fds)):
        p.send(b"x" * (i + 1), stream=i)
        p.close()
    for i in range(3):
        f = ring.next(timeout=1.0)
        assert f is not None and f.stream == i and len(f) == i + 1
        f.release()
    tap = shmring.Tap(address=ring_name)
    assert tap.name.endswith(ring_name)
    tap.close()
    obs = shmring.Observer.open(ring_name)
    assert obs.stats()["records_committed"] == 3
    ring.close()
    assert not Path("/dev/shm", ring_name).exists()


def test_a_socket_address_reaches_the_served_ring() -> None:
    ring = shmring.Consumer(address="memfd:pytest-address,capacity=64K,eventfd")
    with tempfile.TemporaryDirectory(prefix="shmring-pytest-") as d:
        sock = str(Path(d) / "ring.sock")
        with shmring.Listener(ring, sock):
            for text in (f"unix:{sock}", sock):
                p = shmring.Producer(address=text, connect_timeout=5.0)
                p.send(b"hi")
                p.close()
                f = ring.next(timeout=1.0)
                assert f is not None and f.tobytes() == b"hi"
                f.release()
                obs = shmring.Observer.open(text, timeout=5.0)
                assert obs.geometry()["capacity"] == 64 << 10
                tap = shmring.Tap(address=text)
                tap.close()
    ring.close()


# The consumer's process ends without closing its ring (as a crash would).
CHILD = """
import os, sys, shmring
ring = shmring.Consumer(address="create:" + sys.argv[1] + ",capacity=64K")
os._exit(0)
"""


def test_create_replaces_a_stale_ring_and_refuses_a_live_one(
    ring_name: str, children: Children
) -> None:
    child = children.spawn([sys.executable, "-c", CHILD, ring_name])
    assert child.wait(timeout=30) == 0
    assert Path("/dev/shm", ring_name).exists(), "left behind, its consumer gone"
    with pytest.raises(shmring.Exists, match="its consumer is gone"):
        shmring.Consumer(address=f"create:{ring_name},stale=refuse")
    ring = shmring.Consumer(address=f"create:{ring_name}")
    assert ring.stats()["records_committed"] == 0
    with pytest.raises(shmring.Exists, match="its consumer is alive"):
        shmring.Consumer(address=f"create:{ring_name}")
    ring.close()


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "empty"),
        ("cam:0", "shm:cam:0"),
        ("fd:3,x", '"x" is not a descriptor number'),
        ("fd:1000000", "not open"),
        ("create:x,colour=red", 'unknown option "colour"'),
        ("unix:", "needs a socket path"),
    ],
)
def test_bad_text_says_what_is_wrong(text: str, what: str) -> None:
    with pytest.raises(shmring.ConfigError) as e:
        shmring.Producer(address=text)
    assert what in str(e.value), str(e.value)


def test_address_excludes_the_other_ways(ring_name: str) -> None:
    with pytest.raises(shmring.ConfigError, match="address="):
        shmring.Consumer(ring_name, address=ring_name)
    with pytest.raises(shmring.ConfigError, match="sizes"):
        shmring.Consumer(address=f"create:{ring_name}", capacity=1 << 20)
    with pytest.raises(shmring.ConfigError, match="address="):
        shmring.Producer(ring_name, address=ring_name)
    with pytest.raises(shmring.ConfigError, match="address="):
        shmring.Tap(ring_name, address=ring_name)
    with pytest.raises(shmring.ConfigError, match="read-only"):
        shmring.Tap(address="memfd:")


def test_the_cli_takes_the_same_text(ring_name: str) -> None:
    cli = find_cli()
    if cli is None:
        pytest.skip("the shmring command is not built")
    ring = shmring.Consumer(address=f"create:{ring_name},capacity=1M")
    for text in (ring_name, f"shm:{ring_name}", f"/dev/shm/{ring_name}"):
        o = subprocess.run([cli, "stat", "--json", text], capture_output=True, text=True)
        assert o.returncode == 0, o.stderr
        assert '"capacity"' in o.stdout or "records_committed" in o.stdout
    o = subprocess.run([cli, "stat", "fd:x"], capture_output=True, text=True)
    assert o.returncode != 0 and '"x" is not a descriptor number' in o.stderr
    ring.close()
