"""Can an LLM probe be stage 3 within 2 s per claim? The go/no-go speed of that candidate.

The candidate: a logistic regression on the last-token hidden state of a packaged Qwen2.5-Coder
GGUF (llama.cpp embedding mode, last pooling) reading a verdict prompt over the claim and its
evidence pairs. Before any of its accuracy is computed it must pass the stage-3 budget, so this
times the hidden state alone (what every claim would pay), on gold evidence of dev claims 0-9,
whose inputs are shorter than a run's (up to 10 retrieved snippets): a lower bound. Nothing is
trained and no label is read.

    python benchmarks/verdict_probe_speed.py --claims 10 --models packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf

Writes ``verdict_probe_speed.{json,md}``; the load average is recorded beside each row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench_common import DEFAULT_CLAIMS, RESULTS, uptime

from sanctuary_local.verdict_model.inputs import render_evidence  # noqa: E402

SYSTEM = "You are a fact-checker. Judge the claim from the evidence only."
QUESTION = "Is the claim Supported, Refuted, Not Enough Evidence, or Conflicting Evidence/Cherrypicking?"


def prompt(x, words: int) -> str:  # noqa: ANN001 - a VerdictInput
    """Qwen's chat turn with the claim and its pairs, ending where the label would start."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nClaim: {' '.join(x.claim.split())}\n"
            f"Evidence: {render_evidence(x, words, 10)}\n{QUESTION}<|im_end|>\n<|im_start|>assistant\nVerdict:")


def _load() -> str:
    """The 1, 5 and 15 min load averages."""
    return uptime().split("load average:")[-1].strip()


def time_model(name: str, xs: list, words: int, threads: int) -> dict:
    import llama_cpp

    from sanctuary_local.models.resolve import resolve_model

    path = resolve_model(name)
    path = next(path.glob("*.gguf")) if path.is_dir() else path
    llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST, n_ctx=2048,
                          n_batch=2048, n_ubatch=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    texts = [prompt(x, words) for x in xs]
    tokens = [len(llm.tokenize(t.encode(), special=True)) for t in texts]
    llm.embed(texts[0])  # warm-up: the first call maps the weights
    load0, t0 = _load(), time.perf_counter()
    for t in texts:
        # The chat markers are special tokens: tokenize them as such (embed() does not).
        llm.reset()
        llm.eval(llm.tokenize(t.encode(), special=True))
    wall = time.perf_counter() - t0
    return {"model": name, "claims": len(xs), "mean_tokens": round(sum(tokens) / len(tokens), 1), "hidden": llm.n_embd(),
            "s_per_claim": round(wall / len(xs), 2), "tokens_per_s": round(sum(tokens) / wall, 1),
            "load_before": load0, "load_after": _load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=10, help="dev claims 0..N-1, gold evidence")
    ap.add_argument("--models", nargs="+", default=["packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"])
    ap.add_argument("--words", type=int, default=32, help="each answer cut to this many words")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dev", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if not args.dev.is_file():
        raise SystemExit(f"error: not a file: {args.dev}")
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.train import read_training_claims

    claims, _ = read_training_claims(args.dev)
    xs = labelled([c for c in claims if c.index < args.claims], str(args.dev))
    rows = []
    for name in args.models:
        rows.append(time_model(name, xs, args.words, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# LLM-probe stage 3: seconds per claim for the hidden state alone ({date})", "",
             f"{os.cpu_count()} CPUs, {args.threads} llama.cpp threads; gold evidence of dev claims 0-{args.claims - 1}, "
             f"answers cut to {args.words} words (a run's inputs are longer). The stage-3 budget is 2 s per claim.", "",
             "| model | claims | mean tokens | hidden size | s per claim | tokens/s | load before / after |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['claims']} | {r['mean_tokens']} | {r['hidden']} | {r['s_per_claim']} | "
              f"{r['tokens_per_s']} | {r['load_before']} / {r['load_after']} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verdict_probe_speed.json").write_text(json.dumps({"date": date, "rows": rows}, indent=1) + "\n")
    (args.out / "verdict_probe_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
