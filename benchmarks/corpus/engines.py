"""Which sparse engine serves a shared corpus index (issue 28)? Measured on one corpus.

Engines, all over the same ~500-token segments (the corpus index's own, from
``sanctuary-local index`` on a synthetic store, ``tests/support/synthetic_store.py``):

- ``mmap``      the project's corpus index (``corpus/postings.py``): precomputed
                Okapi/ATIRE weights in memory-mapped ``.npy`` arrays, a query sums the
                postings of its terms (np.bincount) — nothing is loaded at open.
- ``sparse``    the per-claim engine (``retrieval/bm25.py`` SparseBM25, scipy CSC) built
                in memory: the reference ranking (its scores equal rank-bm25's).
- ``bm25s``     bm25s 0.3 fed the same term ids, saved, reloaded with ``mmap=True``.
- ``tantivy``   tantivy-py (Rust, on-disk segments), its own tokeniser and BM25 (k1 1.2).

Per engine: build seconds, size on disk, open seconds, latency of one claim's 10 queries
(top-125 segments each, the pipeline's ``top_k_segments``), peak resident memory of a
fresh process that opens the index and runs the queries (VmHWM), and top-10 overlap with
the reference. The query phase of each engine runs in its own process.

    python tests/support/synthetic_store.py --claims 1 --scale 1.0 --out /tmp/eng/store
    mv /tmp/eng/store/queries.json /tmp/eng/queries.json
    python benchmarks/corpus/engines.py --store /tmp/eng/store --queries /tmp/eng/queries.json \
        --work /tmp/eng/work --out benchmarks/results/corpus/corpus_engines
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ENGINES = ("mmap", "sparse", "bm25s", "tantivy")
K = 125


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return -1


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _segments(index_dir: Path) -> list[str]:
    from sanctuary_local.corpus.index import CorpusIndex

    ix = CorpusIndex(index_dir)
    texts, cur, cur_text = [], -1, ""
    for s in range(ix.n_segments):
        u, a, b, _ = ix.segment(s)
        if u != cur:
            cur, cur_text = u, ix.unit_text(u)
        texts.append(cur_text[a:b])
    return texts


def _term_ids(texts: list[str]) -> tuple[list[list[int]], dict]:
    from sanctuary_local.retrieval.segment import _is_stop, term_hashes

    per = []
    for t in texts:
        h = term_hashes(t)
        per.append(h[~_is_stop(h)])
    vocab = np.unique(np.concatenate(per))
    return [np.searchsorted(vocab, h).tolist() for h in per], {"vocab": vocab}


def build(engine: str, store: Path, work: Path) -> dict:
    """Build one engine's index under ``work/engine``; returns build seconds and size."""
    dst = work / engine
    shutil.rmtree(dst, ignore_errors=True)
    t0 = time.perf_counter()
    if engine == "mmap":
        from sanctuary_local.corpus.build import build_index
        from sanctuary_local.corpus.limits import Limits

        rep = build_index(store, dst, limits=Limits(max_file_bytes=1 << 30, max_archive_bytes=1 << 40))
        return {"build_s": round(time.perf_counter() - t0, 2), "disk_mb": round(_du(dst) / 1e6, 1),
                "segments": rep.segments, "text_mb": round(rep.text_bytes / 1e6, 1),
                "note": "includes JSON reading and segmentation"}
    texts = _segments(work / "mmap")
    t0 = time.perf_counter()
    dst.mkdir(parents=True)
    if engine == "sparse":
        import pickle

        from sanctuary_local.records import Document
        from sanctuary_local.retrieval.bm25 import SparseBM25
        from sanctuary_local.retrieval.segment import build_corpus

        corpus = build_corpus([Document(0, i, "", (t,)) for i, t in enumerate(texts)], 10**9)
        eng = SparseBM25()
        eng.index(corpus)
        (dst / "index.pkl").write_bytes(pickle.dumps((corpus, eng), protocol=5))
    elif engine == "bm25s":
        import bm25s

        ids, _ = _term_ids(texts)
        model = bm25s.BM25(k1=1.5, b=0.75, method="robertson")
        model.index((ids, {str(i): i for i in range(max(map(max, filter(None, ids))) + 1)}), create_empty_token=False,
                    show_progress=False)
        model.save(str(dst / "bm25s"))
    elif engine == "tantivy":
        import tantivy

        sb = tantivy.SchemaBuilder()
        sb.add_text_field("body", stored=False)
        sb.add_integer_field("seg", stored=True, indexed=False, fast=True)
        ix = tantivy.Index(sb.build(), path=str(dst))
        w = ix.writer(heap_size=256_000_000, num_threads=2)
        for i, t in enumerate(texts):
            w.add_document(tantivy.Document(body=t, seg=i))
        w.commit()
        w.wait_merging_threads()
    return {"build_s": round(time.perf_counter() - t0, 2), "disk_mb": round(_du(dst) / 1e6, 1),
            "note": "from extracted segment texts (extraction not counted)"}


