"""The official outputs are always valid (issue 11, parts 2-5).

Every prediction carries at least one question-answer pair (an empty ``evi`` cell
crashes the official scorer), at most ``MAX_EVIDENCE`` pairs go out (the full ranking
stays in ``evidence_all``), ids follow the claims file (so a subset run scores against
the matching gold rows) and emitted text has no tab or newline. The stage-3 LLM is a
scripted text (``ScriptedBackend``); everything else is the real code that ``run`` uses.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions, select_range
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.leaderboard import (
    HEADER, check_official_rows, leaderboard_csv_text, read_leaderboard_csv, write_leaderboard_csv,
)
from sanctuary_local.io.predictions import (
    MAX_EVIDENCE, NO_ANSWER, predictions_to_leaderboard, prediction_to_official, read_predictions_json,
    write_predictions_json,
)
from sanctuary_local.flag_help import degraded_reasons
from sanctuary_local.run.prepare import select_claims
from sanctuary_local.records import (
    Chunk, Claim, ClaimEvidence, EvidenceSnippet, HydeResult, Prediction, Query, QueryEvidence,
)
from sanctuary_local.stages.verdict.line import run_verdict
from tests.unit.test_hyde import ScriptedBackend

DOC = "Intro line.\nThe moon\tis rock,\n\n  NASA says.\nApollo brought back 382 kg."
MOON = (DOC.index("The moon"), DOC.index("Apollo") - 1)  # a span with a tab, newlines and a double space
VERDICT = "Reasoning:\n1. The evidence says otherwise.\nLabel: Refuted"


def _snippet(claim: int, start: int, end: int, score: float) -> EvidenceSnippet:
    return EvidenceSnippet(Chunk(claim, 0, "https://nasa.example/moon", start, end, DOC[start:end]), score)


def _queries(claim: int, n: int) -> tuple[Query, ...]:
    return tuple(Query(claim, i, f"Question {i}\tabout the\nmoon?") for i in range(n))


def _predict(claims: list[Claim], evidence: list[ClaimEvidence]) -> list[Prediction]:
    hyde = [HydeResult(c.index, "Refuted", tuple(q.query for q in ev.queries)) for c, ev in zip(claims, evidence)]
    return run_verdict(claims, hyde, evidence, ScriptedBackend([VERDICT] * len(claims)), VerdictConfig())


def _edge_cases() -> tuple[list[Claim], list[ClaimEvidence]]:
    """One claim per way of ending up with little or no evidence, and one with a lot."""
    claims = [Claim(index=i, text=f"Claim {i}: the moon is cheese.") for i in range(6)]
    many = tuple(QueryEvidence(q, (_snippet(5, *MOON, 0.9 - q.number / 100), _snippet(5, 0, 11, 0.5))) for q in _queries(5, 12))
    evidence = [
        ClaimEvidence(0, tuple(QueryEvidence(q) for q in _queries(0, 2)), ("store_missing",)),
        ClaimEvidence(1, tuple(QueryEvidence(q) for q in _queries(1, 2)), ("retrieval_error: boom",)),
        ClaimEvidence(2, tuple(QueryEvidence(q) for q in _queries(2, 2)), ("no_snippets:q0", "no_snippets:q1"),
                      below_threshold=QueryEvidence(_queries(2, 2)[1], (_snippet(2, *MOON, 0.21),))),
        ClaimEvidence(3, (), ("no_queries",)),
        ClaimEvidence(4, (QueryEvidence(_queries(4, 1)[0], (_snippet(4, *MOON, 0.8),)),)),
        ClaimEvidence(5, many),
    ]
    return claims, evidence


def test_every_prediction_has_a_valid_row(tmp_path: Path) -> None:
    claims, evidence = _edge_cases()
    preds = _predict(claims, evidence)
    path = write_leaderboard_csv(predictions_to_leaderboard(preds), tmp_path / "submission.csv")
    assert check_official_rows(path, max_pairs=MAX_EVIDENCE) == []
    rows = read_leaderboard_csv(path)
    assert [len(r.qa_pairs) for r in rows] == [1, 1, 1, 1, 1, MAX_EVIDENCE]
    assert rows[0].qa_pairs == [("Question 0 about the moon?", NO_ANSWER)]  # first question, official marker
    assert rows[3].qa_pairs == [("Claim 3: the moon is cheese.", NO_ANSWER)]  # no question at all: the claim


def test_placeholder_flags_and_degrading() -> None:
    claims, evidence = _edge_cases()
    p = {x.claim_index: x for x in _predict(claims, evidence)}
    assert "evidence_placeholder:no_answer" in p[0].flags and p[0].evidence_all == ()
    assert degraded_reasons(p[0].flags) == ["store_missing"]  # the cause degrades, the placeholder does not
    assert degraded_reasons(p[1].flags) == ["retrieval_error"]
    below = p[2].evidence[0]
    assert "evidence_placeholder:below_threshold" in p[2].flags and degraded_reasons(p[2].flags) == []
    assert (below.question, below.score, below.scraped_text) == ("Question 1 about the moon?", 0.21, DOC[MOON[0] : MOON[1]])
    assert not any(f.startswith("evidence_placeholder") for f in (*p[4].flags, *p[5].flags))
    prompt = run_verdict_prompt(claims[2], evidence[2])  # the verdict LLM never sees the below-threshold snippet
    assert "The moon is rock" not in prompt and prompt.count("(no evidence retrieved)") == 2


def run_verdict_prompt(claim: Claim, ev: ClaimEvidence) -> str:
    backend = ScriptedBackend([VERDICT])
    run_verdict([claim], [HydeResult(claim.index, None, ())], [ev], backend, VerdictConfig())
    return backend.calls[0][0].messages[0].content


def test_at_most_ten_pairs_full_ranking_kept(tmp_path: Path) -> None:
    claims, evidence = _edge_cases()
    p = _predict(claims[5:], evidence[5:])[0]
    assert len(p.evidence_all) == 24 and p.evidence == p.evidence_all[:MAX_EVIDENCE]
    assert [e.score for e in p.evidence] == [0.9 - i / 100 for i in range(10)]  # every question's best snippet first
    path = write_predictions_json([p], tmp_path / "predictions.json")
    (entry,) = orjson.loads(path.read_bytes())
    assert len(entry["evidence"]) == MAX_EVIDENCE and len(entry["evidence_all"]) == 24
    assert read_predictions_json(path) == [p]
    del entry["evidence_all"]  # files without the key still read
    path.write_bytes(orjson.dumps([entry]))
    (back,) = read_predictions_json(path)
    assert back.evidence == p.evidence and back.evidence_all == ()


def test_whitespace_collapsed_verbatim_text_kept() -> None:
    claims, evidence = _edge_cases()
    p = _predict(claims[4:5], evidence[4:5])[0]
    (e,) = p.evidence
    assert e.question == "Question 0 about the moon?" and e.answer == "The moon is rock, NASA says."
    assert DOC[e.start : e.end] == e.scraped_text == "The moon\tis rock,\n\n  NASA says."
    (row,) = predictions_to_leaderboard([p])
    assert row.evi == "Question 0 about the moon?\t\t\nThe moon is rock, NASA says.\t\t\n\n"


def test_claim_id_is_an_integer_in_json() -> None:
    claims, evidence = _edge_cases()
    p = _predict(claims[:1], evidence[:1])[0]
    assert prediction_to_official(p)["claim_id"] == 0
    named = Prediction(claim_index=3, claim_id="claim-3", claim="c", label="Refuted")
    assert prediction_to_official(named)["claim_id"] == "claim-3"
    assert prediction_to_official(Prediction(claim_index=3, claim_id="007", claim="c", label="Refuted"))["claim_id"] == "007"
    (row,) = predictions_to_leaderboard([named])
    assert row.id == "3"  # the CSV id is the index in the claims file


def test_claim_evidence_below_threshold_round_trip() -> None:
    _, evidence = _edge_cases()
    assert ClaimEvidence.from_dict(json.loads(json.dumps(evidence[2].to_dict()))) == evidence[2]
    assert ClaimEvidence.from_dict(json.loads(json.dumps(evidence[0].to_dict()))) == evidence[0]


# ------------------------------------------------------------------- subset runs


def test_subset_run_ids_match_gold_rows(dev_claims_path: Path, shared_dir: Path, tmp_path: Path) -> None:
    """A ``--claims-range 50:60`` run's rows have ids 50..59; the solution CSV of the same
    range is exactly the official solution's rows 50..59, and eval matches them by id."""
    claims = select_claims(read_claims(dev_claims_path), "50:60", None)
    evidence = [ClaimEvidence(c.index, tuple(QueryEvidence(Query(c.index, 0, q.question)) for q in c.gold_questions[:1]))
                for c in claims]
    run_dir = tmp_path / "run"
    preds = _predict(claims, evidence)
    write_predictions_json(preds, run_dir / "predictions.json")
    submission = write_leaderboard_csv(predictions_to_leaderboard(preds), run_dir / "submission.csv")
    assert [r.id for r in read_leaderboard_csv(submission)] == [str(i) for i in range(50, 60)]
    assert check_official_rows(submission, max_pairs=MAX_EVIDENCE) == []

    solution = tmp_path / "solution.csv"
    assert main(["convert", str(dev_claims_path), "--to", str(solution), "--claims-range", "50:60"]) == 0
    official = read_leaderboard_csv(shared_dir / "data" / "fever8_baseline" / "solution_dev_part_a.csv")
    assert solution.read_bytes() == leaderboard_csv_text(official[50:60]).encode("utf-8")

    gold = select_range(load_gold(dev_claims_path), "50:60")
    data = align(gold, load_predictions(run_dir))
    assert data.missing == [] and data.extra == []
    assert [(g.claim_id, g.claim) for g in data.gold] == [(p.claim_id, p.claim) for p in data.pred]
    assert [g.claim_id for g in data.gold] == [str(i) for i in range(50, 60)]


