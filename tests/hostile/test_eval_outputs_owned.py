"""``eval --out DIR`` replaces only the files an earlier ``eval`` wrote there.

Audit finding: ``eval`` wrote ``metrics.json``, ``per_claim.csv``, ``confusion.png`` (and
for a subset ``official_submission.csv`` / ``official_solution.csv``) over whatever held
those names in ``--out``: the user's own files, after minutes of scoring. It now records
what it wrote in ``eval_manifest.json`` and refuses, before scoring, in one line naming
the file, anything else at one of its names: a user's file, a file changed since, a
symbolic link, a FIFO (without blocking on it), a directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sanctuary_local.cli import main as cli_main
from sanctuary_local.errors import UserError

MINE = "the user's own file\n"


def _inputs(tmp_path: Path, ids: range = range(3)) -> tuple[Path, Path]:
    """A gold CSV with claims 0..4 and predictions for ``ids`` (each with its gold evidence)."""
    evi = '"Who built it?\t\t\nGustave Eiffel built it.\t\t\n\n"'
    rows = "".join(f"{i},Claim {i}.,{evi},Refuted,gold\r\n" for i in range(5))
    gold = tmp_path / "gold.csv"
    gold.write_text("id,claim,evi,label,split\r\n" + rows, "utf-8")
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps([{"claim_id": i, "claim": f"Claim {i}.", "pred_label": "Refuted",
                                 "evidence": [{"question": "Who built it?", "answer": "Gustave Eiffel built it."}]}
                                for i in ids]), "utf-8")
    return pred, gold


def _eval(pred: Path, gold: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--pred", str(pred), "--gold", str(gold), "--out", str(out), "--workers", "1", *extra]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], name: str) -> str:
    rc = cli_main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], err
    return lines[0]


def _wordnet() -> None:
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")


@pytest.mark.parametrize("name", ["metrics.json", "per_claim.csv", "confusion.png"])
def test_the_users_own_file_is_refused_before_scoring(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    pred, gold = _inputs(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text(MINE, "utf-8")
    line = _refused(_eval(pred, gold, out), capsys, str(out / name))
    assert "was not written by `eval`" in line
    assert (out / name).read_text("utf-8") == MINE and sorted(p.name for p in out.iterdir()) == [name]


def test_an_earlier_evals_files_are_replaced_but_not_once_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _wordnet()
    pred, gold = _inputs(tmp_path)
    out = tmp_path / "eval"
    assert cli_main(_eval(pred, gold, out)) == 0
    assert cli_main(_eval(pred, gold, out)) == 0  # its own files: replaced
    assert sorted(p.name for p in out.iterdir()) == ["confusion.png", "eval_manifest.json", "metrics.json", "per_claim.csv"]
    (out / "per_claim.csv").write_text("edited by hand\n", "utf-8")
    _refused(_eval(pred, gold, out), capsys, str(out / "per_claim.csv"))
    assert (out / "per_claim.csv").read_text("utf-8") == "edited by hand\n"


def test_a_subset_pair_over_the_users_file_is_refused_and_left_alone_when_not_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _wordnet()
    pred, gold = _inputs(tmp_path, range(1, 4))  # ids 1..3: a subset, the official pair is written
    out = tmp_path / "eval"
    out.mkdir()
    (out / "official_solution.csv").write_text(MINE, "utf-8")
    _refused(_eval(pred, gold, out, "--claims-range", "1:4"), capsys, str(out / "official_solution.csv"))
    assert (out / "official_solution.csv").read_text("utf-8") == MINE and not (out / "metrics.json").exists()
    (out / "official_solution.csv").unlink()
    assert cli_main(_eval(pred, gold, out, "--claims-range", "1:4")) == 0
    assert cli_main(_eval(pred, gold, out, "--claims-range", "1:4")) == 0  # the pair it wrote: replaced
    (tmp_path / "whole").mkdir()
    whole_pred, _ = _inputs(tmp_path / "whole", range(5))
    other = tmp_path / "other"
    other.mkdir()
    (other / "official_submission.csv").write_text(MINE, "utf-8")
    assert cli_main(_eval(whole_pred, gold, other)) == 0  # ids 0…n-1: no pair, the user's file is not in the way
    assert (other / "official_submission.csv").read_text("utf-8") == MINE


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo", "manifest-fifo", "manifest-not-ours"])
def test_links_fifos_and_folders_at_its_names_are_refused(tmp_path: Path, kind: str) -> None:
    pred, gold = _inputs(tmp_path)
    out = tmp_path / "eval"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text(MINE, "utf-8")
    name = {"symlink": "metrics.json", "directory": "confusion.png", "fifo": "per_claim.csv"}.get(kind, "eval_manifest.json")
    if kind == "symlink":
        (out / name).symlink_to(victim)
    elif kind == "directory":
        (out / name).mkdir()
    elif kind == "manifest-not-ours":
        (out / name).write_text(json.dumps({"written_by": "someone", "files": {}}), "utf-8")
    else:
        os.mkfifo(out / name)
    proc = subprocess.run([sys.executable, "-m", "sanctuary_local.cli", *_eval(pred, gold, out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and str(out / name) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and victim.read_text("utf-8") == MINE
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_the_manifest_records_exactly_what_was_written(tmp_path: Path) -> None:
    from sanctuary_local.io.owned_outputs import OwnedOutputs

    owned = OwnedOutputs(tmp_path, "eval")
    owned.write({"a.csv": b"one", "b.png": b"two"})
    owned.write({"a.csv": b"three"})  # b.png is not written again: still recorded as ours
    recorded = json.loads((tmp_path / "eval_manifest.json").read_text("utf-8"))
    assert recorded["written_by"] == "sanctuary-local eval" and set(recorded["files"]) == {"a.csv", "b.png"}
    assert [len(v) for v in recorded["files"].values()] == [1, 1]
    owned.check(["a.csv", "b.png", "c.json"])  # absent names are free
    (tmp_path / "b.png").write_bytes(b"changed")
    with pytest.raises(UserError, match=r"b\.png: was not written by `eval`"):
        owned.write({"b.png": b"four"})
    assert (tmp_path / "b.png").read_bytes() == b"changed"


def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An earlier eval's official pair, scored again on a sub-range into the same folder:
    the new pair would have replaced the very files being read (the manifest says they are ours)."""
    _wordnet()
    pred, gold = _inputs(tmp_path, range(1, 4))
    out = tmp_path / "eval"
    assert cli_main(_eval(pred, gold, out, "--claims-range", "1:4")) == 0
    sub, sol = out / "official_submission.csv", out / "official_solution.csv"
    before = sub.read_bytes()
    line = _refused(_eval(sub, sol, out, "--claims-range", "1:3"), capsys, str(sub))
    assert "it is the input" in line and sub.read_bytes() == before


