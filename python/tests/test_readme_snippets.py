"""Every Python snippet in README.md, docs/GUIDE.md and python/README.md runs as written.

Each runs in a fresh interpreter. The only change: the ring names the snippets
use (`cam0`) are made unique per run, so parallel runs never share a ring; the
test checks the snippet leaves no ring behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import REPO

DOCS = [REPO / "README.md", REPO / "docs" / "GUIDE.md", REPO / "python" / "README.md"]
NAMES = ["cam0"]


def snippets() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            out.append((doc.relative_to(REPO).as_posix(), i, m.group(1)))
    return out


def test_the_docs_have_python_snippets() -> None:
    found = {doc for doc, _, _ in snippets()}
    assert found == {"README.md", "docs/GUIDE.md", "python/README.md"}


@pytest.mark.parametrize(("doc", "index", "code"), snippets(), ids=lambda x: str(x)[:20])
def test_snippet_runs(doc: str, index: int, code: str, tmp_path: Path) -> None:
    renamed = {n: f"shmring-doc-{os.getpid()}-{uuid.uuid4().hex[:8]}" for n in NAMES}
    for old, new in renamed.items():
        code = re.sub(rf'"{old}"', f'"{new}"', code)
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, f"{doc} snippet {index} failed:\n{code}\n{r.stderr}"
        for new in renamed.values():
            assert not Path("/dev/shm", new).exists(), f"{doc} snippet {index} left its ring"
    finally:
        for new in renamed.values():
            Path("/dev/shm", new).unlink(missing_ok=True)


def test_import_from_the_source_directory_says_what_is_wrong() -> None:
    here = REPO / "python"
    r = subprocess.run(
        [sys.executable, "-c", "import shmring"], cwd=here, capture_output=True, text=True
    )
    native = any(
        p.name.startswith("_shmring") and p.suffix == ".so" for p in (here / "shmring").iterdir()
    )
    if native:  # built in place (maturin develop): the import works
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0
        assert "is the package's source directory" in r.stderr, r.stderr
        assert "Run from another directory" in r.stderr, r.stderr
        assert "circular import" not in r.stderr.splitlines()[-1], r.stderr
