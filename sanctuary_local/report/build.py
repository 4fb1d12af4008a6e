"""The report read from a run directory and written as pages: ``write_report``.

Inputs, all read-only: ``RUN_DIR/predictions.json`` (required), ``stage2_evidence.jsonl``
(the snippets per question; without it the official evidence list is shown, numbered
E1…; a claim the follow-up round merged new questions into is read from
``stage2c_followup_evidence.jsonl``, which is what its verdict prompt saw), ``run_state.json`` (the store the run used, unless ``store`` is given) and the
knowledge store (without it the snippet is shown alone, with a note). The run's own small
files (``run_state.json``, ``config.json``, ``timings.json``) are read only when they are
regular files of at most ``MAX_RUN_FILE_BYTES`` (a FIFO or ``/dev/zero`` there is ignored).
Pages are written atomically (``io.safe_io``): a symlink planted at a page's path is
replaced, never written through.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.run_files import final_evidence
from sanctuary_local.io.safe_io import atomic_write_bytes, open_regular, read_regular
from sanctuary_local.records import Prediction
from sanctuary_local.claim_view import ReportSnippet, claim_snippets
from sanctuary_local.report.pages import page_name, render_claim, render_index

if TYPE_CHECKING:
    from sanctuary_local.corpus.source import CorpusSource
    from sanctuary_local.io.store import KnowledgeStore

__all__ = ["ReportSummary", "open_store", "run_info", "write_report"]

#: Largest ``run_state.json`` / ``config.json`` / ``timings.json`` read for the pages.
MAX_RUN_FILE_BYTES = 16 * 1024 * 1024


def _load_optional(path: Path) -> dict[str, Any]:
    """A small JSON object file of the run; {} when absent, not a regular file, too big or bad."""
    try:
        obj = orjson.loads(read_regular(path, MAX_RUN_FILE_BYTES, "run file"))
    except (OSError, UserError, orjson.JSONDecodeError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def run_info(run_dir: Path) -> str:
    """One line about the run for the index, from ``config.json`` and ``timings.json``
    (both optional): profile, the two LLMs, and whether the run is unfinished."""
    cfg, timings = _load_optional(run_dir / "config.json"), _load_optional(run_dir / "timings.json")
    parts = [f"profile {cfg['profile']}"] if isinstance(cfg.get("profile"), str) else []
    for stage, name in (("hyde", "stage 1"), ("verdict", "stage 3")):
        model = _dig(cfg, stage, "llm", "model")
        if isinstance(model, str):
            parts.append(f"{name} model {model}")
    if timings.get("complete") is False:
        parts.append(f"unfinished run: {timings.get('n_claims', '?')} of {timings.get('n_selected', '?')} claims")
    return " · ".join(parts)
def _recorded_store(run_dir: Path) -> Path | None:
    """The store the run used, as ``run_state.json`` records it (None: not recorded);
    runs made before the store was fingerprinted by content name it in ``fingerprint.store``."""
    from sanctuary_local.corpus.index import GEN_NAME, is_corpus_index

    state = _load_optional(run_dir / "run_state.json")
    store = _dig(state, "store_path") or _dig(state, "fingerprint", "store")
    if isinstance(store, str) and "@gen-" in store:  # a corpus index: "path@generation" (corpus/source.py)
        store = store.rsplit("@gen-", 1)[0]
    if not (isinstance(store, str) and store):
        return None
    path = Path(store)
    if GEN_NAME.fullmatch(path.name) and not path.exists() and is_corpus_index(path.parent):
        return path.parent  # `check` pins its generation (index.pinned); re-indexed since: the live one (locate_snippet)
    return path


def open_store(run_dir: Path, store: Path | None) -> tuple[KnowledgeStore | CorpusSource | None, str]:
    """The knowledge store for the snippets' pages (``store``, else the run's own), or
    None and the reason, which every page states; a missing store is never an error."""
    from sanctuary_local.corpus.source import open_source

    path = store if store is not None else _recorded_store(run_dir)
    if path is None:
        return None, f"{run_dir / 'run_state.json'} names no knowledge store and no --store was given"
    try:
        return open_source(path), ""  # a knowledge store, or a corpus index (issue 28)
    except UserError as exc:
        return None, str(exc)


def _claim_docs(ks: KnowledgeStore | CorpusSource | None, why_not: str, claim_index: int,
                snippets: list[ReportSnippet]) -> tuple[dict[int, str] | None, str]:
    """Document position → text of one claim's store file, or None and why not. For a corpus
    index, the page of each of the claim's snippets by the position the run recorded, found
    again in its own file (a re-index since the run renumbers the units; a snippet no unit
    holds any more gets no page, so its note says the index does not hold it)."""
    if ks is None:
        return None, why_not
    from sanctuary_local.corpus.source import CorpusSource

    if isinstance(ks, CorpusSource):
        from sanctuary_local.corpus.index import locate_snippet

        units = {s.doc_position: locate_snippet(ks.index, s) for s in snippets if s.doc_position is not None}
        return {pos: ks.index.unit_text(u) for pos, u in units.items() if u is not None}, ""
    if not ks.has(claim_index):
        return None, f"{ks.file_name(claim_index)}: not in the knowledge store"
    try:
        load = ks.load(claim_index)
    except (OSError, zipfile.BadZipFile) as exc:  # unreadable file or damaged archive: the page says so
        return None, f"{ks.file_name(claim_index)}: cannot be read: {exc}"
    damaged = [p for p in load.problems if "zip" in p.message or p.line == 0]
    if damaged:  # a damaged, encrypted or unreadable member: its text cannot be trusted whole
        return None, "; ".join(str(p) for p in damaged)
    return {d.position: d.text for d in load.documents}, ""


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What ``write_report`` wrote."""

    index: Path
    n_claims: int
    #: Why the pages show no source pages ("" when the store was read).
    store_problem: str


