"""The TF-IDF verdict model's settings, one at a time from the default, on every tuning fold.

Is the default (C 0.5, 10 evidence pairs, answers cut to 48 words, gold evidence + the
retrieved evidence of 483 train claims) at the ceiling of its kind? Each row changes one
setting and fits the model in memory exactly as ``verdict-model train --base tfidf`` fits it
(``verdict_model.tfidf.fit``), then scores:

- **pipeline dev 0-49 and 100-149**: the stage-1/2 records of finished ``cpu`` runs, read as
  stage 3 reads them (flagged text redacted, ``evidence_view.guarded``); both pooled (100 claims);
- **retrieved dev 100-249** and the **selection** figure (pipeline 0-49 + retrieved 100-249),
  as ``verdict/models.py`` computes them;
- **train CV** (``--cv-evidence``): 5 folds of train.json by claim text; each fold's model is
  trained on the other folds (their gold evidence, and their part of the row's retrieved
  evidence) and scores the held-out fold's claims on the evidence stage 2 retrieved for them
  (gold questions as queries) and on their gold evidence. It is the largest tuning set
  (about 2,800 claims), but its evidence comes from gold questions, not stage 1's.

Labels are the argmax. The AVeriTeC score is not computed: the evidence, and so its METEOR
utility, is the same for every row. Dev 50-99 is never read.

    python benchmarks/verdict/tfidf_sweep.py --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_dev100-149/run --retrieved-dev runs/vm/dev100-249_evidence.jsonl \\
        --extra ret483=runs/vm/train_evidence.jsonl --extra all=runs/vm/train_evidence_all.jsonl \\
        --cv-evidence runs/vm/train_evidence_all.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import DEFAULT_CLAIMS as DEV
from benchmarks.common import SHARED, results_dir, uptime
from benchmarks.verdict.models import PipelineRun, _m, fold_arguments

from sanctuary_local.config.settings import VerdictConfig  # noqa: E402
from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.records import LABELS, REFUTED  # noqa: E402
from sanctuary_local.stages.evidence_view import guarded  # noqa: E402
from sanctuary_local.verdict_model.base import TrainSettings  # noqa: E402
from sanctuary_local.verdict_model.evidence import inputs_from_evidence, read_evidence  # noqa: E402
from sanctuary_local.verdict_model.inputs import from_queries, render  # noqa: E402
from sanctuary_local.stages.verdict.trained import MAX_PAIRS  # noqa: E402
from sanctuary_local.verdict_model.store import read_card, resolve  # noqa: E402
from sanctuary_local.verdict_model.tfidf import fit  # noqa: E402
from sanctuary_local.verdict_model.train import training_inputs  # noqa: E402

RESULTS = results_dir(__file__)

FOLDS = 5
#: The row every other row changes one setting of: the shipped default's own training settings.
SHIPPED = read_card(resolve("packaged:verdict-tfidf"))["settings"]


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    c: float
    pairs: int
    words: int
    extra: str
    """The name of the retrieved training evidence (``--extra NAME=FILE``)."""


def settings(args: argparse.Namespace, extras: list[str]) -> list[Setting]:
    """The default first, then each value of each swept setting with the others at the default."""
    base = Setting("default", SHIPPED["c"], MAX_PAIRS, SHIPPED["answer_words"], extras[0])
    rows = [base]
    rows += [replace(base, name=f"C {c:g}", c=c) for c in args.c if c != base.c]
    rows += [replace(base, name=f"{p} pairs", pairs=p) for p in args.pairs if p != base.pairs]
    rows += [replace(base, name=f"{w} words", words=w) for w in args.words if w != base.words]
    rows += [replace(base, name=f"retrieved: {e}", extra=e) for e in extras[1:]]
    return rows


def stage3_inputs(run: PipelineRun, pairs: int) -> list[Any]:
    """A run's evidence as stage 3's trained mode reads it: flagged text redacted, every
    question's best snippet first, at most ``pairs`` pairs."""
    flagged = VerdictConfig(mode="trained").flagged
    out = []
    for c, ev in zip(run.claims, run.evidence, strict=True):
        shown, withheld = guarded(ev, flagged)
        out.append(from_queries(c.text, shown.queries, withheld, pairs, c.gold_label))
    return out


def _predict(vec: Any, lr: Any, xs: list[Any], s: Setting) -> list[str]:
    """The argmax labels, each input read as the setting reads it."""
    return [LABELS[i] for i in lr.predict(vec.transform([render(x, s.words, s.pairs) for x in xs]))]


def _fold(x: Any) -> int:
    return zlib.crc32(" ".join(x.claim.split()).encode()) % FOLDS


