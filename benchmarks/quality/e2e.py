"""End-to-end quality harness: `run` on the surrogate store, then `eval` against gold.

One command measures what users judge the system by, on a range of AVeriTeC dev claims:

- **system**: the whole pipeline (stages 1–3) on the surrogate knowledge store
  (``../shared/tools/make_surrogate_store.py``: gold answers hidden among distractors),
  scored like the FEVER-8 leaderboard: label accuracy, macro-F1, per-class P/R/F1, the
  confusion matrix, Q-only and Q+A Hungarian METEOR and the AVeriTeC score at 0.25;
- **majority-class baseline**: every claim labelled Refuted (the majority class of the
  AVeriTeC dev set, ~61 %), no evidence. Accuracy alone flatters a model that says
  Refuted every time: read macro-F1 and the AVeriTeC score;
- **oracle evidence**: stage 3 alone, fed each claim's gold question–answer pairs as its
  evidence. Separates reasoning errors (this row) from retrieval errors (system row);
- **retrieval only**: the stage 1+2 evidence against the gold QA (Q-only and Q+A METEOR),
  with stage 1's provisional label as the verdict — what stage 3 adds is the difference;
- seconds per claim per stage, and the rates of the fallback / inference flags.

``--budget-s S`` runs the pipeline as ``run --budget-s S`` does (a pilot of the first claims at
full settings, the rest degraded along ``budget.py``'s ladder) and counts the claims per level;
a tiny S (``--budget-s 1``) puts every claim after the pilot at the ladder's floor.

``--corpus INDEX`` runs the pipeline against a corpus index (``sanctuary-local index``,
passed on as ``run --corpus``) instead of the range's surrogate store: every claim's
questions are searched in the whole index, e.g. the surrogate stores of dev claims 0–249
merged into one corpus (issue 28; docs/corpus.md has the commands). Stage 1 does not read
the evidence source, so ``--reuse-from`` a per-claim-store run copies stage 1 and
recomputes retrieval and the verdict; the oracle row does not read it either
(``--no-oracle`` saves its LLM time when the store run has it).

Runs are resumable: the pipeline run reuses ``run``'s stage files, the oracle stage has its
own fsync'ed stage file, so a stopped harness picks up where it stopped when the same
command is given again (the work directory is keyed by ``--label``). ``--eval-only``
scores a finished run as it stands (e.g. one made by an older checkout, whose config
fingerprint the current code would refuse to resume).

    python benchmarks/quality/e2e.py --indices 0:50 --profile cpu --label cpu_dev0-49
    python benchmarks/quality/e2e.py --indices 50:100 --corpus SHARED_INDEX --reuse-from cpu_dev50-99 \
        --no-oracle --label cpu_corpus_heldout50-99
    python benchmarks/quality/e2e.py --compare benchmarks/results/quality/quality_e2e_A.json \
        benchmarks/results/quality/quality_e2e_B.json --label before_after

Writes ``benchmarks/results/quality/quality_e2e_<label>.{json,md,png}``. Tune on dev claims 0–49;
report the final figure also on 50–99, never tuned on.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

# the rows' figures are computed in quality/stats.py, the tables and charts written by quality/report.py
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import DEFAULT_CLAIMS, SHARED, parse_range, results_dir
from benchmarks.quality.report import compare_markdown, to_markdown, write
from benchmarks.quality.stats import (
    as_examples, budget_levels, citation_rates, decomposition_stats, flag_rates, followup_stats, llm_usage, score,
    stage_seconds,
)

RESULTS = results_dir(__file__)

MAJORITY = "Refuted"


# ---------------------------------------------------------------------------- inputs
def ensure_store(claims: Path, lo: int, hi: int, work: Path) -> Path:
    """The surrogate store for claims [lo, hi), built once (deterministic, seconds)."""
    store = work / f"surrogate_{lo}_{hi}"
    if all((store / f"{i}.json").exists() for i in range(lo, hi)):
        return store
    tool = SHARED / "tools" / "make_surrogate_store.py"
    if not tool.exists():
        sys.exit(f"error: {tool} not found: the harness needs ../shared (the surrogate store builder)")
    subprocess.run([sys.executable, str(tool), "--claims", str(claims), "--out", str(store), "--indices", f"{lo}:{hi}"],
                   check=True)
    return store


def evidence_source(args: argparse.Namespace, lo: int, hi: int) -> tuple[Path, dict[str, Any]]:
    """The run's ``--store`` (the range's surrogate store, built once) or, with ``--corpus``,
    the corpus index (refused in one line when it is not one), and how the report names it."""
    if not args.corpus:
        store = ensure_store(Path(args.claims), lo, hi, Path(args.work))
        return store, {"kind": "surrogate store", "path": str(store)}
    from sanctuary_local.corpus.index import CorpusIndex, is_corpus_index

    corpus = Path(args.corpus)
    if not is_corpus_index(corpus):
        sys.exit(f"error: --corpus {corpus}: not a corpus index; build one with `sanctuary-local index DIR --out {corpus}`")
    ix = CorpusIndex(corpus)
    try:
        m = ix.manifest
        return corpus, {"kind": "corpus index", "path": str(corpus), "generation": ix.generation,
                        "documents": int(m.get("units", 0)), "segments": int(m.get("segments", 0)),
                        "text_mb": round(int(m.get("text_bytes", 0)) / 1e6, 1)}
    finally:
        ix.close()


def _reuse_dir(source: str | None, work_root: Path) -> Path | None:
    """``--reuse-from``: an earlier harness label (its ``run`` directory) or a run directory."""
    if not source:
        return None
    labelled = work_root / source / "run"
    return labelled if labelled.is_dir() else Path(source)


def system_run(args: argparse.Namespace, store: Path, work: Path) -> Path:
    """Run (or resume) the pipeline on the range; returns the run directory."""
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    out = work / "run"
    opts = RunOptions(claims=Path(args.claims), store=store, out=out, profile=args.profile,
                      claims_range=args.indices, workers=args.workers, quiet=args.quiet,
                      overrides=parse_overrides(args.set) if args.set else None,
                      reuse_from=_reuse_dir(args.reuse_from, work.parent), budget_s=args.budget_s,
                      argv=["quality_e2e", *sys.argv[1:]])
    run_pipeline(opts)
    return out


def oracle_evidence(claim) -> Any:
    """The claim's gold QA pairs as stage-2 evidence: one query per gold question, its gold
    answers as snippets (score 1.0; an unanswered question gets the official placeholder)."""
    from sanctuary_local.io.predictions import NO_ANSWER
    from sanctuary_local.records import Chunk, ClaimEvidence, EvidenceSnippet, Query, QueryEvidence

    queries = []
    for n, q in enumerate(claim.gold_questions):
        answers = [(a.scored_text(), a.source_url) for a in q.answers] or [(NO_ANSWER, "")]
        snippets = tuple(EvidenceSnippet(Chunk(claim.index, -1, url, 0, len(text), text), 1.0) for text, url in answers)
        queries.append(QueryEvidence(Query(claim.index, n, q.question), snippets))
    return ClaimEvidence(claim.index, tuple(queries))


def oracle_run(args: argparse.Namespace, claims: list, work: Path) -> Path:
    """Stage 3 alone on gold evidence, one claim at a time, persisted (resumable)."""
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.llm import make_backend
    from sanctuary_local.models.resolve import set_offline_env
    from sanctuary_local.records import HydeResult, Prediction
    from sanctuary_local.run.stage_files import StageFile, check_state
    from sanctuary_local.modes import verdict_steps
    from sanctuary_local.stages.verdict.line import run_verdict

    set_offline_env()
    cfg = load_config(args.profile, parse_overrides(args.set) if args.set else None)
    out = work / "oracle"
    check_state(out, {"config": cfg.fingerprint(), "claims": str(args.claims), "indices": args.indices}, force=False)
    sf = StageFile(out / "stage3_oracle.jsonl", Prediction.from_dict)
    todo = [c for c in claims if c.index not in sf]
    if todo:
        trained = None
        if cfg.verdict.mode == "trained":  # the classifier, no LLM
            from sanctuary_local.stages.verdict.trained import load_trained

            trained = load_trained(cfg.verdict.trained_model, cfg.verdict.trained_rule)
        backend = make_backend(cfg.verdict.llm, cfg.models_dir) if trained is None else None
        try:
            for i, c in enumerate(todo, 1):
                t = time.perf_counter()
                [p] = run_verdict([c], [HydeResult(c.index, None, ())], [oracle_evidence(c)], backend, cfg.verdict,
                                  trained=trained, modes=verdict_steps(cfg.verdict))
                sf.append(c.index, p, {"seconds": time.perf_counter() - t})
                if not args.quiet:
                    print(f"oracle {i}/{len(todo)} claim {c.index}: {p.label}", file=sys.stderr)
        finally:
            if backend is not None:
                backend.close()
    return out


def evaluate_all(args: argparse.Namespace) -> dict[str, Any]:
    from sanctuary_local.evaluation.inputs import EvalExample, load_gold
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.predictions import read_predictions_json

    lo, hi = parse_range(args.indices)
    work = Path(args.work) / args.label
    work.mkdir(parents=True, exist_ok=True)
    claims = [c for c in read_claims(args.claims) if lo <= c.index < hi]
    ids = {str(c.claim_id) for c in claims}
    gold = [g for g in load_gold(args.claims) if g.claim_id in ids]
    store, source = evidence_source(args, lo, hi)
    t0 = time.perf_counter()
    run_dir = work / "run" if args.eval_only else system_run(args, store, work)
    if not (run_dir / "predictions.json").exists():
        sys.exit(f"error: {run_dir / 'predictions.json'} not found: run the harness without --eval-only first")
    preds = [p for p in read_predictions_json(run_dir / "predictions.json") if str(p.claim_id) in ids]
    rows: dict[str, Any] = {"system": score(gold, as_examples(preds), args.workers)}
    rows["majority_baseline"] = score(gold, [EvalExample(g.claim_id, g.claim, MAJORITY, ()) for g in gold], args.workers)
    rows["retrieval_only"] = score(gold, as_examples(preds, label_of=lambda p: p.provisional_label), args.workers)
    if args.oracle:
        oracle_dir = work / "oracle" if args.eval_only else oracle_run(args, claims, work)
        from sanctuary_local.records import Prediction
        from sanctuary_local.run.stage_files import StageFile

        sf = StageFile(oracle_dir / "stage3_oracle.jsonl", Prediction.from_dict)
        done = [c for c in claims if c.index in sf]  # all of them unless --eval-only scores a stopped run
        oracle_preds = [sf.records[c.index] for c in done]
        oracle_ids = {str(c.claim_id) for c in done}
        rows["oracle_evidence"] = score([g for g in gold if g.claim_id in oracle_ids], as_examples(oracle_preds), args.workers)
        if len(done) < len(claims):
            sub = score([g for g in gold if g.claim_id in oracle_ids],
                        as_examples([p for p in preds if str(p.claim_id) in oracle_ids]), args.workers)
            rows["system_on_oracle_claims"] = sub
        # Its evidence *is* the gold QA: METEOR is 1 by construction and says nothing.
        rows["oracle_evidence"].update({"q_only": None, "qa": None})
        rows["oracle_evidence"]["verdict_s_per_claim"] = round(
            sum(sf.extras[c.index]["seconds"] for c in done) / max(1, len(done)), 2)
        rows["oracle_evidence"]["flag_rates"] = flag_rates(oracle_preds)
    timings = orjson.loads((run_dir / "timings.json").read_bytes())
    return {
        "label": args.label, "profile": args.profile, "overrides": args.set, "indices": args.indices,
        "claims_file": str(args.claims), "n_claims": len(claims), "rows": rows, "evidence_source": source,
        "stage_s_per_claim": stage_seconds(run_dir, [c.index for c in claims]),
        "flag_rates": flag_rates(preds), "models": _models(run_dir),
        "budget_s": args.budget_s, "budget_levels": budget_levels(preds),  # --budget-s runs only
        "llm_usage": llm_usage(run_dir, [c.index for c in claims]),
        "citations": citation_rates(preds),  # verdict.citations runs only; all None otherwise
        "followup": followup_stats(preds),  # followup.enabled runs only; None otherwise
        "decomposition": decomposition_stats(preds),  # decompose.enabled runs only; None otherwise
        "tokens": {s: {k: v for k, v in st.items() if k.startswith("tokens")} for s, st in timings["stages"].items()},
        "harness_wall_s_this_invocation": round(time.perf_counter() - t0, 1),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _models(run_dir: Path) -> dict[str, str]:
    man = orjson.loads((run_dir / "manifest.json").read_bytes())
    return {role: str(m.get("name")) for role, m in man.get("models", {}).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", default=str(DEFAULT_CLAIMS), help="AVeriTeC claims with gold (default: ../shared dev_part_a.json)")
    ap.add_argument("--indices", default="0:50", help="claims range a:b (default 0:50, the tuning range)")
    ap.add_argument("--profile", default="cpu", help="profile name or file (default cpu)")
    ap.add_argument("--set", action="append", default=[], help="config override key=value (repeatable)")
    ap.add_argument("--label", help="result name (default <profile>_dev<a>-<b-1>); also the work subdirectory")
    ap.add_argument("--work", default="runs/quality_e2e", help="work directory (resumable runs; default runs/quality_e2e)")
    ap.add_argument("--out", default=str(RESULTS), help="where quality_e2e_<label>.* go")
    ap.add_argument("--workers", type=int, default=None, help="retrieval / METEOR processes")
    ap.add_argument("--no-oracle", dest="oracle", action="store_false", help="skip the oracle-evidence row")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--corpus", metavar="INDEX",
                    help="run against this corpus index (`sanctuary-local index`; `run --corpus`) instead of the "
                         "range's surrogate store")
    ap.add_argument("--reuse-from", metavar="LABEL_OR_RUN_DIR",
                    help="copy the stages of an earlier run whose inputs are unchanged (e.g. the base run's stages "
                         "1-2 when only verdict settings differ); their seconds per claim are the source's")
    ap.add_argument("--budget-s", type=float, default=None, metavar="S",
                    help="run the pipeline with `run --budget-s S` (a pilot at full settings, the rest degraded "
                         "along budget.py's ladder when over S s/claim); the report counts the claims per level. "
                         "A tiny S (e.g. 1) measures the ladder's floor")
    ap.add_argument("--eval-only", action="store_true",
                    help="score the finished run in the work directory as it is (no run, no resume)")
    ap.add_argument("--compare", nargs="+", metavar="RESULT_JSON", help="tabulate existing results (no run)")
    args = ap.parse_args(argv)
    if args.budget_s is not None and args.budget_s <= 0:
        ap.error(f"--budget-s must be > 0 (got {args.budget_s:g})")
    if args.budget_s is not None and args.eval_only:
        ap.error("--budget-s runs the pipeline under a budget; --eval-only scores a finished run as it is: pick one")
    if args.compare:
        results = [orjson.loads(Path(p).read_bytes()) for p in args.compare]
        paths = write(results, args.label or "compare", Path(args.out))
        print(compare_markdown(results, args.label or "compare"))
    else:
        lo, hi = parse_range(args.indices)
        args.label = args.label or f"{Path(args.profile).stem}_dev{lo}-{hi - 1}"
        res = evaluate_all(args)
        res["argv"] = argv if argv is not None else sys.argv[1:]
        paths = write(res, args.label, Path(args.out))
        print(to_markdown(res))
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
