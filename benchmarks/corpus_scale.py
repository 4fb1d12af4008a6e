"""Corpus index at scale (issue 28): indexing throughput, size on disk, query latency and
resident memory, on a synthetic corpus and on its first 10 % (how cost grows).

The corpus is ``benchmarks/synthetic_store.py``'s (Zipf-like words, real store shape,
~103 MB and ~48k segments per store file at scale 1), written as AVeriTeC store files,
so ``index`` reads JSON lines, segments and builds the postings. Queries: each store
file's 10 synthetic queries (question + an answer line), i.e. one claim's 10 queries.

Phases (each can be rerun alone; results accumulate in ``--out``.json):

    python benchmarks/corpus_scale.py gen   --files 22 --data /tmp/scale     # store files + queries
    python benchmarks/corpus_scale.py index --files 22 --data /tmp/scale --fraction 0.1 --out R
    python benchmarks/corpus_scale.py index --files 22 --data /tmp/scale --fraction 1.0 --out R
    python benchmarks/corpus_scale.py query --data /tmp/scale --fraction 0.1 --out R   # a fresh process
    python benchmarks/corpus_scale.py query --data /tmp/scale --fraction 1.0 --out R
    python benchmarks/corpus_scale.py table --out R
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return -1


def _load(out: Path) -> dict:
    p = out.with_suffix(".json")
    return orjson.loads(p.read_bytes()) if p.exists() else {}


def _save(out: Path, data: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def _uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0:3].__str__()


def gen(data: Path, files: int, seed: int = 7) -> None:
    from synthetic_store import claim_documents, claim_queries, vocabulary

    store = data / "store"
    store.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(np.random.default_rng(seed))
    for c in range(files):
        path, qpath = store / f"{c}.json", data / "queries" / f"{c}.json"
        if path.exists() and qpath.exists():
            continue
        rng = np.random.default_rng([seed, c])
        docs = claim_documents(rng, vocab, c, 1.0)
        qpath.parent.mkdir(exist_ok=True)
        qpath.write_bytes(orjson.dumps(claim_queries(rng, docs, c)))
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            for d in docs:
                fh.write(orjson.dumps(d) + b"\n")
        tmp.rename(path)  # a file is complete or absent (an interrupted gen resumes)
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB", flush=True)


def _folder(data: Path, fraction: float, files: int) -> Path:
    n = max(1, round(files * fraction))
    folder = data / f"docs_{fraction:g}"
    folder.mkdir(exist_ok=True)
    for c in range(n):
        link = folder / f"{c}.json"
        if not link.exists():
            link.symlink_to((data / "store" / f"{c}.json").resolve())
    return folder


def index(data: Path, fraction: float, files: int, out: Path) -> None:
    from sanctuary_local.corpus.build import build_index

    folder = _folder(data, fraction, files)
    dst = data / f"index_{fraction:g}"
    load_before = _uptime()
    t0 = time.perf_counter()
    rep = build_index(folder, dst, max_bytes=1 << 30)
    secs = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    res = _load(out)
    res[f"index_{fraction:g}"] = {
        "files": rep.indexed + rep.reused, "documents": rep.units, "segments": rep.segments,
        "text_mb": round(rep.text_bytes / 1e6, 1), "seconds": round(secs, 1),
        "mb_per_s": round(rep.text_bytes / 1e6 / secs, 2), "disk_mb": round(size / 1e6, 1),
        "peak_rss_mb": _status("VmHWM"), "load_before": load_before, "load_after": _uptime(), "cpus": os.cpu_count()}
    _save(out, res)
    print(res[f"index_{fraction:g}"], flush=True)


def query(data: Path, fraction: float, out: Path) -> None:
    """Open the index and run one claim's 10 queries (top-125) for every store file's
    queries; memory read from this (fresh) process."""
    from sanctuary_local.corpus.index import CorpusIndex

    base = _status("VmRSS")
    t0 = time.perf_counter()
    ix = CorpusIndex(data / f"index_{fraction:g}")
    open_s = time.perf_counter() - t0
    claims = sorted((data / "queries").glob("*.json"), key=lambda p: int(p.stem))
    lat = []
    for qp in claims:
        qs = [" ".join([q["question"], *q["answers"]]) for q in orjson.loads(qp.read_bytes())]
        t = time.perf_counter()
        for q in qs:
            ix.search(q, 125)
        lat.append(time.perf_counter() - t)
    res = _load(out)
    res[f"query_{fraction:g}"] = {
        "claims": len(lat), "open_s": round(open_s, 3), "first_claim_s": round(lat[0], 3),
        "median_claim_s": round(float(np.median(lat)), 3), "max_claim_s": round(max(lat), 3),
        "rss_start_mb": base, "rss_end_mb": _status("VmRSS"), "peak_rss_mb": _status("VmHWM"), "load": _uptime()}
    _save(out, res)
    print(res[f"query_{fraction:g}"], flush=True)


def table(out: Path) -> None:
    res = _load(out)
    lines = ["# Corpus index at scale (synthetic store files, 2 cores)", "",
             "`benchmarks/corpus_scale.py`; throughput includes reading the JSON lines, segmenting and building "
             "the postings. Query: one claim's 10 queries (question + answer line), top-125 segments each, in a fresh "
             "process (first claim: cold page cache for the terms it touches). Load averages as `uptime` printed them.", "",
             "| corpus | files | segments | text MB | index s | MB/s | disk MB | index peak RSS MB | 10 queries median s | max s | query peak RSS MB | load (index; query) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fracs = sorted((k.removeprefix("index_") for k in res if k.startswith("index_")), key=float)
    for frac in fracs:
        i, q = res[f"index_{frac}"], res.get(f"query_{frac}") or {}
        lines.append(f"| {i['files']} of the store files | {i['files']} | {i['segments']} | {i['text_mb']} | "
                     f"{i['seconds']} | {i['mb_per_s']} | {i['disk_mb']} | {i['peak_rss_mb']} | {q.get('median_claim_s', '')} | "
                     f"{q.get('max_claim_s', '')} | {q.get('peak_rss_mb', '')} | {i['load_before']}; {q.get('load', '')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=("gen", "index", "query", "table"))
    ap.add_argument("--data", type=Path, default=Path("/tmp/scale"))
    ap.add_argument("--files", type=int, default=22)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/corpus_scale"))
    a = ap.parse_args()
    if a.phase == "gen":
        gen(a.data, a.files)
    elif a.phase == "index":
        index(a.data, a.fraction, a.files, a.out)
    elif a.phase == "query":
        query(a.data, a.fraction, a.out)
    else:
        table(a.out)


if __name__ == "__main__":
    main()
