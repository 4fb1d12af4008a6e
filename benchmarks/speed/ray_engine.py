"""``run --engine ray`` against the local engine (issue 30), with the stand-in LLM of
``fake_llm.py`` (a fixed sleep per request) and real retrieval on copies of ``examples/``.

``overhead``: the same claims on this machine, local engine vs ``--engine ray`` (a local
cluster started by the run, as a user gets it), alternating, ``--repeats`` times each;
Ray's overhead = its wall time over the local engine's, as a ratio within one run.

``scaling``: Ray's multi-node test cluster (``ray.cluster_utils.Cluster``: several logical
nodes, 1 CPU each, all on this machine) with 1, 2, 4, 8 nodes and one model actor per node:
claims/hour per stage and overall, showing what grows with the nodes (the LLM stages: a
sleep is free) and what cannot on 2 real cores (retrieval, the driver). → md + json + png.

    nice -n 10 python benchmarks/speed/ray_engine.py overhead --claims 100 --latency 0.5
    nice -n 10 python benchmarks/speed/ray_engine.py scaling --claims 32 --latency 1.0 --nodes 1,2,4,8

→ ``benchmarks/results/speed/ray_overhead.{md,json}``, ``ray_scaling.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import REPO as ROOT
from benchmarks.common import results_dir, uptime

RESULTS = results_dir(__file__)

EXAMPLES = ROOT / "examples"
PROFILE = str(ROOT / "tests" / "data" / "tiny_cpu.toml")


def fake_llm() -> Any:
    if "fake_llm" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fake_llm", ROOT / "tests" / "support" / "fake_llm.py")
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["fake_llm"] = mod
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return sys.modules["fake_llm"]


def make_data(n: int, where: Path) -> tuple[Path, Path]:
    """``n`` claims cycling through the 4 example claims, each with its example store file."""
    claims = json.loads((EXAMPLES / "claims.json").read_text())
    store = where / "store"
    store.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        shutil.copy(EXAMPLES / "store" / f"{i % len(claims)}.json", store / f"{i}.json")
    path = where / "claims.json"
    path.write_text(json.dumps([claims[i % len(claims)] for i in range(n)]))
    return path, store


def one_run(engine: str, claims: Path, store: Path, out: Path, latency: float, **kw: Any) -> dict[str, Any]:
    """One in-process run with the stand-in LLM; wall seconds and per-stage seconds."""
    import sanctuary_local.llm as llm
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    llm.make_backend = fake_llm().FakeFactory(latency_s=latency)
    t = time.perf_counter()
    summary = run_pipeline(RunOptions(claims=claims, store=store, out=out, profile=PROFILE, quiet=True,
                                      engine=engine, restart=True, **kw))
    wall = time.perf_counter() - t
    stages = {k: round(float(v.get("total_s", v.get("seconds", 0.0)) or 0.0), 2)
              for k, v in summary.timings.get("stages", {}).items()}
    return {"engine": engine, "wall_s": round(wall, 2), "claims": summary.n_claims, "stages_s": stages}


def overhead(args: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        claims, store = make_data(args.claims, Path(tmp))
        for rep in range(args.repeats):
            for engine in ("local", "ray"):
                before = uptime()
                r = one_run(engine, claims, store, Path(tmp) / f"{engine}{rep}", args.latency, workers=args.workers)
                rows.append({**r, "repeat": rep, "uptime_before": before, "uptime_after": uptime()})
                print(json.dumps(rows[-1]), flush=True)
    local = [r["wall_s"] for r in rows if r["engine"] == "local"]
    ray = [r["wall_s"] for r in rows if r["engine"] == "ray"]
    ratios = [b / a for a, b in zip(local, ray)]
    result = {"mode": "overhead", "claims": args.claims, "latency_s": args.latency, "workers": args.workers,
              "rows": rows, "ray_over_local": [round(x, 4) for x in ratios],
              "overhead_pct_mean": round(100 * (sum(ratios) / len(ratios) - 1), 2), "command": " ".join(sys.argv)}
    write("ray_overhead", result, overhead_md(result))


def overhead_md(r: dict[str, Any]) -> str:
    lines = [f"# `--engine ray` overhead: {r['claims']} claims, stand-in LLM {r['latency_s']} s/request, "
             f"{r['workers']} retrieval workers, 2-core machine", "",
             f"Command: `{r['command']}`", "",
             "| repeat | engine | wall s | stage s (hyde / retrieval / verdict) | load before → after |", "|---|---|---|---|---|"]
    for x in r["rows"]:
        st = x["stages_s"]
        lines.append(f"| {x['repeat']} | {x['engine']} | {x['wall_s']} | {st.get('hyde', '')} / {st.get('retrieval', '')} / "
                     f"{st.get('verdict', '')} | {_load(x['uptime_before'])} → {_load(x['uptime_after'])} |")
    lines += ["", f"Ray wall / local wall per repeat: {', '.join(f'{x:.3f}' for x in r['ray_over_local'])}; "
              f"mean overhead **{r['overhead_pct_mean']} %** (target ≤ 5 %).", ""]
    return "\n".join(lines)


def _load(up: str) -> str:
    return up.rsplit("load average:", 1)[-1].strip()


def scaling(args: argparse.Namespace) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from sanctuary_local.run.ray_engine import NAMESPACE, import_ray

    import_ray()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        claims, store = make_data(args.claims, Path(tmp))
        for n in [int(x) for x in args.nodes.split(",")]:
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20,
                                                                    "include_dashboard": False})
            for _ in range(n - 1):
                cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20)
            ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
            try:
                before = uptime()
                r = one_run("ray", claims, store, Path(tmp) / f"n{n}", args.latency, ray_actors=n, workers=n)
            finally:
                ray.shutdown()
                cluster.shutdown()
            r.update(nodes=n, uptime_before=before, uptime_after=uptime())
            r["claims_per_hour"] = round(3600 * r["claims"] / r["wall_s"], 1)
            r["stage_claims_per_hour"] = {k: round(3600 * r["claims"] / v, 1) for k, v in r["stages_s"].items() if v}
            rows.append(r)
            print(json.dumps(r), flush=True)
    result = {"mode": "scaling", "claims": args.claims, "latency_s": args.latency, "rows": rows,
              "command": " ".join(sys.argv)}
    write("ray_scaling", result, scaling_md(result))
    plot(result, RESULTS / "ray_scaling.png")


def scaling_md(r: dict[str, Any]) -> str:
    lines = [f"# `--engine ray` on Ray's multi-node test cluster: {r['claims']} claims, stand-in LLM "
             f"{r['latency_s']} s/request, 1 CPU and 1 model actor per logical node, all nodes on one 2-core machine",
             "", f"Command: `{r['command']}`", "",
             "| nodes | wall s | claims/h overall | claims/h hyde | claims/h retrieval | claims/h verdict | load before → after |",
             "|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        s = x["stage_claims_per_hour"]
        lines.append(f"| {x['nodes']} | {x['wall_s']} | {x['claims_per_hour']} | {s.get('hyde', '')} | "
                     f"{s.get('retrieval', '')} | {s.get('verdict', '')} | {_load(x['uptime_before'])} → {_load(x['uptime_after'])} |")
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [x["nodes"] for x in r["rows"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(nodes, [x["claims_per_hour"] for x in r["rows"]], "o-", label="overall")
    for stage in ("hyde", "retrieval", "verdict"):
        ax.plot(nodes, [x["stage_claims_per_hour"].get(stage, 0) for x in r["rows"]], "o--", label=stage)
    base = r["rows"][0]["stage_claims_per_hour"].get("hyde", 0)
    ax.plot(nodes, [base * n for n in nodes], ":", color="grey", label="linear (hyde at 1 node × nodes)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.set_xlabel("logical nodes (1 CPU, 1 model actor each; one 2-core machine)")
    ax.set_ylabel("claims / hour")
    ax.set_title(f"--engine ray, stand-in LLM {r['latency_s']} s/request")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write(name: str, result: dict[str, Any], md: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(md)
    print(f"→ {RESULTS / name}.{{md,json}}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("overhead", "scaling"))
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.5, help="stand-in LLM seconds per request")
    ap.add_argument("--repeats", type=int, default=2, help="overhead: local/ray pairs")
    ap.add_argument("--workers", type=int, default=2, help="overhead: retrieval processes (both engines)")
    ap.add_argument("--nodes", default="1,2,4,8", help="scaling: logical node counts")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    overhead(args) if args.mode == "overhead" else scaling(args)


if __name__ == "__main__":
    main()
