"""What the pages and the API show of a check, and the Jinja2 templates that show it.

A finished check is read back from its run folder (``predictions.json``, the stage-2
file) and the corpus index: the verdict with its label probabilities (a trained verdict's
``meta.label_scores``), the questions, each evidence snippet with its file, PDF page, URL
and character span, highlighted inside its page's text by the report's own code
(``claim_view.snippet_in_context``), and the justification with its "Evidence q.n" mentions
linked. Templates autoescape everything; text that is already HTML comes only from the
report's escaping functions and is marked safe here, nowhere else.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import time
import urllib.parse
from collections.abc import Container
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.flag_help import explain
from sanctuary_local.records import LABELS, Prediction
from sanctuary_local.serve.jobs import CheckRecord

#: What the pages call each stage (the API gives the names).
STAGE_TITLES = {"decompose": "splitting the claim", "hyde": "questions", "retrieval": "evidence search",
                "followup": "follow-up questions", "verdict": "verdict"}

__all__ = ["STAGE_TITLES", "CheckResult", "EvidenceView", "load_result", "probabilities", "record_json", "source_html", "templates"]


@lru_cache(maxsize=1)
def templates() -> Any:
    """The Jinja2 environment over ``sanctuary_local/templates`` (autoescaped)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("sanctuary_local", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["seconds"] = _seconds
    env.filters["urlpath"] = lambda p: urllib.parse.quote(str(p), safe="/")
    env.filters["vclass"] = lambda label: re.sub(r"[^A-Za-z]", "", str(label))
    env.filters["stage_title"] = lambda name: STAGE_TITLES.get(name, name)
    env.filters["flag_text"] = explain  # a flag's plain-language sentence (flag_help.FLAG_TEXT)
    return env


def stylesheet() -> bytes:
    """The pages' CSS: the report's stylesheet, then the server's own additions."""
    folder = resources.files("sanctuary_local.templates")
    return folder.joinpath("report.css").read_bytes() + b"\n" + folder.joinpath("serve.css").read_bytes()


def _when(ts: float | None) -> str:
    return "" if ts is None else dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:.1f} s" if s < 90 else f"{s / 60:.1f} min"


@dataclass(frozen=True)
class EvidenceView:
    """One evidence snippet as the page shows it."""

    n: int
    label: str
    anchor: str
    question: str
    path: str
    page: int
    url: str
    unit: int | None
    """The corpus unit (a file, a PDF page) whose extracted text holds the snippet."""
    text: str
    """The snippet itself: ``unit text[start:end]``."""
    start: int | None
    end: int | None
    score: float | None
    context: Any
    """The snippet inside its page's text, ``<mark>``ed (``Markup``: escaped by the report's code)."""
    servable: bool
    """Whether the corpus file itself can be opened (an indexed file under the corpus root)."""


@dataclass(frozen=True)
class CheckResult:
    """A finished check, read back from its run folder."""

    prediction: Prediction
    official: dict[str, Any]
    """The prediction as ``predictions.json`` holds it (what the API and the download give)."""
    probabilities: list[tuple[str, float]]
    calibrated: bool
    questions: list[str]
    evidence: list[EvidenceView]
    justification: Any
    """``Markup``: escaped, "Evidence q.n" mentions linked to their snippets."""
    problem: str
    """Why the snippets' pages are not shown ("" when they are)."""


def probabilities(meta: dict[str, Any]) -> tuple[list[tuple[str, float]], bool]:
    """``meta["label_scores"]``'s label probabilities, best first, and whether they are
    calibrated; ([], False) for a label read from text. Labels default to ``LABELS`` order."""
    ls = meta.get("label_scores") if isinstance(meta, dict) else None
    if not isinstance(ls, dict):
        return [], False
    probs = ls.get("probabilities")
    labels = ls.get("labels") or list(LABELS)
    if not isinstance(probs, list) or not isinstance(labels, list) or len(probs) != len(labels) or not probs:
        return [], False
    try:
        pairs = [(str(lab), float(p)) for lab, p in zip(labels, probs)]
    except (TypeError, ValueError):
        return [], False
    return sorted(pairs, key=lambda kv: -kv[1]), bool(ls.get("calibrated"))


