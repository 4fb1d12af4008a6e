"""The runnable scripts of examples/ run as a user runs them, on examples/ data, offline and
without an LLM: retrieval alone, a check with the trained verdict, and scoring its predictions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=EXAMPLES.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_an_example_is_short_and_says_how_to_run_it(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 60, f"{script.name}: an example stays at most 60 lines"
    assert f"python examples/{script.name}" in text  # its docstring's command


def test_retrieve_prints_snippets_with_their_spans() -> None:
    out = run("examples/retrieve.py", "--claim", "0")
    assert out.startswith("Q: The Eiffel Tower grows")
    assert "https://www.factcheckhub.example/2022/07/eiffel-tower-summer-height [0:353]" in out


def test_check_then_score(tmp_path: Path) -> None:
    preds = tmp_path / "predictions.json"
    out = run("examples/check_claim.py", "--out", str(preds))
    assert out.count("claim ") >= 4 and "Refuted (" in out and preds.is_file()
    scored = run("examples/score.py", str(preds))
    # the README's example: all four claims come out Refuted, one of them rightly
    assert scored.startswith("4 claims: accuracy 0.250, macro-F1 0.100")
