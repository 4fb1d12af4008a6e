"""A shared corpus is harder than a per-claim store (issue 28): retrieval on both, same claims.

The surrogate stores of dev claims lo–hi (``../shared/tools/make_surrogate_store.py``)
are merged into one corpus index (``sanctuary-local index`` over the store folder: every
store line is a document); each claim's gold questions + gold answers are its queries
(as in ``quality/surrogate.py``). Per claim, beside its own per-claim store:

- gold-document recall: the claim's gold documents (its store lines of ``type == "gold"``)
  among the documents of the coarse top-125 segments, union over its queries;
- distractors: the share of those coarse documents that come from other claims' stores,
  and how many of them are other claims' gold documents;
- with ``--snippets``: claims with a gold snippet (a final snippet, at the profile's
  similarity threshold, from one of the claim's own gold documents), running the real
  stage 2 (``run_retrieval``: MiniLM chunking and dense search) on both sources.

    python ../shared/tools/make_surrogate_store.py --claims ../shared/data/averitec/dev_part_a.json \
        --indices 0:250 --out /tmp/shared_corpus/store
    python benchmarks/corpus/shared.py --store /tmp/shared_corpus/store --index /tmp/shared_corpus/index \
        --claims ../shared/data/averitec/dev_part_a.json --indices 0:250 --out benchmarks/results/corpus/corpus_shared_dev0-249
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.quality.surrogate import coarse_recall, gold_queries  # noqa: E402

from sanctuary_local.config.settings import load_config  # noqa: E402
from sanctuary_local.corpus.build import build_index  # noqa: E402
from sanctuary_local.corpus.source import CorpusSource  # noqa: E402
from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.io.store import KnowledgeStore  # noqa: E402
from sanctuary_local.records import HydeResult  # noqa: E402
from sanctuary_local.stages.evidence import EvidenceRetriever, run_retrieval  # noqa: E402


def unit_owner(source: CorpusSource) -> tuple[np.ndarray, np.ndarray]:
    """Per corpus unit: the claim whose store file it comes from, and its 0-based line."""
    ix = source.index
    owner, line = np.empty(ix.n_units, np.int64), np.empty(ix.n_units, np.int64)
    for u in range(ix.n_units):
        m = ix.unit_meta(u)
        owner[u], line[u] = int(m["path"].removesuffix(".json")), m["line"] - 1
    return owner, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--claims", type=Path, required=True)
    ap.add_argument("--indices", default="0:250")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--snippets", default="", help="a:b: also run the semantic stage on these claims")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    lo, hi = map(int, args.indices.split(":"))
    cfg = load_config(args.profile).retrieval
    cfg.index_cache = ""
    t0 = time.perf_counter()
    rep = build_index(args.store, args.index)
    index_s = time.perf_counter() - t0
    store, source = KnowledgeStore(args.store), CorpusSource(args.index)
    owner, line = unit_owner(source)
    claims = [c for c in read_claims(args.claims) if lo <= c.index < hi]
    coarse = EvidenceRetriever.__new__(EvidenceRetriever)
    coarse.cfg = cfg
    gold_lines = {c.index: {d.position for d in store.load(c.index).documents if d.type == "gold"} for c in claims}
    all_gold = {(i, p) for i, ps in gold_lines.items() for p in ps}
    rows = []
    for c in claims:
        qs = gold_queries(c)
        docs = store.load(c.index).documents
        own_hit, n_gold = coarse_recall(coarse, docs, qs)
        _, hits = source.claim_inputs(c.index, qs, cfg.top_k_segments)
        units = {s.doc_position for segs in hits for s in segs}
        corpus_hit = sum(1 for u in units if owner[u] == c.index and line[u] in gold_lines[c.index])
        other = [u for u in units if owner[u] != c.index]
        rows.append({"claim": c.index, "gold_docs": n_gold, "store_gold_hit": own_hit, "corpus_gold_hit": corpus_hit,
                     "corpus_docs": len(units), "corpus_other_docs": len(other),
                     "corpus_other_gold_docs": sum(1 for u in other if (int(owner[u]), int(line[u])) in all_gold)})
    snippet = snippets(args, cfg, claims, gold_lines, owner, line) if args.snippets else None
    write(args, rows, rep, index_s, snippet, cfg)


def snippets(args, cfg, claims, gold_lines, owner, line) -> dict:
    """Claims with a gold snippet at the profile threshold, per-claim store vs corpus."""
    a, b = map(int, args.snippets.split(":"))
    sel = [c for c in claims if a <= c.index < b and gold_lines[c.index]]
    hyde = [HydeResult(c.index, None, gold_queries(c)) for c in sel]
    out = {"claims": len(sel), "threshold": cfg.retriever.similarity_threshold}
    for name, path in (("store", args.store), ("corpus", args.index)):
        t0 = time.perf_counter()
        res = run_retrieval(path, hyde, cfg, workers=1)
        hit = 0
        for c, ev in zip(sel, res):
            pos = [s.chunk.doc_position for q in ev.queries for s in q.snippets]
            if name == "store":
                hit += any(p in gold_lines[c.index] for p in pos)
            else:
                hit += any(owner[p] == c.index and line[p] in gold_lines[c.index] for p in pos)
        out[name] = {"claims_with_gold_snippet": hit, "share": round(hit / max(1, len(sel)), 4),
                     "seconds": round(time.perf_counter() - t0, 1)}
        print(name, out[name], flush=True)
    return out


def write(args, rows, rep, index_s, snippet, cfg) -> None:
    with_gold = [r for r in rows if r["gold_docs"]]
    rec = lambda key: float(np.mean([r[key] / r["gold_docs"] for r in with_gold]))  # noqa: E731
    any_gold = lambda key: float(np.mean([r[key] > 0 for r in with_gold]))  # noqa: E731
    s = {"claims": len(rows), "claims_with_gold_docs": len(with_gold), "top_k_segments": cfg.top_k_segments,
         "store_gold_recall": round(rec("store_gold_hit"), 4), "corpus_gold_recall": round(rec("corpus_gold_hit"), 4),
         "store_claims_any_gold_doc": round(any_gold("store_gold_hit"), 4),
         "corpus_claims_any_gold_doc": round(any_gold("corpus_gold_hit"), 4),
         "corpus_docs_per_claim": round(float(np.mean([r["corpus_docs"] for r in rows])), 1),
         "corpus_other_share": round(float(np.mean([r["corpus_other_docs"] / max(1, r["corpus_docs"]) for r in rows])), 4),
         "corpus_other_gold_per_claim": round(float(np.mean([r["corpus_other_gold_docs"] for r in rows])), 2),
         "corpus": {"units": rep.units, "segments": rep.segments, "text_mb": round(rep.text_bytes / 1e6, 1),
                    "index_s": round(index_s, 1)},
         "snippets": snippet, "indices": args.indices, "load_avg": [round(x, 2) for x in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_bytes(orjson.dumps({"summary": s, "claims": rows}, option=orjson.OPT_INDENT_2))
    lines = [f"# Shared corpus vs per-claim store (surrogate stores of dev claims {args.indices}, gold Q+A as queries)", "",
             f"Corpus: the {s['claims']} surrogate stores merged, {rep.units} documents, {rep.segments} segments, "
             f"{s['corpus']['text_mb']} MB of text (indexed in {s['corpus']['index_s']} s). Load average at the end: "
             f"{s['load_avg']} on {os.cpu_count()} cores.", "",
             "| retrieval (coarse top-%d segments' documents) | per-claim store | shared corpus |" % cfg.top_k_segments,
             "|---|---|---|",
             f"| gold-document recall (mean over {len(with_gold)} claims with gold docs) | {s['store_gold_recall']:.3f} | {s['corpus_gold_recall']:.3f} |",
             f"| claims with ≥ 1 gold document retrieved | {s['store_claims_any_gold_doc']:.3f} | {s['corpus_claims_any_gold_doc']:.3f} |",
             f"| documents retrieved per claim | – | {s['corpus_docs_per_claim']} |",
             f"| share of them from other claims' stores (distractors) | 0 | {s['corpus_other_share']:.3f} |",
             f"| other claims' gold documents retrieved per claim | 0 | {s['corpus_other_gold_per_claim']} |"]
    if snippet:
        lines += ["", f"Semantic stage (MiniLM, threshold {snippet['threshold']}) on {snippet['claims']} claims "
                  f"({args.snippets}) with gold documents:", "",
                  "| | per-claim store | shared corpus |", "|---|---|---|",
                  f"| claims with a gold snippet | {snippet['store']['share']:.3f} ({snippet['store']['claims_with_gold_snippet']}) "
                  f"| {snippet['corpus']['share']:.3f} ({snippet['corpus']['claims_with_gold_snippet']}) |",
                  f"| stage-2 seconds (1 worker) | {snippet['store']['seconds']} | {snippet['corpus']['seconds']} |"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
