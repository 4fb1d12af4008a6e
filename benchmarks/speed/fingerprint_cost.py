"""What fingerprinting a run costs (issue 29): the store by content, code, prompts, models.

Writes ``--claims`` store files of ``--mb`` MB each (seeded random bytes: hashing does not
care what they hold; a full-scale claim file is ~100 MB), then times

- ``store_identity`` with an empty hash cache (every file read and hashed),
- the same with the cache written by the first pass (``stat`` only),
- after one file is rewritten (that file alone is hashed again),
- ``code_identity``, ``prompt_identities`` and ``model_identities`` (cpu-fast profile, warm cache).

The files were just written, so the page cache holds them: the cold figure is the
hashing cost, not a cold disk's read time (which retrieval pays for the same files too).
Records ``uptime`` before and after.

    python benchmarks/speed/fingerprint_cost.py --claims 10 --mb 100 --tmp /tmp/fpbench
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.run.fingerprint import HashCache, code_identity, model_identities, prompt_identities, store_identity

RESULTS = Path(__file__).resolve().parents[1] / "results" / "speed"


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=10)
    ap.add_argument("--mb", type=float, default=100.0, help="MB per store file")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/fingerprint_bench"))
    ap.add_argument("--name", default="fingerprint_cost")
    args = ap.parse_args()
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    store = args.tmp / "store"
    shutil.rmtree(args.tmp, ignore_errors=True)
    store.mkdir(parents=True)
    rng = np.random.default_rng(0)
    size = int(args.mb * 2**20)
    for i in range(args.claims):
        (store / f"{i}.json").write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    indices = list(range(args.claims))
    cache_path = args.tmp / "hash_cache.json"
    cold_cache = HashCache(cache_path)
    _, cold = _timed(lambda: store_identity(KnowledgeStore(store), indices, cold_cache))
    cold_cache.save()
    _, warm = _timed(lambda: store_identity(KnowledgeStore(store), indices, HashCache(cache_path)))
    time.sleep(0.01)
    (store / "0.json").write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    _, one_changed = _timed(lambda: store_identity(KnowledgeStore(store), indices, HashCache(cache_path)))
    code, code_s = _timed(code_identity)
    cfg = load_config("cpu-fast")
    _, prompts_s = _timed(lambda: prompt_identities(cfg))
    model_cache = HashCache(args.tmp / "model_cache.json")
    _, models_cold = _timed(lambda: model_identities(cfg, model_cache))
    _, models_warm = _timed(lambda: model_identities(cfg, model_cache))
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    total_gb = args.claims * size / 2**30
    result = {
        "claims": args.claims, "mb_per_file": args.mb, "total_gb": round(total_gb, 3), "cpu_count": os.cpu_count(),
        "store_cold_s": cold, "store_cold_gb_per_s": round(total_gb / cold, 3) if cold else None,
        "store_warm_cache_s": warm, "store_one_file_changed_s": one_changed,
        "code_identity_s": code_s, "code_kind": code["id"].split(":")[0], "prompt_identities_s": prompts_s,
        "models_cpu_fast_first_s": models_cold, "models_cpu_fast_cached_s": models_warm,
        "uptime_before": load_before, "uptime_after": load_after,
        "command": f"python benchmarks/speed/fingerprint_cost.py --claims {args.claims} --mb {args.mb:g}",
    }
    shutil.rmtree(args.tmp, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = [("store, empty cache (every file hashed)", f"{cold:.3f} s ({result['store_cold_gb_per_s']} GB/s)"),
            ("store, cache from the first pass", f"{warm:.4f} s"),
            ("store, one file rewritten", f"{one_changed:.3f} s"),
            (f"code ({result['code_kind']})", f"{code_s:.4f} s"),
            ("prompts (4 stages)", f"{prompts_s:.4f} s"),
            ("models of cpu-fast, first / cached", f"{models_cold:.3f} s / {models_warm:.4f} s")]
    md = [f"# Fingerprint cost: {args.claims} store files × {args.mb:g} MB ({total_gb:.2f} GB)", "",
          f"`{result['command']}`; files just written (page cache warm: hashing cost, not disk read).", "",
          "| what | seconds |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows], "",
          f"Load before: `{load_before}`  ", f"Load after: `{load_after}`", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