def _write(path: Path, text: str) -> None:
    try:  # atomic: a symlink planted at the page's path is replaced, not followed
        atomic_write_bytes(path, text.encode("utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot write the report: {exc.strerror or exc}") from None


#: How every page ``write_report`` writes begins, up to its title (templates/report_*.html).
_OUR_HEAD = b'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
_OUR_TITLES = (b"<title>sanctuary-local report: ", b"<title>Claim ")


def _not_ours(path: Path) -> bool:
    """Whether ``path`` exists and is not a page an earlier report wrote (a user's file)."""
    try:
        with open_regular(path, follow=False) as f:  # never blocks on a FIFO; a link is not ours
            head = f.read(512)
    except FileNotFoundError:
        return False
    except (OSError, UserError):
        return True
    rest = head[len(_OUR_HEAD):]
    return not (head.startswith(_OUR_HEAD) and rest.split(b"\n", 2)[1:2] and
                rest.split(b"\n", 2)[1].startswith(_OUR_TITLES))


def _check_no_clobber(out: Path, names: list[str]) -> None:
    """A ``UserError`` when writing ``names`` into ``out`` would replace a file that is not
    a page of an earlier report: ``--out`` may name a folder of the user's own files."""
    theirs = [n for n in names if _not_ours(out / n)]
    if theirs:
        raise UserError(f"{out}: holds {theirs[0]}" + (f" and {len(theirs) - 1} more files" if len(theirs) > 1 else "")
                        + " not written by `report`; refusing to overwrite (choose a new or empty --out)")


def _read_predictions(run_dir: Path, claims_range: str | None) -> list[Prediction]:
    """The run's predictions by claim index, those in ``claims_range`` (a:b) when given."""
    from sanctuary_local.io.claims import parse_claims_range
    from sanctuary_local.io.predictions import read_predictions_json

    path = run_dir / "predictions.json"
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: not a run directory (it does not exist or is not a directory)")
    if not path.is_file():
        raise UserError(f"{path}: not found; is {run_dir} the --out of a finished `run`? "
                        "(a killed run writes it when the same `run` command is run again to resume)")
    preds = sorted(read_predictions_json(path), key=lambda p: p.claim_index)
    if claims_range is None:
        return preds
    selected = parse_claims_range(claims_range)
    kept = [p for p in preds if p.claim_index in selected]
    if not kept:
        raise UserError(f"{path}: --claims-range {claims_range} selects none of its {len(preds)} claims")
    return kept


def write_report(run_dir: Path, out: Path | None = None, store: Path | None = None,
                 progress: Callable[[int, int], None] | None = None, claims_range: str | None = None,
                 alone: bool = False) -> ReportSummary:
    """Write ``index.html`` and one ``claim_<index>.html`` per prediction (those in
    ``claims_range`` when given) into ``out`` (default ``run_dir/report``);
    ``progress(done, total)`` is called before the first page and after each. ``alone``: the
    claim pages are meant to be read alone (``check --report``), without a link to the index."""
    tick = progress or (lambda done, total: None)
    run_dir = Path(run_dir)
    preds = _read_predictions(run_dir, claims_range)
    stage2 = final_evidence(run_dir)
    ks, why_not = open_store(run_dir, store)
    out = Path(out) if out is not None else run_dir / "report"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create the report directory: {exc.strerror or exc}") from None
    _check_no_clobber(out, [*(page_name(p) for p in preds), "index.html"])
    tick(0, len(preds))
    for i, p in enumerate(preds, start=1):
        snippets = claim_snippets(p, stage2.get(p.claim_index))
        docs, reason = _claim_docs(ks, why_not, p.claim_index, snippets)
        page = render_claim(p, snippets, docs, reason, alone=alone)
        _write(out / page_name(p), page)
        tick(i, len(preds))
    _write(out / "index.html", render_index(run_dir.resolve().name, preds, run_info(run_dir)))
    return ReportSummary(out / "index.html", len(preds), why_not)
