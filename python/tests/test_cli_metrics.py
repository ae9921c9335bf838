"""`shmring stat --prometheus` and `shmring exporter`, parsed by the Prometheus
project's own parser (prometheus_client) and linted by its own checker (`promtool
check metrics`), with the values checked against what this test sent through the
ring."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest
from conftest import REPO, Children, find_cli
from prometheus_client.parser import text_string_to_metric_families

import shmring


@pytest.fixture(scope="module")
def cli() -> str:
    exe = find_cli()
    if exe is None:
        pytest.fail("the shmring command was not found: cargo build --release -p shmring-cli")
    r = subprocess.run([exe, "exporter", "--help"], capture_output=True)
    if r.returncode != 0:
        pytest.fail(f"{exe} has no exporter command: rebuild it (cargo build --release)")
    return exe


def promtool() -> str:
    """Prometheus' promtool: $PROMTOOL, PATH, or where `scripts/deps.sh test` puts it."""
    for exe in (
        os.environ.get("PROMTOOL"),
        shutil.which("promtool"),
        str(REPO / "target" / "tools" / "bin" / "promtool"),
    ):
        if exe and os.access(exe, os.X_OK):
            return exe
    pytest.fail("promtool not found: run scripts/deps.sh test (or set PROMTOOL)")


def promtool_accepts(text: str) -> None:
    r = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert r.returncode == 0, f"promtool check metrics:\n{r.stdout}{r.stderr}\n{text}"


def samples(text: str) -> dict[tuple[str, str], float]:
    """(sample name, ring label) -> value; also checks every family's type, and
    that promtool accepts the text."""
    promtool_accepts(text)
    out: dict[tuple[str, str], float] = {}
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, s.labels["ring"])] = s.value
    counters = {n for n, t in types.items() if t == "counter"}
    assert "shmring_records_committed" in counters
    assert types["shmring_occupancy_bytes"] == "gauge"
    return out


def scrape(url: str) -> dict[tuple[str, str], float]:
    """One scrape of the exporter at `url`, as samples()."""
    with urllib.request.urlopen(url, timeout=30) as resp:
        return samples(resp.read().decode())


def served_url(out: IO[bytes] | None) -> str:
    """The address an exporter says it serves on (its first line)."""
    assert out is not None
    line = out.readline().decode()
    assert line.startswith("shmring exporter: serving http://127.0.0.1:"), line
    return line.split()[-1]


def fill(ring_name: str) -> tuple[shmring.Consumer, shmring.Producer]:
    """5 records of 1000 bytes and 3 of 64 sent, 2 received and released."""
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 20)
    p = shmring.Producer(ring_name)
    traffic(ring, p)
    return ring, p


def traffic(ring: shmring.Consumer, p: shmring.Producer) -> None:
    """5 records of 1000 bytes and 3 of 64 sent, 2 received and released."""
    for _ in range(5):
        p.send(bytes(1000), stream=1)
    for _ in range(3):
        p.send(bytes(64), stream=2)
    for _ in range(2):
        f = ring.next(timeout=1.0)
        assert f is not None
        f.release()


def check(values: dict[tuple[str, str], float], ring: str, consumer: shmring.Consumer) -> None:
    v = {name: x for (name, r), x in values.items() if r == ring}
    assert v["shmring_records_committed_total"] == 8
    assert v["shmring_bytes_committed_total"] == 5 * 1000 + 3 * 64
    assert v["shmring_records_consumed_total"] == 2
    assert v["shmring_bytes_consumed_total"] == 2 * 1000
    assert v["shmring_records_in_flight"] == 6
    assert v["shmring_consumer_attached"] == 1
    assert v["shmring_producers"] == 1
    assert v["shmring_capacity_bytes"] == 1 << 20
    assert v["shmring_drops_full_total"] == 0
    assert v["shmring_ring_readable"] == 1
    # Every counter the bindings report, under the same name; a duration in ns
    # is served in seconds.
    for name, x in consumer.stats().items():
        if name.endswith("_ns"):
            assert v[f"shmring_{name[:-3]}_seconds"] == int(x) / 1e9, name
            continue
        # A counter ends in _total, a gauge of bytes in _bytes (once).
        keys = [f"shmring_{name}_total", f"shmring_{name}_bytes", f"shmring_{name}"]
        key = next((k for k in keys if k in v), keys[-1])
        assert v[key] == int(x), name


