"""Stage 3 on any system's evidence (issue 66): ``verdict-model eval --evidence``, ``train
--evidence`` with a leaderboard CSV, ``run --evidence-from``, and files made for other claims.

Real components: the packaged TF-IDF verdict model, the real CLI, the project's own CSV and
predictions writers; the FEVER-8 converter's reading is reproduced as its script does it.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.leaderboard import LeaderboardRow, check_official_rows, format_evi, write_leaderboard_csv
from sanctuary_local.records import LABELS

from tests.support.verdict_model_support import error_line

REPO = Path(__file__).resolve().parents[2]
CLAIMS = REPO / "examples" / "claims.json"
MODEL = "packaged:verdict-tfidf"
#: Another system's evidence for the four example claims: real-looking snippets, its own labels.
PAIRS = [
    [("Where does the claim come from?", "A viral post shared on Facebook in 2020 made the claim."),
     ("Is there any record of it?", "Officials said there is no record of such an event; the image was doctored.")],
    [("What do the official figures say?", "The figures published by the ministry confirm the number.")],
    [("Did anyone report on it?", "No answer could be found.")],
    [("What happened?", "Some reports say it happened, others deny it."), ("When?", "In March, according to one source.")],
]
OWN_LABELS = ["Refuted", "Refuted", "Refuted", "Supported"]


def _csv(path: Path, claims: list | None = None, ids: list[int] | None = None) -> Path:
    claims = claims or [c.text for c in read_claims(CLAIMS)]
    ids = list(range(len(PAIRS))) if ids is None else ids
    rows = [LeaderboardRow(str(i), claims[k], format_evi(PAIRS[k]), OWN_LABELS[k], "pred") for k, i in enumerate(ids)]
    write_leaderboard_csv(rows, path)
    return path


def test_eval_on_a_leaderboard_csv_scores_its_evidence_and_its_labels(tmp_path: Path) -> None:
    from sanctuary_local.verdict_model.external import external_inputs

    evidence = _csv(tmp_path / "system.csv")
    claims = read_claims(CLAIMS)
    xs, _ = external_inputs(claims, CLAIMS, evidence)
    assert [[(p.question, p.answer) for p in x.pairs] for x in xs] == PAIRS  # the file's pairs, in order
    assert [x.label for x in xs] == [c.gold_label for c in claims]  # gold labels from --claims
    out = tmp_path / "m.json"
    assert main(["verdict-model", "eval", "--claims", str(CLAIMS), "--evidence", str(evidence), "--model", MODEL,
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    own = result["others"]["system.csv"]  # the file's own labels, scored beside
    assert own["accuracy"] == 0.25 and own["n"] == 4  # only claim 1 is Refuted in gold
    assert result["model"]["n"] == 4 and result["evidence"] == str(evidence)
    gold = tmp_path / "g.json"
    assert main(["verdict-model", "eval", "--claims", str(CLAIMS), "--model", MODEL, "--json", str(gold)]) == 0
    assert "others" not in json.loads(gold.read_text())


def test_eval_reads_a_predictions_json_and_a_range(tmp_path: Path) -> None:
    evidence = tmp_path / "p.json"
    claims = read_claims(CLAIMS)
    evidence.write_text(json.dumps([
        {"claim_id": i, "claim": claims[i].text, "pred_label": OWN_LABELS[i],
         "evidence": [{"question": q, "answer": a, "url": "https://example.org/x"} for q, a in PAIRS[i]]}
        for i in (1, 2)]))
    out = tmp_path / "m.json"
    assert main(["verdict-model", "eval", "--claims", str(CLAIMS), "--evidence", str(evidence), "--indices", "1:3",
                 "--model", MODEL, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["others"]["p.json"]["n"] == 2


@pytest.mark.parametrize(("change", "said"), [
    ("text", "id 2: its claim"),
    ("past", "id 7 is past the 4 claims of"),
    ("missing", "has no row for claim 3 of"),
])
def test_a_file_for_other_claims_is_one_line_and_nothing_is_written(tmp_path: Path, change: str, said: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    texts = [c.text for c in read_claims(CLAIMS)]
    if change == "text":
        texts[2] = "Another claim altogether."
    ids = {"past": [0, 1, 2, 7], "missing": [0, 1, 2]}.get(change)
    evidence = _csv(tmp_path / "bad.csv", texts, ids)  # "missing": the first three claims only
    out = tmp_path / "m.json"
    line = error_line(capsys, ["verdict-model", "eval", "--claims", str(CLAIMS), "--evidence", str(evidence),
                               "--model", MODEL, "--json", str(out)])
    assert said in line and str(evidence) in line, line
    assert not out.exists()
    run_out = tmp_path / "run"
    line = error_line(capsys, ["run", "--claims", str(CLAIMS), "--evidence-from", str(evidence), "--out", str(run_out),
                               "--quiet"])
    assert said in line, line
    assert not run_out.exists()


def _official_converter(predictions: Path) -> str:
    """The FEVER-8 converter's reading of a predictions JSON: ``json.load``, then per entry its
    ``claim``, ``pred_label`` and each evidence item's ``question`` and ``answer``; the CSV it
    writes (``id`` the position, as its script does)."""
    out = io.StringIO(newline="")
    w = csv.writer(out)
    w.writerow(["id", "claim", "evi", "label", "split"])
    for i, entry in enumerate(json.loads(predictions.read_text(encoding="utf-8"))):
        evi = "".join(e["question"] + "\t\t\n" + e["answer"] + "\t\t\n\n" for e in entry["evidence"])
        w.writerow([i, entry["claim"], evi, entry["pred_label"], "pred"])
    return out.getvalue()


def test_run_evidence_from_gives_the_usual_outputs_and_the_converter_accepts_them(tmp_path: Path) -> None:
    evidence = _csv(tmp_path / "system.csv")
    out = tmp_path / "run"
    rc = main(["run", "--claims", str(CLAIMS), "--evidence-from", str(evidence), "--out", str(out), "--quiet"])
    assert rc in (0, 3)
    preds = json.loads((out / "predictions.json").read_text())
    assert len(preds) == 4
    for k, p in enumerate(preds):
        assert [(e["question"], e["answer"]) for e in p["evidence"]] == PAIRS[k]  # the file's evidence, as given
        assert p["pred_label"] in LABELS and "evidence_from" in p["flags"]
        probs = p["label_probabilities"]  # the extra fields: probabilities (and, with a rule, confident)
        assert list(probs) == list(LABELS) and abs(sum(probs.values()) - 1) < 1e-3
    for name in ("submission.csv", "stage1_hyde.jsonl", "stage2_evidence.jsonl", "stage3_predictions.jsonl", "timings.json",
                 "manifest.json"):
        assert (out / name).is_file(), name
    converted = tmp_path / "converted.csv"
    converted.write_text(_official_converter(out / "predictions.json"), encoding="utf-8")
    assert check_official_rows(converted) == []
    assert check_official_rows(out / "submission.csv") == []
    assert main(["convert", str(out / "predictions.json"), "--to", str(tmp_path / "c.csv")]) == 0
    assert main(["report", str(out)]) == 0
    again = main(["run", "--claims", str(CLAIMS), "--evidence-from", str(evidence), "--out", str(out), "--quiet"])
    assert again == rc  # resumed: nothing to do, the same outputs
    assert json.loads((out / "predictions.json").read_text()) == preds
