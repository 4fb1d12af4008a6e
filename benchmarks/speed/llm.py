"""CPU benchmark of the llama.cpp backend on stage-1 prompts (issue 4).

Measures tokens/s and prompts/s for a batch of real stage-1 (HyDE) prompts with and
without the JSON-schema grammar, on the cpu profile's LLM (Qwen2.5-Coder-1.5B since issue 12;
the committed llm_cpu results were measured on Gemma 3 270M, the default then). Claims come from
``examples/claims.json`` (repeated to reach ``--claims``). Writes JSON + Markdown to
``benchmarks/results/speed/llm_cpu.{json,md}``.

    python benchmarks/speed/llm.py --claims 8 --max-tokens 384 --threads 2 --modes plain,grammar
    python benchmarks/speed/llm.py --claims 8 --max-tokens 384 --threads 1,2,3 --modes plain

``--threads`` takes a comma list: one model load per thread count, every mode at each.
The load average is recorded before and after each row (2 shared cores: a busy machine
halves the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.claims import read_claims
from sanctuary_local.llm import make_backend
from sanctuary_local.stages.hyde import build_hyde_request, parse_hyde

ROOT = Path(__file__).resolve().parents[2]


def run_mode(backend, claims, cfg, grammar: bool, threads: int) -> dict:
    """One batch of stage-1 requests; returns throughput and parse outcomes."""
    load_before = os.getloadavg()[0]
    hcfg = replace(cfg.hyde, llm=replace(cfg.hyde.llm, structured_output=grammar))
    reqs = [build_hyde_request(c, hcfg) for c in claims]
    t0 = time.perf_counter()
    results = backend.generate(reqs)
    wall = time.perf_counter() - t0
    out_tok = sum(r.completion_tokens for r in results)
    in_tok = sum(r.prompt_tokens for r in results)
    parsed = [parse_hyde(r.text, c, hcfg, r.finish_reason) for r, c in zip(results, claims)]
    return {
        "threads": threads,
        "grammar": grammar,
        "prompts": len(reqs),
        "wall_s": round(wall, 2),
        "prompt_tokens": in_tok,
        "completion_tokens": out_tok,
        "completion_tokens_per_s": round(out_tok / wall, 2),
        "prompts_per_s": round(len(reqs) / wall, 4),
        "errors": sum(not r.ok for r in results),
        "strict_json_ok": sum(not p.flags or p.flags == ("hyde_truncated",) for p in parsed),
        "claim_fallbacks": sum("hyde_claim_fallback" in p.flags for p in parsed),
        "mean_questions": round(sum(len(p.queries) for p in parsed) / len(parsed), 2),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", default="2", help="comma list of llama.cpp thread counts")
    ap.add_argument("--modes", default="plain,grammar", help="comma list of plain,grammar")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/speed/llm_cpu"))
    args = ap.parse_args()
    cfg = load_config(args.profile)
    cfg.hyde.sampling.max_tokens = args.max_tokens
    base = read_claims(ROOT / "examples/claims.json")
    claims = [replace(base[i % len(base)], index=i, claim_id=str(i)) for i in range(args.claims)]
    threads = [int(t) for t in args.threads.split(",")]
    rows: list[dict] = []
    for n in threads:
        cfg.hyde.llm.n_threads = n
        backend = make_backend(cfg.hyde.llm)
        try:
            for mode in args.modes.split(","):
                rows.append(run_mode(backend, claims, cfg, grammar=mode == "grammar", threads=n))
                print(json.dumps(rows[-1]), flush=True)
                write(rows, cfg, threads, args)  # after every row: a slow mode cut short keeps the others
        finally:
            backend.close()


def write(rows: list[dict], cfg, threads: list[int], args) -> None:
    report = {
        "model": cfg.hyde.llm.model, "backend": "llama_cpp", "threads": threads,
        "max_tokens": args.max_tokens, "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "load_avg_at_end": os.getloadavg(), "rows": rows,
    }
    out = Path(args.out)  # not with_suffix: "…qwen1.5b_threads" would lose ".5b_threads"
    out.parent.joinpath(out.name + ".json").write_text(json.dumps(report, indent=1))
    lines = [f"# llama.cpp stage-1 benchmark ({report['model']}, max_tokens={args.max_tokens}, "
             f"{report['cpu_count']} cores)", "",
             "| threads | grammar | prompts | wall s | tok in | tok out | tok/s out | prompts/s | strict JSON | claim fallbacks "
             "| mean questions | load before/after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['grammar']} | {r['prompts']} | {r['wall_s']} | {r['prompt_tokens']} | "
                     f"{r['completion_tokens']} | {r['completion_tokens_per_s']} | {r['prompts_per_s']} | {r['strict_json_ok']} | "
                     f"{r['claim_fallbacks']} | {r['mean_questions']} | {r['load_1min_before']}/{r['load_1min_after']} |")
    lines += ["", f"load average at end: {report['load_avg_at_end']}",
              "", "Command: `python benchmarks/speed/llm.py " + " ".join(sys.argv[1:]) + "`"]
    out.parent.joinpath(out.name + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
