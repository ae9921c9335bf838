"""The package as a user meets it: its version and layout version, record kinds as
an IntEnum, type stubs that pass `mypy --strict` on the documentation's snippets,
and the ring a killed consumer leaves (threads: test_threads.py)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, Children, find_cli

import shmring

STUB = Path(shmring.__file__).with_name("_shmring.pyi")


def workspace_version() -> str:
    """The workspace's version: the one place it is set (Cargo.toml)."""
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    assert m, section
    return m.group(1)


def test_versions_come_from_the_workspace_and_the_core() -> None:
    assert shmring.__version__ == workspace_version()
    assert importlib.metadata.version("shmring") == workspace_version()
    # The layout version is the core's: the CLI, built from the same core, says it.
    cli = find_cli()
    assert cli is not None, "the shmring command was not found"
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith(f"(layout version {shmring.LAYOUT_VERSION})"), out
    assert isinstance(shmring.LAYOUT_VERSION, int) and shmring.LAYOUT_VERSION > 0


def test_kinds_are_an_intenum(ring_name: str) -> None:
    import enum

    assert issubclass(shmring.Kind, enum.IntEnum)
    assert [k.name for k in shmring.Kind] == ["RAW", "VIDEO", "AUDIO"]
    assert shmring.KIND_VIDEO is shmring.Kind.VIDEO
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    tap = shmring.Tap(ring_name)
    p = shmring.Producer(ring_name)
    p.send(b"a", kind=shmring.Kind.AUDIO)
    p.send(b"b", kind=42)  # an application's own kind
    got = []
    for _ in range(2):
        f = ring.next(timeout=1.0)
        assert f is not None
        got.append(f.kind)
        f.release()
    assert got == [shmring.Kind.AUDIO, 42]
    assert type(got[0]) is shmring.Kind and type(got[1]) is int
    assert repr(got[0]) == "<Kind.AUDIO: 2>"
    t = tap.next(timeout=1.0)
    assert t is not None and type(t.kind) in (shmring.Kind, int)
    for r in (tap, p, ring):
        r.close()


def stub_names() -> set[str]:
    tree = ast.parse(STUB.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_stubs_name_what_the_module_exports() -> None:
    native = {n for n in shmring.__all__ if n != "Consumer"}
    assert native - stub_names() == set()
    # The stub's kinds are the module's.
    tree = ast.parse(STUB.read_text())
    kind = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Kind")
    members = {
        t.id: ast.literal_eval(a.value)
        for a in kind.body
        if isinstance(a, ast.Assign)
        for t in a.targets
        if isinstance(t, ast.Name)
    }
    assert members == {k.name: k.value for k in shmring.Kind}


def mypy_strict(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version",
            "3.12",
            "--no-incremental",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=path.parent,
    )


def test_the_documentation_snippets_pass_mypy_strict(tmp_path: Path) -> None:
    """Every Python snippet of README.md, docs/GUIDE.md and python/README.md, type-checked with
    `mypy --strict` against the installed package's stubs. Python 3.12 is the target:
    from it on (PEP 688) numpy's stubs accept any object with a buffer, a Frame too."""
    n = 0
    for doc in (REPO / "README.md", REPO / "docs" / "GUIDE.md", REPO / "python" / "README.md"):
        for m in re.finditer(r"```python\n(.*?)```", doc.read_text(), re.S):
            (tmp_path / f"snippet_{n}.py").write_text(m.group(1))
            n += 1
    assert n >= 6
    r = mypy_strict(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # The package's own Python (the source), with the stubs beside it, also passes.
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "shmring"],
        capture_output=True,
        text=True,
        cwd=REPO / "python",
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_stubs_hold_send_to_buffers(tmp_path: Path) -> None:
    """`send` takes what has a buffer (bytes, bytearray, memoryview, numpy arrays, a
    frame); a str, which has none and fails at run time, fails `mypy --strict`."""
    good = tmp_path / "good.py"
    good.write_text(
        "import numpy as np\n"
        "import shmring\n\n"
        "def f(p: shmring.Producer, frame: shmring.Frame) -> None:\n"
        "    p.send(b'bytes')\n"
        "    p.send(bytearray(3))\n"
        "    p.send(memoryview(b'view'))\n"
        "    p.send(np.zeros(4, np.uint8))\n"
        "    p.send(frame)\n"
        "    shmring.parse_media_header(frame)\n"
    )
    r = mypy_strict(good)
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import shmring\n\n"
        "def f(p: shmring.Producer) -> None:\n"
        "    p.send('text')\n"
    )
    r = mypy_strict(bad)
    assert r.returncode == 1 and 'bad.py:4: error: Argument 1 to "send"' in r.stdout, r.stdout
    # And at run time a str is refused too (it has no buffer).
    ring = shmring.Consumer(create=True, memfd=True, capacity=1 << 16)
    with pytest.raises(TypeError):
        shmring.Producer(ring=ring).send("text")
    ring.close()


CHILD = """
import sys, time, shmring
ring = shmring.Consumer(sys.argv[1], create=True, capacity=1 << 16)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_ring_left_by_sigterm_is_named_stale_and_replaced(
    ring_name: str, children: Children
) -> None:
    child = children.spawn(
        [sys.executable, "-c", CHILD, ring_name], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    # Alive: never replaced.
    with pytest.raises(shmring.Exists, match="its consumer is alive"):
        shmring.Consumer(ring_name, create=True)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert Path("/dev/shm", ring_name).exists(), "SIGTERM runs no clean-up"
    # Kept when asked to.
    with pytest.raises(shmring.Exists) as e:
        shmring.Consumer(ring_name, create=True, replace_stale=False)
    for needle in (
        "its consumer is gone",
        "SIGTERM",
        "replace_stale=False",
        f"shmring rm {ring_name}",
    ):
        assert needle in str(e.value), str(e.value)
    # Creating replaces it.
    ring = shmring.Consumer(ring_name, create=True, capacity=1 << 16)
    shmring.Producer(ring_name).send(b"again")
    f = ring.next(timeout=1.0)
    assert f is not None and f.tobytes() == b"again"
    f.release()
    ring.close()
    assert not Path("/dev/shm", ring_name).exists()


def test_a_file_that_is_no_ring_is_never_replaced(ring_name: str) -> None:
    path = Path("/dev/shm", ring_name)
    path.write_bytes(b"someone else's" * 1000)
    with pytest.raises(shmring.Exists, match="left alone"):
        shmring.Consumer(ring_name, create=True)
    assert path.read_bytes() == b"someone else's" * 1000
