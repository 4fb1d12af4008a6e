"""vLLM backend on a GPU box (skipped without CUDA, vllm or the paper models in models/).

Run as-is there: ``pytest -m gpu tests/e2e/test_llm_vllm_gpu.py`` after
``sanctuary-local models fetch paper``. Checks batching, structured output, token
counts, and that ``close`` gives the GPU memory back before stage 3 loads its model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import MissingModel
from sanctuary_local.io.claims import read_claims
from sanctuary_local.llm import make_backend
from sanctuary_local.llm.base import ChatMessage, ChatRequest
from sanctuary_local.models.resolve import resolve_model
from sanctuary_local.prompts import load_schema
from sanctuary_local.stages.hyde import run_hyde

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def _need(llm_cfg):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm", reason="vllm is not installed (pip install '.[gpu]')")
    try:
        resolve_model(llm_cfg.model, REPO / "models")
    except MissingModel as exc:
        pytest.skip(str(exc))
    return torch


def test_vllm_stage1_structured_and_release():
    cfg = load_config("paper")
    torch = _need(cfg.hyde.llm)
    cfg.hyde.sampling.max_tokens = 512
    backend = make_backend(cfg.hyde.llm, REPO / "models")
    try:
        claims = read_claims(REPO / "examples" / "claims.json")
        results = run_hyde(claims, backend, cfg.hyde)
        assert [r.claim_index for r in results] == [c.index for c in claims]
        assert all(r.generation.prompt_tokens > 0 and r.generation.completion_tokens > 0 for r in results)
        # With structured output on (paper profile) a finished output is valid schema JSON.
        for r in results:
            if r.generation.finish_reason == "stop":
                obj = json.loads(r.raw_text)
                assert obj["label"] in load_schema("hyde_schema.json")["properties"]["label"]["enum"]
        msgs = (ChatMessage("user", "Say hello."),)
        (res,) = backend.generate([ChatRequest(msgs, cfg.hyde.sampling)])
        assert res.prompt_tokens == backend.count_tokens(msgs)
    finally:
        backend.close()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    assert free > 0.7 * total, f"GPU memory not released: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
