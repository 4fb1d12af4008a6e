"""What several end-to-end test modules share (imported by ``conftest.py`` and tests; not a
test module itself): the example data, the test profile, the network guard, and the one
uninterrupted real-model run on examples/ that ``conftest.reference_run`` makes once per
session (issue 29: the citations, follow-up and reuse tests copy its stages 1-2 with
``--reuse-from`` instead of recomputing them; test_pipeline_e2e reads it)."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: cpu-fast (Qwen2.5-Coder-0.5B on llama.cpp, MiniLM) with short generations and the LLM verdict
#: (the paper's path, ``verdict_short.txt``).
TINY = str(ROOT / "tests" / "data" / "tiny_cpu.toml")
#: ``TINY``'s stages 1-2 with cpu-fast's own stage 3, the packaged trained verdict (no LLM): the
#: reference run's profile and the real-model orchestration and fault tests'.
TINY_TRAINED = str(ROOT / "tests" / "data" / "tiny_cpu_trained.toml")
N_EXAMPLES = len(orjson.loads((EXAMPLES / "claims.json").read_bytes()))
#: ``TINY``'s (and ``TINY_TRAINED``'s) stage-1 and retrieval settings, as overrides of cpu-fast:
#: tests that start from the reference run with their own stage-3 settings merge their
#: ``verdict`` section into this (stages 1-2 are then the reference run's and are copied).
TINY_SECTIONS = {"hyde": {"max_questions": 5, "sampling": {"max_tokens": 160}},
                 "retrieval": {"max_snippets": 4}}
TINY_VERDICT_PROMPT = "verdict_short.txt"


def block_non_loopback(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Any connection to a non-loopback address raises (and is recorded)."""
    attempts: list[object] = []
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"network blocked by test: {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, a: guarded(self, a) or 0)
    return attempts


def make_reference_run(out: Path) -> Path:
    """One uninterrupted in-process run of ``TINY_TRAINED`` on examples/ into ``out``, with every
    non-loopback socket blocked; asserts it reached no network and did every claim."""
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    mp = pytest.MonkeyPatch()
    attempts = block_non_loopback(mp)
    try:
        summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                          profile=TINY_TRAINED, workers=1, quiet=True))
    finally:
        mp.undo()
    assert attempts == [], f"the pipeline tried to reach the network: {attempts}"
    assert summary.n_claims == N_EXAMPLES
    return out


def reuse_extras(out: Path, stage_file: str) -> dict[int, str | None]:
    """Per claim of a stage file, the run its record was copied from (None: computed)."""
    return {o["claim_index"]: o.get("extra", {}).get("reused_from")
            for o in map(orjson.loads, (out / stage_file).read_bytes().splitlines())}
