"""Verdict candidates on real retrieved evidence: the FEVER-8 baseline's 10 QA pairs per claim.

Each candidate is trained on AVeriTeC train only (its gold evidence and/or the baseline's two
real-web runs over train claims 0-999), then reads the baseline's real-web evidence for dev
claims 0-249 (``submission_part_a.csv``). Rows: accuracy, macro-F1, per-label F1, training
wall time, stage-3 seconds per claim (the label and the occlusion justification: the claim
read 1 + 10 times), and the weights' size; HerO's label (the baseline's own, on the same
evidence) and the majority class beside them. Candidates are chosen on the tuning claims
(dev 0-49 and 150-249); the stack (d) is fitted on dev 100-149; dev 50-99 is reported only
with ``--report`` for the chosen candidate.

    python benchmarks/verdict/real_web.py                          # the table (tuning claims, 0-249)
    python benchmarks/verdict/real_web.py --report packaged:verdict-web   # once: dev 50-99
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.common import DEFAULT_CLAIMS, SHARED, results_dir, uptime, write_result  # noqa: E402

BASELINE = SHARED / "data" / "fever8_baseline"
TRAIN = SHARED / "data" / "averitec" / "train.json"
DEV_EVIDENCE = BASELINE / "submission_part_a.csv"
TRAIN_EVIDENCE = [BASELINE / f"train_0-999_baseline_evidence_run{k}.csv" for k in (1, 2)]
TUNE = [*range(0, 50), *range(150, 250)]
FIT = list(range(100, 150))
REPORT = list(range(50, 100))
SHIPPED = ("packaged:verdict-tfidf", "packaged:verdict-tfidf-hyde2000", "packaged:verdict-tfidf-web",
           "packaged:verdict-tfidf-claim", "packaged:verdict-stance-web", "packaged:verdict-web-stack",
           "packaged:verdict-tfidf-pairs", "packaged:verdict-pairs-stack")


def candidates() -> dict[str, dict]:
    """Name → what ``verdict-model train`` is given (``settings`` of ``TrainSettings``)."""
    web = {"evidence": TRAIN_EVIDENCE}
    return {
        "(a) tfidf, gold + real-web train evidence, C=1": {**web, "settings": {"c": 1.0}},
        "(a) tfidf, gold + real-web, C=0.5": {**web, "settings": {"c": 0.5}},
        "(a) tfidf, gold + real-web, C=3": {**web, "settings": {"c": 3.0}},
        "(a) tfidf, real-web train evidence only, C=1": {**web, "gold": False, "settings": {"c": 1.0}},
    }


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _stage3_seconds(model, xs) -> float:  # noqa: ANN001
    """Seconds per claim of the label and its justification (each pair left out in turn)."""
    from sanctuary_local.verdict_model.inputs import without

    t = time.perf_counter()
    model.predict_proba(xs)
    for x in xs:
        if x.pairs:
            model.predict_proba([without(x, k) for k in range(len(x.pairs))])
    return (time.perf_counter() - t) / max(1, len(xs))


def _row(name: str, gold: list[str], pred: list[str], idx: list[int], extra: dict) -> dict:
    from sanctuary_local.verdict_model.evaluate import metrics_of

    return {"name": name, **extra, "tune": metrics_of([gold[i] for i in TUNE], [pred[i] for i in TUNE]),
            "all": metrics_of(gold, pred), **({"report": metrics_of([gold[i] for i in idx], [pred[i] for i in idx])}
                                              if idx else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--only", nargs="*", help="Candidates to train (names' starts); default: all")
    ap.add_argument("--report", metavar="MODEL", help="Also score this model (packaged:NAME or a directory) on dev 50-99, once")
    ap.add_argument("--label", default="real_web_candidates")
    args = ap.parse_args()

    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.records import LABELS, REFUTED
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.decision import decide
    from sanctuary_local.verdict_model.external import external_inputs
    from sanctuary_local.verdict_model.store import load_model
    from sanctuary_local.verdict_model.train import train

    claims = read_claims(args.claims)[:250]
    xs, found = external_inputs(claims, args.claims, DEV_EVIDENCE, claims)
    gold = [x.label or "" for x in xs]
    rows = [_row("HerO-8B: the baseline's own label, same evidence", gold, [found[c.index].label for c in claims],
                 REPORT if args.report else [], {}),
            _row("majority class (Refuted)", gold, [REFUTED] * len(gold), REPORT if args.report else [], {})]
    probs: dict[str, np.ndarray] = {}
    models: list[tuple[str, str, float | None]] = [(s, s, None) for s in SHIPPED]
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in candidates().items():
            if args.only and not any(name.startswith(o) for o in args.only):
                continue
            out = Path(tmp) / f"m{len(models)}"
            t = time.perf_counter()
            train(TRAIN, out, TrainSettings(**spec["settings"]), evidence=spec.get("evidence", ()),
                  gold=spec.get("gold", True))
            models.append((name, str(out), time.perf_counter() - t))
        if args.report:
            models.append((f"chosen: {args.report}", args.report, None))
        for name, where, wall in models:
            m = load_model(where)
            p = m.predict_proba(xs)
            probs[name] = p
            pred = decide(p)
            rows.append(_row(name, gold, pred, REPORT if name.startswith("chosen") else [],
                             {"train_s": None if wall is None else round(wall, 1),
                              "stage3_s_per_claim": round(_stage3_seconds(m, xs[:50]), 4),
                              "weights_mb": round(_size(m.directory) / 1e6, 1)}))
    rows.append(_stance_row(claims, args.claims, xs, gold))
    extra = _confidence(args.report, xs, gold) if args.report else {}
    meta = {"claims": str(args.claims), "dev_evidence": str(DEV_EVIDENCE), "train": str(TRAIN),
            "train_evidence": [str(p) for p in TRAIN_EVIDENCE], "uptime": uptime(), "labels": list(LABELS)}
    write_result(results_dir(__file__), args.label, meta, {"rows": rows, "model": args.report, **extra},
                 markdown(rows, meta, bool(args.report)) + extra.get("markdown", ""))


def _stance_row(claims, claims_path: Path, xs, gold: list[str]) -> dict:  # noqa: ANN001
    """(c): explicit stance features per pair (refutation, negation, support, hedging and
    conflict cues; numbers of the claim missing from the answer; overlap), pooled per claim
    (mean, max, overlap-weighted: ``verdict_model.stance.features``, the shipped stance member's),
    then a balanced logistic regression trained on the real-web train evidence alone (C 0.1)."""
    from sanctuary_local.records import LABELS
    from sanctuary_local.verdict_model import stance
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.external import external_inputs
    from sanctuary_local.verdict_model.train import read_training_claims

    t = time.perf_counter()
    train_claims, _ = read_training_claims(TRAIN)
    txs = [x for path in TRAIN_EVIDENCE for x in external_inputs(train_claims, TRAIN, path)[0]]
    scaler, lr = stance.fit(txs, TrainSettings(base="stance", c=0.1))
    wall = time.perf_counter() - t
    t = time.perf_counter()
    pred = [LABELS[i] for i in lr.predict(scaler.transform(stance.features(xs)))]
    per = (time.perf_counter() - t) / len(xs)
    return _row("(c) stance features per pair, pooled, logistic regression (real-web train evidence)", gold, pred, [],
                {"train_s": round(wall, 1), "stage3_s_per_claim": round(per, 4), "weights_mb": 0.0})


def _confidence(model_name: str, xs, gold: list[str]) -> dict:  # noqa: ANN001
    """The chosen model's confidence rule on dev 50-99 and 0-249, and the risk-coverage figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sanctuary_local.verdict_model.confidence import answered, risk_coverage
    from sanctuary_local.verdict_model.decision import decide
    from sanctuary_local.verdict_model.store import load_model, read_confidence

    m = load_model(model_name)
    rule = read_confidence(m.directory, m.sha256) or {}
    t = rule.get("threshold")
    p = m.predict_proba(xs)
    labels = decide(p)
    out, lines = {"threshold": t, "rule": rule}, ["", f"## Saying when unsure: {model_name}, threshold {t}", "",
                                                 f"Fitted on dev 100-149 (real-web evidence): {rule.get('fit_answered')} of "
                                                 f"{rule.get('claims_fitted')} claims confident, {rule.get('fit_accuracy')} of them right.", "",
                                                 "| claims | confident (share) | right among them | accuracy of all |", "|---|---|---|---|"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, idx in (("dev 50-99 (held out)", REPORT), ("dev 0-249 (incl. tuned and fit claims)", list(range(len(xs))))):
        pp, ll, gg = p[idx], [labels[i] for i in idx], [gold[i] for i in idx]
        a = answered(pp, ll, gg, t)
        out[name] = a
        acc = sum(x == y for x, y in zip(ll, gg)) / len(gg)
        lines.append(f"| {name} | {a['answered']} ({a['coverage']:.2f}) | {a['accuracy']} | {acc:.3f} |")
        rc = risk_coverage(pp, ll, gg)
        ax.plot([c for c, _ in rc], [r for _, r in rc], label=name)
    ax.axhline(0.8, color="grey", ls=":", lw=1)
    ax.set_xlabel("share of claims answered (surest first)")
    ax.set_ylabel("accuracy of the answered claims")
    ax.set_title(f"Risk-coverage, real-web evidence: {model_name.removeprefix('packaged:')}")
    ax.set_ylim(0, 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results_dir(__file__) / "real_web_risk_coverage.png", dpi=110)
    lines += ["", "![risk-coverage](real_web_risk_coverage.png)", ""]
    out["markdown"] = "\n".join(lines) + "\n"
    return out


def _cells(m: dict) -> str:
    f1 = " / ".join(f"{v['f1']:.2f}" for v in m["per_class"].values())
    return f"{m['macro_f1']:.3f} | {m['accuracy']:.3f} | {f1}"


def markdown(rows: list[dict], meta: dict, report: bool) -> str:
    lines = ["# Verdict candidates on real retrieved evidence (the FEVER-8 baseline's, dev 0-249)", "",
             "Evidence: the FEVER-8 baseline's own 10 question-answer pairs per claim, retrieved from the real "
             "AVeriTeC knowledge store (`submission_part_a.csv`). Trained on AVeriTeC train only (gold evidence "
             "and the baseline's two real-web runs over train claims 0-999). **Tuning** = dev 0-49 and 150-249 "
             "(150 claims, where candidates are chosen); **0-249** includes those tuned claims.",
             f"Machine: `{meta['uptime']}`.", "",
             "| candidate | tuning: macro-F1 | acc | F1 S / R / NEE / C | 0-249: macro-F1 | acc | F1 S / R / NEE / C "
             "| train s | stage 3 s/claim | MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {_cells(r['tune'])} | {_cells(r['all'])} | {r.get('train_s') or '–'} | "
                     f"{r.get('stage3_s_per_claim', '–')} | {r.get('weights_mb', '–')} |")
    if report:
        lines += ["", "## Held out: dev 50-99 (reported once, for the chosen model)", "",
                  "| row | macro-F1 | acc | F1 S / R / NEE / C |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {_cells(r['report'])} |" for r in rows if "report" in r]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