class Sweep:
    """The data every row reads, loaded once; ``row`` fits and scores one setting."""

    def __init__(self, args: argparse.Namespace, extras: dict[str, Path]) -> None:
        self.claims, self.gold, _ = training_inputs(args.train)
        self.extras = {name: read_evidence(path) for name, path in extras.items()}
        self.cv = read_evidence(args.cv_evidence) if args.cv_evidence else None
        self.runs = {name: PipelineRun(path, DEV) for name, path in
                     (("pipeline 0-49", args.pipeline_run), ("pipeline 100-149", args.fit_run)) if path}
        for run in self.runs.values():
            if any(50 <= i < 100 for i in run.indices):
                raise SystemExit("dev 50-99 is the held-out range: it is never read here")
        self.dev_ret = read_evidence(args.retrieved_dev) if args.retrieved_dev else None
        self.dev = read_claims(DEV)

    def tests(self, pairs: int) -> dict[str, list[Any]]:
        out = {name: stage3_inputs(run, pairs) for name, run in self.runs.items()}
        if len(out) == 2:
            out["pipeline pooled"] = out["pipeline 0-49"] + out["pipeline 100-149"]
        if self.dev_ret is not None:
            out["retrieved 100-249"] = inputs_from_evidence(self.dev[100:250], self.dev_ret, max_pairs=pairs)
            if "pipeline 0-49" in out:
                out["selection"] = out["pipeline 0-49"] + out["retrieved 100-249"]
        return out

    def row(self, s: Setting) -> dict[str, Any]:
        t0 = time.perf_counter()
        ts = TrainSettings(base="tfidf", c=s.c, answer_words=s.words, seed=SHIPPED["seed"],
                           class_weight=SHIPPED["class_weight"])
        extra = inputs_from_evidence(self.claims, self.extras[s.extra], max_pairs=s.pairs)
        vec, lr = fit(self.gold + extra, ts, s.pairs)
        row: dict[str, Any] = {"setting": s.name, "c": s.c, "pairs": s.pairs, "words": s.words, "extra": s.extra}
        for name, xs in self.tests(s.pairs).items():
            row[name] = _m([x.label or "" for x in xs], _predict(vec, lr, xs, s))
        if self.cv is not None:
            row.update(self.cross_validate(ts, s, extra))
        row["seconds"] = round(time.perf_counter() - t0, 1)
        return row

    def cross_validate(self, ts: TrainSettings, s: Setting, extra: list[Any]) -> dict[str, Any]:
        held = inputs_from_evidence(self.claims, self.cv, max_pairs=s.pairs)
        gold_y, gold_p, ret_y, ret_p = [], [], [], []
        for k in range(FOLDS):
            vec, lr = fit([x for x in self.gold + extra if _fold(x) != k], ts, s.pairs)
            for xs, ys, ps in (([x for x in held if _fold(x) == k], ret_y, ret_p),
                               ([x for x in self.gold if _fold(x) == k], gold_y, gold_p)):
                ys += [x.label for x in xs]
                ps += _predict(vec, lr, xs, s)
        return {"train CV retrieved": _m(ret_y, ret_p), "train CV gold": _m(gold_y, gold_p)}

    def majority(self) -> dict[str, Any]:
        row: dict[str, Any] = {"setting": "majority class (Refuted)"}
        for name, xs in self.tests(MAX_PAIRS).items():
            row[name] = _m([x.label or "" for x in xs], [REFUTED] * len(xs))
        if self.cv is not None:
            held = [x.label for x in inputs_from_evidence(self.claims, self.cv)]
            row["train CV retrieved"] = _m(held, [REFUTED] * len(held))
            row["train CV gold"] = _m([x.label for x in self.gold], [REFUTED] * len(self.gold))
        return row


COLUMNS = ("pipeline 0-49", "pipeline 100-149", "pipeline pooled", "retrieved 100-249", "selection",
           "train CV retrieved", "train CV gold")


def to_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    cell = lambda m: f"{m['accuracy']:.3f} / {m['macro_f1']:.3f}" if m else "-"  # noqa: E731
    lines = [f"# TF-IDF verdict settings, one at a time ({meta['date']})", "",
             f"Machine: {meta['cpus']} CPUs; `{meta['uptime']}` at the end. Runs: {meta['runs']}. "
             f"Retrieved training evidence: {meta['extras']}. Train CV evidence: {meta['cv_evidence']}. "
             "Each cell: accuracy / macro-F1, argmax labels. Dev 50-99 is never read.", "",
             "| setting | " + " | ".join(cols) + " | fit + score s |",
             "|---" * (len(cols) + 2) + "|"]
    for r in rows:
        lines.append(f"| {r['setting']} | " + " | ".join(cell(r.get(c)) for c in cols) + f" | {r.get('seconds', '-')} |")
    return "\n".join(lines) + "\n"


