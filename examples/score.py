"""Score a predictions file from Python: its labels against the gold labels of the claims file,
beside always answering the most common gold label (no model; the evidence scores, Hungarian
METEOR and the AVeriTeC score, are ``sanctuary-local eval``'s, which also needs WordNet).

    python examples/check_claim.py --out /tmp/predictions.json
    python examples/score.py /tmp/predictions.json                 # gold: examples/claims.json
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from sanctuary_local.evaluation.labels import LabelMetrics, label_metrics
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.predictions import read_predictions_json

HERE = Path(__file__).resolve().parent


def score(predictions: Path, claims: Path) -> tuple[LabelMetrics, LabelMetrics]:
    """Label metrics of the predictions, and of the majority class, on the predicted claims."""
    gold = {c.index: c.gold_label for c in read_claims(claims)}
    preds = [p for p in read_predictions_json(predictions) if gold.get(p.claim_index)]
    truth = [gold[p.claim_index] for p in preds]
    majority = Counter(truth).most_common(1)[0][0]
    return label_metrics(truth, [p.label for p in preds]), label_metrics(truth, [majority] * len(truth))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", type=Path, help="an official predictions.json")
    ap.add_argument("--claims", type=Path, default=HERE / "claims.json", help="the claims with their gold labels")
    args = ap.parse_args(argv)
    ours, base = score(args.predictions, args.claims)
    print(f"{ours.n} claims: accuracy {ours.accuracy:.3f}, macro-F1 {ours.macro_f1:.3f} "
          f"(majority class: {base.accuracy:.3f}, {base.macro_f1:.3f})")
    for label, s in ours.per_class.items():
        print(f"  {label}: precision {s.precision:.2f}, recall {s.recall:.2f}, F1 {s.f1:.2f} ({s.support} gold)")


if __name__ == "__main__":
    main()