def load_result(run_dir: Path, corpus: Path, indexed: Container[str], check_id: str) -> CheckResult:
    """The finished check in ``run_dir`` (``UserError`` when its files cannot be read)."""
    from markupsafe import Markup

    from sanctuary_local.corpus.index import CorpusIndex, locate_snippet
    from sanctuary_local.io.predictions import prediction_to_official, read_predictions_json
    from sanctuary_local.io.run_files import read_stage2
    from sanctuary_local.claim_view import claim_snippets, linkify_citations, snippet_in_context

    preds = read_predictions_json(run_dir / "predictions.json")
    if len(preds) != 1:
        raise UserError(f"{run_dir / 'predictions.json'}: expected one prediction, found {len(preds)}")
    pred = preds[0]
    stage2 = {**read_stage2(run_dir / "stage2_evidence.jsonl"), **read_stage2(run_dir / "stage2c_followup_evidence.jsonl")}
    ev = stage2.get(pred.claim_index)
    snippets = claim_snippets(pred, ev)
    try:
        index, problem = CorpusIndex(corpus), ""
    except (UserError, OSError) as exc:
        index, problem = None, f"the corpus index cannot be read: {exc}"
    views = []
    for n, s in enumerate(snippets, start=1):
        unit = locate_snippet(index, s) if index is not None else None
        meta = _unit_meta(index, unit)
        text = index.unit_text(unit) if meta else None
        path = str(meta.get("path", "")) if meta else ""
        context = snippet_in_context(s, text)
        if index is not None and meta is None and s.doc_position is not None:
            context = f'<span class="note span-note">{_GONE}: the snippet alone</span>\n{context}'
        views.append(EvidenceView(n, s.label, s.anchor, s.question, path, int(meta.get("page") or 0) if meta else 0,
                                  str(meta.get("url") or "") if meta else s.url, unit, s.text, s.start, s.end,
                                  s.score, Markup(context), path in indexed))
    questions = [qe.query.question for qe in ev.queries] if ev is not None else list(dict.fromkeys(s.question for s in snippets))
    probs, calibrated = probabilities(pred.meta)
    justification = Markup(linkify_citations(pred.justification or "(no justification)", {s.label: s.anchor for s in snippets}))
    return CheckResult(pred, prediction_to_official(pred), probs, calibrated, questions, views, justification, problem)


_GONE = "the corpus index no longer holds this snippet in its file (changed or removed since the check)"


def _unit_meta(index: Any, unit: int | None) -> dict[str, Any] | None:
    if index is None or unit is None or not 0 <= unit < index.n_units:
        return None
    return index.unit_meta(unit)


def source_html(text: str, start: int | None, end: int | None, snippet: str) -> tuple[Any, bool]:
    """A unit's whole text, escaped, its span ``<mark id="span">``ed; False (and no mark)
    when the span does not hold the snippet (the index changed since the check)."""
    from markupsafe import Markup

    if start is None or end is None or not (0 <= start <= end <= len(text)) or text[start:end] != snippet:
        return Markup(html.escape(text)), False
    return Markup(f'{html.escape(text[:start])}<mark id="span">{html.escape(text[start:end])}</mark>'
                  f"{html.escape(text[end:])}"), True


def record_json(rec: CheckRecord, *, position: int | None, eta_s: float | None, stages: list[str],
                result: CheckResult | None) -> dict[str, Any]:
    """A check as the API gives it: status and progress, and the result once done."""
    out: dict[str, Any] = {
        "id": rec.id, "claim": rec.claim, "claim_date": rec.claim_date, "status": rec.status,
        "created": rec.created, "started": rec.started, "finished": rec.finished,
        "stages": stage_rows(rec, stages), "notes": list(rec.notes),
    }
    if rec.status in ("queued", "running"):
        out["position"] = position
        out["eta_s"] = None if eta_s is None else round(eta_s, 1)
    if rec.status == "failed":
        out["error"] = rec.error
    if rec.status == "done":
        out["label"] = rec.label
        if result is not None:
            probs, calibrated = result.probabilities, result.calibrated
            out["label_probabilities"] = dict(probs) if probs else None
            out["calibrated"] = calibrated if probs else None
            out["result"] = result.official
    return out


def stage_rows(rec: CheckRecord, stages: list[str]) -> list[dict[str, Any]]:
    """Each stage of the check with its state (done / running / waiting) and seconds."""
    names = list(dict.fromkeys([*stages, *rec.stage_seconds, *([rec.stage] if rec.stage else [])]))
    rows = []
    for name in names:
        if name == rec.stage and rec.status == "running":
            rows.append({"name": name, "state": "running",
                         "seconds": round(time.time() - (rec.stage_started or time.time()), 1)})
        elif name in rec.stage_seconds:
            rows.append({"name": name, "state": "done", "seconds": rec.stage_seconds[name]})
        else:
            rows.append({"name": name, "state": "waiting", "seconds": None})
    return rows