def test_cli_eval_scores_a_subset_against_the_full_gold_file(dev_claims_path: Path, tmp_path: Path) -> None:
    from sanctuary_local.errors import UserError
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")
    claims = select_claims(read_claims(dev_claims_path), "50:53", None)
    preds = _predict(claims, [ClaimEvidence(c.index) for c in claims])
    write_predictions_json(preds, tmp_path / "run" / "predictions.json")
    run = tmp_path / "run"
    assert main(["eval", "--pred", str(run), "--gold", str(dev_claims_path), "--claims-range", "50:53", "--workers", "1"]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["n_claims"] == 3 and metrics["missing_predictions"]["count"] == 0
    assert metrics["inputs"]["claims_range"] == "50:53"


# ------------------------------------------------------------ the checker itself


def _write(path: Path, rows: list[tuple[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for rid, evi in rows:
            w.writerow((rid, "a claim", evi, "Refuted", "pred"))
    return path


def test_checker_reports_what_the_scorer_would_crash_on(tmp_path: Path) -> None:
    pair = "Q?\t\t\nA.\t\t\n\n"
    path = _write(tmp_path / "bad.csv", [
        ("0", pair), ("1", ""), ("2", "Q?\t\t\nA.\t\t\nB.\t\t\n\n"), ("3", "Q only\t\t\n\n"),
        ("4", pair * 11), ("4", pair), ("x", pair),
    ])
    problems = check_official_rows(path, max_pairs=MAX_EVIDENCE)
    assert not any(p.startswith("row 1 ") for p in problems)
    expected = ["row 2 (id '1'): evi is empty", "row 3 (id '2'): evidence piece 0: 2 question-answer separators",
                "row 4 (id '3'): evidence piece 0: 0 question-answer separators", "row 5 (id '4'): 11 question-answer pairs",
                "row 6 (id '4'): duplicate id", "row 7 (id 'x'): id is not a non-negative integer"]
    for needle in expected:
        assert any(p.startswith(needle) for p in problems), (needle, problems)
    assert check_official_rows(path) == [p for p in problems if "question-answer pairs, more than" not in p]


@pytest.mark.parametrize("name", ["submission_part_a.csv", "solution_dev_part_a.csv"])
def test_checker_accepts_the_official_files(shared_dir: Path, name: str) -> None:
    assert check_official_rows(shared_dir / "data" / "fever8_baseline" / name) == []


def test_checker_reads_like_pandas(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    path = _write(tmp_path / "nan.csv", [("0", "Q?\t\t\nA.\t\t\n\n"), ("1", "")])
    assert pd.isna(pd.read_csv(path)["evi"].iloc[1])
    assert any("pandas reads evi as nan" in p for p in check_official_rows(path))
