"""How much of the gold answers the trained verdict gets to read: a diagnostic, no model, no label.

A trained verdict reads each snippet cut to ``answer_words`` words (48). A snippet is a semantic
chunk of a page, and the answer may sit past its first 48 words. For every claim with gold
answers, each gold answer sentence (at least 3 content words) counts as *found* when at least 80 %
of its content words occur in the evidence text the model reads, as stage 3 orders it (the best
snippet of every question first, at most 10 pairs):

- the full snippets;
- their first ``answer_words`` words (``inputs.render``, the shipped reading);
- their focused ``answer_words`` words (``inputs.focused``: of the runs of whole sentences that fit,
  the one sharing most content words with its question and the claim; ``--answer-focus``).

and, past the 10 pairs stage 3 reads, every snippet of every question (what stage 2 kept at all).

Run it on tuning folds only (pipeline dev 0-49 and 100-149, retrieved dev 100-249), never dev 50-99:

    python benchmarks/verdict_focus.py --claims ../shared/data/averitec/dev_part_a.json \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run \\
        --retrieved-dev runs/vm/dev100-249_evidence.jsonl --label verdict_focus_contain

Stage 2's settings, compared on the retrieval range (dev 150-249): evidence retrieved with each
setting (``verdict-model evidence … --indices 150:250 --set retrieval.…``), one row each:

    python benchmarks/verdict_focus.py --claims ../shared/data/averitec/dev_part_a.json --indices 150:250 \\
        --evidence "shipped cpu=runs/vm/dev100-249_evidence.jsonl" --evidence "threshold 0.2=runs/vm/dev150-249_thr02.jsonl" \\
        --label verdict_focus_retrieval150-249
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


from bench_common import REPO, RESULTS, parse_range, uptime

sys.path.insert(0, str(REPO))

from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.records import Claim  # noqa: E402
from sanctuary_local.verdict_model.evidence import read_evidence, read_run_evidence  # noqa: E402
from sanctuary_local.verdict_model.inputs import _SENTENCE_END, _content_words, _cut, focused, from_queries  # noqa: E402

#: A gold sentence is found when this share of its content words occurs in the text read.
FOUND_SHARE = 0.8
READINGS = ("full snippets", "first words (shipped)", "focused words (--answer-focus)", "every snippet kept")


def gold_sentences(claim: Claim) -> list[set[str]]:
    """The content words of each gold answer sentence with at least 3 of them."""
    out = []
    for q in claim.gold_questions:
        for a in q.answers or ():
            if a.answer_type != "Unanswerable":
                out += [w for s in _SENTENCE_END.split(a.answer.strip()) if len(w := _content_words(s)) >= 3]
    return out


def found_shares(claims: dict[int, Claim], evidence: dict, words: int) -> dict[str, float | int]:
    """The share of gold sentences found in each reading, over the claims of ``evidence``."""
    found, total, n, pairs = [0] * len(READINGS), 0, 0, 0
    for i, ev in sorted(evidence.items()):
        gold = gold_sentences(claims[i])
        if not gold:
            continue
        x = from_queries(claims[i].text, ev.queries)
        kept = " ".join(sn.chunk.text for q in ev.queries for sn in q.snippets)
        texts = (" ".join(p.answer for p in x.pairs), " ".join(_cut(p.answer, words) for p in x.pairs),
                 " ".join(focused(p.answer, p.question, x.claim, words) for p in x.pairs), kept)
        pairs += len(x.pairs)
        for k, text in enumerate(texts):
            have = _content_words(text)
            found[k] += sum(1 for g in gold if len(g & have) >= FOUND_SHARE * len(g))
        total, n = total + len(gold), n + 1
    return {"claims": n, "gold_sentences": total, "pairs_per_claim": round(pairs / max(n, 1), 1),
            **{r: round(f / max(total, 1), 3) for r, f in zip(READINGS, found)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=Path, required=True, help="the dev claims file (gold answers)")
    ap.add_argument("--pipeline-run", type=Path, action="append", default=[], help="a finished run directory")
    ap.add_argument("--retrieved-dev", type=Path, help="a `verdict-model evidence` file of dev claims")
    ap.add_argument("--evidence", action="append", default=[], metavar="NAME=FILE",
                    help="a `verdict-model evidence` file of dev claims, as a row named NAME; repeatable")
    ap.add_argument("--indices", type=parse_range, help="only the claims a:b (e.g. 150:250, the retrieval range)")
    ap.add_argument("--answer-words", type=int, default=48)
    ap.add_argument("--label", default="verdict_focus_contain")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    claims = read_claims(args.claims)
    by_index = {c.index: c for c in claims}
    folds = {f"pipeline {r.parent.name}": read_run_evidence(r, claims, args.claims) for r in args.pipeline_run}
    if args.retrieved_dev:
        folds[f"retrieved {args.retrieved_dev.name}"] = read_evidence(args.retrieved_dev)
    for spec in args.evidence:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"--evidence expects NAME=FILE, got {spec!r}")
        folds[name] = read_evidence(Path(path))
    if args.indices:
        lo, hi = args.indices
        folds = {name: {i: ev for i, ev in ev.items() if lo <= i < hi} for name, ev in folds.items()}
    held_out = sorted({name for name, ev in folds.items() if any(50 <= i < 100 for i in ev)})
    if held_out:
        ap.error(f"{', '.join(held_out)}: holds dev claims 50-99, the held-out range; use tuning folds only")
    rows = {name: found_shares(by_index, ev, args.answer_words) for name, ev in folds.items()}
    lines = [f"# Gold answer sentences the trained verdict reads ({args.answer_words}-word answers)", "",
             f"Load: {uptime()}. A gold sentence is found when {FOUND_SHARE:.0%} of its content words occur "
             "in the text read.", "", f"    python {shlex.join(sys.argv)}", "",
             "| evidence | claims | gold sentences | pairs read per claim | " + " | ".join(READINGS) + " |",
             "|---" * (4 + len(READINGS)) + "|"]
    lines += [f"| {name} | {r['claims']} | {r['gold_sentences']} | {r['pairs_per_claim']} | "
              + " | ".join(f"{r[k]:.3f}" for k in READINGS) + " |"
              for name, r in rows.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out / f"{args.label}.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
