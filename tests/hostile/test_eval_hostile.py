"""Hostile inputs and ``--out`` contents that made ``eval`` crash with a traceback, hang, or
write outside ``--out`` (audit of the eval command):

- a PRED or GOLD file name with a byte that is not UTF-8: ``metrics.json`` could not hold
  the name, a ``TypeError`` after all the scoring;
- a CSV with a quote left open at the end, which the csv module reads as a field running to
  the end of the file: ``pandas.errors.ParserError`` from the official-rows check on a
  submission, and a gold CSV's last claim silently left out of the score;
- the Ev2R judge cache inside ``--out`` as a symbolic link (answers written wherever it
  points) or a FIFO (a traceback when the first answer was stored); an entry of the cache
  that is a symbolic link (an "answer" read from a file outside the cache), or that sits in
  a linked sub-folder (written outside it).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from sanctuary_local.cli import main as cli_main
from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.ev2r import JudgeCache
from sanctuary_local.io.leaderboard import check_official_rows

EVI = '"Who built it?\t\t\nGustave Eiffel built it.\t\t\n\n"'


def _csv(path: Path, split: str, ids: range = range(3), tail: str = "") -> Path:
    rows = "".join(f"{i},Claim {i}.,{EVI},Refuted,{split}\r\n" for i in ids)
    path.write_text("id,claim,evi,label,split\r\n" + rows + tail, "utf-8")
    return path


def _wordnet() -> None:
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")


def _one_error_line(capsys: pytest.CaptureFixture[str], *names: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert all(n in lines[0] for n in names), lines[0]
    return lines[0]


def test_a_file_name_that_is_not_utf8_is_written_escaped(tmp_path: Path) -> None:
    _wordnet()
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/pred\xff.csv"))
    _csv(odd, "pred", range(1, 3))
    gold = _csv(tmp_path / "gold.csv", "gold")
    out = Path(os.fsdecode(bytes(tmp_path) + b"/out\xfe"))
    assert cli_main(["eval", "--pred", str(odd), "--gold", str(gold), "--out", str(out), "--workers", "1",
                     "--claims-range", "1:3"]) == 0
    inputs = json.loads((out / "metrics.json").read_bytes())["inputs"]
    assert inputs["pred"].endswith("pred\\xff.csv") and inputs["official_pair"]["solution"].endswith("out\\xfe/official_solution.csv")


def test_a_quote_never_closed_is_one_error_line_not_a_crash_or_a_lost_claim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The csv module (lenient) read a quote left open at the end as a field running to the
    end of the file: pandas (the official-rows check) then crashed on the submission, and in
    a gold CSV the last claim's split became "gold\r\n", so the claim vanished from the score."""
    from sanctuary_local.io.leaderboard import _pandas_problems

    unclosed = f'2,Claim 2.,{EVI},Refuted,"pred\r\n'
    pred = _csv(tmp_path / "pred.csv", "pred", range(2), tail=unclosed)
    (problem,) = check_official_rows(pred)
    assert problem.startswith(f"{pred}:") and "a quote opened in this record is never closed" in problem
    gold = _csv(tmp_path / "gold.csv", "gold")
    assert cli_main(["eval", "--pred", str(pred), "--gold", str(gold), "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    _one_error_line(capsys, f"{pred}:", "never closed")
    lost = _csv(tmp_path / "lost.csv", "gold", range(2), tail=unclosed.replace("pred", "gold"))
    assert cli_main(["eval", "--pred", str(gold), "--gold", str(lost), "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    _one_error_line(capsys, f"{lost}:", "never closed")
    assert not (tmp_path / "o").exists()
    # and should pandas still stop on a file the csv module reads, that is a problem line too
    (line,) = _pandas_problems(pred, pred.read_text("utf-8"), 3)
    assert "pandas (the scorer's reader) cannot read it" in line and "\n" not in line


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_the_judge_cache_in_out_is_not_a_link_or_a_fifo(tmp_path: Path, planted: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    cache = out / "ev2r_cache"
    if planted == "symlink":
        cache.symlink_to(elsewhere)
    else:
        os.mkfifo(cache)
    gold = _csv(tmp_path / "gold.csv", "gold")
    # refused before scoring, so before any judge model is loaded
    assert cli_main(["eval", "--pred", str(gold), "--gold", str(gold), "--out", str(out), "--judge", "cpu",
                     "--workers", "1"]) == 2
    _one_error_line(capsys, str(cache))
    assert sorted(p.name for p in out.iterdir()) == ["ev2r_cache"] and list(elsewhere.iterdir()) == []


def test_judge_cache_entries_never_block_or_leave_the_cache(tmp_path: Path) -> None:
    cache = JudgeCache(tmp_path / "cache")
    key = "ab" + "0" * 62
    cache.put(key, "judge", "answer")
    assert cache.get(key) == "answer"
    entry = tmp_path / "cache" / "ab" / f"{key}.json"
    entry.unlink()
    os.mkfifo(entry)
    got: list[str | None] = []
    reader = threading.Thread(target=lambda: got.append(cache.get(key)), daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():  # unblock the stuck reader before failing
        os.close(os.open(entry, os.O_WRONLY | os.O_NONBLOCK))
    assert got == [None], "a FIFO in the cache blocked the judge"
    cache.put(key, "judge", "again")  # the FIFO is replaced, not written through
    assert cache.get(key) == "again" and entry.is_file()
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"judge": "judge", "text": "planted"}), "utf-8")
    entry.unlink()
    entry.symlink_to(planted)
    assert cache.get(key) is None  # asked again, not read from outside the cache
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache" / "cd").symlink_to(elsewhere)
    with pytest.raises(UserError, match="is a symbolic link; refusing to write the judge cache through it"):
        cache.put("cd" + "1" * 62, "judge", "x")
    assert list(elsewhere.iterdir()) == []


def test_ids_from_a_file_reach_the_console_without_control_characters(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A prediction id holding an escape sequence was printed as it is in the 'unknown ids'
    warning: a hostile file recoloured the terminal, or retitled its window."""
    _wordnet()
    pred = _csv(tmp_path / "pred.csv", "pred", range(2), tail=f'"9\x1b[31mRED\x1b]0;pwned\x07",c,{EVI},Refuted,pred\r\n')
    assert cli_main(["eval", "--pred", str(pred), "--gold", str(_csv(tmp_path / "gold.csv", "gold")),
                     "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err and "\x07" not in printed.out + printed.err
    assert "9\\x1b[31mRED\\x1b]0;pwned\\x07" in printed.out


def test_a_run_directory_whose_predictions_json_is_a_fifo_is_named(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "predictions.json")
    assert cli_main(["eval", "--pred", str(run), "--gold", str(_csv(tmp_path / "gold.csv", "gold")), "--workers", "1"]) == 2
    assert "FIFO" in _one_error_line(capsys, str(run / "predictions.json"))


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_judge_limit_below_one_is_refused(tmp_path: Path, limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--judge-limit -1 judged every claim but the last (a slice from the end), 0 none."""
    gold = _csv(tmp_path / "gold.csv", "gold")
    assert cli_main(["eval", "--pred", str(gold), "--gold", str(gold), "--out", str(tmp_path / "o"),
                     "--judge-limit", limit]) == 2
    _one_error_line(capsys, "--judge-limit must be >= 1")
    assert not (tmp_path / "o").exists()
