"""Check claims from Python without an LLM: stage 2 retrieves each claim's evidence (the claim
itself as the one question, as ``retrieve.py`` does), and the trained verdict, the ``cpu``
default, labels it with the four labels' probabilities and quotes the passages that weigh most.
``--out`` writes the official ``predictions.json`` (``score.py`` scores it).

    python examples/check_claim.py --claim 0
    python examples/check_claim.py --out /tmp/predictions.json      # every claim of the file
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.predictions import write_predictions_json
from sanctuary_local.records import HydeResult, Prediction, Query
from sanctuary_local.stages.evidence import run_retrieval
from sanctuary_local.stages.verdict.line import run_verdict
from sanctuary_local.stages.verdict.trained import load_trained

HERE = Path(__file__).resolve().parent


def check(claims_file: Path, store: Path, indices: list[int] | None = None) -> list[Prediction]:
    """Stages 2 and 3 of the ``cpu`` profile for the claims at ``indices`` (default: all)."""
    cfg = load_config("cpu")
    claims = [c for c in read_claims(claims_file) if indices is None or c.index in indices]
    questions = [HydeResult(c.index, None, (Query(c.index, 0, c.text),)) for c in claims]
    evidence = run_retrieval(store, questions, cfg.retrieval, models_dir=cfg.models_dir, workers=1)
    model = load_trained(cfg.verdict.trained_model, cfg.verdict.trained_rule)
    return run_verdict(claims, questions, evidence, None, cfg.verdict, trained=model)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=HERE / "claims.json")
    ap.add_argument("--store", type=Path, default=HERE / "store")
    ap.add_argument("--claim", type=int, action="append", help="a claim's index (repeatable; default: all)")
    ap.add_argument("--out", type=Path, help="write the predictions here (official predictions.json)")
    args = ap.parse_args(argv)
    preds = check(args.claims, args.store, args.claim)
    for p in preds:
        probs = p.meta["label_scores"]
        shown = ", ".join(f"{lbl} {pr:.2f}" for lbl, pr in zip(probs["labels"], probs["probabilities"]))
        print(f"claim {p.claim_index}: {p.label} ({shown})\n  {p.justification[:300]}")
    if args.out:
        write_predictions_json(preds, args.out)
        print(f"predictions: {args.out}")


if __name__ == "__main__":
    main()
