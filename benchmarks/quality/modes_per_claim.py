"""Per-claim comparison of a mode run against its base run (issue 15's per-claim figures).

Splits the claims by whether the mode touched them (a follow-up round asked, or the claim
was decomposed into several parts) and counts, for each group, labels changed and claims
right before and after; lists every changed label:

    python benchmarks/quality/modes_per_claim.py --base runs/quality_e2e/cpu_base_dev0-49/run \
        --mode runs/quality_e2e/cpu_followup_dev0-49/run
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def touched(meta: dict) -> bool:
    """The mode changed this claim's verdict input."""
    return bool((meta.get("followup") or {}).get("questions")) or \
        len((meta.get("decomposition") or {}).get("components") or ()) > 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the base run's directory")
    ap.add_argument("--mode", required=True, help="the mode run's directory (same claims)")
    ap.add_argument("--claims", default=str(REPO.parent / "shared/data/averitec/dev_part_a.json"))
    args = ap.parse_args()
    from sanctuary_local.evaluation.inputs import load_gold
    from sanctuary_local.records import Prediction
    from sanctuary_local.io.run_files import STAGE_FILES
    from sanctuary_local.run.stage_files import StageFile

    base, mode = (StageFile(Path(d) / STAGE_FILES["verdict"], Prediction.from_dict).records for d in (args.base, args.mode))
    gold = {g.claim_id: g.label for g in load_gold(args.claims)}
    groups: dict[str, list[int]] = {"touched by the mode": [], "untouched": []}
    for i in sorted(mode):
        groups["touched by the mode" if touched(mode[i].meta) else "untouched"].append(i)
    for name, idx in groups.items():
        right = lambda recs: sum(recs[i].label == gold[str(recs[i].claim_id)] for i in idx)  # noqa: E731
        changed = [i for i in idx if base[i].label != mode[i].label]
        print(f"{name}: {len(idx)} claims, {len(changed)} labels changed, right {right(base)} -> {right(mode)}")
        for i in changed:
            print(f"  claim {i}: gold {gold[str(mode[i].claim_id)]}; {base[i].label} -> {mode[i].label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
