"""Ev2R: robust parsing of judge answers, scoring/caching with a scripted judge, and a
plumbing run with the real packaged Qwen2.5-Coder-0.5B judge (the cpu-fast profile's LLM)
through llama.cpp (structure only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.config.settings import SamplingConfig
from sanctuary_local.evaluation.ev2r import NOT_COMPARABLE, JudgeCache, ev2r_scores, parse_judgement
from sanctuary_local.evaluation.inputs import EvalExample
from sanctuary_local.llm.base import ChatRequest, ChatResult
from sanctuary_local.records import REFUTED, SUPPORTED

GOLD = [
    EvalExample("0", "The Eiffel Tower is in Rome.", REFUTED, (("Where is the Eiffel Tower?", "In Paris, France."),)),
    EvalExample("1", "Water boils at 100 C at sea level.", SUPPORTED, (("At what temperature does water boil?", "100 C at sea level."),)),
]
PRED = [
    EvalExample("0", "The Eiffel Tower is in Rome.", REFUTED, (("Where is the Eiffel Tower located?", "Paris."),)),
    EvalExample("1", "Water boils at 100 C at sea level.", REFUTED, ()),
]


def test_parse_tolerates_fences_chatter_and_official_keys() -> None:
    j = parse_judgement('Here: ```json\n{"reference_facts": [{"fact": "a", "supported": true}, {"fact": "b", "supported": "no"}], "predicted_facts": [{"fact": "c", "supported": "yes"}]}\n```')
    assert (j.ok, j.recall, j.precision) == (True, 0.5, 1.0)
    official = parse_judgement('{"facts count reference evidence": 4, "support reference evidence": 3, "facts count predicted evidence": 2, "support predicted evidence": 2}')
    assert official.recall == 0.75 and official.precision == 1.0
    for bad in ("", "no json at all", '{"reference_facts": 3}', '{"facts count reference evidence": 1, "support reference evidence": 5}'):
        j = parse_judgement(bad)
        assert not j.ok and j.recall == 0.0 and j.error


class ScriptedJudge:
    """Answers from a script (unit test of prompt parsing/scoring only); counts calls."""

    name = "scripted"
    model_id = "script-v1"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls = 0

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self.calls += len(requests)
        out = []
        for r in requests:
            assert r.json_schema is not None and r.sampling.temperature == 0.0
            text = self.answers.get(r.tag)
            out.append(ChatResult(text=text or "", error=None if text is not None else "boom", finish_reason="stop"))
        return out

    def count_tokens(self, messages) -> int:  # pragma: no cover - protocol filler
        return 0

    def close(self) -> None:
        pass


def _facts(ref: list[bool]) -> str:
    return json.dumps({"reference_facts": [{"fact": f"f{i}", "supported": s} for i, s in enumerate(ref)], "predicted_facts": []})


def test_scores_hits_and_cache(tmp_path: Path) -> None:
    answers = {"ev2r-q:0": _facts([True, False]), "ev2r-qa:0": _facts([True, True, False]), "ev2r-q:1": "garbage"}
    judge = ScriptedJudge(answers)  # "ev2r-qa:1" missing → backend error
    sampling = SamplingConfig(temperature=0.0, max_tokens=64)
    summary, per_claim = ev2r_scores(GOLD, PRED, judge, JudgeCache(tmp_path), sampling)
    assert per_claim[0]["qa_recall"] == pytest.approx(2 / 3) and per_claim[0]["hit"] == 1.0
    assert per_claim[1] == {"q_recall": 0.0, "qa_recall": 0.0, "qa_precision": 0.0, "hit": 0.0, "parsed": 0.0}
    assert summary["judge"] == "scripted:script-v1" and summary["comparability"] == NOT_COMPARABLE
    assert summary["score"] == 0.5 and summary["unparsed_answers"] == 2
    assert summary["judge_calls"] == {"requests": 4, "cached": 0, "failed": 1}
    again, _ = ev2r_scores(GOLD, PRED, judge, JudgeCache(tmp_path), sampling)
    assert again["judge_calls"] == {"requests": 4, "cached": 3, "failed": 1}  # only the failure is re-asked
    assert judge.calls == 5 and again["qa_recall"] == summary["qa_recall"]
    other = ScriptedJudge({})
    other.model_id = "another"
    assert ev2r_scores(GOLD, PRED, other, JudgeCache(tmp_path), sampling)[0]["judge_calls"]["cached"] == 0  # keyed by judge


@pytest.fixture(scope="module")
def cpu_judge():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.errors import UserError
    from sanctuary_local.llm import make_backend

    cfg = load_config("cpu-fast")
    try:
        backend = make_backend(cfg.verdict.llm, cfg.models_dir)
    except UserError as exc:
        pytest.skip(f"packaged Qwen2.5-Coder-0.5B unavailable: {exc}")
    yield backend
    backend.close()


def test_real_cpu_judge_plumbing(cpu_judge, tmp_path: Path) -> None:
    # A 0.5B judge is a plumbing test: structure, not values.
    # Claim 1 only (2 requests: Q-only and Q+A) keeps this under a minute on 2 busy cores.
    gold, pred = GOLD[1:], PRED[1:]
    sampling = SamplingConfig(temperature=0.0, top_k=1, max_tokens=24)
    summary, per_claim = ev2r_scores(gold, pred, cpu_judge, JudgeCache(tmp_path), sampling)
    assert summary["judge"] == "llama_cpp:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert len(per_claim) == 1 and summary["judge_calls"]["requests"] == 2
    c = per_claim[0]
    assert 0.0 <= c["q_recall"] <= 1.0 and 0.0 <= c["qa_recall"] <= 1.0
    assert c["hit"] == 0.0  # wrong label never counts, whatever the judge says
    cached, _ = ev2r_scores(gold, pred, cpu_judge, JudgeCache(tmp_path), sampling)
    assert cached["judge_calls"]["cached"] == 2 - summary["judge_calls"]["failed"]
    assert cached["qa_recall"] == summary["qa_recall"]
