"""Stage 1 unit tests: prompt rendering snapshot, parse ladder → HydeResult, run_hyde
ordering and error handling (a scripted backend replays fixed texts: this tests our
parsing and bookkeeping, not a model — the real model runs in test_llm_e2e.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from sanctuary_local.config.settings import HydeConfig, SamplingConfig
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt, load_schema
from sanctuary_local.records import Claim, HydeResult
from sanctuary_local.stages.hyde import build_hyde_request, hyde_prompt_hash, parse_hyde, run_hyde

CLAIM = Claim(index=7, text="The moon is made of cheese.", date="01-04-2020", speaker="A. Baker", location="GB", reporting_source="Facebook")


class ScriptedBackend:
    """Replays fixed outputs (or errors) in order; counts words as tokens."""

    name, model_id = "scripted", "scripted"

    def __init__(self, outputs: list[str | Exception]) -> None:
        self.outputs, self.calls = outputs, []

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self.calls.append(requests)
        return [ChatResult("", finish_reason="error", error=str(o)) if isinstance(o, Exception)
                else ChatResult(o, 10, 5, "stop", 0.1, cached_tokens=4) for o in self.outputs[: len(requests)]]

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        return sum(len(m.content.split()) for m in messages)

    def close(self) -> None:
        pass


def test_prompt_snapshot():
    req = build_hyde_request(CLAIM, HydeConfig())
    (msg,) = req.messages
    assert msg.role == "user"
    assert msg.content.startswith("You are a highly capable, thoughtful, and precise fact-checker.")
    assert msg.content.endswith(
        "Now process this claim:\n\nClaim: The moon is made of cheese.\nClaim Date: 01-04-2020\n"
        "Claim Speaker: A. Baker\nLocation ISO Code: GB\nReporting Source: Facebook\n"
    )
    for needle in ("Supported:", "Refuted:", "Conflicting Evidence/Cherrypicking:", "5 to 10 Q-A pairs",
                   "not more than 3 sentences", "Fabricate", "1-SHOT EXAMPLE", '"evidence"'):
        assert needle in msg.content
    assert "Not Enough Evidence" not in msg.content  # stage 1 never abstains (§4.1)
    assert "{{" not in msg.content
    # Snapshot: any edit of the template must be deliberate (update this hash with it).
    assert hashlib.sha256(msg.content.encode()).hexdigest()[:16] == SNAPSHOT
    assert req.sampling == SamplingConfig(temperature=0.5, top_p=0.8, min_p=0.1, max_tokens=2048)
    assert req.json_schema is None and req.tag == "hyde:7"
    # The fixed head (instructions + example) is named for the backend's prefix cache.
    assert msg.content.startswith(req.cache_prefix) and req.cache_prefix.endswith("Now process this claim:\n\nClaim: ")
    assert req.cache_prefix == build_hyde_request(replace(CLAIM, text="Other."), HydeConfig()).cache_prefix


def test_cpu_profile_asks_for_exactly_five_questions():
    # cpu's stage-1 prompt (issue 43, chosen on dev 0-49); cpu-fast and paper keep the paper's.
    from sanctuary_local.config.settings import load_config

    content = build_hyde_request(CLAIM, load_config("cpu").hyde).messages[0].content
    assert "Generate exactly 5 Q-A pairs" in content and "5 to 10" not in content
    assert "one answer per question" in content and content.endswith("Reporting Source: Facebook\n")
    for profile in ("cpu-fast", "paper"):
        assert load_config(profile).hyde.prompt == "hyde.txt"


SNAPSHOT = "1240b4b114f48f71"  # sha256[:16] of the rendered prompt for CLAIM


@pytest.mark.parametrize("prompt", ["hyde.txt", "hyde_short.txt"])
def test_fewshot_example_is_valid_and_schema_conformant(prompt):
    text = load_prompt(prompt)
    line = next(ln for ln in text.splitlines() if ln.startswith('{"label": "Refuted"'))
    example = json.loads(line)
    schema = load_schema("hyde_schema.json")
    assert example["label"] in schema["properties"]["label"]["enum"]
    assert 5 <= len(example["evidence"]) <= schema["properties"]["evidence"]["maxProperties"]


def test_missing_metadata_and_schema_switch():
    cfg = HydeConfig()
    cfg.llm.structured_output = True
    req = build_hyde_request(Claim(index=0, text="X"), cfg)
    assert "Claim Date: Unknown" in req.messages[0].content and req.json_schema == load_schema("hyde_schema.json")


def test_parse_dedupes_clamps_and_numbers():
    ev = {f"Was the cheese batch {i % 12} tested?": [f"a{i}"] for i in range(12)}
    ev["was the cheese batch 3  tested ?"] = ["extra"]  # a near-duplicate of question 3
    r = parse_hyde(json.dumps({"label": "Supported", "evidence": ev}), CLAIM, HydeConfig())
    assert len(r.queries) == 10 and "hyde_clamped" in r.flags
    assert [q.number for q in r.queries] == list(range(10))
    assert r.queries[3].answers == ("a3", "extra")
    assert all(q.claim_index == 7 for q in r.queries) and r.provisional_label == "Supported"


def test_parse_claim_fallback():
    r = parse_hyde("I don't know.", CLAIM, HydeConfig(), "stop")
    assert [q.question for q in r.queries] == [CLAIM.text]
    assert "hyde_claim_fallback" in r.flags and "hyde_no_label" in r.flags and r.provisional_label is None


def test_run_hyde_order_errors_and_accounting():
    good = json.dumps({"label": "Refuted", "evidence": {"Q one?": ["a"], "Q two?": ["b"]}})
    claims = [replace(CLAIM, index=i, claim_id=str(i)) for i in range(3)]
    backend = ScriptedBackend([good, RuntimeError("boom"), "nonsense"])
    out = run_hyde(claims, backend, HydeConfig())
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 3  # one call, all prompts
    assert [r.claim_index for r in out] == [0, 1, 2]
    assert out[0].provisional_label == "Refuted" and out[0].generation.completion_tokens == 5
    assert out[0].generation.cached_tokens == 4  # the backend's reused-prefix count is kept
    assert "hyde_few_questions" in out[0].flags
    assert any(f.startswith("hyde_llm_error: boom") for f in out[1].flags) and "hyde_claim_fallback" in out[1].flags
    assert "hyde_claim_fallback" in out[2].flags
    for r in out:  # every record survives a JSONL round trip
        assert HydeResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_prompt_hash_stable():
    assert hyde_prompt_hash() == hyde_prompt_hash() and len(hyde_prompt_hash()) == 16