def query(engine: str, work: Path, queries: list[str]) -> dict:
    """Open the index, run the queries three times; the last pass is timed."""
    base = _status("VmRSS")
    t0 = time.perf_counter()
    if engine == "mmap":
        from sanctuary_local.corpus.index import CorpusIndex

        ix = CorpusIndex(work / "mmap")
        run = lambda q: ix.search(q, K)[0]  # noqa: E731
    elif engine == "sparse":
        import pickle

        corpus, eng = pickle.loads((work / "sparse" / "index.pkl").read_bytes())
        run = lambda q: eng.search(corpus.query_ids(q), K)[0]  # noqa: E731
    elif engine == "bm25s":
        import bm25s

        from sanctuary_local.retrieval.segment import _is_stop, term_hashes

        model = bm25s.BM25.load(str(work / "bm25s" / "bm25s"), mmap=True)
        from sanctuary_local.corpus.index import CorpusIndex

        vocab = np.asarray(CorpusIndex(work / "mmap").arrays["vocab"])  # same terms, same ids (np.unique order)

        def run(q: str) -> np.ndarray:
            h = term_hashes(q)
            h = h[~_is_stop(h)]
            pos = np.minimum(np.searchsorted(vocab, h), len(vocab) - 1)
            ids = pos[vocab[pos] == h]
            from sanctuary_local.retrieval.bm25 import top_k

            return top_k(np.asarray(model.get_scores(ids.tolist())), K)[0]
    else:
        import re

        import tantivy

        ix = tantivy.Index.open(str(work / "tantivy"))
        ix.reload()
        searcher = ix.searcher()

        def run(q: str) -> np.ndarray:
            words = " ".join(re.findall(r"\w+", q))
            hits = searcher.search(ix.parse_query(words, ["body"]), K).hits
            return np.array([searcher.doc(a)["seg"][0] for _, a in hits])
    open_s = time.perf_counter() - t0
    tops = [run(q) for q in queries]  # warm-up (page cache)
    run(queries[0])
    t1 = time.perf_counter()
    tops = [run(q) for q in queries]
    lat = time.perf_counter() - t1
    return {"open_s": round(open_s, 3), "query10_s": round(lat, 4), "rss_base_mb": base,
            "peak_rss_mb": _status("VmHWM"), "top10": [t[:10].tolist() for t in tops]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--phase", choices=("all", "query"), default="all")
    ap.add_argument("--engine", default="")
    args = ap.parse_args()
    qs = orjson.loads(args.queries.read_bytes())
    claim_qs = [" ".join([q["question"], *q["answers"]]) for q in qs[0]]
    if args.phase == "query":
        print(json.dumps(query(args.engine, args.work, claim_qs)))
        return
    engines = args.engines.split(",")
    rows = {}
    for e in ["mmap", *[x for x in engines if x != "mmap"]]:
        print(f"building {e} …", flush=True)
        rows[e] = build(e, args.store, args.work)
        res = subprocess.run([sys.executable, __file__, "--store", str(args.store), "--queries", str(args.queries),
                              "--work", str(args.work), "--phase", "query", "--engine", e],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        if res.returncode:
            rows[e]["error"] = res.stderr.strip().splitlines()[-1]
            continue
        rows[e].update(json.loads(res.stdout.strip().splitlines()[-1]))
        print(e, {k: v for k, v in rows[e].items() if k != "top10"}, flush=True)
    ref = rows.get("sparse", {}).get("top10")
    for e, r in rows.items():
        if ref and "top10" in r:
            r["overlap10_vs_sparse"] = round(float(np.mean([len(set(a) & set(b)) / max(1, len(b))
                                                            for a, b in zip(r["top10"], ref)])), 3)
        r.pop("top10", None)
    load = os.getloadavg()
    result = {"corpus": rows["mmap"].get("segments"), "text_mb": rows["mmap"].get("text_mb"), "engines": rows,
              "uptime_load": [round(x, 2) for x in load], "cpus": os.cpu_count()}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.with_suffix(".json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        lines = [f"# Sparse engines for a shared corpus ({result['corpus']} segments, {result['text_mb']} MB of text)", "",
                 f"Load average while measuring: {result['uptime_load']} on {result['cpus']} cores. "
                 "Query phase of each engine in a fresh process; 10 queries = one claim's, top-125 each.", "",
                 "| engine | build s | disk MB | open s | 10 queries s | peak RSS MB | top-10 overlap vs sparse |",
                 "|---|---|---|---|---|---|---|"]
        for e, r in rows.items():
            lines.append(f"| {e} | {r.get('build_s')} | {r.get('disk_mb')} | {r.get('open_s', r.get('error', ''))} | "
                         f"{r.get('query10_s', '')} | {r.get('peak_rss_mb', '')} | {r.get('overlap10_vs_sparse', '')} |")
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
