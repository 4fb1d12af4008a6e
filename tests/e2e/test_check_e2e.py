"""End to end (issue 28): `index` then `check "claim" --corpus` on examples/corpus with the
real CPU models (tests/data/tiny_cpu_trained.toml: Qwen2.5-Coder-0.5B via llama.cpp for
stage 1, MiniLM, real BM25 and FAISS, and the packaged trained verdict that `check`'s default
profile uses), every non-loopback socket blocked. One run; asserts the printed verdict
and sources, the provenance of every snippet (the span holds the snippet, in the file
itself for text and Markdown) and the cited HTML report. Never answer quality."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.corpus.index import CorpusIndex
from sanctuary_local.records import LABELS
from tests.support.shared_runs import TINY_TRAINED, block_non_loopback

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "corpus"

pytestmark = pytest.mark.slow


def test_index_then_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    attempts = block_non_loopback(monkeypatch)
    ix, out, page = tmp_path / "ix", tmp_path / "check", tmp_path / "report.html"
    assert main(["index", str(CORPUS), "--out", str(ix), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["check", "Water boils at 70 degrees Celsius on the summit of Mount Everest.", "--corpus", str(ix),
                 "--date", "2024-05-01", "--profile", TINY_TRAINED, "--out", str(out), "--report", str(page)])
    printed = capsys.readouterr().out
    assert attempts == [], f"check tried to reach the network: {attempts}"
    assert code in (0, 3), printed
    verdict = next(line for line in printed.splitlines() if line.startswith("verdict:"))
    assert verdict.removeprefix("verdict:").strip() in LABELS
    claim = orjson.loads((out / "claim.json").read_bytes())
    assert claim == [{"claim": "Water boils at 70 degrees Celsius on the summit of Mount Everest.", "claim_date": "01-05-2024"}]

    sources = orjson.loads((out / "run" / "sources.json").read_bytes())
    assert sources, printed
    index = CorpusIndex(ix)
    for s in (c["source"] for c in sources):
        assert index.unit_text(s["unit"])[s["start"]:s["end"]] == s["text"] != ""
        if s["path"].endswith((".md", ".txt")):  # the extracted text is the file's text
            assert (CORPUS / s["path"]).read_text(encoding="utf-8")[s["start"]:s["end"]] == s["text"]
        if s["path"].endswith(".pdf"):
            assert s["page"] in (1, 2)
        assert f"{s['start']}-{s['end']}" in printed and s["path"] in printed
    assert any(s["source"]["path"] == "boiling-point.pdf" for s in sources), "BM25 over the corpus missed the PDF"
    for line in printed.splitlines():  # a span that answers several questions is listed once
        if "of its extracted text" in line:
            spans = line.split(": characters ", 1)[1].split(" of its extracted text", 1)[0].split(", ")
            assert len(spans) == len(set(spans)), line
    asked = [ln.split(". ", 1)[1] for ln in printed.splitlines() if re.match(r"  Q\d+\. ", ln)]
    assert asked and len(asked) == len(set(asked)), printed  # each question once, its answers under it
    if "  flags: " in printed:
        assert "What the flags mean" in printed, printed
    preds = orjson.loads((out / "run" / "predictions.json").read_bytes())
    assert preds[0]["claim"].startswith("Water boils") and preds[0]["pred_label"] in LABELS

    html = page.read_text(encoding="utf-8")
    assert "<mark" in html and "Water boils at 70 degrees" in html and "store-note" not in html
    assert 'href="index.html"' not in html  # the page stands alone: no link to an index that is not there


def test_a_printed_answer_is_the_part_nearest_its_question() -> None:
    """The console shows a snippet's sentences nearest the question and the claim, not its first
    400 characters (a newcomer's walkthrough: the 70 °C sentence that decides the claim was cut off)."""
    from sanctuary_local.cli.check_cmd import EXCERPT_WORDS
    from sanctuary_local.verdict_model.inputs import excerpt

    filler = "Mountains are tall and the air is thin up there. " * 12
    answer = filler + "On the summit of Mount Everest water boils at about 70 degrees Celsius. " + filler
    shown = excerpt(answer, "At what temperature does water boil on Everest?", "Water boils at 70 degrees on Everest.",
                    EXCERPT_WORDS)
    assert "70 degrees Celsius" in shown and shown.startswith("… ") and shown.endswith("…")
    assert len(shown.split()) <= EXCERPT_WORDS + 2
    assert excerpt("Short answer.", "q", "c", EXCERPT_WORDS) == "Short answer."
