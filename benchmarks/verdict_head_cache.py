"""What stage 3's prompt head on disk saves a new process (``llm.prefix_cache``, docs/llm.md).

The paper-mode verdict's prompt starts with the template's instructions and examples (its text
before the first placeholder, ``ChatRequest.cache_prefix``). llama.cpp keeps that head evaluated
in memory and, with ``llm.prefix_cache``, on disk, so a new process's first verdict skips it.
Three ``sanctuary-local run`` processes, one after the other, on the same claims and store:

1. **off**: ``--set verdict.llm.prefix_cache=false``: the head is evaluated, nothing read or written;
2. **fill**: the cache on: the head is read from disk if an earlier run left it, else evaluated and saved;
3. **on**: the cache on, the head on disk: the first verdict reads it.

With ``--code DIR`` (a checkout of an older commit, e.g. ``git worktree add DIR e0019f5``) a fourth
run, **code at DIR**, runs that checkout's package (``PYTHONPATH=DIR``), to show whether the change
moved any stage-3 text. Stage 1's cache is on in every run, so stage 1 is the same in each.
Reported per run: each claim's stage-3 seconds and prompt tokens, the tokens read from the cache
(``meta.cached_tokens``) and the label; then whether the runs' stage-3 texts and labels are
identical. Default: the test profile (``tests/data/tiny_cpu.toml``: the 0.5B, the paper mode
with ``verdict_short.txt``) on examples/. Run it alone: another process on the 2 cores slows llama.cpp by up to 10x.

    python benchmarks/verdict_head_cache.py --label verdict_head_cache_tiny_examples
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, RESULTS, uptime

RUNS = (("off", ["--set", "verdict.llm.prefix_cache=false"]), ("fill", []), ("on", []))


def one_run(name: str, extra: list[str], args: argparse.Namespace, out: Path, code: Path | None = None) -> dict:
    """One ``sanctuary-local run`` process (of the package at ``code`` if given); its stage-3
    records, wall time and load."""
    cmd = [sys.executable, "-m", "sanctuary_local.cli", "run", "--claims", str(args.claims),
           "--store", str(args.store), "--out", str(out), "--profile", args.profile, "--quiet", *extra]
    env = {**os.environ, "PYTHONPATH": str(code)} if code else None
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code or REPO)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 3):
        raise SystemExit(f"error: run '{name}' exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    claims = []
    for line in (out / "stage3_predictions.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)["record"]
        meta = rec["meta"]
        claims.append({"claim_index": rec["claim_index"], "seconds": round(meta["seconds"], 2),
                       "prompt_tokens": meta["prompt_tokens"], "cached_tokens": meta["cached_tokens"],
                       "label": rec["label"], "text": meta.get("raw_text", "")})
    claims.sort(key=lambda c: c["claim_index"])
    return {"run": name, "command": " ".join(cmd), "wall_s": round(wall, 1), "uptime_after": uptime(), "claims": claims}


def to_markdown(runs: list[dict], meta: dict) -> str:
    lines = [f"# Stage 3's prompt head on disk ({meta['date']})", "",
             f"Profile `{meta['profile']}`, claims `{meta['claims']}`, store `{meta['store']}`; "
             f"`{meta['uptime_before']}` before. Three processes (four with --code), one after the other "
             "(`benchmarks/verdict_head_cache.py`).", "",
             "| run | wall s | load after | first claim: stage-3 s / prompt tokens / from cache | later claims: stage-3 s (mean) |",
             "|---|---|---|---|---|"]
    for r in runs:
        first, rest = r["claims"][0], r["claims"][1:]
        later = f"{sum(c['seconds'] for c in rest) / len(rest):.1f}" if rest else "-"
        load = r["uptime_after"].split("load average:")[-1].strip()
        lines.append(f"| {r['run']} | {r['wall_s']} | {load} | {first['seconds']} / {first['prompt_tokens']} / "
                     f"{first['cached_tokens']} | {later} |")
    lines += ["", f"Stage-3 texts identical in every run: **{meta['same_texts']}**; labels identical: "
              f"**{meta['same_labels']}**.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=REPO / "examples" / "claims.json")
    ap.add_argument("--store", type=Path, default=REPO / "examples" / "store")
    ap.add_argument("--profile", default=str(REPO / "tests" / "data" / "tiny_cpu.toml"))
    ap.add_argument("--code", type=Path, help="a checkout of an older commit: a fourth run with its package")
    ap.add_argument("--label", default="verdict_head_cache")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.claims, args.store = args.claims.resolve(), args.store.resolve()
    if args.profile.endswith(".toml"):
        args.profile = str(Path(args.profile).resolve())
    for path in (args.claims, args.store, *([args.code / "sanctuary_local"] if args.code else [])):
        if not path.exists():
            raise SystemExit(f"error: not found: {path}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "profile": args.profile,
            "claims": str(args.claims), "store": str(args.store), "uptime_before": uptime()}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(name, extra, args, Path(tmp) / name) for name, extra in RUNS]
        if args.code:
            runs.append(one_run(f"code at {args.code}", [], args, Path(tmp) / "code", args.code.resolve()))
    meta["same_texts"] = len({tuple(c["text"] for c in r["claims"]) for r in runs}) == 1
    meta["same_labels"] = len({tuple(c["label"] for c in r["claims"]) for r in runs}) == 1
    md = to_markdown(runs, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    (args.out / f"{args.label}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    sys.exit(main())
