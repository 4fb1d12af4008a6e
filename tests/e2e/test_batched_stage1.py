"""Stage 1 with several claims decoded together in one llama.cpp batch (``llm.parallel``,
issue 69), on the packaged Qwen2.5-Coder-0.5B: records equal in shape to the one-at-a-time
path's, the JSON-schema grammar per sequence, and a run killed mid-batch that resumes with
every claim recorded exactly once and no process left behind. Structure only, never
answer quality or speed (``benchmarks/speed/throughput.py`` measures those)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from sanctuary_local import procs
from sanctuary_local.config.settings import HydeConfig, LLMConfig, SamplingConfig
from sanctuary_local.errors import MissingModel
from sanctuary_local.io.claims import read_claims
from sanctuary_local.llm import make_backend
from sanctuary_local.llm.base import ChatMessage, ChatRequest
from sanctuary_local.models.resolve import resolve_model
from sanctuary_local.prompts import load_schema
from sanctuary_local.records import HydeResult
from sanctuary_local.stages.hyde import run_hyde
from tests.support.shared_runs import EXAMPLES, TINY_TRAINED

pytestmark = pytest.mark.slow

QWEN = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"
TOKENS = 96  # short generations: the records' shape is the point


@pytest.fixture(scope="module")
def backends():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    try:
        resolve_model(QWEN)
    except MissingModel as exc:
        pytest.skip(str(exc))
    made = {p: make_backend(LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=4096, n_threads=2, parallel=p,
                                      prefix_cache=False)) for p in (1, 3)}
    yield made
    for b in made.values():
        b.close()


def _shape(r: HydeResult) -> dict:
    """A record's field names and types, and its generation's field names."""
    return {f.name: type(getattr(r, f.name)).__name__ for f in dataclasses.fields(r)} | {
        "generation": sorted(f.name for f in dataclasses.fields(r.generation))}


def test_batched_stage1_records_equal_in_shape(backends) -> None:
    claims = read_claims(EXAMPLES / "claims.json")[:3]
    cfg = HydeConfig(max_questions=5, sampling=SamplingConfig(max_tokens=TOKENS))
    one = run_hyde(claims, backends[1], cfg)
    batched = run_hyde(claims, backends[3], cfg)
    assert [r.claim_index for r in batched] == [c.index for c in claims]
    for a, b in zip(one, batched, strict=True):
        assert _shape(a) == _shape(b)
        assert b.generation.prompt_tokens == a.generation.prompt_tokens  # the same prompt, tokenised alike
        assert 0 < b.generation.completion_tokens <= TOKENS
        assert b.generation.finish_reason in ("stop", "length")
        assert b.generation.cached_tokens > 0  # the shared head came from sequence 0, evaluated once
        assert b.queries or any("fallback" in f for f in b.flags)
        assert all(q.claim_index == b.claim_index and q.number == i for i, q in enumerate(b.queries))


def test_batched_requests_each_keep_their_grammar_and_stop(backends) -> None:
    """Per-sequence samplers: requests with the stage's JSON schema (grammar on) beside one
    without it and one with a stop string, in one batch; the constrained outputs parse."""
    schema = load_schema("hyde_schema.json")
    def req(text: str, **kw) -> ChatRequest:
        return ChatRequest((ChatMessage("user", text),), SamplingConfig(max_tokens=80, **kw.pop("sampling", {})), **kw)

    reqs = [req("Give a JSON object with a label and evidence for: the moon is made of cheese.", json_schema=schema),
            req("Count from one to thirty in words, separated by commas.", sampling={"stop": ["Seven", "seven"]}),
            req("Give a JSON object with a label and evidence for: water boils at 100 C at sea level.", json_schema=schema)]
    out = backends[3].generate(reqs)
    assert all(r.ok for r in out), [r.error for r in out]
    assert [r.extra["grammar"] for r in out] == [True, False, True]
    for r in (out[0], out[2]):
        if r.finish_reason == "stop":
            assert isinstance(json.loads(r.text), dict)
        else:  # cut by max_tokens: still the schema's prefix
            assert r.text.lstrip().startswith("{")
    assert "six" in out[1].text.lower() and "seven" not in out[1].text.lower()  # cut at the stop string
    assert out[1].finish_reason == "stop"


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "sanctuary_local.cli", "run", "--claims", str(EXAMPLES / "claims.json"),
            "--store", str(EXAMPLES / "store"), "--out", str(out), "--profile", TINY_TRAINED, "--workers", "1",
            "--quiet", "--set", "hyde.llm.parallel=2", "--set", "hyde.llm.batch_size=2"]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.soak
def test_kill_mid_batch_then_resume_records_each_claim_once(tmp_path: Path) -> None:
    """Waves of 2 claims decoded together: SIGKILL once the first wave is on disk (the second
    is then mid-batch), check that nothing the run started outlives it, resume, finish."""
    out = tmp_path / "run"
    stage1 = out / "stage1_hyde.jsonl"
    proc = subprocess.Popen(_cmd(out), env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while proc.poll() is None and _lines(stage1) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the kill"
    time.sleep(2.0)  # the second wave's batch is decoding now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 2 <= _lines(stage1) < 4
    deadline = time.monotonic() + 10
    while procs.session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert procs.session_members(proc.pid) == {}, "a process of the killed run is still alive"
    final = subprocess.run(_cmd(out), capture_output=True, text=True, timeout=900)
    assert final.returncode in (0, 3), final.stderr[-2000:]
    n = len(orjson.loads((EXAMPLES / "claims.json").read_bytes()))
    for name in ("stage1_hyde.jsonl", "stage2_evidence.jsonl", "stage3_predictions.jsonl"):
        idx = [orjson.loads(line)["claim_index"] for line in (out / name).read_bytes().splitlines()]
        assert sorted(idx) == list(range(n)), (name, idx)  # exactly once
    rows = orjson.loads((out / "predictions.json").read_bytes())
    assert len(rows) == n
