"""Every benchmark script answers ``--help`` on a CPU machine, GPU-only ones included: the
arguments are parsed before anything heavy is loaded or a GPU is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if "argparse" in p.read_text(encoding="utf-8"))


def test_the_scripts_are_found():
    assert len(SCRIPTS) >= 20 and BENCHMARKS / "speed/vllm_gpu.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_exits_zero_with_usage(script):
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                       cwd=BENCHMARKS.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.lstrip().startswith("usage:"), r.stdout[:500]
