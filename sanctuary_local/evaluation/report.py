"""Outputs of ``eval``: ``metrics.json``, ``per_claim.csv``, ``confusion.png`` and the console table."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson
from rich.markup import escape
from rich.table import Table

from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.evaluate import HEADLINE_THRESHOLD, EvalReport

PER_CLAIM_FIELDS = (
    "claim_id", "gold_label", "pred_label", "correct", "n_pred_evidence", "n_gold_evidence",
    "meteor_q_only", "meteor_qa", "averitec_hit_0.25", "claim_types",
    "ev2r_q_recall", "ev2r_qa_recall", "ev2r_hit_0.5",
)  # fmt: skip


#: First characters that make a spreadsheet read a cell as a formula (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """A text cell starting like a formula, prefixed with a single quote (OWASP's rule):
    ``per_claim.csv`` is opened in spreadsheets, and its ids and claim types come from
    input files. Numbers pass unchanged."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(FORMULA_START) else cell


def per_claim_csv(report: EvalReport) -> str:
    """One row per gold claim, in gold order; text cells made spreadsheet-safe."""
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(PER_CLAIM_FIELDS)
    for c in report.claims:
        hit = 1 if (c.correct and c.qa > HEADLINE_THRESHOLD) else 0
        ev = c.ev2r
        writer.writerow(map(spreadsheet_safe, (
            c.claim_id, c.gold_label, c.pred_label or "(missing)", int(c.correct), c.n_pred_evidence,
            c.n_gold_evidence, f"{c.q_only:.6f}", f"{c.qa:.6f}", hit, "|".join(c.claim_types),
            *((f"{ev['q_recall']:.6f}", f"{ev['qa_recall']:.6f}", int(ev["hit"])) if ev else ("", "", "")),
        )))  # fmt: skip
    return out.getvalue()


def confusion_png(report: EvalReport, title: str = "") -> bytes:
    """A labelled confusion-matrix heat map (rows gold, columns predicted), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on a batch machine
    import matplotlib.pyplot as plt
    import numpy as np

    labels = report.labels.labels
    matrix = np.array(report.labels.confusion)
    short = [lbl.split("/")[0].replace("Not Enough Evidence", "NEE") for lbl in labels]
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), short, rotation=20, ha="right")
    ax.set_yticks(range(len(labels)), short)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    top = matrix.max() if matrix.size else 0
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center", color="white" if matrix[i, j] > top / 2 else "black")
    missing = len(report.missing)
    ax.set_title(title or f"accuracy {report.labels.accuracy:.3f}, macro-F1 {report.labels.macro_f1:.3f}" + (f" ({missing} missing)" if missing else ""))
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    return png.getvalue()


#: What ``output_files`` returns, by name: the files every ``eval`` writes.
METRICS, PER_CLAIM, CONFUSION = "metrics.json", "per_claim.csv", "confusion.png"
#: The official scorer's pair ``eval`` writes for a subset (``cli/eval_cmd.py``).
OFFICIAL_SUBMISSION, OFFICIAL_SOLUTION = "official_submission.csv", "official_solution.csv"


def output_files(report: EvalReport, inputs: dict[str, Any]) -> dict[str, bytes]:
    """The three output files, ``{name: bytes}`` (``METRICS``, ``PER_CLAIM``, ``CONFUSION``)."""
    metrics = {"inputs": inputs, **report.to_dict()}
    return {
        METRICS: orjson.dumps(metrics, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS),
        PER_CLAIM: per_claim_csv(report).encode("utf-8"),
        CONFUSION: confusion_png(report),
    }


#: Bytes of an earlier ``metrics.json`` read at most to recognise it.
METRICS_LIMIT = 64 << 20
_PNG = b"\x89PNG\r\n\x1a\n"


def earlier_outputs(folder: Path) -> set[str]:
    """The outputs in ``folder`` of an ``eval`` from before ``eval_manifest.json``, by their
    content: a ``metrics.json`` with eval's sections, then beside it a ``per_claim.csv`` with
    eval's header, a PNG ``confusion.png``, and the official pair it says it wrote (CSVs with
    the leaderboard header). None without such a ``metrics.json``."""
    from sanctuary_local.io.leaderboard import HEADER
    from sanctuary_local.io.safe_io import open_regular, read_regular

    def head(name: str, n: int) -> bytes:
        try:
            with open_regular(folder / name, follow=False) as f:
                return f.read(n)
        except (OSError, UserError):
            return b""

    try:
        metrics = orjson.loads(read_regular(folder / METRICS, METRICS_LIMIT, follow=False))
    except (OSError, UserError, orjson.JSONDecodeError):
        return set()
    if not (isinstance(metrics, dict) and {"inputs", "labels", "meteor", "n_claims"} <= metrics.keys()
            and isinstance(metrics["inputs"], dict)):
        return set()
    ours = {METRICS}
    if head(PER_CLAIM, 64).startswith(b"claim_id,gold_label,pred_label,correct,"):
        ours.add(PER_CLAIM)
    if head(CONFUSION, len(_PNG)) == _PNG:
        ours.add(CONFUSION)
    pair = metrics["inputs"].get("official_pair")
    if isinstance(pair, dict) and pair.get("written") is True:
        csv_head = ",".join(HEADER).encode()
        ours |= {n for n in (OFFICIAL_SUBMISSION, OFFICIAL_SOLUTION) if head(n, len(csv_head)) == csv_head}
    return ours


def summary_table(report: EvalReport) -> Table:
    """The console table: label metrics, METEOR scores, and Ev2R with its judge."""
    table = Table(title=f"sanctuary-local eval ({len(report.claims)} claims)", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows: list[tuple[str, float | str]] = [
        ("label accuracy", report.labels.accuracy),
        ("label macro-F1 (4 labels)", report.labels.macro_f1),
        ("2-class accuracy (Supported vs rest)", report.binary.accuracy),
        ("2-class macro-F1", report.binary.macro_f1),
        ("Q only (Hungarian METEOR)", report.q_only),
        ("Q + A (Hungarian METEOR)", report.qa),
        ("old AVeriTeC score (METEOR @ 0.25)", report.averitec[HEADLINE_THRESHOLD]),
    ]
    rows += [(f"  AVeriTeC score @ {t:g}", v) for t, v in report.averitec.items() if t != HEADLINE_THRESHOLD]
    for label, s in report.labels.per_class.items():
        rows.append((f"  {label}: P / R / F1 (n={s.support})", f"{s.precision:.4f} / {s.recall:.4f} / {s.f1:.4f}"))
    if report.ev2r:
        judge = report.ev2r["judge"]
        rows += [
            (f"Q only (Ev2R recall), judge {judge}", report.ev2r["q_recall"]),
            (f"Q + A (Ev2R recall), judge {judge}", report.ev2r["qa_recall"]),
            (f"new AVeriTeC score (Ev2R @ 0.5), judge {judge}", report.ev2r["score"]),
        ]
    if report.missing:
        rows.append(("missing predictions (counted wrong)", str(len(report.missing))))
    for name, value in rows:
        table.add_row(escape(name), f"{value:.4f}" if isinstance(value, float) else value)
    return table
