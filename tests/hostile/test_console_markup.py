"""Ids, notes and paths from input files are printed as text, never as rich markup.

Audit finding: a leaderboard CSV with the id ``[/]`` made ``eval`` die with a traceback
(rich ``MarkupError``, after writing its outputs); a path holding ``[/]`` did the same to
``convert`` and ``inspect``, and ``[bold]`` in an id or path styled the line.
These tests fail on the code before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EVI = "Q?\t\t\nA.\t\t\n\n"


def test_eval_prints_a_markup_id_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pred = tmp_path / "sub.csv"
    pred.write_text(f'id,claim,evi,label,split\n0,c,"{EVI}",Refuted,pred\n[/],c,"{EVI}",Refuted,pred\n', encoding="utf-8")
    gold = tmp_path / "gold.csv"
    gold.write_text(f'id,claim,evi,label,split\n0,c,"{EVI}",Refuted,gold\n', encoding="utf-8")
    assert main(["eval", "--pred", str(pred), "--gold", str(gold), "--out", str(tmp_path / "e"), "--workers", "1"]) == 0
    assert "predictions for unknown ids (ignored): [/]" in capsys.readouterr().out


def test_convert_and_inspect_print_a_markup_path_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "a[" / "]b[bold]"
    folder.mkdir(parents=True)
    pred = folder / "p.json"
    pred.write_text(json.dumps([{"claim_id": 0, "claim": "c", "evidence": [{"question": "Q?", "answer": "A."}],
                                 "pred_label": "Refuted"}]), encoding="utf-8")
    assert main(["convert", str(pred), "--to", str(folder / "o.csv")]) == 0
    assert f"{pred} (predictions) → {folder / 'o.csv'}" in " ".join(capsys.readouterr().err.split())  # wrapped at any width
    store = folder / "store"
    store.mkdir()
    (store / "0.json").write_text('{"url": "u", "url2text": ["a"]}\n{bad\n', encoding="utf-8")
    assert main(["inspect", "--store", str(store)]) == 0
    assert f"{store / '0.json'}:2: malformed JSON line" in capsys.readouterr().out.replace("\n", "")
