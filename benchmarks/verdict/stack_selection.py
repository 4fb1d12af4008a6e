"""How the stack was chosen: its members and weights, out of fold on train's real-web evidence.

Fifty tuning claims move macro-F1 by ±0.05 (dev 0-49 and 100-149 disagree by that much), so
members and weights are first judged where there are a thousand claims: the FEVER-8
baseline's two real-web runs over train claims 0-999, each claim predicted by models trained
without it (5 folds grouped by claim, the gold evidence of the held-out claims left out
too). Members, trained as ``verdict-model train`` trains them (gold + both real-web runs):

- ``full``: TF-IDF of the claim and its 10 pairs, answers cut at 100 words, C 1
  (``packaged:verdict-tfidf-web``);
- ``claim``: TF-IDF of the claim alone (``--pairs 0``), C 1 (``packaged:verdict-tfidf-claim``);
- ``stance``: stance cues per pair, pooled, C 0.1 (``--base stance``, ``packaged:verdict-stance-web``);
- ``pair``: TF-IDF of each pair read against its claim, pooled per claim, answers cut at 100
  words, C 0.3 (``--base tfidf --per-pair``, ``packaged:verdict-tfidf-pairs``).

Every combination with equal weights, and the best weights on a 0.1 grid, are scored out of
fold, then on the tuning claims (dev 0-49 and 150-249) and the fit claims (100-149), all on
the baseline's real-web evidence. Dev 50-99 is not read here.

    python benchmarks/verdict/stack_selection.py
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402
from benchmarks.verdict.real_web import DEV_EVIDENCE, FIT, TRAIN, TRAIN_EVIDENCE, TUNE  # noqa: E402

MEMBERS = {"full": {"base": "tfidf", "c": 1.0, "answer_words": 100},
           "claim": {"base": "tfidf", "c": 1.0, "answer_words": 100, "max_pairs": 0},
           "stance": {"base": "stance", "c": 0.1},
           "pair": {"base": "tfidf", "per_pair": True, "c": 0.3, "answer_words": 100}}
FOLDS = 5


def _predictor(xs, settings):  # noqa: ANN001, ANN202
    """A member fitted on ``xs`` in memory, as a function of inputs to probabilities."""
    from sanctuary_local.verdict_model import stance, tfidf
    from sanctuary_local.verdict_model.inputs import render

    if settings.base == "tfidf" and settings.per_pair:
        from sanctuary_local.verdict_model import pair_tfidf

        vec, lr, _ = pair_tfidf.fit(xs, settings)
        return lambda q: pair_tfidf.predict(vec, lr.coef_, lr.intercept_, q, settings)
    if settings.base == "stance":
        scaler, lr = stance.fit(xs, settings)
        return lambda q: lr.predict_proba(scaler.transform(stance.features(q, settings.max_pairs)))
    vec, lr = tfidf.fit(xs, settings)
    return lambda q: lr.predict_proba(vec.transform([render(x, settings.answer_words, settings.max_pairs) for x in q]))


@dataclass
class OutOfFold:
    """Each member's probabilities: out of fold on train's real-web readings, and on the dev
    claims 0-249 (the baseline's real-web evidence) from members trained on all of train."""

    train: list
    """Training inputs: gold evidence of every train claim, then both real-web runs."""
    group: np.ndarray
    """Each training input's train-claim index (folds are grouped by it)."""
    web: np.ndarray
    """True where the input is a real-web reading (only those are scored out of fold)."""
    fold: np.ndarray
    dev_xs: list
    oof: dict[str, np.ndarray]
    on_dev: dict[str, np.ndarray]
    seconds: dict[str, float]


def out_of_fold(claims_path: Path, members: dict[str, dict] = MEMBERS) -> OutOfFold:
    """Train each member fold by fold (5 folds grouped by train claim) and on all of train."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.records import LABELS
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.external import external_inputs
    from sanctuary_local.verdict_model.train import read_training_claims

    claims, _ = read_training_claims(TRAIN)
    gold_xs = labelled(claims, str(TRAIN))
    runs = [external_inputs(claims, TRAIN, p) for p in TRAIN_EVIDENCE]
    train = gold_xs + [x for xs, _ in runs for x in xs]
    group = np.array([c.index for c in claims] + [c.index for xs, found in runs for c in claims if c.index in found])
    web = np.array([False] * len(gold_xs) + [True] * (len(train) - len(gold_xs)))
    fold = np.random.RandomState(0).permutation(int(group.max()) + 1)[group] % FOLDS
    dev = read_claims(claims_path)[:250]
    dev_xs, _ = external_inputs(dev, claims_path, DEV_EVIDENCE, dev)

    oof, on_dev, seconds = {}, {}, {}
    for name, spec in members.items():
        t, s = time.perf_counter(), TrainSettings(**spec)
        oof[name] = np.zeros((len(train), len(LABELS)))
        for f in range(FOLDS):
            held = np.where((fold == f) & web)[0]
            oof[name][held] = _predictor([train[i] for i in np.where(fold != f)[0]], s)([train[i] for i in held])
        on_dev[name] = _predictor(train, s)(dev_xs)
        seconds[name] = round(time.perf_counter() - t, 1)
    return OutOfFold(train, group, web, fold, dev_xs, oof, on_dev, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", default="stack_selection")
    args = ap.parse_args()

    from sanctuary_local.records import LABELS
    from sanctuary_local.verdict_model.evaluate import metrics_of
    from sanctuary_local.verdict_model.stack import combine

    o = out_of_fold(args.claims)
    train, web, dev_xs, oof, on_dev, seconds = o.train, o.web, o.dev_xs, o.oof, o.on_dev, o.seconds
    W = np.where(web)[0]
    y_oof = [train[i].label for i in W]
    y_dev = [x.label for x in dev_xs]

    def score(weights: dict[str, float]) -> dict:
        names = [k for k, w in weights.items() if w > 0]
        ws = [weights[k] for k in names]
        p_oof, p_dev = combine([oof[k][W] for k in names], ws), combine([on_dev[k] for k in names], ws)
        pred = [LABELS[i] for i in p_dev.argmax(1)]
        return {"weights": weights, "oof": metrics_of(y_oof, [LABELS[i] for i in p_oof.argmax(1)]),
                "tune": metrics_of([y_dev[i] for i in TUNE], [pred[i] for i in TUNE]),
                "fit": metrics_of([y_dev[i] for i in FIT], [pred[i] for i in FIT])}

    rows = [score({k: 1.0 / len(c) if k in c else 0.0 for k in MEMBERS})
            for r in range(1, len(MEMBERS) + 1) for c in itertools.combinations(MEMBERS, r)]
    grid = [score({k: w / 10 for k, w in zip(MEMBERS, ws)})
            for ws in itertools.product(range(11), repeat=len(MEMBERS)) if sum(ws) == 10]
    grid.sort(key=lambda r: (r["oof"]["macro_f1"], r["oof"]["accuracy"]), reverse=True)
    meta = {"train": str(TRAIN), "train_evidence": [str(p) for p in TRAIN_EVIDENCE], "dev_evidence": str(DEV_EVIDENCE),
            "folds": FOLDS, "oof_claims": len(W) // len(TRAIN_EVIDENCE), "member_seconds": seconds, "uptime": uptime()}
    write_result(results_dir(__file__), args.label, meta, {"equal": rows, "grid_top": grid[:5]},
                 markdown(rows, grid[:5], meta))


def _cells(m: dict) -> str:
    return f"{m['macro_f1']:.3f} | {m['accuracy']:.3f}"


def markdown(rows: list[dict], grid: list[dict], meta: dict) -> str:
    head = ["| members (weights) | out of fold, train real-web: macro-F1 | acc | tuning: macro-F1 | acc | "
            "fit 100-149: macro-F1 | acc |", "|---|---|---|---|---|---|---|"]

    def line(r: dict) -> str:
        shown = " + ".join(f"{k} {w:.2f}" for k, w in r["weights"].items() if w > 0)
        return f"| {shown} | {_cells(r['oof'])} | {_cells(r['tune'])} | {_cells(r['fit'])} |"

    return "\n".join([
        "# Choosing the stack: members and weights, out of fold on train's real-web evidence", "",
        f"{meta['oof_claims']} train claims, each read on both of the FEVER-8 baseline's real-web runs by members "
        f"trained without it ({meta['folds']} folds grouped by claim); then the tuning claims (dev 0-49 and 150-249) "
        "and the fit claims (dev 100-149) on the baseline's real-web dev evidence. Dev 50-99 is not read here. "
        f"Member training (all folds) in seconds: {meta['member_seconds']}. Machine: `{meta['uptime']}`.", "",
        "## Equal weights", "", *head, *(line(r) for r in rows), "",
        "## The best weights out of fold (0.1 grid)", "", *head, *(line(r) for r in grid), ""])


if __name__ == "__main__":
    main()
