"""Stage 2 retrieval benchmark on a synthetic store (see ``synthetic_store.py``).

Per claim, each in a fresh spawned process (so peak RSS is per claim, like one pool
worker): seconds and peak RSS after every sub-stage — load, segment, index, BM25
query, semantic chunking, embedding, FAISS — and the same coarse stage with the
reference (rank-bm25 BM25Okapi over nltk ``word_tokenize`` tokens, lower-cased, as the
FEVER-8 baseline does) on the same segments and queries, in its own process, with the
speed-up ratio. The top-125 overlap of our engine with rank-bm25 *on our tokens* (the
≥ 0.95 requirement) and with the nltk-tokenised reference are reported too.

    python tests/support/synthetic_store.py --claims 2 --scale 1.0 --out /tmp/synstore
    python benchmarks/speed/retrieval.py --store /tmp/synstore --claims 0,1 --out benchmarks/results/speed/retrieval
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import re
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import Query


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


class Laps:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}
        self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.rows[name] = {"s": round(now - self.t, 3), "peak_rss_mb": _rss_mb()}
        self.t = now


def _queries(store: str, claim: int) -> list[Query]:
    data = orjson.loads((Path(store) / "queries.json").read_bytes())[claim]
    return [Query(claim, q["number"], q["question"], tuple(q["answers"])) for q in data]


def parse_sets(text: str) -> dict[str, Any]:
    """``a=1,b.c=x`` (retrieval config keys) → nested override dict for ``load_config``."""
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, val = item.split("=", 1)
        node = out
        *parents, last = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = int(val) if val.lstrip("-").isdigit() else val
    return {"retrieval": out} if out else {}


def semantic_variant(name: str, sets: str, docs, hits, queries) -> dict[str, Any]:
    """One semantic-stage variant (retrieval overrides ``sets``) on the same BM25 hits."""
    from sanctuary_local.stages.evidence import EvidenceRetriever, _Clock

    t0 = time.perf_counter()
    r = EvidenceRetriever(load_config("cpu", parse_sets(sets)).retrieval)
    load_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    walked = r.semantic_segments(hits)
    chunks, vectors = r._chunks(docs, hits)
    chunk_s = time.perf_counter() - t0
    clock = _Clock()
    snippets, _ = r._dense(chunks, vectors, queries, clock)
    cpu_s = time.process_time() - c0  # CPU seconds, all threads: less sensitive to other load than wall time
    segs = {s for q in walked for s in q}
    row = {"variant": name, "sets": sets, "model_load_s": round(load_s, 2), "chunk_s": round(chunk_s, 2),
           "embed_s": clock.timings["embed"], "faiss_s": clock.timings["faiss"],
           "semantic_s": round(chunk_s + clock.timings["embed"] + clock.timings["faiss"], 2), "semantic_cpu_s": round(cpu_s, 2),
           "segments": len(segs), "chunks": len(chunks), "snippets": sum(len(s) for s in snippets),
           "mean_top1_cosine": round(float(np.mean([s[0].score for s in snippets if s])) if any(snippets) else 0.0, 4),
           "peak_rss_mb": _rss_mb(),
           "kept": [[(x.chunk.doc_position, x.chunk.start, x.chunk.end) for x in s] for s in snippets]}
    print(orjson.dumps({k: v for k, v in row.items() if k != "kept"}).decode(), flush=True)
    return row


def ours(store: str, claim: int, engine: str, semantic_queries: int, check_ref: bool,
         variants: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Our pipeline on one claim, sub-stage by sub-stage."""
    from sanctuary_local.retrieval.bm25 import make_engine
    from sanctuary_local.retrieval.segment import build_corpus, term_hashes

    cfg = load_config("cpu").retrieval
    laps = Laps()
    term_hashes("warm up")  # one-time per-process set-up (code-point tables, stop list): not per claim
    laps.lap("setup")
    loaded = KnowledgeStore(store).load(claim)
    docs, queries = loaded.documents, _queries(store, claim)
    laps.lap("load")
    corpus = build_corpus(docs, cfg.segment_tokens)
    laps.lap("segment")
    eng = make_engine(engine, cfg.bm25_k1, cfg.bm25_b)
    eng.index(corpus)
    laps.lap("index")
    qids = [corpus.query_ids(q.text) for q in queries]
    top = [eng.search(q, cfg.top_k_segments)[0] for q in qids]
    laps.lap("bm25_query")
    info: dict[str, Any] = {"docs": len(docs), "mb": round(loaded.n_bytes / 1e6, 1), "segments": len(corpus.segments),
                            "terms": int(corpus.lengths.sum()), "queries": len(queries), "top": [t.tolist() for t in top]}
    # the index cache a second run over the same store uses: write, size, read back
    import tempfile

    from sanctuary_local.retrieval.bm25 import load_cached, save_cached

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.pkl"
        laps.t = time.perf_counter()
        save_cached(path, corpus, eng)
        laps.lap("index_cache_save")
        info["index_cache_mb"] = round(path.stat().st_size / 1e6, 1)
        load_cached(path)
        laps.lap("index_cache_load")
    if check_ref:  # rank-bm25 on the very same term ids: the ≥ 0.95 overlap requirement
        ref = make_engine("rank_bm25", cfg.bm25_k1, cfg.bm25_b)
        ref_corpus = build_corpus(docs, cfg.segment_tokens, token_ids=True)
        ref.index(ref_corpus)
        del ref_corpus
        ov = [len(set(t.tolist()) & set(ref.search(q, cfg.top_k_segments)[0].tolist())) / max(1, len(t)) for t, q in zip(top, qids)]
        info["overlap_rank_bm25_same_tokens"] = round(float(np.mean(ov)), 4)
        laps.t = time.perf_counter()
    if semantic_queries and not variants:
        from sanctuary_local.stages.evidence import EvidenceRetriever, _Clock

        r = EvidenceRetriever(cfg)
        laps.lap("model_load")
        hits = [[corpus.segments[i] for i in t.tolist()] for t in top[:semantic_queries]]
        chunks, vectors = r._chunks(docs, hits)
        laps.lap("semantic_chunking")
        clock = _Clock()
        snippets, _ = r._dense(chunks, vectors, queries[:semantic_queries], clock)
        laps.rows["embedding"] = {"s": clock.timings["embed"], "peak_rss_mb": _rss_mb()}
        laps.rows["faiss"] = {"s": clock.timings["faiss"], "peak_rss_mb": _rss_mb()}
        info.update(chunks=len(chunks), semantic_queries=semantic_queries, snippets=sum(len(s) for s in snippets))
    if semantic_queries and variants:
        hits = [[corpus.segments[i] for i in t.tolist()] for t in top[:semantic_queries]]
        info["variants"] = [semantic_variant(name, sets, docs, hits, queries[:semantic_queries]) for name, sets in variants]
        ref = info["variants"][0]["kept"]
        for v in info["variants"]:  # top-8 agreement with the first (reference) variant
            v["top8_overlap_vs_first"] = round(float(np.mean([len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(v["kept"], ref)])), 4)
            v["top1_same_as_first"] = round(float(np.mean([bool(a) and bool(b) and a[0] == b[0] for a, b in zip(v["kept"], ref)])), 4)
    info["stages"] = laps.rows
    info["coarse_s"] = round(sum(laps.rows[k]["s"] for k in ("segment", "index", "bm25_query")), 3)
    info["peak_rss_mb"] = _rss_mb()
    return info


