"""What the stage-3 label re-ask changes, measured on a finished quality-harness run.

The run's stage-3 records keep each claim's raw reasoning. For every claim whose
reasoning has no label line (flag ``verdict_label_fallback``), this rebuilds the exact
stage-3 request from the run's stage-1/2 records and calls the pipeline's own
``reask_missing_labels`` with the recorded reasoning — what ``run`` now does right after
generation (stage 3 decodes greedily, top_k = 1, so the reasoning itself would not change).
Writes the before/after label metrics on the same claims:

    python benchmarks/reask_effect.py --run runs/quality_e2e/cpu_qwen1.5b_dev0-49/run \
        --label cpu_qwen1.5b_dev0-49_reask
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a quality-harness (or `run`) output directory")
    ap.add_argument("--claims", default=str(REPO.parent / "shared/data/averitec/dev_part_a.json"))
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results"))
    args = ap.parse_args()
    import quality_e2e as q  # a sibling script: python puts benchmarks/ on sys.path
    from sanctuary_local.config.settings import Config
    from sanctuary_local.evaluation.inputs import load_gold
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.llm import make_backend
    from sanctuary_local.llm.base import ChatResult
    from sanctuary_local.models.resolve import set_offline_env
    from sanctuary_local.records import ClaimEvidence, HydeResult, Prediction
    from sanctuary_local.run.stage_files import STAGE_FILES, StageFile
    from sanctuary_local.stages.verdict.line import build_verdict_request, reask_missing_labels
    from sanctuary_local.stages.verdict.parsing import parse_verdict_output

    set_offline_env()
    run = Path(args.run)
    raw_cfg = orjson.loads((run / "config.json").read_bytes())
    cfg = Config()
    from sanctuary_local.config.settings import _merge  # the run's own effective config

    _merge(cfg, {k: v for k, v in raw_cfg.items() if k != "profile"}, str(run / "config.json"))
    hyde = StageFile(run / STAGE_FILES["hyde"], HydeResult.from_dict)
    ev = StageFile(run / STAGE_FILES["retrieval"], ClaimEvidence.from_dict)
    verdict = StageFile(run / STAGE_FILES["verdict"], Prediction.from_dict)
    claims = {c.index: c for c in read_claims(args.claims)}
    before = [verdict.records[i] for i in sorted(verdict.records)]
    todo = [p for p in before if "verdict_label_fallback" in p.flags and p.meta.get("raw_text")]
    backend = make_backend(cfg.verdict.llm, cfg.models_dir)
    t0 = time.perf_counter()
    after = {p.claim_index: p for p in before}
    try:
        for p in todo:
            c = claims[p.claim_index]
            req, _ = build_verdict_request(c, hyde.records[c.index], ev.records[c.index], cfg.verdict, backend)
            res = ChatResult(p.meta["raw_text"], finish_reason=p.meta.get("finish_reason", ""))
            [res] = reask_missing_labels([req], [res], backend, cfg.verdict)
            label, just, flags = parse_verdict_output(res.text, p.provisional_label)
            new_flags = [f for f in p.flags if f not in ("verdict_label_fallback", "verdict_label_inferred")] + list(flags)
            if res.extra.get("label_reasked"):
                new_flags.append("verdict_label_reasked")
            after[c.index] = dataclasses.replace(p, label=label, flags=tuple(dict.fromkeys(new_flags)))
            print(f"claim {c.index}: {p.label} -> {label} (re-ask said {res.extra.get('label_reask_text', '')!r})", file=sys.stderr)
    finally:
        backend.close()
    secs = time.perf_counter() - t0
    ids = {str(p.claim_id) for p in before}
    gold = [g for g in load_gold(args.claims) if g.claim_id in ids]
    rows = {"without re-ask": q.score(gold, q.as_examples(before), 1),
            "with re-ask": q.score(gold, q.as_examples([after[p.claim_index] for p in before]), 1)}
    res = {"label": args.label, "run": str(run), "n_claims": len(before), "reasked": len(todo),
           "reask_s_total": round(secs, 1), "rows": rows,
           "flag_rates": {"without re-ask": q.flag_rates(before), "with re-ask": q.flag_rates(list(after.values()))},
           "changed": {str(p.claim_index): [p.label, after[p.claim_index].label] for p in todo},
           "machine": {"cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}}
    out = Path(args.out) / f"reask_{args.label}"
    Path(f"{out}.json").write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2) + b"\n")
    lines = [f"# Stage-3 label re-ask on {run} ({len(before)} claims, {len(todo)} without a label line)", "",
             "| | accuracy | macro-F1 | AVeriTeC @0.25 | verdict_label_fallback |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['accuracy']:.3f} | {row['macro_f1']:.3f} | {row['averitec_0.25']:.3f} | "
                     f"{res['flag_rates'][name]['verdict_label_fallback']:.3f} |")
    lines += ["", f"Re-ask cost: {secs:.1f} s in total for {len(todo)} claims; load average at the end "
              f"{res['machine']['loadavg_at_end']}.", "", "Changed labels (before → after): "
              + ", ".join(f"claim {k}: {a} → {b}" for k, (a, b) in res["changed"].items()), "",
              f"Command: `python benchmarks/reask_effect.py --run {run} --label {args.label}`", ""]
    Path(f"{out}.md").write_text("\n".join(lines), "utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
