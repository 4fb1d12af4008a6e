"""Label metrics (sklearn semantics), input loading/alignment and bad-input messages, CLI outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.inputs import MISSING_LABEL, EvalExample, align, load_gold, load_predictions, normalize_label
from sanctuary_local.evaluation.labels import binary_label_metrics, label_metrics
from sanctuary_local.io.leaderboard import LeaderboardRow, format_evi, write_leaderboard_csv
from sanctuary_local.records import CONFLICTING, NEE, REFUTED, SUPPORTED

S, R, N, C = SUPPORTED, REFUTED, NEE, CONFLICTING


def test_label_metrics_hand_computed() -> None:
    gold = [S, S, R, R, R, N]
    pred = [S, R, R, R, S, R]
    m = label_metrics(gold, pred)
    assert m.accuracy == pytest.approx(3 / 6)
    # S: tp1 fp1 fn1 → P=R=F1=0.5; R: tp2 fp2 fn1 → P=.5 R=2/3 F1=4/7; N: 0; C: absent → 0
    assert m.per_class[S].f1 == pytest.approx(0.5)
    assert m.per_class[R].precision == pytest.approx(0.5)
    assert m.per_class[R].recall == pytest.approx(2 / 3)
    assert m.per_class[R].f1 == pytest.approx(4 / 7)
    assert m.per_class[N].f1 == 0.0 and m.per_class[C].support == 0
    assert m.macro_f1 == pytest.approx((0.5 + 4 / 7) / 4)  # all four labels averaged
    assert m.confusion[1] == (1, 2, 0, 0)
    assert sum(map(sum, m.confusion)) == len(gold)


def test_missing_prediction_is_wrong_in_both_views() -> None:
    m = label_metrics([R, N], [MISSING_LABEL, N])
    assert m.accuracy == 0.5 and m.per_class[R].recall == 0.0
    b = binary_label_metrics([R, S], [MISSING_LABEL, S])
    assert b.accuracy == 0.5 and b.labels == (S, "Not Supported")


def test_normalize_label_variants_and_rejects() -> None:
    assert normalize_label("  not enough   INFO ", "x") == N
    assert normalize_label("Conflicting Evidence/Cherry-picking", "x") == C
    assert normalize_label("SUPPORTS", "x") == S
    with pytest.raises(UserError, match="claim id 7.*'Maybe'"):
        normalize_label("Maybe", "claim id 7")


def _write_csv(path: Path, rows: list[tuple[str, str, list[tuple[str, str]]]], split: str) -> Path:
    return write_leaderboard_csv([LeaderboardRow(i, f"claim {i}", format_evi(p), lbl, split) for i, lbl, p in rows], path)


def test_alignment_missing_and_extra(tmp_path: Path) -> None:
    qa = [("Q?", "A.")]
    gold = load_gold(_write_csv(tmp_path / "gold.csv", [("0", S, qa), ("1", R, qa), ("2", N, qa)], "gold"))
    pred = load_predictions(_write_csv(tmp_path / "pred.csv", [("2", "nei", qa), ("0", S, []), ("9", R, qa)], "pred"))
    data = align(gold, pred)
    assert [p.claim_id for p in data.pred] == ["0", "1", "2"]
    assert data.missing == ["1"] and data.extra == ["9"]
    assert data.pred[1].label == MISSING_LABEL and data.pred[1].qa_pairs == ()
    assert data.pred[2].label == N  # "nei" normalised
    assert any("claim 0" in n and "no evidence" in n for n in data.notes)


def test_bad_inputs_name_the_claim(tmp_path: Path) -> None:
    qa = [("Q?", "A.")]
    gold_csv = _write_csv(tmp_path / "gold.csv", [("0", S, qa)], "gold")
    with pytest.raises(UserError, match="claim id 5.*'Perhaps'"):
        load_predictions(_write_csv(tmp_path / "bad.csv", [("5", "Perhaps", qa)], "pred"))
    with pytest.raises(UserError, match="claim id 0 has no gold evidence"):
        load_gold(_write_csv(tmp_path / "g2.csv", [("0", S, [])], "gold"))
    with pytest.raises(UserError, match="no prediction id matches"):
        align(load_gold(gold_csv), [EvalExample("x", "c", S, qa)])
    with pytest.raises(UserError, match="more than once"):
        align(load_gold(gold_csv), [EvalExample("0", "c", S, qa)] * 2)
    with pytest.raises(UserError, match="without predictions.json"):
        load_predictions(tmp_path)
    bad_json = tmp_path / "p.json"
    bad_json.write_text(json.dumps([{"claim_id": 3, "claim": "c", "pred_label": "Refuted", "evidence": "oops"}]))
    with pytest.raises(UserError, match=r"entry 0: field 'evidence' must be a list"):
        load_predictions(bad_json)


def test_predictions_json_and_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    entries = [{"claim_id": "0", "claim": "c", "pred_label": "Supported", "evidence": [{"question": "Q?", "answer": "A.", "url": "u"}]}]
    (run / "predictions.json").write_text(json.dumps(entries))
    preds = load_predictions(run)
    assert preds == [EvalExample("0", "c", S, (("Q?", "A."),))]


def test_cli_eval_writes_outputs(tmp_path: Path) -> None:
    from sanctuary_local.cli import main
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")
    qa = [("Who won the 2020 election?", "Joe Biden won the 2020 US presidential election.")]
    gold = _write_csv(tmp_path / "gold.csv", [("0", S, qa), ("1", R, qa)], "gold")
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.json").write_text(json.dumps([{"claim_id": "0", "claim": "c", "pred_label": "Supported", "evidence": [{"question": q, "answer": a} for q, a in qa]}]))
    assert main(["eval", "--pred", str(run), "--gold", str(gold), "--workers", "1"]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["labels"]["accuracy"] == 0.5  # claim 1 missing → counted wrong
    assert metrics["missing_predictions"]["ids"] == ["1"]
    assert 0.45 < metrics["meteor"]["qa"] < 0.5  # claim 0 identical (≈1 minus fragmentation penalty), claim 1 empty (0)
    assert metrics["meteor"]["averitec_score"] == 0.5 and metrics["ev2r"] is None
    lines = (run / "per_claim.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[2].startswith("1,Refuted,(missing),0")
    assert (run / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["eval", "--pred", str(tmp_path / "nope.json"), "--gold", str(gold)]) == 2