def reference(store: str, claim: int) -> dict[str, Any]:
    """The paper's coarse stage: nltk word_tokenize + rank-bm25 BM25Okapi, same segments."""
    import nltk
    from rank_bm25 import BM25Okapi

    from sanctuary_local.retrieval.bm25 import top_k

    cfg = load_config("cpu").retrieval
    laps = Laps()
    docs, queries = KnowledgeStore(store).load(claim).documents, _queries(store, claim)
    laps.lap("load")
    # preserve_line=True: Treebank word tokenizer without Punkt (its data is not installed offline)
    tok = lambda s: nltk.word_tokenize(s.lower(), preserve_line=True)  # noqa: E731
    # segments by the plain regex definition (≤ 500 \w+ tokens with their leading separators):
    # the same spans as ours, computed the straightforward way
    seg_re = re.compile(rf"(?:\W*\w+){{1,{cfg.segment_tokens}}}")
    corpus = [tok(m.group()) for d in docs for m in seg_re.finditer(d.text)]
    laps.lap("segment_tokenize")
    bm = BM25Okapi(corpus, k1=cfg.bm25_k1, b=cfg.bm25_b)
    laps.lap("index")
    top = [top_k(np.asarray(bm.get_scores(tok(q.text))), cfg.top_k_segments)[0].tolist() for q in queries]
    laps.lap("bm25_query")
    return {"stages": laps.rows, "coarse_s": round(sum(v["s"] for k, v in laps.rows.items() if k != "load"), 3),
            "peak_rss_mb": _rss_mb(), "top": top}


