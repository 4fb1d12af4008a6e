"""Do two verdict models agree? A retrained model against the shipped one, say.

Compares the files' SHA-256, the largest difference of each array of a TF-IDF model, and, on
the gold evidence of dev 0-49 and 100-249 (and the retrieved dev 100-249 evidence, if given),
the largest probability difference and how many inputs get the same label. Dev 50-99 is never read.

    sanctuary-local verdict-model train ../shared/data/averitec/train.json --out runs/vm/repro_default --base tfidf \\
        --seed 0 --evidence runs/vm/train_evidence.jsonl --c 0.5
    python benchmarks/verdict/compare_models.py packaged:verdict-tfidf runs/vm/repro_default \\
        --retrieved-dev runs/vm/dev100-249_evidence.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import DEFAULT_CLAIMS

from sanctuary_local.errors import UserError  # noqa: E402
from sanctuary_local.verdict_model.store import directory_sha256, load_model, resolve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="a model directory or packaged:NAME")
    ap.add_argument("b", help="a model directory or packaged:NAME")
    ap.add_argument("--retrieved-dev", type=Path, help="evidence retrieved for dev 100-249 (verdict-model evidence)")
    ap.add_argument("--dev", type=Path, default=DEFAULT_CLAIMS)
    args = ap.parse_args()
    missing = [str(p) for p in (args.dev, args.retrieved_dev) if p and not p.is_file()]
    if missing:
        raise SystemExit(f"error: not a file: {', '.join(missing)}")
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.evidence import inputs_from_evidence, read_evidence
    from sanctuary_local.verdict_model.train import read_training_claims

    try:
        dirs = [resolve(m) for m in (args.a, args.b)]
        models = [load_model(m) for m in (args.a, args.b)]
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    out: dict = {"a": args.a, "b": args.b, "same_sha256": directory_sha256(dirs[0]) == directory_sha256(dirs[1])}
    arrays = [d / "tfidf_lr.npz" for d in dirs]
    if all(p.is_file() for p in arrays):
        a, b = (np.load(p) for p in arrays)
        out["max_array_difference"] = {k: float(np.abs(a[k] - b[k]).max()) if a[k].shape == b[k].shape else "shapes differ"
                                       for k in a.files}
    dev, _ = read_training_claims(args.dev)
    xs = labelled([c for c in dev if c.index < 50 or 100 <= c.index < 250], str(args.dev))
    if args.retrieved_dev:
        xs += inputs_from_evidence(dev[100:250], read_evidence(args.retrieved_dev))
    pa, pb = (m.predict_proba(xs) for m in models)
    out.update({"inputs": len(xs), "same_label": int((pa.argmax(1) == pb.argmax(1)).sum()),
                "max_probability_difference": float(np.abs(pa - pb).max())})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
