"""Subset submissions on the official FEVER-8 scorer (issue 29).

The scorer (``averitec_evaluate.py``'s ``compute``) is reproduced here as far as it
matches rows: pandas reads both CSVs, keeps the ids of the solution's gold split, sorts
by id, pairs row k with row k, and its Ev2R part looks row k up by ``id == k``; each pair
is then scored as the script does (its own splitting of ``evi``, ≤ 10 predicted items,
gold questions de-duplicated for Q-only, Hungarian METEOR, label match, utility > 0.25).
On a real subset submission (the FEVER-8 baseline's rows for claims 50–99) the naive
files misscore, and the pair ``eval``/``convert --gold`` write scores exactly what
``eval`` reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.cli import main
from sanctuary_local.io.leaderboard import read_leaderboard_csv, write_leaderboard_csv
from sanctuary_local.io.official_pair import official_pairs, pairing_problems, renumbered

pd = pytest.importorskip("pandas")


def _official_rows(solution_file: Path, submission_file: Path) -> tuple:
    """``compute``'s row matching, verbatim in effect: (submission frame, solution frame)."""
    solution_df = pd.read_csv(solution_file)
    submission_df = pd.read_csv(submission_file)
    public_ids = solution_df[solution_df.split == "gold"]["id"].values
    sol = solution_df[solution_df["id"].isin(public_ids)].sort_values("id").reset_index(drop=True)
    sub = submission_df[submission_df["id"].isin(public_ids)].sort_values("id").reset_index(drop=True)
    return sub, sol


def _pairs(evi: str) -> list[tuple[str, str]]:
    out = []
    for piece in evi.split("\t\t\n\n"):
        if piece != "":
            q, a = piece.split("\t\t\n")
            out.append((q, a))
    return out


def _official_scores(solution_file: Path, submission_file: Path) -> dict[str, float]:
    """Q-only, Q+A and old AVeriTeC score of the official scorer on these two files."""
    from scipy.optimize import linear_sum_assignment

    from sanctuary_local.evaluation.meteor import pairwise_matrix  # METEOR of every (predicted, gold) string

    def utility(pred: list[str], gold: list[str]) -> float:
        scores = pairwise_matrix(pred, gold)
        rows, cols = linear_sum_assignment(scores, maximize=True)
        return float(scores[rows, cols].sum()) * (1 / float(len(gold)))

    sub, sol = _official_rows(solution_file, submission_file)
    q_only, qa, hits = [], [], []
    for i in range(len(sub)):  # the scorer iterates over the submission's rows
        pred, gold = _pairs(sub.iloc[i]["evi"])[:10], _pairs(sol.iloc[i]["evi"])
        q_only.append(utility([q for q, _ in pred], list(dict.fromkeys(q for q, _ in gold))))
        u = utility([f"{q} {a}" for q, a in pred], [f"{q} {a}" for q, a in gold])
        qa.append(u)
        hits.append(1.0 if u > 0.25 and sub.iloc[i]["label"] == sol.iloc[i]["label"] else 0.0)
    return {"q_only": float(np.mean(q_only)), "qa": float(np.mean(qa)), "averitec": float(np.mean(hits)),
            "accuracy": float(np.mean([sub.iloc[i]["label"] == sol.iloc[i]["label"] for i in range(len(sub))]))}