def _in_child(fn, *args):  # noqa: ANN001, ANN202
    from sanctuary_local.procs import die_with_parent

    # a killed benchmark leaves no worker behind (issue 16)
    with mp.get_context("spawn").Pool(1, initializer=die_with_parent) as pool:
        return pool.apply(fn, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--claims", default="0", help="comma-separated claim indices")
    ap.add_argument("--engine", default="sparse")
    ap.add_argument("--semantic-queries", type=int, default=10, help="queries through the semantic stage (0: skip)")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--label", default="", help="free text stored with the results (e.g. scale)")
    ap.add_argument("--out", default="benchmarks/results/speed/retrieval")
    ap.add_argument("--note", default="", help="free text about the machine's state, stored with the results")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=V,...",
                    help="semantic-stage variant (retrieval overrides), repeatable; the first is the "
                         "reference for the top-8 overlap (e.g. 'exhaustive:' then 'pool:chunk_vectors=pool')")
    args = ap.parse_args()
    rows = []
    args.load_before = [round(x, 2) for x in os.getloadavg()]
    for c in (int(x) for x in args.claims.split(",")):
        variants = [tuple(v.split(":", 1)) for v in args.variant]
        row = {"claim": c, "ours": _in_child(ours, args.store, c, args.engine, args.semantic_queries, not args.no_reference, variants)}
        if not args.no_reference:
            ref = _in_child(reference, args.store, c)
            o = row["ours"]
            row["reference"] = {k: v for k, v in ref.items() if k != "top"}
            row["speedup_coarse"] = round(ref["coarse_s"] / max(o["coarse_s"], 1e-9), 1)
            row["overlap_nltk_reference"] = round(float(np.mean([len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(o["top"], ref["top"])])), 4)
        row["ours"].pop("top")
        rows.append(row)
        print(orjson.dumps(row).decode())
    write(args, rows)


def write(args: argparse.Namespace, rows: list[dict]) -> None:
    load_after = [round(x, 2) for x in os.getloadavg()]
    meta = {"store": args.store, "engine": args.engine, "label": args.label, "python": platform.python_version(),
            "cpus": mp.cpu_count(), "numpy": np.__version__, "loadavg_1_5_15_before": args.load_before,
            "loadavg_1_5_15_after": load_after,
            "note": f"{mp.cpu_count()} CPUs; load average (1/5/15 min) before {args.load_before}, after {load_after}. {args.note}".strip()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_bytes(orjson.dumps({"meta": meta, "claims": rows}, option=orjson.OPT_INDENT_2))
    stages = ["load", "setup", "segment", "index", "bm25_query", "index_cache_save", "index_cache_load", "model_load", "semantic_chunking", "embedding", "faiss"]
    lines = [f"# Retrieval benchmark ({args.label or args.store}; engine `{args.engine}`)", "", meta["note"], "",
             "| claim | MB | docs | segments | " + " | ".join(stages) + " | coarse s | peak RSS MB | index cache MB | ref coarse s | ref RSS MB | speed-up | overlap same tokens | overlap nltk ref |",
             "|" + "---|" * (len(stages) + 12)]
    for r in rows:
        o, ref = r["ours"], r.get("reference", {})
        cells = [str(o["stages"].get(s, {}).get("s", "–")) for s in stages]
        lines.append(f"| {r['claim']} | {o['mb']} | {o['docs']} | {o['segments']} | " + " | ".join(cells)
                     + f" | {o['coarse_s']} | {o['peak_rss_mb']} | {o.get('index_cache_mb', '–')} | {ref.get('coarse_s', '–')} | {ref.get('peak_rss_mb', '–')}"
                     + f" | {r.get('speedup_coarse', '–')} | {o.get('overlap_rank_bm25_same_tokens', '–')} | {r.get('overlap_nltk_reference', '–')} |")
    lines += ["", "Seconds per sub-stage; peak RSS = max resident set of the claim's own process (one worker)."]
    vrows = [(r["claim"], v) for r in rows for v in r["ours"].get("variants", [])]
    if vrows:
        lines += ["", "Semantic-stage variants (same BM25 hits; overlap = share of the first variant's kept snippets per query):", "",
                  "| claim | variant | overrides | segments | chunks | chunk s | embed s | FAISS s | semantic s | CPU s | snippets | top-8 overlap | same top-1 | mean top-1 cosine | model load s | peak RSS MB |",
                  "|" + "---|" * 16]
        lines += [f"| {c} | {v['variant']} | `{v['sets'] or '-'}` | {v['segments']} | {v['chunks']} | {v['chunk_s']} | {v['embed_s']} | {v['faiss_s']}"
                  f" | **{v['semantic_s']}** | {v['semantic_cpu_s']} | {v['snippets']} | {v['top8_overlap_vs_first']} | {v['top1_same_as_first']} | {v['mean_top1_cosine']} | {v['model_load_s']} | {v['peak_rss_mb']} |"
                  for c, v in vrows]
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
