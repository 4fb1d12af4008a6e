"""Where one short pipeline run spends its time (issue 29: what makes the end-to-end tests slow).

Runs the pipeline in-process on examples/ under cProfile and writes, per profile given:
the wall time, the top functions by cumulative time, and per claim of stage 3 its prompt
tokens, the tokens served from the KV cache, and its seconds. Compare profiles in one
invocation (they run one after the other, on the same machine and load):

    python benchmarks/speed/profile_run.py --claims-range 0:2 --label tiny_before_after \\
        old_tiny.toml tests/data/tiny_cpu.toml

Writes ``benchmarks/results/speed/profile_run_<label>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "speed"


def profile_one(profile: str, claims_range: str, top: int) -> dict:
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    out = Path(tempfile.mkdtemp(prefix="profile_run_")) / "run"
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    run_pipeline(RunOptions(claims=ROOT / "examples" / "claims.json", store=ROOT / "examples" / "store", out=out,
                            profile=profile, workers=1, quiet=True, claims_range=claims_range))
    prof.disable()
    wall = time.perf_counter() - t0
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
    verdicts = []
    for line in (out / "stage3_predictions.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)["record"]
        m = rec["meta"]
        verdicts.append({"claim": rec["claim_index"], "prompt_tokens": m.get("prompt_tokens"),
                         "cached_tokens": m.get("cached_tokens"), "seconds": round(m.get("seconds", 0.0), 2)})
    return {"profile": profile, "wall_s": round(wall, 2), "verdict": verdicts, "top": text.getvalue()}


def to_markdown(res: dict) -> str:
    lines = [f"# Profile of one short run: {res['label']}", "",
             f"Claims {res['claims_range']} of examples/, in-process, under cProfile. {res['cpus']} CPUs, load average "
             f"before {res['load_before']}, after {res['load_after']}; {res['date']}.", "",
             "| profile | wall s | stage 3 per claim: prompt tokens / cached / seconds |", "|---|---|---|"]
    for r in res["runs"]:
        per = "; ".join(f"claim {v['claim']}: {v['prompt_tokens']} / {v['cached_tokens']} / {v['seconds']}" for v in r["verdict"])
        lines.append(f"| `{r['profile']}` | {r['wall_s']} | {per} |")
    lines += ["", f"Command: `python benchmarks/speed/profile_run.py {' '.join(res['argv'])}`", ""]
    for r in res["runs"]:
        lines += [f"## `{r['profile']}`: top functions by cumulative time", "", "```", r["top"].strip(), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", help="profile names or files, run one after the other")
    ap.add_argument("--claims-range", default="0:2", help="claims of examples/ (default 0:2)")
    ap.add_argument("--label", required=True, help="names the result files")
    ap.add_argument("--top", type=int, default=25, help="functions listed per profile (default 25)")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    for p in args.profiles:
        if "/" in p and not Path(p).is_file():
            ap.error(f"profile file {p} does not exist")
    before = [round(x, 2) for x in os.getloadavg()]
    runs = [profile_one(p, args.claims_range, args.top) for p in args.profiles]
    res = {"label": args.label, "claims_range": args.claims_range, "runs": runs, "cpus": os.cpu_count(),
           "load_before": before, "load_after": [round(x, 2) for x in os.getloadavg()],
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "argv": sys.argv[1:] if argv is None else argv}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile_run_{args.label}.json").write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2) + b"\n")
    (out / f"profile_run_{args.label}.md").write_text(to_markdown(res), "utf-8")
    print(f"wrote {out / f'profile_run_{args.label}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
