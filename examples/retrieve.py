"""Stage 2 alone, from Python: the evidence a knowledge store holds for one claim, searched
with the claim itself as the only question (no LLM, no stage 1). Every snippet keeps the URL
and the exact character span of its document it was cut from.

    python examples/retrieve.py                      # claim 0 of examples/claims.json
    python examples/retrieve.py --claim 2 --store examples/store --profile cpu
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import ClaimEvidence, HydeResult, Query
from sanctuary_local.stages.evidence import run_retrieval

HERE = Path(__file__).resolve().parent


def retrieve(claims: Path, store: Path, index: int, profile: str = "cpu") -> ClaimEvidence:
    """The stage-2 record of claim ``index``: per question its snippets, best first."""
    cfg = load_config(profile)
    claim = next(c for c in read_claims(claims) if c.index == index)
    question = HydeResult(claim.index, None, (Query(claim.index, 0, claim.text),))
    [evidence] = run_retrieval(store, [question], cfg.retrieval, models_dir=cfg.models_dir, workers=1)
    return evidence


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=HERE / "claims.json")
    ap.add_argument("--store", type=Path, default=HERE / "store")
    ap.add_argument("--claim", type=int, default=0, help="the claim's index in the claims file")
    ap.add_argument("--profile", default="cpu")
    args = ap.parse_args(argv)
    evidence = retrieve(args.claims, args.store, args.claim, args.profile)
    for qe in evidence.queries:
        print(f"Q: {qe.query.question}")
        for sn in qe.snippets:
            c = sn.chunk
            print(f"  {sn.score:.2f}  {c.url} [{c.start}:{c.end}]  {' '.join(c.text.split())[:100]}")


if __name__ == "__main__":
    main()
