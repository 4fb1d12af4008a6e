"""Training evidence retrieved as stage 1 retrieves it: each gold question with a hypothetical answer.

At run time stage 2 searches with stage 1's question *and* its hypothetical answer (HyDE,
``Query.text``); the default's retrieved training evidence searched with the gold question alone.
A 1.5B model's hypothetical answer mostly restates the claim, so here each gold question is
searched with the claim's text as its answer: the snippets come closer to those a run shows
stage 3. Two steps:

    # the evidence (stage 2 of the cpu profile over the train claims' surrogate store; the same
    # seeded 483 claims as the default's file; about 1.3 s per claim on quiet cores; resumable)
    python benchmarks/verdict/hyde_evidence.py build ../shared/data/averitec/train.json --store runs/vm/store \\
        --out runs/vm/train_evidence_hyde.jsonl --limit 483 --seed 0
    # the table: the default's settings with that evidence instead of, or beside, the default's
    python benchmarks/verdict/hyde_evidence.py table --extra ret483=runs/vm/train_evidence.jsonl \\
        --extra hyde483=runs/vm/train_evidence_hyde.jsonl --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_dev100-149/run --retrieved-dev runs/vm/dev100-249_evidence.jsonl --notes RULE.md

Labels are the argmax. Dev 50-99 is never read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.verdict import tfidf_sweep as sweep

from sanctuary_local.errors import UserError  # noqa: E402
from sanctuary_local.records import Claim, Query  # noqa: E402
from sanctuary_local.verdict_model.base import TrainSettings  # noqa: E402
from sanctuary_local.run.training_evidence import build  # noqa: E402
from sanctuary_local.verdict_model.evidence import inputs_from_evidence  # noqa: E402
from sanctuary_local.verdict_model.tfidf import fit  # noqa: E402


def claim_as_answer(claim: Claim) -> tuple[Query, ...]:
    """Each gold question as a stage-2 query whose hypothetical answer is the claim's text."""
    return tuple(Query(claim.index, n, q.question, (claim.text,))
                 for n, q in enumerate(claim.gold_questions) if q.question.strip())


def build_main(argv: list[str]) -> None:
    from sanctuary_local.verdict_model.train import read_training_claims

    ap = argparse.ArgumentParser(prog="verdict/hyde_evidence.py build", description="retrieve the evidence file")
    ap.add_argument("claims", type=Path)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=483)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                    help="a retrieval setting, as `verdict-model evidence --set` (repeatable)")
    args = ap.parse_args(argv)
    from sanctuary_local.cli.run_cmd import parse_overrides

    if not args.claims.is_file():
        raise SystemExit(f"error: not a file: {args.claims}")
    claims, _ = read_training_claims(args.claims)
    t0 = time.time()

    def progress(done: int, total: int) -> None:
        print(f"\r{done}/{total} claims, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)

    try:
        n = build(claims, args.store, args.out, overrides=parse_overrides(args.set_), limit=args.limit, seed=args.seed,
                  progress=progress, queries=claim_as_answer)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"\n{args.out}: evidence for {n} claims", file=sys.stderr)


def rows(sw: sweep.Sweep, extras: list[str]) -> list[dict[str, Any]]:
    """The default (its own retrieved evidence), that evidence replaced, and both."""
    if len(extras) != 2:
        raise SystemExit("error: give --extra twice: the default's evidence, then this script's")
    s = sweep.settings(argparse.Namespace(c=[], pairs=[], words=[]), extras[:1])[0]
    ts = TrainSettings(base="tfidf", c=s.c, answer_words=s.words, seed=sweep.SHIPPED["seed"],
                       class_weight=sweep.SHIPPED["class_weight"])
    retrieved = {name: inputs_from_evidence(sw.claims, sw.extras[name], max_pairs=s.pairs) for name in extras}
    tests = sw.tests(s.pairs)
    out = [sw.majority()]
    for name, extra in ((f"default ({extras[0]})", retrieved[extras[0]]),
                        (f"{extras[1]} instead", retrieved[extras[1]]),
                        (f"{extras[0]} + {extras[1]}", retrieved[extras[0]] + retrieved[extras[1]])):
        t0 = time.perf_counter()
        vec, lr = fit(sw.gold + extra, ts, s.pairs)
        out.append(sweep.scored(name, tests, lambda xs, vec=vec, lr=lr: sweep._predict(vec, lr, xs, s), t0))
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(f"usage: {Path(sys.argv[0]).name} {{build,table}} [--help | options]\n\n{__doc__}")
        return
    if len(sys.argv) < 2 or sys.argv[1] not in ("build", "table"):
        raise SystemExit("error: the first argument is build or table (--help shows both steps)")
    step, sys.argv = sys.argv[1], [f"{sys.argv[0]} {sys.argv[1]}", *sys.argv[2:]]
    if step == "build":
        build_main(sys.argv[1:])
    else:
        sweep.one_extra_main(__doc__, "verdict_hyde_evidence",
                             "# TF-IDF verdict: training evidence searched as stage 1 searches", rows)

if __name__ == "__main__":
    sys.exit(main())