def test_outputs_of_an_eval_from_before_the_manifest_are_recognised_by_content(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run folder evaluated before eval_manifest.json existed is evaluated again (it holds
    the same files, without the manifest); a user's own files beside them are still refused."""
    _wordnet()
    pred, gold = _inputs(tmp_path, range(1, 4))
    out = tmp_path / "eval"
    assert cli_main(_eval(pred, gold, out, "--claims-range", "1:4")) == 0
    (out / "eval_manifest.json").unlink()  # what an eval of before left
    assert cli_main(_eval(pred, gold, out, "--claims-range", "1:4")) == 0
    assert (out / "eval_manifest.json").is_file()
    (out / "eval_manifest.json").unlink()
    (out / "per_claim.csv").write_text(MINE, "utf-8")  # not eval's header: the user's
    _refused(_eval(pred, gold, out, "--claims-range", "1:4"), capsys, str(out / "per_claim.csv"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "confusion.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"the user's chart")  # a PNG, but no eval metrics.json
    (mine / "metrics.json").write_text(json.dumps({"inputs": {}, "accuracy": 1}), "utf-8")  # JSON, not eval's
    _refused(_eval(pred, gold, mine), capsys, str(mine / "metrics.json"))
    (mine / "metrics.json").unlink()
    _refused(_eval(pred, gold, mine), capsys, str(mine / "confusion.png"))
    assert (mine / "confusion.png").read_bytes().endswith(b"the user's chart")
