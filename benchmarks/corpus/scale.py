"""Corpus index at scale (issue 28): indexing throughput, size on disk, query latency and
resident memory, on a synthetic corpus and on its first 10 % (how cost grows).

The corpus is ``tests/support/synthetic_store.py``'s (Zipf-like words, real store shape,
~103 MB and ~48k segments per store file at scale 1), written as AVeriTeC store files,
so ``index`` reads JSON lines, segments and builds the postings. Queries: each store
file's 10 synthetic queries (question + an answer line), i.e. one claim's 10 queries.

Phases (each can be rerun alone; results accumulate in ``--out``.json):

    python benchmarks/corpus/scale.py gen   --files 25 --data /tmp/scale     # store files + queries
    python benchmarks/corpus/scale.py index --files 25 --data /tmp/scale --fraction 0.1 --out R
    python benchmarks/corpus/scale.py index --files 25 --data /tmp/scale --fraction 1.0 --out R
    python benchmarks/corpus/scale.py query --data /tmp/scale --fraction 0.1 --out R   # a fresh process
    python benchmarks/corpus/scale.py query --data /tmp/scale --fraction 1.0 --out R
    python benchmarks/corpus/scale.py table --out R
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))  # synthetic_store, the seeded corpus the tests use too


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return -1


class _Peak:
    """Samples this process's resident memory every 0.1 s in a thread: the peak of the
    total (VmRSS), of the anonymous part (RssAnon: what the process itself allocated) and
    of the file-backed part (RssFile: pages of memory-mapped files, which the kernel can
    drop and re-read). VmHWM is the kernel's exact peak of the total."""

    def __init__(self) -> None:
        self.peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.sample()

    def sample(self) -> None:
        for k in self.peak:
            self.peak[k] = max(self.peak[k], _status(k))

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._t.join()
        self.sample()
        return {"peak_rss_sampled_mb": self.peak["VmRSS"], "peak_anon_mb": self.peak["RssAnon"],
                "peak_file_mb": self.peak["RssFile"]}


def _drop_cache(folder: Path) -> None:
    """Evict the index's own files from the page cache (posix_fadvise DONTNEED on each
    file: only these files, nothing system-wide), so the first queries read from disk."""
    for f in folder.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


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
    from sanctuary_local.corpus.limits import Limits

    folder = _folder(data, fraction, files)
    dst = data / f"index_{fraction:g}"
    load_before = _uptime()
    peak = _Peak()
    t0, c0 = time.perf_counter(), time.process_time()
    rep = build_index(folder, dst, limits=Limits(max_file_bytes=1 << 30, max_archive_bytes=1 << 40))
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    mem = peak.stop()
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    res = _load(out)
    res[f"index_{fraction:g}"] = {
        "files": rep.indexed + rep.reused, "documents": rep.units, "segments": rep.segments,
        "text_mb": round(rep.text_bytes / 1e6, 1), "seconds": round(secs, 1),
        "cpu_s": round(cpu, 1), "mb_per_s": round(rep.text_bytes / 1e6 / secs, 2),
        "mb_per_cpu_s": round(rep.text_bytes / 1e6 / cpu, 2), "disk_mb": round(size / 1e6, 1),
        "peak_rss_mb": _status("VmHWM"), **mem, "load_before": load_before, "load_after": _uptime(),
        "cpus": len(os.sched_getaffinity(0))}
    _save(out, res)
    print(res[f"index_{fraction:g}"], flush=True)


def query(data: Path, fraction: float, out: Path, keep_pages: bool = False) -> None:
    """Open the index and run one claim's 10 queries (top-125) for every store file's
    queries, in a fresh process whose memory is read from /proc (``_Peak``). The index's
    files are first evicted from the page cache, so the first claim reads from disk.
    ``keep_pages``: the postings' pages stay mapped after each query (as before
    ``CorpusIndex.release``), recorded as ``query_<fraction>_kept``."""
    from sanctuary_local.corpus.index import CorpusIndex

    folder = data / f"index_{fraction:g}"
    _drop_cache(folder)
    base = _status("VmRSS")
    peak = _Peak()
    load = _uptime()
    t0 = time.perf_counter()
    ix = CorpusIndex(folder, release_pages=not keep_pages)
    open_s = time.perf_counter() - t0
    claims = sorted((data / "queries").glob("*.json"), key=lambda p: int(p.stem))
    lat, cpu = [], []
    for qp in claims:
        qs = [" ".join([q["question"], *q["answers"]]) for q in orjson.loads(qp.read_bytes())]
        t, c = time.perf_counter(), time.process_time()
        for q in qs:
            ix.search(q, 125)
        lat.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    warm, warm_cpu = lat[1:] or lat, cpu[1:] or cpu
    mem = peak.stop()
    res = _load(out)
    key = f"query_{fraction:g}" + ("_kept" if keep_pages else "")
    res[key] = {
        "segments": ix.n_segments, "claims": len(lat), "open_s": round(open_s, 3),
        "first_claim_s": round(lat[0], 3), "median_claim_s": round(float(np.median(warm)), 3),
        "max_claim_s": round(max(warm), 3), "claim_s": [round(x, 3) for x in lat],
        "first_claim_cpu_s": round(cpu[0], 3), "median_claim_cpu_s": round(float(np.median(warm_cpu)), 3),
        "max_claim_cpu_s": round(max(warm_cpu), 3),
        "rss_start_mb": base, "rss_end_mb": _status("VmRSS"), "peak_rss_mb": _status("VmHWM"), **mem,
        "load": load, "load_after": _uptime()}
    _save(out, res)
    print(res[key], flush=True)


