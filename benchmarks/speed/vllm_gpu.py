"""GPU benchmark of the vLLM backend (run on a CUDA box; nothing here runs on CPU).

Reports, for stage 1 (Qwen2.5-7B, structured output) and stage 3 (Phi-4 GPTQ), the
same figures as ``speed/llm.py``: prompts/s, completion tokens/s, tokens in/out, for a
batch of ``--claims`` claims (examples/claims.json repeated), one engine per stage,
released in between. Stage 3 prompts carry the stage-1 questions but no retrieved
snippets (this measures the LLM, not retrieval), so they are shorter than in a full run. Writes ``benchmarks/results/speed/llm_vllm_gpu.{json,md}``.

    python benchmarks/speed/vllm_gpu.py --claims 20
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from sanctuary_local.config.settings import load_config
from sanctuary_local.io.claims import read_claims
from sanctuary_local.llm import make_backend
from sanctuary_local.records import ClaimEvidence, QueryEvidence
from sanctuary_local.stages.hyde import build_hyde_request, parse_hyde
from sanctuary_local.stages.verdict.parsing import parse_verdict_output as parse_verdict
from sanctuary_local.stages.verdict.prompt import build_verdict_request

ROOT = Path(__file__).resolve().parents[2]


def _row(stage: str, results, wall: float) -> dict:
    out = sum(r.completion_tokens for r in results)
    return {"stage": stage, "prompts": len(results), "wall_s": round(wall, 2),
            "prompt_tokens": sum(r.prompt_tokens for r in results), "completion_tokens": out,
            "completion_tokens_per_s": round(out / wall, 1), "prompts_per_s": round(len(results) / wall, 3),
            "errors": sum(not r.ok for r in results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=20)
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    args = ap.parse_args()  # --help works without a GPU
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("speed/vllm_gpu.py needs a CUDA GPU (no GPU figures are ever estimated)")
    cfg = load_config(args.profile)
    base = read_claims(ROOT / "examples/claims.json")
    claims = [replace(base[i % len(base)], index=i, claim_id=str(i)) for i in range(args.claims)]
    rows = []

    backend = make_backend(cfg.hyde.llm, args.models_dir)
    reqs = [build_hyde_request(c, cfg.hyde) for c in claims]
    t0 = time.perf_counter()
    res1 = backend.generate(reqs)
    rows.append(_row("stage1_hyde", res1, time.perf_counter() - t0))
    hyde = [parse_hyde(r.text, c, cfg.hyde, r.finish_reason) for r, c in zip(res1, claims)]
    backend.close()

    backend = make_backend(cfg.verdict.llm, args.models_dir)
    evs = [ClaimEvidence(c.index, tuple(QueryEvidence(q) for q in h.queries)) for c, h in zip(claims, hyde)]
    reqs = [build_verdict_request(c, h, e, cfg.verdict, backend)[0] for c, h, e in zip(claims, hyde, evs)]
    t0 = time.perf_counter()
    res3 = backend.generate(reqs)
    rows.append(_row("stage3_verdict", res3, time.perf_counter() - t0))
    rows[-1]["labels"] = [parse_verdict(r.text, None)[0] for r in res3]
    backend.close()

    report = {"gpu": torch.cuda.get_device_name(0), "profile": args.profile, "claims": args.claims, "rows": rows}
    out = ROOT / "benchmarks/results/speed/llm_vllm_gpu"
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    lines = [f"# vLLM benchmark on {report['gpu']} ({args.claims} claims, profile {args.profile})", "",
             "| stage | prompts | wall s | tok in | tok out | tok/s out | prompts/s |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['stage']} | {r['prompts']} | {r['wall_s']} | {r['prompt_tokens']} | {r['completion_tokens']} | "
              f"{r['completion_tokens_per_s']} | {r['prompts_per_s']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
