"""Issue 69: claims per hour of a whole `cpu` run with stage 1 one claim at a time against
several claims decoded together in one llama.cpp batch (``hyde.llm.parallel`` = N), on the
same claims, one setting after another in one invocation, beside the machine's memory
bandwidth measured in the same invocation.

Each setting is a full run (stages 1-3 on the range's surrogate store, through
``benchmarks/quality/e2e.py``, its own process, no oracle row), so its quality comes with it:
macro-F1, accuracy, the AVeriTeC score at 0.25 and Q-only METEOR against gold; seconds per
claim per stage, stage-1 completion tokens per second, peak RSS, the repaired and
line-fallback rates of stage 1's output, the load average before and after, and how many
claims' stage-1 text equals the sequential run's. "Effective weight bytes per second" is
the GGUF's size × stage-1 completion tokens per second: what one-at-a-time decoding would
have to read to produce tokens that fast (issue 69's "batching beats the bandwidth wall"
compares it with the sequential row's). ``--grammar N`` adds a row at parallel N with
stage 1's JSON-schema grammar on (``hyde.llm.structured_output``).

    python benchmarks/speed/throughput.py --indices 0:50 --parallel 1,4
    python benchmarks/speed/throughput.py --indices 0:50 --parallel 1,2,4,8 --grammar 4

Resumable per setting (the runs live in ``runs/throughput/<label>/``): a setting whose run
finished and whose row is in the label's earlier result is taken from it as measured (timing,
load and all), not run again; a stopped one resumes. The bandwidth is measured again. Writes
``benchmarks/results/speed/throughput_<label>.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import orjson  # noqa: E402

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402
from benchmarks.speed.batched_decode import bandwidth_gbs  # noqa: E402

E2E = Path(__file__).resolve().parents[1] / "quality" / "e2e.py"


def _setting(n: int, grammar: bool) -> tuple[str, list[str]]:
    name = f"parallel{n}" + ("_grammar" if grammar else "")
    sets = [f"hyde.llm.parallel={n}"] + (["hyde.llm.structured_output=true"] if grammar else [])
    return name, sets


def run_setting(a: argparse.Namespace, name: str, sets: list[str], work: Path) -> dict:
    """One full run (resumed if it stopped) and its scores; the wall time is the run's own."""
    cmd = [sys.executable, str(E2E), "--indices", a.indices, "--profile", a.profile, "--claims", a.claims,
           "--label", name, "--work", str(work), "--out", str(work / "scores"), "--no-oracle", "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    harness_s = time.perf_counter() - t
    res = orjson.loads((work / "scores" / f"quality_e2e_{name}.json").read_bytes())
    timings = orjson.loads((work / name / "run" / "timings.json").read_bytes())
    system, hyde = res["rows"]["system"], timings["stages"]["hyde"]
    return {
        "setting": name, "overrides": sets, "n_claims": res["n_claims"],
        "wall_s": timings["wall_s"], "claims_per_hour": round(res["n_claims"] / timings["wall_s"] * 3600, 1),
        "stage_s_per_claim": res["stage_s_per_claim"],
        "hyde_total_s": hyde["total_s"], "hyde_tokens_out": hyde["tokens_out"],
        "hyde_tokens_per_s": hyde["tokens_per_s_out"],
        "peak_rss_mb": timings.get("peak_rss_mb"),
        "macro_f1": system["macro_f1"], "accuracy": system["accuracy"], "averitec_0.25": system["averitec_0.25"],
        "q_only_meteor": system["q_only"],
        "hyde_repaired": res["flag_rates"].get("hyde_repaired"), "hyde_line_fallback": res["flag_rates"].get("hyde_line_fallback"),
        "hyde_claim_fallback": res["flag_rates"].get("hyde_claim_fallback"),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
        "harness_s_this_invocation": round(harness_s, 1),
    }


def stage1_texts(run: Path) -> dict[int, str]:
    """Each claim's stage-1 text, read by the project's one reader of run files."""
    from sanctuary_local.io.run_files import STAGE_FILES, readable_records
    from sanctuary_local.records import HydeResult

    return {i: r.raw_text for i, r in readable_records(run / STAGE_FILES["hyde"], HydeResult.from_dict).items()}


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plain = [r for r in rows if "grammar" not in r["setting"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["parallel"] for r in plain], [r["claims_per_hour"] for r in plain], "o-", label="stage 1 batched (no grammar)")
    for r in rows:
        if "grammar" in r["setting"]:
            ax.plot([r["parallel"]], [r["claims_per_hour"]], "s", label=f"N={r['parallel']}, grammar on")
    base = plain[0]["claims_per_hour"]
    ax.axhline(2 * base, ls="--", c="grey", label="issue 69's target: 2x sequential")
    ax.set_xlabel("claims decoded together in stage 1 (hyde.llm.parallel)")
    ax.set_ylabel("claims per hour (whole run)")
    ax.set_xticks(sorted({r["parallel"] for r in rows}))
    ax.set_ylim(0, max(2.2 * base, max(r["claims_per_hour"] for r in rows) * 1.1))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indices", default="0:50", help="dev claims a:b (default 0:50, the issue's 50 claims)")
    ap.add_argument("--claims", default=str(DEFAULT_CLAIMS))
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--parallel", default="1,2,4,8", help="N values, comma-separated, 1 first (default 1,2,4,8)")
    ap.add_argument("--grammar", type=int, action="append", default=[], metavar="N",
                    help="also run parallel N with stage 1's JSON-schema grammar on (repeatable)")
    ap.add_argument("--label", default="throughput_cpu")
    ap.add_argument("--work", default="runs/throughput")
    a = ap.parse_args()
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.llm.llama_cpp_backend import _gguf_file
    from sanctuary_local.models.resolve import resolve_model

    ns = [int(x) for x in a.parallel.split(",")]
    if ns[0] != 1:
        sys.exit("error: --parallel must start with 1 (the sequential row every ratio is taken against)")
    cfg = load_config(a.profile)
    weights = _gguf_file(resolve_model(cfg.hyde.llm.model, cfg.models_dir)).stat().st_size
    work = Path(a.work) / a.label
    bw = bandwidth_gbs()
    earlier = results_dir(__file__) / f"{a.label}.json"
    done = {r["setting"]: r for r in orjson.loads(earlier.read_bytes())["rows"]} if earlier.exists() else {}
    rows = []
    for n, grammar in [*((n, False) for n in ns), *((n, True) for n in a.grammar)]:
        name, sets = _setting(n, grammar)
        timing = work / name / "run" / "timings.json"
        if name in done and timing.exists() and orjson.loads(timing.read_bytes()).get("complete"):
            rows.append({**done[name], "share_of_bandwidth": round(done[name]["effective_weight_gb_per_s"] / bw, 2)})
            continue
        print(f"[throughput] {name} ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        row = {"parallel": n, "grammar": grammar, **run_setting(a, name, sets, work)}
        row["effective_weight_gb_per_s"] = round(weights * row["hyde_tokens_per_s"] / 1e9, 1)
        row["share_of_bandwidth"] = round(row["effective_weight_gb_per_s"] / bw, 2)
        rows.append(row)
    seq = stage1_texts(work / rows[0]["setting"] / "run")
    for r in rows:
        mine = stage1_texts(work / r["setting"] / "run")
        r["same_stage1_text_as_sequential"] = sum(mine.get(i) == t for i, t in seq.items())
    base = rows[0]
    md = [f"# Claims per hour: stage 1 one at a time vs batched (`{a.profile}`, dev {a.indices}, surrogate store)", "",
          f"Stage-1 model `{cfg.hyde.llm.model}` ({weights / 1e9:.2f} GB). Memory bandwidth measured in this invocation "
          f"(numpy copy, read+write, best of 5): **{bw:.1f} GB/s**. Machine: `{uptime()}`, {os.cpu_count()} CPUs.", "",
          "| setting | claims/h | × sequential | wall s | s/claim stage 1 / 2 / 3 | stage-1 tokens/s | effective weight GB/s (share of bandwidth) "
          "| peak RSS MB | macro-F1 | accuracy | AVeriTeC@0.25 | Q-only METEOR | repaired / line fallback | same stage-1 text | load before → after |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["stage_s_per_claim"]
        md.append(f"| {r['setting']} | {r['claims_per_hour']} | {r['claims_per_hour'] / base['claims_per_hour']:.2f} | "
                  f"{r['wall_s']:.0f} | {s['hyde']} / {s['retrieval']} / {s['verdict']} | {r['hyde_tokens_per_s']} | "
                  f"{r['effective_weight_gb_per_s']} ({r['share_of_bandwidth']}) | {r['peak_rss_mb']} | {r['macro_f1']:.3f} | "
                  f"{r['accuracy']:.3f} | {r['averitec_0.25']:.3f} | {r['q_only_meteor']:.3f} | "
                  f"{r['hyde_repaired']:.2f} / {r['hyde_line_fallback']:.2f} | "
                  f"{r['same_stage1_text_as_sequential']}/{r['n_claims']} | {r['load_before']} → {r['load_after']} |")
    out = results_dir(__file__)
    chart(rows, out / f"{a.label}.png")
    meta = {"indices": a.indices, "profile": a.profile, "model": cfg.hyde.llm.model, "weights_bytes": weights,
            "bandwidth_gb_s": round(bw, 1), "uptime": uptime(), "cpus": os.cpu_count()}
    write_result(out, a.label, meta, {"rows": rows}, "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
