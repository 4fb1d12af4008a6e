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

sys.path.insert(0, str(REPO / "benchmarks"))

from calibration_variants import DEFAULT_CLAIMS, judged, qa_utilities, row, table  # noqa: E402

from sanctuary_local.calibrate import load_fit_data, run_config  # noqa: E402
from sanctuary_local.errors import UserError  # noqa: E402
from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.records import ClaimEvidence, HydeResult, QueryEvidence  # noqa: E402
from sanctuary_local.runstate import STAGE_FILES, StageFile  # noqa: E402
from sanctuary_local.stages.calibration import _log_softmax, fit_logistic  # noqa: E402

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


def read_done(path: Path) -> dict[int, dict[str, Any]]:
    """The claims an earlier pass finished. A line torn by a kill is dropped from the file
    (so the next append starts on a line of its own) and its claim is recomputed."""
    done: dict[int, dict[str, Any]] = {}
    lines = path.read_text("utf-8").splitlines() if path.exists() else []
    for line in lines:
        try:
            rec = json.loads(line)
            done[int(rec["claim_index"])] = rec
        except (ValueError, KeyError, TypeError):
            print(f"{path}: dropping an unreadable line (its claim is recomputed): {line[:60]!r}", file=sys.stderr)
    if len(done) < len(lines):
        path.write_text("".join(json.dumps(rec) + "\n" for rec in done.values()), "utf-8")
    return done


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
    done = read_done(path)
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
                rec = {"claim_index": i, "logprobs": scores, "seconds": round(time.perf_counter() - t0, 2)}
                with path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                done[i] = rec
                print(f"[{n}/{len(todo)}] claim {i}: {rec['seconds']} s", file=sys.stderr, flush=True)
        finally:
            backend.close()
    return done


def examples(fit: Any, extra: dict[int, dict[str, Any]]) -> dict[str, list[Any]]:
    """The three input sets on the claims the extra pass scored: the run's label scores (as
    shipped), both (the extra scores ride in the logistic model's extra-feature slot,
    ``FitExample.stance``, normalised), and the extra scores alone."""
    keep = [(i, e) for i, e in zip(fit.indices, fit.examples, strict=True) if (extra.get(i) or {}).get("logprobs")]
    return {"shipped": [e for _, e in keep],
            "both": [dataclasses.replace(e, stance=tuple(_log_softmax(list(extra[i]["logprobs"])))) for i, e in keep],
            "extra": [dataclasses.replace(e, logprobs=tuple(extra[i]["logprobs"])) for i, e in keep],
            "indices": [i for i, _ in keep]}


def separation(examples: list[Any]) -> float | None:
    """ROC AUC of log P(Supported) - log P(Refuted) between the gold Supported and Refuted
    claims (0.5: the scores do not tell them apart); None without both classes."""
    from sklearn.metrics import roc_auc_score

    sr = [e for e in examples if e.gold in ("Supported", "Refuted")]
    if len({e.gold for e in sr}) < 2:
        return None
    return round(float(roc_auc_score([e.gold == "Supported" for e in sr], [e.logprobs[0] - e.logprobs[1] for e in sr])), 3)


def pick(rows: list[dict[str, Any]], majority_acc: float) -> dict[str, Any] | None:
    """The standing rule: among the rows at or above the majority's accuracy, the best
    macro-F1 (ties: higher accuracy, then the earlier row); None when no row qualifies."""
    ok = [r for r in rows if r["accuracy"] >= majority_acc]
    return max(ok, key=lambda r: (r["macro_f1"], r["accuracy"], -rows.index(r))) if ok else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished scored run (verdict.mode = scored)")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", required=True)
    ap.add_argument("--pass", dest="kind", choices=("no-evidence", "verdict-words"), default="no-evidence")
    ap.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--separation-only", action="store_true",
                    help="print how well the run's own label scores separate Supported from Refuted, and stop")
    args = ap.parse_args(argv)
    try:
        fit = load_fit_data(args.run, args.claims)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.separation_only:
        print(f"{args.run}: ROC AUC of log P(Supported) - log P(Refuted), Supported vs Refuted claims: "
              f"{separation(list(fit.examples))}")
        return 0
    out = REPO / "runs" / "evidence_effect" / args.label
    out.mkdir(parents=True, exist_ok=True)
    extra = extra_scores(args.run, out, args.claims, args.kind)
    load = [round(x, 2) for x in os.getloadavg()]
    ex = examples(fit, extra)
    gold = [e.gold for e in ex["shipped"]]
    qa_map = qa_utilities(args.run, args.claims, tuple(ex["indices"]))
    qa = [qa_map[i] for i in ex["indices"]]
    sha, h = fit.model_sha256, fit.prompt_hash
    base = [row("majority class (Refuted)", gold, ["Refuted"] * len(gold), [0.0] * len(gold)),
            row("stage-1 label alone", gold, [e.provisional or "Refuted" for e in ex["shipped"]], qa)]
    word = "no-evidence" if args.kind == "no-evidence" else "verdict-word"
    groups: dict[str, list[dict[str, Any]]] = {}
    for key, name in (("shipped", "(a) label scores + stage-1"), ("both", f"(b) label and {word} scores + stage-1"),
                      ("extra", f"(c) {word} scores + stage-1")):
        groups[key] = [row(f"{name}, C {c}" + (", balanced" if bal else ""), gold,
                           judged(lambda e, s, p, c=c, b=bal: fit_logistic(e, s, p, c=c, balanced=b), ex[key], None, sha, h), qa)
                       for c in C_VALUES for bal in (False, True)]
    picks = {k: pick(rows, base[0]["accuracy"]) for k, rows in groups.items()}
    secs = [extra[i]["seconds"] for i in ex["indices"]]
    result = {"run": str(args.run), "pass": args.kind, "claims": ex["indices"], "load_end": load,
              "separation_auc": separation(ex["shipped"]),
              "extra_seconds_mean": round(sum(secs) / len(secs), 2),
              "rows": base + [r for rows in groups.values() for r in rows],
              "picks": {k: (p["row"] if p else None) for k, p in picks.items()}}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = args.results_dir / f"evidence_effect_{args.label}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    md = [f"# Extra calibration inputs ({args.kind}): `{args.label}`", "",
          f"Command: `python benchmarks/evidence_effect.py --run {args.run} --pass {args.kind} --label {args.label}`. "
          f"{len(gold)} claims, leave-one-out logistic regressions; AVeriTeC@0.25 uses the run's own evidence (only labels "
          f"differ between rows). The {args.kind} pass: {result['extra_seconds_mean']} s/claim standalone (a verdict-words "
          f"pass re-reads the whole prompt here); load average when the analysis ran {load}.", "",
          f"The run's own label scores separate its Supported from its Refuted claims with a ROC AUC of "
          f"{result['separation_auc']} (log P(Supported) - log P(Refuted); 0.5 = chance).", "",
          *table(base + result["rows"][2:]), ""]
    md += [f"Pick {k} (standing rule: the best macro-F1 at or above the majority's accuracy): "
           + (f"**{p['row']}**, {p['accuracy']:.3f} / {p['macro_f1']:.3f} / {p['averitec_0.25']:.3f}" if p else "**none** qualifies")
           for k, p in picks.items()]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
