"""Shared pytest fixtures: the shared data folder, the example data, a surrogate store, and
the one real-model reference run on examples/ that several end-to-end modules read.

``../shared`` is optional (CI has it, a fresh clone may not): fixtures that need it
skip the test with a reason when it is absent.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` (the project's shared data); skips the test when it is absent."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"shared data folder {SHARED} is absent")
    return SHARED


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """``examples/``: 4 claims (``claims.json``) and their store (``store/{0..3}.json``)."""
    return REPO / "examples"


@pytest.fixture(scope="session")
def dev_claims_path(shared_dir: Path) -> Path:
    """The real AVeriTeC dev claims 0–249 (official format)."""
    return shared_dir / "data" / "averitec" / "dev_part_a.json"


@pytest.fixture(scope="session")
def surrogate_store(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A surrogate knowledge store for dev claims 0–19, built once per session with
    ``../shared/tools/make_surrogate_store.py`` (deterministic, about a second)."""
    out = tmp_path_factory.mktemp("surrogate_store")
    tool = shared_dir / "tools" / "make_surrogate_store.py"
    claims = shared_dir / "data" / "averitec" / "dev_part_a.json"
    subprocess.run(
        [sys.executable, str(tool), "--claims", str(claims), "--out", str(out), "--indices", "0:20"],
        check=True, capture_output=True, timeout=300,
    )
    return out


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the test profile with the trained verdict
    (``tests/data/tiny_cpu_trained.toml``) on examples/,
    every non-loopback socket blocked, made once per session (``shared_runs.py``):
    test_pipeline_e2e reads it, and the citations, follow-up, reuse and corrupted-store
    tests start from its finished stages with ``--reuse-from`` where their inputs are the
    same (issue 29: the real model's stages 1-2 ran once per module before)."""
    from tests.support.shared_runs import make_reference_run

    return make_reference_run(tmp_path_factory.mktemp("reference"))
