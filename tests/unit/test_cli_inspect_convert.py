"""`sanctuary-local inspect` and `convert`, in process and once as a real subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main


def test_inspect_examples(examples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    rc = main(["inspect", "--claims", str(examples_dir / "claims.json"), "--store", str(examples_dir / "store"), "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "documents per claim" in text and "malformed" in text
    report = orjson.loads(out.read_bytes())
    assert report["n_claims"] == 4 and report["missing"] == [] and report["n_problems"] == 0
    assert report["empty_documents"] == 4 and report["n_documents"] == 64


def test_inspect_surrogate_with_missing_and_bad_lines(surrogate_store: Path, dev_claims_path: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(surrogate_store, store)
    (store / "3.json").unlink()
    with open(store / "5.json", "ab") as f:
        f.write(b'{"url": "broken\n')
    out = tmp_path / "r.json"
    assert main(["inspect", "--claims", str(dev_claims_path), "--store", str(store), "--json", str(out)]) == 0
    report = orjson.loads(out.read_bytes())
    assert report["n_claims"] == 250 and report["n_store_files"] == 19
    assert 3 in report["missing"] and len(report["missing"]) == 231
    assert report["n_problems"] == 1 and report["problems"][0].startswith(f"{store / '5.json'}:")
    assert report["docs_per_claim"]["min"] > 0


def test_inspect_zip_without_claims(surrogate_store: Path, tmp_path: Path) -> None:
    zpath = tmp_path / "store.zip"
    shutil.make_archive(str(tmp_path / "store"), "zip", root_dir=surrogate_store.parent, base_dir=surrogate_store.name)
    out = tmp_path / "r.json"
    assert main(["inspect", "--store", str(zpath), "--json", str(out)]) == 0
    assert orjson.loads(out.read_bytes())["n_store_files"] == 20


def test_convert_all_directions(examples_dir: Path, tmp_path: Path) -> None:
    solution = tmp_path / "solution.csv"
    assert main(["convert", str(examples_dir / "claims.json"), "--to", str(solution)]) == 0
    assert solution.read_bytes().startswith(b"id,claim,evi,label,split\r\n0,")
    preds = tmp_path / "preds.json"
    assert main(["convert", str(solution), "--to", str(preds)]) == 0
    assert [p["pred_label"] for p in orjson.loads(preds.read_bytes())][:2] == ["Supported", "Refuted"]
    back = tmp_path / "back.csv"
    assert main(["convert", str(preds), "--to", str(back)]) == 0
    assert back.read_bytes() == solution.read_bytes()


def test_convert_baseline_csv_round_trip(shared_dir: Path, tmp_path: Path) -> None:
    src = shared_dir / "data" / "fever8_baseline" / "submission_part_a.csv"
    assert main(["convert", str(src), "--to", str(tmp_path / "p.json")]) == 0
    assert main(["convert", str(tmp_path / "p.json"), "--to", str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_bytes() == src.read_bytes()


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"", "in.json", "is empty"),
        (b"{}", "in.json", "expected a JSON array"),
        (b'[{"claim": "\xff"}]', "in.json", "not UTF-8"),
        (b'[{"claim": "a"}, {"speaker": "b"}]', "in.json", "claim 1"),
        (b'[{"claim": "a", "pred_label": "Maybe"}]', "in.json", "unknown pred_label"),
        (b"id,claim,evi,label,split\r\n0,c,,Nope,pred\r\n", "in.csv", "unknown label"),
        (b"a,b\r\n", "in.csv", "expected header"),
    ],
)
def test_convert_bad_input_exit_2_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, name: str, message: str
) -> None:
    src = tmp_path / name
    src.write_bytes(content)
    dst = tmp_path / "out" / ("o.json" if name.endswith(".csv") else "o.csv")
    assert main(["convert", str(src), "--to", str(dst)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not dst.exists()
    if dst.parent.exists():  # not even a temp file is left behind
        assert list(dst.parent.iterdir()) == []


def test_convert_unsupported_and_unknown_suffix(examples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(examples_dir / "claims.json"), "--to", str(tmp_path / "x.json")]) == 2
    assert "cannot convert claims" in capsys.readouterr().err
    assert main(["convert", str(examples_dir / "claims.json"), "--to", str(tmp_path / "x.txt")]) == 2
    assert "--to-format" in capsys.readouterr().err
    assert main(["convert", str(examples_dir / "claims.json"), "--to", str(tmp_path / "x.txt"), "--to-format", "leaderboard"]) == 0


def test_inspect_bad_store_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--store", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err


def test_console_script_subprocess(examples_dir: Path, tmp_path: Path) -> None:
    """The installed console script, as a user runs it (falls back to `python -m`)."""
    exe = shutil.which("sanctuary-local", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "sanctuary_local.cli"]
    res = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "sanctuary-local" in res.stdout
    out = tmp_path / "s.csv"
    res = subprocess.run([*cmd, "convert", str(examples_dir / "claims.json"), "--to", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes().count(b",gold\r\n") == 4
    res = subprocess.run([*cmd, "convert", str(tmp_path / "none.json"), "--to", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "not found" in res.stderr and "Traceback" not in res.stderr


def test_convert_nul_and_cr_reach_the_scorer_unchanged(examples_dir: Path, tmp_path: Path) -> None:
    """NUL and CR in a claim or an answer are written as they are, and that is right: the
    csv writer quotes a field holding CR, and pandas (the official scorer's reader) and
    the csv module both read the exact text back. Nothing to strip."""
    pd = pytest.importorskip("pandas")
    claims = orjson.loads((examples_dir / "claims.json").read_bytes())
    claims[0]["claim"] = "A NUL \x00 and a CR \r inside, and a CRLF \r\n too"
    claims[0]["questions"][0]["answers"][0]["answer"] = "an answer\rwith a CR and \x00 a NUL"
    src = tmp_path / "claims.json"
    src.write_bytes(orjson.dumps(claims))
    solution = tmp_path / "solution.csv"
    assert main(["convert", str(src), "--to", str(solution)]) == 0
    from sanctuary_local.io.leaderboard import check_official_rows, read_leaderboard_csv

    rows = read_leaderboard_csv(solution)
    frame = pd.read_csv(solution)
    assert len(frame) == len(rows) == len(claims) and check_official_rows(solution) == []
    assert frame["claim"].iloc[0] == rows[0].claim == claims[0]["claim"]
    assert frame["evi"].iloc[0] == rows[0].evi and "an answer\rwith a CR and \x00 a NUL" in rows[0].evi