def test_stat_prometheus_is_one_scrape(cli: str, ring_name: str) -> None:
    ring, p = fill(ring_name)
    r = subprocess.run([cli, "stat", "--prometheus", ring_name], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    check(samples(r.stdout), ring_name, ring)
    del p
    ring.close()


def test_exporter_serves_metrics(cli: str, ring_name: str, children: Children) -> None:
    ring, p = fill(ring_name)
    bad = ring_name + "-garbage"
    Path("/dev/shm", bad).write_bytes(b"\x5a" * 8192)
    try:
        ex = children.spawn(
            [cli, "exporter", "--listen", "127.0.0.1:0", "--ring", ring_name, "--ring", bad],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        url = served_url(ex.stdout)
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            values = samples(resp.read().decode())
        check(values, ring_name, ring)
        assert values[("shmring_ring_readable", bad)] == 0
        assert ("shmring_records_committed_total", bad) not in values
        # Each scrape reads the ring afresh.
        p.send(bytes(10))
        again = scrape(url)
        assert again[("shmring_records_committed_total", ring_name)] == 9
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/metrics", "/nothing"), timeout=30)
        assert e.value.code == 404
    finally:
        Path("/dev/shm", bad).unlink(missing_ok=True)
    del p
    ring.close()


def test_exporter_exports_only_rings(cli: str, ring_name: str, children: Children) -> None:
    """Scanning /dev/shm, files of other programs (not shmring rings) are not exported,
    not even as unreadable rings; a ring beside them is."""
    ring, p = fill(ring_name)
    others = [Path("/dev/shm", ring_name + suffix) for suffix in ("-garbage", "-small")]
    others[0].write_bytes(b"\x5a" * 65536)
    others[1].write_bytes(b"state of another program")
    try:
        ex = children.spawn(
            [cli, "exporter", "--listen", "127.0.0.1:0", "--prefix", ring_name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert ex.stdout is not None
        url = ex.stdout.readline().decode().split()[-1]
        values = scrape(url)
        check(values, ring_name, ring)
        assert {r for _, r in values} == {ring_name}, values
    finally:
        for o in others:
            o.unlink(missing_ok=True)
    del p
    ring.close()


def test_exporter_observes_rings_on_sockets(cli: str, children: Children) -> None:
    """`exporter --sockets DIR`: the ring served on a socket there is labelled by
    its socket path with the values sent; a stale socket is unreadable."""
    with tempfile.TemporaryDirectory(prefix="shmring-pytest-") as d:
        sock = str(Path(d) / "cam.sock")
        ring = shmring.Consumer("pytest-exporter", create=True, memfd=True, capacity=1 << 20)
        # A socket whose server went away: its file stays, nothing accepts.
        stale = str(Path(d) / "stale.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale)
        s.close()
        with shmring.Listener(ring, sock):
            p = shmring.Producer.connect(sock)
            traffic(ring, p)
            ex = children.spawn(
                [cli, "exporter", "--listen", "127.0.0.1:0", "--sockets", d],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            url = served_url(ex.stdout)
            values = scrape(url)
            check(values, sock, ring)
            assert values[("shmring_ring_readable", stale)] == 0
            assert ("shmring_records_committed_total", stale) not in values
            # The connection is kept: the next scrape sees the new record.
            p.send(bytes(10))
            again = scrape(url)
            assert again[("shmring_records_committed_total", sock)] == 9
            assert again[("shmring_oldest_pending_age_seconds", sock)] == 0
            # A reservation held open: the consumer, having read everything before
            # it, waits on it and publishes it as the oldest open claim.
            for _ in range(7):
                f = ring.next(timeout=1.0)
                assert f is not None
                f.release()
            held = p.reserve(100)
            assert ring.next(timeout=0.2) is None
            claim = scrape(url)
            assert claim[("shmring_oldest_pending_age_seconds", sock)] > 0
            assert claim[("shmring_oldest_pending_slot", sock)] == p.slot
            assert claim[("shmring_oldest_pending_pid", sock)] == os.getpid()
            held.abort()
            ex.kill()
            ex.wait()
            p.close()
        ring.close()


def test_the_sample_alerts_use_metrics_the_exporter_serves(cli: str, ring_name: str) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    used = set(re.findall(r"\bshmring_\w+", block))
    assert {"shmring_drops_full_total", "shmring_consumer_attached"} <= used
    ring, p = fill(ring_name)
    r = subprocess.run([cli, "stat", "--prometheus", ring_name], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    served = {name for name, _ in samples(r.stdout)}
    assert used <= served, used - served
    del p
    ring.close()
