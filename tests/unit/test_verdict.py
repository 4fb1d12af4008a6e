"""Stage 3 unit tests: official evidence order, prompt rendering and fitting, label
fallbacks, flags and metadata (scripted backend = fixed texts; the real model runs in
test_llm_e2e.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from sanctuary_local.llm.base import ChatResult

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.records import (
    Chunk, ClaimEvidence, EvidenceSnippet, HydeResult, Prediction, Query, QueryEvidence,
)
from sanctuary_local.stages.evidence_view import evidence_items, format_evidence
from sanctuary_local.stages.verdict.line import run_verdict
from sanctuary_local.stages.verdict.prompt import build_verdict_request
from sanctuary_local.stages.verdict.prompt_hash import verdict_prompt_hash
from tests.unit.test_hyde import CLAIM, ScriptedBackend

DOC = "Line one about cheese.\nThe moon is rock, NASA says.\nApollo brought back 382 kg of lunar rock."


def snippet(start: int, end: int, score: float, url: str = "https://nasa.gov/moon") -> EvidenceSnippet:
    return EvidenceSnippet(Chunk(7, 0, url, start, end, DOC[start:end]), score)


def evidence(claim_index: int = 7, flags: tuple[str, ...] = ()) -> ClaimEvidence:
    q1, q2 = Query(claim_index, 0, "What is the moon made of?"), Query(claim_index, 1, "What did Apollo bring back?")
    return ClaimEvidence(claim_index, (
        QueryEvidence(q1, (snippet(23, 51, 0.9), snippet(0, 22, 0.4))),
        QueryEvidence(q2, (snippet(52, len(DOC), 0.8, "https://example.org/apollo"),)),
    ), flags=flags)


HYDE = HydeResult(7, "Refuted", (Query(7, 0, "What is the moon made of?"),), flags=("hyde_repaired",))


def test_evidence_items_round_robin_and_verbatim():
    items = evidence_items(evidence())
    assert [(i.question[:8], i.score) for i in items] == [("What is ", 0.9), ("What did", 0.8), ("What is ", 0.4)]
    for it in items:
        assert DOC[it.start : it.end] == it.scraped_text and it.answer == " ".join(it.scraped_text.split())
        assert it.doc_position == 0
    assert evidence_items(ClaimEvidence(1)) == ()


def test_prompt_snapshot():
    req, notes = build_verdict_request(CLAIM, HYDE, evidence(), VerdictConfig(), ScriptedBackend([]))
    text = req.messages[0].content
    assert notes == [] and req.tag == "verdict:7" and req.json_schema is None
    assert req.sampling.temperature == 0.9 and req.sampling.top_p == 0.7 and req.sampling.top_k == 1
    for label in ("Supported", "Refuted", "Not Enough Evidence", "Conflicting Evidence/Cherrypicking"):
        assert text.count(f"Label: {label}") == 1  # exactly one worked example per label
    assert ("Claim: The moon is made of cheese.\nClaim Date: 01-04-2020\nClaim Speaker: A. Baker\n"
            "Location ISO Code: GB\nReporting Source: Facebook\n\nQuestion 1: What is the moon made of?\n"
            "  Evidence 1.1 (URL: https://nasa.gov/moon): \u27e6The moon is rock, NASA says.\u27e7\n"
            "  Evidence 1.2 (URL: https://nasa.gov/moon): \u27e6Line one about cheese.\u27e7\n"
            "Question 2: What did Apollo bring back?\n"
            "  Evidence 2.1 (URL: https://example.org/apollo): \u27e6Apollo brought back 382 kg of lunar rock.\u27e7\n") in text
    assert "between \u27e6 and \u27e7" in text  # the prompt declares the fenced text as data
    assert text.rstrip().endswith("Label: <Supported | Refuted | Not Enough Evidence | Conflicting Evidence/Cherrypicking>")
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == "5a49ed8f3cc3ac53"  # update deliberately with verdict.txt


LONG = "Cheese " + " ".join(f"word{i}" for i in range(30)) + "."


def long_evidence() -> ClaimEvidence:
    """``evidence()`` with a 31-word 0.4 snippet: dropping it saves more words than the
    trim notice that replaces it costs (the fake tokenizer counts words)."""
    ev = evidence()
    q1 = ev.queries[0]
    low = EvidenceSnippet(Chunk(7, 1, "https://nasa.gov/cheese", 0, len(LONG), LONG), 0.4)
    return ClaimEvidence(7, (QueryEvidence(q1.query, (q1.snippets[0], low)), ev.queries[1]))


def test_trimming_drops_lowest_scores_first_and_never_the_claim():
    backend = ScriptedBackend([])
    full = backend.count_tokens(build_verdict_request(CLAIM, HYDE, long_evidence(), VerdictConfig(), backend)[0].messages)
    cfg = VerdictConfig()
    cfg.sampling.max_tokens = 100
    cfg.llm.max_model_len = full + 100 - 2  # 2 words too many: the 0.4 snippet (31 words) must go
    req, notes = build_verdict_request(CLAIM, HYDE, long_evidence(), cfg, backend)
    text = req.messages[0].content
    assert "word17" not in text and "The moon is rock" in text and "382 kg" in text
    assert notes[0].startswith("dropped 1 of 3 snippets") and "score=0.4000" in notes[1]
    assert "  (1 more snippet trimmed to fit the context window)\nQuestion 2:" in text  # said, not hidden
    cfg.llm.max_model_len = 200  # far too small: every snippet goes, claim and questions stay
    req, notes = build_verdict_request(CLAIM, HYDE, evidence(), cfg, backend)
    text = req.messages[0].content
    # trimmed evidence is reported as trimmed, never as "no evidence retrieved" (issue 26 defect 7)
    assert "The moon is made of cheese." in text and "(no evidence retrieved)" not in text
    assert text.count("trimmed to fit the context window") == 2 and "(2 more snippets trimmed" in text
    assert notes[0].startswith("dropped 3 of 3") and "over the 100-token budget" in notes[-1]


def test_format_without_questions():
    assert format_evidence(ClaimEvidence(3)) == "(no questions and no evidence)"


def test_run_verdict_labels_flags_meta():
    out_texts = ["Reasoning:\n1. a\n2. b\n3. c\n4. d\nLabel: NEE", RuntimeError("server down"), "no label here"]
    claims = [CLAIM, CLAIM.__class__(index=8, text="B"), CLAIM.__class__(index=9, text="C")]
    hydes = [HYDE, HydeResult(8, None, ()), HydeResult(9, "Supported", ())]
    evs = [evidence(7, ("evidence_few",)), ClaimEvidence(8), ClaimEvidence(9)]
    preds = run_verdict(claims, hydes, evs, ScriptedBackend(out_texts), VerdictConfig(label_reask=""))
    assert [p.claim_index for p in preds] == [7, 8, 9]
    assert preds[0].label == "Not Enough Evidence" and preds[0].justification == "1. a\n2. b\n3. c\n4. d"
    assert preds[0].flags == ("hyde_repaired", "evidence_few") and preds[0].provisional_label == "Refuted"
    assert len(preds[0].evidence) == 3
    assert preds[1].label == "Refuted" and "verdict_label_fallback" in preds[1].flags  # majority class
    assert any(f.startswith("verdict_llm_error: server down") for f in preds[1].flags)
    assert preds[2].label == "Supported" and "verdict_label_fallback" in preds[2].flags  # stage-1 label
    meta = preds[0].meta
    assert meta["verdict_prompt_hash"] == verdict_prompt_hash("verdict.txt", "") and len(meta["hyde_prompt_hash"]) == 16
    assert meta["prompt_tokens"] == 10 and meta["completion_tokens"] == 5 and meta["trimmed"] == []
    for p in preds:
        assert Prediction.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_run_verdict_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="out of order"):
        run_verdict([CLAIM], [HydeResult(8, None, ())], [ClaimEvidence(7)], ScriptedBackend(["x"]), VerdictConfig())
    with pytest.raises(ValueError, match="1 claims, 0 hyde"):
        run_verdict([CLAIM], [], [ClaimEvidence(7)], ScriptedBackend(["x"]), VerdictConfig())


class QueueBackend(ScriptedBackend):
    """Answers requests with the next outputs in order, across calls."""

    def generate(self, requests):
        self.calls.append(requests)
        taken, self.outputs = self.outputs[: len(requests)], self.outputs[len(requests):]
        return [ChatResult(o, 10, 5, "length" if "cut" in o else "stop", 0.1) for o in taken]


@pytest.mark.parametrize(("answer", "label"), [
    ("Refuted", "Refuted"), ("Label: Not Enough Evidence", "Not Enough Evidence"),
    ("**Supported**", "Supported"), ("Conflicting Evidence/Cherrypicking.\nBecause ...", "Conflicting Evidence/Cherrypicking"),
])
def test_missing_label_is_reasked_once_in_the_same_conversation(answer, label):
    claims = [CLAIM, CLAIM.__class__(index=8, text="B")]
    backend = QueueBackend(["Reasoning:\n1. a\nLabel: Supported", "Reasoning:\n1. the evidence is cut", answer])
    preds = run_verdict(claims, [HYDE, HydeResult(8, "Supported", ())], [evidence(7), ClaimEvidence(8)], backend, VerdictConfig())
    assert len(backend.calls) == 2 and len(backend.calls[1]) == 1  # only the claim without a label
    (follow,) = backend.calls[1]
    assert [m.role for m in follow.messages] == ["user", "assistant", "user"]
    assert follow.messages[1].content == "Reasoning:\n1. the evidence is cut"
    assert follow.messages[2].content.endswith("Label:") and follow.sampling.max_tokens <= 16
    assert preds[0].label == "Supported" and "verdict_label_reasked" not in preds[0].flags
    assert preds[1].label == label and preds[1].justification == "1. the evidence is cut"
    assert "verdict_label_reasked" in preds[1].flags and "verdict_label_fallback" not in preds[1].flags
    assert "verdict_truncated" in preds[1].flags


def test_reask_that_fails_keeps_the_fallback():
    backend = QueueBackend(["Reasoning: no label", "I cannot decide."])
    (pred,) = run_verdict([CLAIM], [HYDE], [evidence(7)], backend, VerdictConfig())
    assert pred.label == "Refuted" and "verdict_label_fallback" in pred.flags  # the stage-1 label
    assert "verdict_label_reasked" in pred.flags


def test_sampling_stop_strings_are_validated_and_the_short_prompt_renders():
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.errors import UserError
    from sanctuary_local.prompts import load_prompt

    cfg = load_config("cpu", {"verdict": {"sampling": {"stop": ["\nClaim:"]}}})
    assert cfg.verdict.sampling.stop == ["\nClaim:"] and cfg.hyde.sampling.stop == []
    for bad in ("\nClaim:", [""], [3]):  # --set parses a bare string as a string, not a list
        with pytest.raises(UserError, match="verdict.sampling.stop must be a list of non-empty strings"):
            load_config("cpu", {"verdict": {"sampling": {"stop": bad}}})
    assert load_config("cpu", {"verdict": {"sampling": {"repetition_penalty": 1.1}}}).verdict.sampling.repetition_penalty == 1.1
    for bad in (0, -1.0, 11):
        with pytest.raises(UserError, match=r"verdict.sampling.repetition_penalty must be a number in \(0, 10\]"):
            load_config("cpu", {"verdict": {"sampling": {"repetition_penalty": bad}}})
    for bad in ("1.1", True):  # the wrong type is refused as it is read, before the range check
        with pytest.raises(UserError, match=r"verdict.sampling.repetition_penalty must be a number, got"):
            load_config("cpu", {"verdict": {"sampling": {"repetition_penalty": bad}}})
    # issue 26's "shorter examples" row: one short example per label, the same slots as verdict.txt
    short, full = load_prompt("verdict_short.txt"), load_prompt("verdict.txt")
    for slot in ("{{claim}}", "{{date}}", "{{speaker}}", "{{location}}", "{{reporting_source}}", "{{evidence}}"):
        assert short.count(slot) == full.count(slot) == 1
    assert [short.count(f"Label: {lab}\n") for lab in ("Supported", "Refuted", "Not Enough Evidence")] == [1, 1, 1]
    assert len(short) < len(full) * 0.6


@pytest.mark.parametrize("settings", [{}, {"prompt": "verdict_short.txt"}, {"citations": True}])
def test_the_request_names_its_fixed_head_for_the_kv_cache(settings):
    # Every claim's verdict prompt starts with the template's text before its first
    # placeholder (instructions and worked examples); the request names it so that llama.cpp
    # keeps its KV state in memory and on disk (llm.prefix_cache), as stage 1's does.
    from dataclasses import replace

    from sanctuary_local.prompts import fixed_head, load_prompt

    cfg = VerdictConfig(**settings)
    template = load_prompt(cfg.citations_prompt if cfg.citations else cfg.prompt)
    reqs = [build_verdict_request(c, HYDE, evidence(), cfg, ScriptedBackend([]))[0]
            for c in (CLAIM, replace(CLAIM, text="The sun is cold."))]
    head = fixed_head(template)
    assert len(head) > 1000 and head.endswith("Claim: ") and "{{" not in head
    for req in reqs:
        assert req.cache_prefix == head and req.messages[-1].content.startswith(head)
    assert reqs[0].messages[-1].content != reqs[1].messages[-1].content
