"""Extra calibration inputs for the label scores: do they carry the signal the scores lack?

``--pass no-evidence`` (the default): the evidence's *effect* on the label scores.

Contextual calibration (Zhao et al., 2021) in one extra pass: for every claim of a scored
run, score the four labels once more with the same questions but **no evidence** (the
scored prompt, ``verdict.scored_prompt``, every question shown as "(no evidence
retrieved)"). The no-evidence scores are the model's prior about the claim alone; the
difference to the run's own (with-evidence) scores is what the evidence moved. Then
leave-one-out logistic regressions on the run's claims compare, claim for claim:

- the run's label scores + stage-1 label (what ``sanctuary-local calibrate`` fits);
- the same plus the no-evidence scores (the model may weigh the difference);
- the no-evidence scores + stage-1 label alone (how much is the claim prior).

``--pass verdict-words``: the same reasoning (the run's own, greedy), then a question in
the words fact-checkers publish, scored as the answer: True, False, Unproven, Mixed
(``VERDICT_WORDS_ASK``). The four scores are inputs beside the run's label scores, as above.

Stages 1 and 2 are read from the run, never recomputed; the no-evidence pass is the real
model on the real prompts (the run's config, its llama.cpp backend), appended claim by
claim to ``runs/evidence_effect/<label>/<pass>.jsonl`` (rerun to resume).

    python benchmarks/evidence_effect.py \
        --run runs/quality_e2e/cpu_scored_reason_short_rp_raw_dev100-149/run \
        --label cpu_short_rp_dev100-149

Writes ``benchmarks/results/evidence_effect_<label>.{md,json}``. Read only runs over the
fit (100-149) or tuning (0-49) ranges: nothing here may be chosen on the reporting range.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sanctuary_local.calibrate import load_fit_data, predicted_labels, run_config  # noqa: E402
from sanctuary_local.evaluation.labels import label_metrics  # noqa: E402
from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.records import LABELS, ClaimEvidence, HydeResult, QueryEvidence  # noqa: E402
from sanctuary_local.runstate import STAGE_FILES, StageFile  # noqa: E402
from sanctuary_local.stages.calibration import _log_softmax, fit_logistic  # noqa: E402

DEFAULT_CLAIMS = REPO.parent / "shared" / "data" / "averitec" / "dev_part_a.json"
C_VALUES = (0.3, 1.0, 3.0)
VERDICT_WORDS = ("True", "False", "Unproven", "Mixed")
VERDICT_WORDS_ASK = ("Based on your reasoning, how would a fact-checker rate the claim? Answer with one word: "
                     "True, False, Unproven or Mixed.")


def without_evidence(ev: ClaimEvidence) -> ClaimEvidence:
    """The same questions, none of their snippets (the prompt shows each as unanswered)."""
    return ClaimEvidence(ev.claim_index, tuple(QueryEvidence(q.query) for q in ev.queries))


def verdict_words(claim: Any, hyde: HydeResult, ev: ClaimEvidence, reasoning: str, backend: Any, vcfg: Any) -> Any:
    """The run's prompt and reasoning, then ``VERDICT_WORDS_ASK``: the four words' scores."""
    from sanctuary_local.llm.base import ChatMessage, ScoreRequest
    from sanctuary_local.stages.verdict import build_prompts, config_prompt_hash, guard_flagged
    from sanctuary_local.stages.verdict_draft import Context, Draft
    from sanctuary_local.stages.verdict_paper import fit_conversation

    ctx = Context(backend, vcfg, None, config_prompt_hash(vcfg))
    d = build_prompts(guard_flagged([Draft(claim, hyde, ev, None)], ctx), ctx)[0]
    conv = fit_conversation(ctx, d.request.messages, reasoning, ChatMessage("user", VERDICT_WORDS_ASK), 16)
    return backend.score([ScoreRequest(conv, VERDICT_WORDS, tag=f"{claim.index}:words")])[0]


def extra_scores(run: Path, out: Path, claims_path: Path, kind: str) -> dict[int, dict[str, Any]]:
    """Claim index -> {"logprobs", "seconds"} of the extra pass (computed once, appended)."""
    from sanctuary_local.calibrate import run_predictions
    from sanctuary_local.llm import make_backend
    from sanctuary_local.stages.verdict import run_verdict

    cfg = run_config(run)
    vcfg = dataclasses.replace(cfg.verdict, calibration="")
    if kind == "no-evidence":
        vcfg = dataclasses.replace(vcfg, reasoning_tokens=0)
    preds = run_predictions(run)
    claims = {c.index: c for c in read_claims(claims_path)}
    hyde = dict(StageFile(run / STAGE_FILES["hyde"], HydeResult.from_dict, repair=False).records)
    evidence = dict(StageFile(run / STAGE_FILES["retrieval"], ClaimEvidence.from_dict, repair=False).records)
    path = out / f"{kind}.jsonl"
    done = {json.loads(line)["claim_index"]: json.loads(line) for line in path.read_text().splitlines()} if path.exists() else {}
    todo = [i for i in sorted(evidence) if i not in done and i in hyde]
    if todo:
        backend = make_backend(vcfg.llm, cfg.models_dir)
        try:
            for n, i in enumerate(todo, 1):
                t0 = time.perf_counter()
                if kind == "no-evidence":
                    pred = run_verdict([claims[i]], [hyde[i]], [without_evidence(evidence[i])], backend, vcfg)[0]
                    scores = (pred.meta.get("label_scores") or {}).get("logprobs")
                else:
                    res = verdict_words(claims[i], hyde[i], evidence[i], preds[i].meta.get("raw_text") or "", backend, vcfg)
                    scores = list(res.logprobs) if res.ok else None
                row = {"claim_index": i, "logprobs": scores, "seconds": round(time.perf_counter() - t0, 2)}
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                done[i] = row
                print(f"[{n}/{len(todo)}] claim {i}: {row['seconds']} s", file=sys.stderr, flush=True)
        finally:
            backend.close()
    return done


def metrics(gold: list[str], pred: list[str]) -> dict[str, float]:
    m = label_metrics(gold, pred)
    return {"accuracy": round(m.accuracy, 3), "macro_f1": round(m.macro_f1, 3)}


def loo(examples: list[Any], c: float, balanced: bool, sha: str, prompt: str) -> list[str]:
    """Leave-one-out labels: claim i labelled by the regression fitted on the others."""
    return [predicted_labels([examples[i]], fit_logistic(examples[:i] + examples[i + 1:], sha, prompt, c=c, balanced=balanced))[0]
            for i in range(len(examples))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished scored run (verdict.mode = scored)")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", required=True)
    ap.add_argument("--pass", dest="kind", choices=("no-evidence", "verdict-words"), default="no-evidence")
    ap.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    out = REPO / "runs" / "evidence_effect" / args.label
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    extra_run = extra_scores(args.run, out, args.claims, args.kind)
    load = os.getloadavg()
    fit = load_fit_data(args.run, args.claims)
    keep = [(i, e) for i, e in zip(fit.indices, fit.examples, strict=True) if (extra_run.get(i) or {}).get("logprobs")]
    with_ev = [e for _, e in keep]
    both = [dataclasses.replace(e, stance=tuple(_log_softmax(list(extra_run[i]["logprobs"])))) for i, e in keep]
    prior = [dataclasses.replace(e, logprobs=tuple(extra_run[i]["logprobs"])) for i, e in keep]
    gold = [e.gold for e in with_ev]
    majority = max(LABELS, key=gold.count)
    rows: list[dict[str, Any]] = [{"row": f"majority ({majority})", **metrics(gold, [majority] * len(gold))},
                                  {"row": "stage-1 label alone", **metrics(gold, [e.provisional or majority for e in with_ev])}]
    extra = "no-evidence" if args.kind == "no-evidence" else "verdict-word"
    for name, ex in (("label scores + stage-1", with_ev), (f"label and {extra} scores + stage-1", both),
                     (f"{extra} scores + stage-1", prior)):
        for c in C_VALUES:
            for bal in (False, True):
                pred = loo(ex, c, bal, fit.model_sha256, fit.prompt_hash)
                rows.append({"row": f"{name}, C {c}" + (", balanced" if bal else ""), **metrics(gold, pred)})
    secs = [extra_run[i]["seconds"] for i, _ in keep]
    result = {"run": str(args.run), "pass": args.kind, "claims": [i for i, _ in keep], "n": len(keep), "load": [round(x, 2) for x in load],
              "extra_seconds_mean": round(sum(secs) / len(secs), 2), "wall_s": round(time.time() - t0, 1),
              "rows": [{k: v for k, v in r.items() if k in ("row", "accuracy", "macro_f1")} for r in rows]}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"evidence_effect_{args.label}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = [f"# Evidence effect: `{args.label}`", "",
          f"Command: `python benchmarks/evidence_effect.py --run {args.run} --pass {args.kind} --label {args.label}`. "
          f"{len(keep)} claims, leave-one-out; load at the end {result['load']}; the {args.kind} pass "
          f"{result['extra_seconds_mean']} s/claim (standalone: a verdict-words pass re-reads the whole prompt).", "",
          "| row | accuracy | macro-F1 |", "|---|---|---|"]
    md += [f"| {r['row']} | {r['accuracy']:.3f} | {r['macro_f1']:.3f} |" for r in rows]
    (args.results_dir / f"evidence_effect_{args.label}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