@pytest.fixture(scope="module")
def subset(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(full official solution file, the baseline's submission rows for claims 50-99)."""
    base = shared_dir / "data" / "fever8_baseline"
    rows = [r for r in read_leaderboard_csv(base / "submission_part_a.csv") if 50 <= int(r.id) < 100]
    path = write_leaderboard_csv(rows, tmp_path_factory.mktemp("subset") / "submission.csv")
    return base / "solution_dev_part_a.csv", path


def test_the_official_matching_misscores_a_subset_as_it_is(subset: tuple[Path, Path]) -> None:
    solution, submission = subset
    sub, sol = _official_rows(solution, submission)
    assert list(sub["id"][:3]) == [50, 51, 52] and list(sol["id"][:3]) == [0, 1, 2]  # claim 50 against gold 0
    gold, pred = read_leaderboard_csv(solution), read_leaderboard_csv(submission)
    view = official_pairs(gold, pred)  # our reproduction agrees with pandas'
    assert [(int(a.id), int(b.id)) for a, b in view.pairs] == list(zip(sub["id"], sol["id"][: len(sub)]))
    assert any("another claim's gold" in p for p in pairing_problems(gold, pred))
    sliced = [r for r in gold if 50 <= int(r.id) < 100]  # a solution slice with the same ids
    view = official_pairs(sliced, pred)
    assert all(a.id == b.id for a, b in view.pairs) and not any(view.ev2r_found)  # METEOR right, Ev2R finds nothing
    assert pairing_problems(renumbered(sliced), renumbered(pred)) == []


def test_eval_and_convert_write_the_pair_the_official_scorer_scores_right(
    subset: tuple[Path, Path], dev_claims_path: Path, tmp_path: Path
) -> None:
    from sanctuary_local.errors import UserError
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")
    solution, submission = subset
    out = tmp_path / "eval"
    assert main(["eval", "--pred", str(submission), "--gold", str(solution), "--claims-range", "50:100",
                 "--out", str(out), "--workers", "1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    pair = metrics["inputs"]["official_pair"]
    assert pair["written"] and pair["claim_ids_of_rows"] == [str(i) for i in range(50, 100)]
    sub_file, sol_file = out / "official_submission.csv", out / "official_solution.csv"
    sub, sol = _official_rows(sol_file, sub_file)
    assert list(sub["id"]) == list(sol["id"]) == list(range(50))  # the Ev2R lookup (id == row) finds every row
    assert list(sub["claim"]) == list(sol["claim"])  # the same claim in every row
    official = _official_scores(sol_file, sub_file)
    assert official["q_only"] == pytest.approx(metrics["meteor"]["q_only"], abs=1e-9)
    assert official["qa"] == pytest.approx(metrics["meteor"]["qa"], abs=1e-9)
    assert official["averitec"] == pytest.approx(metrics["meteor"]["averitec_score"], abs=1e-9)
    assert official["accuracy"] == pytest.approx(metrics["labels"]["accuracy"], abs=1e-9)
    naive = _official_scores(solution, submission)  # the subset as it is, against the full solution
    assert naive["averitec"] < official["averitec"] and naive["qa"] < official["qa"]

    # convert --gold writes the same pair beside a subset submission (gold as the claims JSON)
    preds = tmp_path / "preds.json"
    assert main(["convert", str(submission), "--to", str(preds)]) == 0
    dst = tmp_path / "sub.csv"
    assert main(["convert", str(preds), "--to", str(dst), "--gold", str(dev_claims_path)]) == 0
    assert (tmp_path / "sub_official_submission.csv").read_bytes() == sub_file.read_bytes()
    assert (tmp_path / "sub_official_solution.csv").read_bytes() == sol_file.read_bytes()
    assert [r.id for r in read_leaderboard_csv(dst)] == [str(i) for i in range(50, 100)]  # --to itself is unchanged


def test_no_pair_for_a_whole_file_or_with_missing_predictions(subset: tuple[Path, Path], tmp_path: Path) -> None:
    from sanctuary_local.cli.eval_cmd import official_pair
    from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions, select_range

    solution, submission = subset
    gold = load_gold(solution)
    whole = align(gold[:5], [g for g in gold[:5]])
    info, files = official_pair(whole, tmp_path)
    assert info["written"] is False and files == {}
    partial = align(select_range(gold, "50:101"), load_predictions(submission))  # claim 100 has no prediction
    result, files = official_pair(partial, tmp_path)
    assert not result["written"] and "1 claims have no prediction" in result["reason"] and files == {}


def test_convert_gold_only_with_predictions_to_csv(dev_claims_path: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["convert", str(dev_claims_path), "--to", str(tmp_path / "solution.csv"), "--gold", str(dev_claims_path)])
    assert rc == 2 and "--gold goes with a predictions JSON" in capsys.readouterr().err
    assert not (tmp_path / "solution.csv").exists()
