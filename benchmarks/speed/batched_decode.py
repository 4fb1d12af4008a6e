"""Issue 69's first measurement: stage-1 prompts decoded one sequence at a time against
several sequences in one llama.cpp batch (``llama_batch`` with several sequence ids, through
llama-cpp-python's low-level API), on the same claims in the same process, beside the
machine's memory bandwidth measured in the same run.

Greedy decoding (stage 1's sampling: temperature 0), the shared instructions evaluated once
and copied into each sequence (``llama_memory_seq_cp``), continuous batching (a finished
sequence's slot takes the next claim). Tokens per second, claims per hour, decode steps per
second and bytes of weights read per second (GGUF size × decode steps per second: each step
reads the weights once, for every sequence in the batch) as a share of the measured copy
bandwidth. This is a probe of the engine, not yet the pipeline's stage 1.

    python benchmarks/speed/batched_decode.py --claims 4 --parallel 1,2,4
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402


def bandwidth_gbs(mb: int = 1024, reps: int = 5) -> float:
    """Best of ``reps`` copies of a buffer far larger than the cache: read + write bytes per second."""
    import numpy as np

    a = np.ones(mb * 2**20 // 8)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t))
    return best / 1e9


class Batcher:
    """One llama.cpp context with ``n`` sequence slots (seq 0 holds the shared head)."""

    def __init__(self, llama_cpp, model, head: list[int], n: int, n_ctx: int, threads: int) -> None:
        self.lib, self.n = llama_cpp, n
        p = llama_cpp.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, 512, 512, n + 1
        p.n_threads = p.n_threads_batch = threads
        p.kv_unified = True
        self.ctx = llama_cpp.llama_init_from_model(model, p)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.nv = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        self.steps = 0
        self.head = len(head)
        self.decode([(t, i, 0, False) for i, t in enumerate(head)])

    def decode(self, items: list[tuple[int, int, int, bool]]) -> dict[int, int]:
        """Evaluate (token, position, sequence, wants logits) items; greedy next token per sequence."""
        import numpy as np

        out, b = {}, self.batch
        for s in range(0, len(items), 512):
            chunk = items[s : s + 512]
            for i, (t, pos, seq, lg) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos, 1, lg
                b.seq_id[i][0] = seq
            b.n_tokens = len(chunk)
            if self.lib.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed (KV cache full?)")
            self.steps += 1
            for i, (_, _, seq, lg) in enumerate(chunk):
                if lg:
                    row = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i), shape=(self.nv,))
                    out[seq] = int(np.argmax(row))
        return out

    def run(self, prompts: list[list[int]], max_tokens: int) -> tuple[list[list[int]], int]:
        """Every prompt's completion (continuous batching over ``n`` slots) and the decode steps taken."""
        lib, queue, slots, outs, steps0 = self.lib, list(range(len(prompts))), {}, {}, self.steps
        while queue or slots:
            items = []
            while queue and len(slots) < self.n:
                r, seq = queue.pop(0), next(s for s in range(1, self.n + 1) if s not in slots)
                lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
                lib.llama_memory_seq_cp(self.mem, 0, seq, -1, -1)
                t = prompts[r]
                items += [(t[i], i, seq, i == len(t) - 1) for i in range(self.head, len(t))]
                slots[seq] = [r, len(t), [], None]
            for seq, sl in slots.items():
                if sl[3] is not None:
                    items.append((sl[3], sl[1], seq, True))
                    sl[1] += 1
            nxt = self.decode(items)
            for seq in list(slots):
                sl, tok = slots[seq], nxt[seq]
                eog = lib.llama_vocab_is_eog(self.vocab, tok)
                if not eog:
                    sl[2].append(tok)
                    sl[3] = tok
                if eog or len(sl[2]) >= max_tokens:
                    outs[sl[0]] = sl[2]
                    del slots[seq]
                    lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        return [outs[i] for i in range(len(prompts))], self.steps - steps0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=4, help="the first K dev claims (default 4)")
    ap.add_argument("--claims-file", default=str(DEFAULT_CLAIMS))
    ap.add_argument("--parallel", default="1,2,4", help="sequences in one batch, comma-separated (default 1,2,4)")
    ap.add_argument("--max-tokens", type=int, default=384, help="stage 1's cap (the cpu profile's 384)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--label", default="batched_decode_cpu")
    a = ap.parse_args()
    import llama_cpp

    from sanctuary_local.config.settings import load_config
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.llm.llama_cpp_backend import LlamaCppBackend
    from sanctuary_local.stages.hyde import build_hyde_request

    cfg = load_config("cpu")
    claims = read_claims(a.claims_file)[: a.claims]
    be = LlamaCppBackend(cfg.hyde.llm, cfg.models_dir)
    prompts = [be._tokenize(be._render(build_hyde_request(c, cfg.hyde).messages)) for c in claims]
    h = 0
    while h < min(map(len, prompts)) - 1 and all(p[h] == prompts[0][h] for p in prompts):
        h += 1
    gguf = Path(be._llm.model_path)
    weights = gguf.stat().st_size
    bw = bandwidth_gbs()
    rows, texts = [], {}
    for n in [int(x) for x in a.parallel.split(",")]:
        n_ctx = h + n * (max(map(len, prompts)) - h + a.max_tokens) + 64
        b = Batcher(llama_cpp, be._llm._model.model, prompts[0][:h], n, n_ctx, a.threads)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        outs, steps = b.run(prompts, a.max_tokens)
        dt = time.perf_counter() - t
        ntok = sum(map(len, outs))
        texts[n] = [be._llm.detokenize(o).decode("utf-8", errors="replace") for o in outs]
        rows.append({"parallel": n, "seconds": round(dt, 1), "completion_tokens": ntok,
                     "tokens_per_s": round(ntok / dt, 2), "claims_per_hour": round(len(prompts) / dt * 3600),
                     "decode_steps_per_s": round(steps / dt, 2),
                     "weights_gb_per_s": round(weights * steps / dt / 1e9, 1),
                     "share_of_bandwidth": round(weights * steps / dt / 1e9 / bw, 2),
                     "same_text_as_parallel_1": sum(x == y for x, y in zip(texts[n], texts.get(1, texts[n]))),
                     "load_before": round(load, 2)})
        llama_cpp.llama_batch_free(b.batch)
        llama_cpp.llama_free(b.ctx)
    base = rows[0]["claims_per_hour"]
    md = [f"# Stage-1 prompts: one sequence vs several in one llama.cpp batch ({len(prompts)} dev claims)", "",
          f"Model `{gguf.name}` ({weights / 1e9:.2f} GB), {a.threads} threads, greedy, max {a.max_tokens} tokens, "
          f"shared head {h} tokens evaluated once. Memory bandwidth (numpy copy, read+write, best of 5): **{bw:.1f} GB/s**.",
          f"Machine: `{uptime()}`", "",
          "| sequences per batch | s | tokens | tokens/s | claims/h | × N=first | decode steps/s | weights GB/s | share of bandwidth | same text as N=1 | load |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['parallel']} | {r['seconds']} | {r['completion_tokens']} | {r['tokens_per_s']} | {r['claims_per_hour']} | "
                  f"{r['claims_per_hour'] / base:.2f} | {r['decode_steps_per_s']} | {r['weights_gb_per_s']} | "
                  f"{r['share_of_bandwidth']} | {r['same_text_as_parallel_1']}/{len(prompts)} | {r['load_before']} |")
    meta = {"claims": a.claims, "claims_file": Path(a.claims_file).name, "threads": a.threads, "max_tokens": a.max_tokens,
            "model": gguf.name, "head_tokens": h, "bandwidth_gb_s": round(bw, 1), "uptime": uptime()}
    write_result(results_dir(__file__), a.label, meta, {"rows": rows}, "\n".join(md) + "\n")
    be.close()


if __name__ == "__main__":
    main()