def table(out: Path) -> None:
    res = _load(out)
    lines = ["# Corpus index at scale (synthetic store files, 2 cores)", "",
             "`benchmarks/corpus/scale.py`; throughput includes reading the JSON lines, segmenting and building "
             "the postings. Query: one claim's 10 queries (question + answer line), top-125 segments each, every "
             "store file's 10 queries in turn, in a fresh process whose index files were first evicted from the page "
             "cache (first claim: cold; median and max over the other claims). Memory from /proc/self/status: peak "
             "total (VmHWM) and, sampled every 0.1 s, the peak anonymous part (what the process allocated) and the "
             "peak file-backed part (memory-mapped index pages, which the kernel can drop). Load averages as "
             "`uptime` printed them (1, 5, 15 min).", "",
             "| corpus | segments | text MB | index s | MB/s | disk MB (× text) | index peak RSS MB (anon) "
             "| open s | 10 queries: cold s | median s | max s | query peak RSS MB | anon / file MB | load (index; query) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fracs = sorted((k.removeprefix("index_") for k in res if k.startswith("index_")), key=float)
    top = res[f"index_{fracs[-1]}"] if fracs else {}
    for frac in fracs:
        i, q = res[f"index_{frac}"], res.get(f"query_{frac}") or res.get(f"query_{frac}_kept") or {}
        share = f" ({100 * i['segments'] / top['segments']:.0f} %)" if top.get("segments") else ""
        lines.append(
            f"| {i['files']} store files{share} | {i['segments']:,} | {i['text_mb']:,} | {i['seconds']} | {i['mb_per_s']} | "
            f"{i['disk_mb']:,} ({i['disk_mb'] / i['text_mb']:.2f}) | {i['peak_rss_mb']:,} ({i.get('peak_anon_mb', '?')}) | "
            f"{q.get('open_s', '')} | {q.get('first_claim_s', '')} | {q.get('median_claim_s', '')} | {q.get('max_claim_s', '')} | "
            f"{q.get('peak_rss_mb', '')} | {q.get('peak_anon_mb', '')} / {q.get('peak_file_mb', '')} | "
            f"{i['load_before']}; {q.get('load', '')} |")
    lines += ["", "Every query run (`kept`: the postings' pages stay mapped after each query, as before "
              "`CorpusIndex.release`; otherwise they are released after each query):", "",
              "| run | segments | open s | cold claim s (CPU s) | median s (CPU s) | max s | peak RSS MB | peak anon / file MB | load |",
              "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in res if k.startswith("query_")):
        q = res[key]
        lines.append(f"| {key} | {q.get('segments', ''):,} | {q['open_s']} | {q['first_claim_s']} ({q.get('first_claim_cpu_s', '–')}) | "
                     f"{q['median_claim_s']} ({q.get('median_claim_cpu_s', '–')}) | {q['max_claim_s']} | {q['peak_rss_mb']} | "
                     f"{q.get('peak_anon_mb', '–')} / {q.get('peak_file_mb', '–')} | {q['load']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=("gen", "index", "query", "table"))
    ap.add_argument("--data", type=Path, default=Path("/tmp/scale"))
    ap.add_argument("--files", type=int, default=25)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/corpus/corpus_scale"))
    ap.add_argument("--keep-pages", action="store_true", help="query: keep the postings' pages mapped (no release)")
    a = ap.parse_args()
    if a.phase == "gen":
        gen(a.data, a.files)
    elif a.phase == "index":
        index(a.data, a.fraction, a.files, a.out)
    elif a.phase == "query":
        query(a.data, a.fraction, a.out, a.keep_pages)
    else:
        table(a.out)


if __name__ == "__main__":
    main()