def scored(name: str, tests: dict[str, list[Any]], predict: Any, t0: float | None = None) -> dict[str, Any]:
    """One table row: ``predict(inputs) -> labels`` scored on every fold (with the seconds since
    ``t0`` when given), printed as it is made."""
    row: dict[str, Any] = {"setting": name}
    for fold, xs in tests.items():
        row[fold] = _m([x.label or "" for x in xs], predict(xs))
    if t0 is not None:
        row["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(row), flush=True)
    return row


def _parser(doc: str, label: str) -> argparse.ArgumentParser:
    """The arguments every table that refits the default takes: train, --extra, the folds, label, out."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--train", type=Path, default=SHARED / "data" / "averitec" / "train.json")
    ap.add_argument("--extra", action="append", required=True, metavar="NAME=FILE",
                    help="retrieved training evidence (verdict-model evidence); the first is the default's; repeatable")
    fold_arguments(ap)
    ap.add_argument("--label", default=label)
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def _extras(args: argparse.Namespace, *files: Path | None) -> dict[str, Path]:
    """``--extra NAME=FILE`` as a dict; one error line for a malformed value or a missing file."""
    bad = [e for e in args.extra if not all(e.partition("=")[::2])]
    if bad:
        raise SystemExit(f"error: --extra takes NAME=FILE, got {', '.join(repr(b) for b in bad)}")
    extras = {name: Path(path) for name, _, path in (e.partition("=") for e in args.extra)}
    missing = [str(p) for p in (args.train, *files, *extras.values()) if p and not p.is_file()]
    if missing:
        raise SystemExit(f"error: not a file: {', '.join(missing)}")
    return extras


def _write(args: argparse.Namespace, sweep: Sweep, extras: dict[str, Path], rows: list[dict[str, Any]],
           title: str | None = None, notes: str = "") -> None:
    """``LABEL.json`` and ``LABEL.md`` (the table, under ``title`` if given, then ``notes``)."""
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(), "uptime": uptime(),
            "runs": "; ".join(r.name for r in sweep.runs.values()) or "none",
            "extras": ", ".join(f"{k} = {v}" for k, v in extras.items()),
            "cv_evidence": str(args.cv_evidence) if args.cv_evidence else "not run"}
    md = to_markdown(rows, meta)
    if title:
        md = md.replace("# TF-IDF verdict settings, one at a time", title, 1)
    md += notes
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / f"{args.label}.md").write_text(md)
    print(md)


def one_extra_main(doc: str, label: str, title: str, rows: Any) -> None:
    """The ``main`` of a table that refits the default's row with changes (``verdict_metadata.py``,
    ``verdict_inputs.py``, ``verdict/hyde_evidence.py``): ``--extra`` (the first is the default's
    retrieved training evidence), the tuning folds, ``rows(sweep, extra_names)`` for the table,
    written as ``LABEL.json`` and ``LABEL.md`` (with ``--notes`` under it)."""
    ap = _parser(doc, label)
    ap.add_argument("--notes", type=Path, help="a text (e.g. the rule written before the table) put under the table")
    args = ap.parse_args()
    extras = _extras(args, args.retrieved_dev, args.notes)
    args.cv_evidence = None
    sweep = Sweep(args, extras)
    notes = "\n" + args.notes.read_text(encoding="utf-8") if args.notes else ""
    _write(args, sweep, extras, rows(sweep, list(extras)), title, notes)


def main() -> None:
    ap = _parser(__doc__, "verdict_tfidf_sweep")
    ap.add_argument("--cv-evidence", type=Path, help="evidence retrieved for the train claims: scores the train CV")
    ap.add_argument("--c", type=float, nargs="*", default=[0.3, 0.7, 1.0, 1.5, 2.0, 3.0])
    ap.add_argument("--pairs", type=int, nargs="*", default=[5, 20])
    ap.add_argument("--words", type=int, nargs="*", default=[24, 96])
    args = ap.parse_args()
    extras = _extras(args, args.cv_evidence)
    sweep = Sweep(args, extras)
    rows = [sweep.majority()]
    for s in settings(args, list(extras)):
        rows.append(sweep.row(s))
        print(json.dumps(rows[-1]), flush=True)
    _write(args, sweep, extras, rows)


if __name__ == "__main__":
    sys.exit(main())
