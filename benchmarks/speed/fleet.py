"""Stage-1 prompts through the openai_http backend against real servers on 127.0.0.1.

Starts ``--servers`` servers of one kind — ``vllm`` (``vllm serve`` on the folder made by
``models prep-vllm``; run this from ``.venv-vllm``) or ``llama_cpp`` (llama-cpp-python's
server on the packaged GGUF; run from ``.venv``) — sends the stage-1 prompts of the first
``--claims`` AVeriTeC dev claims through one fleet client, optionally kills one server
after ``--kill-after`` of its requests have finished, and reports per-server requests,
tokens and throughput. Servers bind to 127.0.0.1 only and are stopped at the end.

    .venv-vllm/bin/python benchmarks/speed/fleet.py --kind vllm --servers 1 --claims 8
    .venv/bin/python benchmarks/speed/fleet.py --kind llama_cpp --servers 2 --claims 8 --kill-after 1

→ ``benchmarks/results/speed/fleet_<kind>_<n>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "speed"
DEV = ROOT.parent / "shared" / "data" / "averitec" / "dev_part_a.json"
GGUF = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"
HF_DIR = ROOT / "models" / "qwen2.5-coder-0.5b-instruct-hf"


def start_server(kind: str, log: Path) -> tuple[subprocess.Popen, str]:
    """One server on a free loopback port (it dies with this script); its process and /v1 URL."""
    from sanctuary_local.llm import local_server
    from sanctuary_local.models.resolve import resolve_model

    port = local_server.free_port()
    cmd = (local_server.vllm_cmd(HF_DIR, port) if kind == "vllm"
           else local_server.llama_cpp_cmd(resolve_model(GGUF), port))
    return local_server.start(cmd, port, log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("vllm", "llama_cpp"), required=True)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--claims", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight per server")
    ap.add_argument("--kill-after", type=int, default=0, help="kill the last server after N of its requests (0: never)")
    ap.add_argument("--schema", action="store_true", help="send the stage-1 JSON schema (response_format)")
    args = ap.parse_args()

    from sanctuary_local.config.settings import load_config
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.llm import local_server
    from sanctuary_local.llm import make_backend
    from sanctuary_local.stages.hyde import build_hyde_request

    load_before = [round(x, 2) for x in os.getloadavg()]
    logs = Path("/tmp") / f"bench_fleet_{os.getpid()}"
    logs.mkdir(exist_ok=True)
    servers = []
    try:
        startup = []
        for i in range(args.servers):  # one at a time: two engine loads at once would only fight for the cores
            proc, url = start_server(args.kind, logs / f"server{i}.log")
            servers.append((proc, url))
            startup.append(round(local_server.wait_up(proc, url, logs / f"server{i}.log", 900), 1))
        cfg = load_config(str(ROOT / "sanctuary_local" / "profiles" / "vllm-cpu.toml")).hyde
        cfg = replace(cfg, llm=replace(cfg.llm, structured_output=args.schema))
        cfg.sampling.max_tokens = args.max_tokens
        claims = read_claims(DEV)[: args.claims]
        reqs = [build_hyde_request(c, cfg) for c in claims]
        backend = make_backend(replace(cfg.llm, backend="openai_http", base_url=[u for _, u in servers],
                                       served_model="qwen", concurrency=args.concurrency, timeout_s=900, retries=1))
        killed = None
        if args.kill_after:
            victim = servers[-1]

            def killer() -> None:
                nonlocal killed
                while backend.server_stats[victim[1]]["requests"] < args.kill_after:
                    time.sleep(0.05)
                victim[0].kill()
                killed = victim[1]

            threading.Thread(target=killer, daemon=True).start()
        t0 = time.perf_counter()
        results = backend.generate(reqs)
        wall = time.perf_counter() - t0
    finally:
        for proc, _ in servers:
            local_server.stop(proc, grace_s=30)
    per_server = {u: dict(st, completion_tokens_per_s_wall=round(st["completion_tokens"] / wall, 2))
                  for u, st in backend.server_stats.items()}
    report = {
        "kind": args.kind, "servers": args.servers, "prompts": len(reqs), "max_tokens": args.max_tokens,
        "concurrency_per_server": args.concurrency, "schema": args.schema, "startup_s": startup,
        "wall_s": round(wall, 1), "ok": sum(r.ok for r in results), "errors": [r.error for r in results if not r.ok],
        "completion_tokens": sum(r.completion_tokens for r in results),
        "completion_tokens_per_s": round(sum(r.completion_tokens for r in results) / wall, 2),
        "killed": killed, "per_server": per_server, "cpu_count": os.cpu_count(),
        "load_avg_before": load_before, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=1))
    out = RESULTS / f"fleet_{args.kind}_{args.servers}{'_kill' if args.kill_after else ''}"
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"# openai_http fleet: {args.servers} × {args.kind} server on 127.0.0.1, {len(reqs)} stage-1 prompts", "",
             f"wall {report['wall_s']} s, {report['ok']}/{len(reqs)} ok, {report['completion_tokens']} tokens out, "
             f"{report['completion_tokens_per_s']} tok/s aggregate; server start-up {startup} s; killed: {killed or 'none'}", "",
             "| server | requests | failed | tokens out | tok/s over the wall time |", "|---|---|---|---|---|"]
    for u, st in per_server.items():
        lines.append(f"| {u} | {st['requests']} | {st['failed']} | {st['completion_tokens']} | {st['completion_tokens_per_s_wall']} |")
    lines += ["", f"{os.cpu_count()} CPU cores (nothing else ran when the committed results were measured); load average {load_before} before, "
              f"{report['load_avg_at_end']} at the end."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
