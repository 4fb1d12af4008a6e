"""The end-to-end quality harness (benchmarks/quality/e2e.py): its rows are computed right.

from tests.support.scripts import load_script

The harness's model runs are benchmarks (committed under benchmarks/results/); here its
pure parts are checked on the real dev claims: the oracle evidence is exactly the gold QA
as the official converter writes it, the majority-class row equals a hand count, and the
report renders every row.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness():
    return load_script("quality.e2e")


@pytest.fixture(scope="module")
def dev_claims(dev_claims_path):
    from sanctuary_local.io.claims import read_claims

    return read_claims(dev_claims_path)[:50]


def test_oracle_evidence_is_the_gold_qa(harness, dev_claims):
    from sanctuary_local.io.predictions import gold_to_solution
    from sanctuary_local.stages.evidence_view import evidence_items, format_evidence

    for claim in dev_claims:
        ev = harness.oracle_evidence(claim)
        got = sorted((q.query.question, s.chunk.text) for q in ev.queries for s in q.snippets)
        want = sorted(gold_to_solution([claim])[0].qa_pairs)
        assert got == want, claim.index
        block = format_evidence(ev)
        for q in claim.gold_questions:  # shown on one line (whitespace collapsed, issue 27)
            assert " ".join(q.question.split()) in block
        assert len(evidence_items(ev)) == len(want)


def test_majority_row_matches_a_hand_count(harness, dev_claims, dev_claims_path):
    from sanctuary_local.evaluation.inputs import EvalExample, load_gold

    gold = [g for g in load_gold(dev_claims_path) if int(g.claim_id) < 50]
    row = harness.score(gold, [EvalExample(g.claim_id, g.claim, "Refuted", ()) for g in gold], workers=1)
    counts = Counter(c.gold_label for c in dev_claims)
    acc = counts["Refuted"] / len(dev_claims)
    assert row["accuracy"] == pytest.approx(acc)
    # Only Refuted has a non-zero F1 (precision = acc, recall = 1); macro-F1 averages 4 classes.
    assert row["macro_f1"] == pytest.approx(2 * acc / (acc + 1) / 4)
    assert row["qa"] == 0.0 and row["averitec_0.25"] == 0.0


def test_report_renders_every_row_and_compares(harness, tmp_path):
    row = {"n": 2, "accuracy": 0.5, "macro_f1": 0.25, "q_only": 0.3, "qa": 0.2, "averitec_0.25": 0.5,
           "per_class": {lab: {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
                         for lab in ("Supported", "Refuted", "Not Enough Evidence", "Conflicting Evidence/Cherrypicking")},
           "confusion": [[0] * 4 for _ in range(4)], "pred_label_counts": {"Refuted": 2}}
    res = {"label": "t", "profile": "cpu", "overrides": [], "indices": "0:2", "n_claims": 2,
           "rows": {"system": row, "majority_baseline": row, "retrieval_only": row,
                    "oracle_evidence": dict(row, q_only=None, qa=None, verdict_s_per_claim=1.0, flag_rates={})},
           "stage_s_per_claim": {"hyde": 1.0, "retrieval": 2.0, "verdict": 3.0},
           "flag_rates": {f: 0.0 for f in load_script("quality.stats").RATE_FLAGS}, "models": {"verdict_llm": "m"},
           "machine": {"cpus": 2, "loadavg_at_end": [1.0, 1.0, 1.0]}, "date": "now", "argv": []}
    md = harness.to_markdown(res)
    for key in res["rows"]:
        assert load_script("quality.report").ROW_TITLES[key] in md
    paths = harness.write([res, dict(res, label="u")], "cmp", tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    assert "| u | cpu | 0:2 |" in paths[1].read_text()


def test_budget_levels_count_each_claims_highest_stage_level(harness):
    from sanctuary_local.records import Prediction

    def pred(i: int, levels: dict[str, int] | None) -> Prediction:
        meta = {} if levels is None else {"budget": {"levels": levels, "knobs": {}}}
        return Prediction(claim_index=i, claim_id=str(i), claim="c", label="Refuted", meta=meta)

    assert harness.budget_levels([pred(0, None), pred(1, None)]) is None  # no --budget-s
    preds = [pred(0, {"hyde": 0, "retrieval": 0, "verdict": 0}), pred(1, {"hyde": 0, "retrieval": 0, "verdict": 0}),
             pred(2, {"hyde": 4, "retrieval": 4, "verdict": 4}), pred(3, {"hyde": 1, "retrieval": 2, "verdict": 4}),
             pred(4, {"hyde": 0, "retrieval": 3, "verdict": 2})]
    assert harness.budget_levels(preds) == {"0": 2, "3": 1, "4": 2}
    row = {"n": 1, "accuracy": 1.0, "macro_f1": 1.0, "q_only": 0.0, "qa": 0.0, "averitec_0.25": 0.0,
           "per_class": {"Refuted": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}},
           "confusion": [[1]], "pred_label_counts": {"Refuted": 1}}
    res = {"label": "t", "profile": "cpu", "overrides": [], "indices": "0:1", "n_claims": 1, "rows": {"system": row},
           "stage_s_per_claim": {}, "flag_rates": {}, "models": {}, "machine": {"cpus": 2, "loadavg_at_end": [1.0]},
           "date": "now", "argv": [], "budget_s": 1.0, "budget_levels": {"0": 2, "4": 48}}
    assert "Run with `--budget-s 1`: claims per degradation level" in harness.to_markdown(res)
    assert "--budget-s" not in harness.to_markdown(dict(res, budget_s=None, budget_levels=None))
    # --eval-only of a budgeted run: the levels are in the predictions, the budget is not on the command line
    assert "Run with a latency budget (`run --budget-s`)" in harness.to_markdown(dict(res, budget_s=None))


@pytest.mark.parametrize("argv, says", [
    (["--budget-s", "0"], "--budget-s must be > 0 (got 0)"),
    (["--budget-s", "-5"], "--budget-s must be > 0 (got -5)"),
    (["--budget-s", "1", "--eval-only"], "--eval-only scores a finished run as it is"),
])
def test_a_bad_budget_is_one_usage_error_before_any_run(harness, tmp_path, capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        harness.main([*argv, "--work", str(tmp_path / "work"), "--out", str(tmp_path)])
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not list(tmp_path.glob("quality_e2e_*"))


def test_llm_usage_counts_tokens_and_prefill_saved_per_stage(harness, tmp_path):
    from sanctuary_local.records import Generation, HydeResult, Prediction
    from sanctuary_local.io.run_files import STAGE_FILES
    from sanctuary_local.run.stage_files import StageFile

    hyde = StageFile(tmp_path / STAGE_FILES["hyde"], HydeResult.from_dict)
    verdict = StageFile(tmp_path / STAGE_FILES["verdict"], Prediction.from_dict)
    for i, (cached, secs) in enumerate([(0, 10.0), (600, 5.0), (600, 5.0)]):
        hyde.append(i, HydeResult(i, None, (), generation=Generation(700, 100, secs, "stop", cached)), {"seconds": secs})
        pred = Prediction(claim_index=i, claim_id=str(i), claim="c", label="Refuted", evidence=(), justification="",
                          meta={"prompt_tokens": 2000, "completion_tokens": 50 * (i + 1), "cached_tokens": 0, "seconds": 4.0})
        verdict.append(i, pred, {"seconds": 4.0})
    usage = harness.llm_usage(tmp_path, [0, 1])  # claim 2 is outside the range
    assert usage["hyde"] == {"claims": 2, "prompt_tokens_per_claim": 700.0, "prefill_saved_per_claim": 300.0,
                             "completion_tokens_per_claim": 100.0, "tokens_per_s_in": round(1400 / 15, 1),
                             "tokens_per_s_out": round(200 / 15, 2)}
    assert usage["verdict"]["completion_tokens_per_claim"] == 75.0 and usage["verdict"]["tokens_per_s_out"] == 18.75  # 150 tokens in 8 s
    assert "| hyde | 700.0 | 300.0 | 100.0 |" in "\n".join(load_script("quality.report").usage_markdown([{"label": "t", "llm_usage": usage}]))


# ---------------------------------------------------------------- --corpus (issue 28)
def test_corpus_source_is_the_index_and_refuses_a_plain_folder(harness, tmp_path):
    import argparse

    from sanctuary_local.corpus.build import build_index

    args = argparse.Namespace(corpus=str(tmp_path / "plain"), claims="unused", work=str(tmp_path / "work"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(SystemExit, match="not a corpus index"):
        harness.evidence_source(args, 0, 2)
    rep = build_index(REPO / "examples" / "corpus", tmp_path / "ix")
    args.corpus = str(tmp_path / "ix")
    path, src = harness.evidence_source(args, 0, 2)
    assert path == tmp_path / "ix" and not (tmp_path / "work").exists()  # no surrogate store built
    assert (src["kind"], src["documents"], src["segments"]) == ("corpus index", rep.units, rep.segments)
    assert src["generation"] == rep.generation
    text = load_script("quality.report").source_text({"evidence_source": src})
    assert str(tmp_path / "ix") in text and f"{rep.units:,} documents" in text
    assert load_script("quality.report").source_text({}) == "surrogate knowledge store"  # results made before --corpus


@pytest.mark.slow
def test_corpus_run_reuses_stage_one_of_a_store_run(harness, surrogate_store, dev_claims_path, tmp_path, monkeypatch):
    """One claim with the tiny profile: a per-claim-store run, then the same claim against a
    corpus index of the surrogate stores of claims 0–19 with --reuse-from it: stage 1 is
    copied, retrieval is recomputed from the corpus, and the result names the index."""
    import orjson

    from sanctuary_local.corpus.build import build_index
    from sanctuary_local.corpus.index import CorpusIndex
    from tests.support.shared_runs import block_non_loopback

    attempts = block_non_loopback(monkeypatch)
    tiny = str(REPO / "tests" / "data" / "tiny_cpu_trained.toml")
    build_index(surrogate_store, tmp_path / "ix")
    # stage 3 is the trained verdict, no LLM (this test is about retrieval)
    common = ["--claims", str(dev_claims_path), "--indices", "3:4", "--profile", tiny, "--work", str(tmp_path / "w"),
              "--out", str(tmp_path / "res"), "--workers", "1", "--no-oracle", "--quiet"]
    assert harness.main([*common, "--label", "store"]) == 0
    assert harness.main([*common, "--label", "corpus", "--corpus", str(tmp_path / "ix"), "--reuse-from", "store"]) == 0
    assert attempts == []
    run = tmp_path / "w" / "corpus" / "run"
    hyde = [orjson.loads(x) for x in (run / "stage1_hyde.jsonl").read_bytes().splitlines()]
    ev = [orjson.loads(x) for x in (run / "stage2_evidence.jsonl").read_bytes().splitlines()]
    assert [h["extra"].get("reused_from") for h in hyde] == [str((tmp_path / "w" / "store" / "run").resolve())]
    assert [e["extra"].get("reused_from") for e in ev] == [None]
    state = orjson.loads((run / "run_state.json").read_bytes())["fingerprint"]
    assert state["store"] == {"3": CorpusIndex(tmp_path / "ix").fingerprint}
    ix = CorpusIndex(tmp_path / "ix")
    for q in ev[0]["record"]["queries"]:
        for s in q["snippets"]:  # a corpus document: its position is a unit of the index
            c = s["chunk"]
            assert ix.unit_text(c["doc_position"])[c["start"]:c["end"]] == c["text"]
    res = orjson.loads((tmp_path / "res" / "quality_e2e_corpus.json").read_bytes())
    assert res["evidence_source"]["kind"] == "corpus index" and "corpus index" in (tmp_path / "res" / "quality_e2e_corpus.md").read_text()
