"""The extra-calibration-inputs benchmark (benchmarks/evidence_effect.py): its inputs, its
pick and its usage error, without a model (its model passes are benchmarks, committed as
results)."""

from __future__ import annotations

import math

import pytest

from sanctuary_local.calibrate import FitData
from sanctuary_local.records import Chunk, ClaimEvidence, EvidenceSnippet, Query, QueryEvidence
from sanctuary_local.stages.calibration import FitExample
from sanctuary_local.stages.verdict import format_evidence


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("evidence_effect")


def _evidence() -> ClaimEvidence:
    chunk = Chunk(claim_index=7, doc_position=0, url="https://example.org/a", start=0, end=21, text="The rate fell to 3 %.")
    return ClaimEvidence(7, (QueryEvidence(Query(7, 0, "Did the rate fall?"), (EvidenceSnippet(chunk, 0.8),)),
                             QueryEvidence(Query(7, 1, "When?"))))


def test_without_evidence_keeps_every_question_and_no_snippet(bench):
    ev = _evidence()
    bare = bench.without_evidence(ev)
    assert [q.query for q in bare.queries] == [q.query for q in ev.queries]
    assert all(not q.snippets for q in bare.queries)
    shown = format_evidence(bare)
    assert "The rate fell" not in shown and "Did the rate fall?" in shown and "When?" in shown
    assert shown.count("(no evidence retrieved)") == 2


def test_the_extra_scores_join_as_normalised_inputs_and_unscored_claims_drop(bench):
    ex = (FitExample((-1.0, -2.0, -3.0, -4.0), "Supported", "Refuted"),
          FitExample((-2.0, -1.0, -3.0, -4.0), "Refuted", "Supported"))
    data = FitData(ex, (100, 101), "sha", "hash", {})
    got = bench.examples(data, {100: {"logprobs": [0.0, -1.0, -2.0, -3.0]}, 101: {"logprobs": None}})
    assert got["indices"] == [100] and got["shipped"] == [ex[0]]
    (both,) = got["both"]
    assert both.logprobs == ex[0].logprobs and both.provisional == "Supported"
    assert sum(math.exp(x) for x in both.stance) == pytest.approx(1.0)
    assert both.stance[0] - both.stance[1] == pytest.approx(1.0)  # a log-softmax keeps the differences
    (alone,) = got["extra"]
    assert alone.logprobs == (0.0, -1.0, -2.0, -3.0) and alone.stance == ()


def test_the_pick_is_the_best_macro_f1_at_or_above_the_majority_accuracy(bench):
    rows = [{"row": "a", "accuracy": 0.50, "macro_f1": 0.40},  # best F1, below the majority
            {"row": "b", "accuracy": 0.60, "macro_f1": 0.30},
            {"row": "c", "accuracy": 0.60, "macro_f1": 0.30},  # tie with b: the earlier row wins
            {"row": "d", "accuracy": 0.62, "macro_f1": 0.29}]
    assert bench.pick(rows, 0.56)["row"] == "b"
    assert bench.pick(rows, 0.40)["row"] == "a"
    assert bench.pick(rows, 0.70) is None


def test_the_verdict_words_are_the_ones_the_question_offers(bench):
    assert len(bench.VERDICT_WORDS) == 4
    for word in bench.VERDICT_WORDS:
        assert word in bench.VERDICT_WORDS_ASK


def test_a_directory_without_a_run_is_one_line_and_exit_2(bench, tmp_path, capsys):
    assert bench.main(["--run", str(tmp_path / "nope"), "--label", "t", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope" in err and "\n" not in err
    assert not list(tmp_path.glob("evidence_effect_*"))


def test_separation_is_the_roc_auc_of_supported_over_refuted(bench):
    def ex(s: float, r: float, gold: str) -> FitExample:
        return FitExample((s, r, -5.0, -5.0), None, gold)

    perfect = [ex(-1, -3, "Supported"), ex(-3, -1, "Refuted"), ex(-2, -2.5, "Supported"), ex(-9, -9, "Not Enough Evidence")]
    assert bench.separation(perfect) == 1.0
    inverted = [ex(-3, -1, "Supported"), ex(-1, -3, "Refuted")]
    assert bench.separation(inverted) == 0.0
    assert bench.separation([ex(-1, -2, "Supported")]) is None  # one class: undefined


def test_a_torn_last_line_is_recomputed_not_fatal(bench, tmp_path, capsys):
    path = tmp_path / "no-evidence.jsonl"
    path.write_text('{"claim_index": 100, "logprobs": [-1, -2, -3, -4], "seconds": 4.2}\n{"claim_index": 10', "utf-8")
    done = bench.read_done(path)
    assert list(done) == [100] and done[100]["logprobs"] == [-1, -2, -3, -4]
    assert "unreadable line" in capsys.readouterr().err
    assert path.read_text("utf-8").endswith("}\n")  # the next append starts a line of its own
    assert list(bench.read_done(path)) == [100]
    assert bench.read_done(tmp_path / "absent.jsonl") == {}
