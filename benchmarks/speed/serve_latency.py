"""From Check to verdict in `sanctuary-local serve` against the `check` CLI, one claim, same corpus.

The target: Check to verdict on the `cpu` profile, models already loaded, is at most the
`check` CLI's time + 2 s. This starts a real server (`serve --profile cpu --port 0` on
127.0.0.1, the real model) on an index of examples/corpus, waits until its models are
loaded, warms it with one check of another example claim, then times POST /api/checks →
GET /api/checks/ID until "done" (polled every 0.1 s) for the measured claim. The server
is then stopped, and the `check` CLI runs the same claim on the same index in its own
process: its total wall time (process start, imports, model load, pipeline, printing) and
its pipeline's own figures from the run's timings.json (``--out`` keeps them): ``wall_s``
and ``wall_s`` less the stages' model-load seconds (``load_s``). `uptime`'s load averages
are recorded before and after each timing. Writes benchmarks/results/speed/serve_latency.md and
.json (``--out-name`` to change):

    nice -n 10 python benchmarks/speed/serve_latency.py             # ~2-5 min on 2 idle cores
    nice -n 10 python benchmarks/speed/serve_latency.py --profile cpu-fast --claim 2

Run it with the repository root on PYTHONPATH (or the package installed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import REPO, results_dir, uptime

RESULTS = results_dir(__file__)

#: Seconds between two polls of a running check (the measured time is late by at most this).
POLL_S = 0.1


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sanctuary_local.cli", *args]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


class Server:
    """`sanctuary-local serve` on a free loopback port, in its own process."""

    def __init__(self, index: Path, data: Path, profile: str, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(cli("serve", "--corpus", str(index), "--data", str(data), "--profile", profile,
                                         "--port", "0"), env=child_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=open(log, "wb"))  # noqa: SIM115 - the process owns it
        deadline = time.monotonic() + 300
        while not (m := re.search(r"serving http://[^:]+:(\d+)/", log.read_text(errors="replace"))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"serve did not start: {log.read_text()[-3000:]}")
            time.sleep(0.1)
        self.port = int(m.group(1))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            headers = {"content-type": "application/json"} if body is not None else {}
            conn.request(method, path, body=orjson.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, orjson.loads(resp.read())
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 1800) -> float:
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            state = self.request("GET", "/api/status")[1]["state"]
            if state == "ready":
                return time.monotonic() - t
            if state not in ("starting", "loading models"):
                raise SystemExit(f"serve is {state}: {self.log.read_text()[-3000:]}")
            time.sleep(0.5)
        raise SystemExit("the models did not load in time")

    def check(self, claim: str, timeout: float = 3600) -> dict[str, Any]:
        """POST the claim, poll until it is done; the seconds of each step and the result."""
        t0 = time.perf_counter()
        status, created = self.request("POST", "/api/checks", {"claim": claim})
        posted = time.perf_counter() - t0
        if status != 202:
            raise SystemExit(f"POST /api/checks answered {status}: {created}")
        while time.perf_counter() - t0 < timeout:
            view = self.request("GET", created["url"])[1]
            if view["status"] == "done":
                return {"id": created["id"], "check_to_verdict_s": round(time.perf_counter() - t0, 3),
                        "post_answered_s": round(posted, 3), "label": view["label"]}
            if view["status"] == "failed":
                raise SystemExit(f"the check failed: {view.get('error')}")
            time.sleep(POLL_S)
        raise SystemExit(f"no verdict in {timeout} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def run_timings(run_dir: Path) -> dict[str, Any]:
    """A run's timings.json, summed: pipeline wall seconds, model-load seconds, per stage."""
    t = orjson.loads((run_dir / "timings.json").read_bytes())
    load = sum(s["load_s"] for s in t["stages"].values())
    return {"pipeline_wall_s": t["wall_s"], "load_s": round(load, 3),
            "pipeline_less_load_s": round(t["wall_s"] - load, 3),
            "stages_s": {k: {"total_s": v["total_s"], "load_s": v["load_s"], "tokens_in": v.get("tokens_in"),
                             "tokens_out": v.get("tokens_out")} for k, v in t["stages"].items()}}


def time_serve(index: Path, work: Path, profile: str, claim: str, warm_claim: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    server = Server(index, work / "serve-data", profile, work / "serve.log")
    try:
        out["models_loaded_s"] = round(server.wait_ready(), 1)
        out["warm"] = server.check(warm_claim)
        out["uptime_before"] = uptime()
        out["measured"] = server.check(claim)
        out["uptime_after"] = uptime()
        out["measured"]["pipeline"] = run_timings(work / "serve-data" / "checks" / out["measured"]["id"] / "run")
    finally:
        server.stop()
    return out


def time_cli(index: Path, work: Path, profile: str, claim: str) -> dict[str, Any]:
    out: dict[str, Any] = {"uptime_before": uptime()}
    t = time.perf_counter()
    proc = subprocess.run(cli("check", claim, "--corpus", str(index), "--profile", profile, "--out", str(work / "cli")),
                          env=child_env(), cwd=REPO, capture_output=True, text=True)
    out["process_total_s"] = round(time.perf_counter() - t, 3)
    out["uptime_after"] = uptime()
    if proc.returncode not in (0, 3):  # 3: finished, the result flagged as degraded
        raise SystemExit(f"check exited {proc.returncode}: {proc.stderr[-3000:]}")
    out["exit_code"] = proc.returncode
    out["label"] = next((ln.split(":", 1)[1].strip() for ln in proc.stdout.splitlines() if ln.startswith("verdict:")), None)
    out["pipeline"] = run_timings(work / "cli" / "run")
    return out


def report(res: dict[str, Any]) -> str:
    s, c = res["serve"]["measured"], res["cli"]
    serve_s, cli_total, cli_pipe = s["check_to_verdict_s"], c["process_total_s"], c["pipeline"]["pipeline_less_load_s"]
    rows = [
        ("serve: POST /api/checks → done (models loaded, warmed)", serve_s, res["serve"]["uptime_before"], res["serve"]["uptime_after"]),
        ("check CLI: whole process (start, imports, model load, pipeline)", cli_total, c["uptime_before"], c["uptime_after"]),
        ("check CLI: its pipeline (timings.json wall_s)", c["pipeline"]["pipeline_wall_s"], "", ""),
        ("check CLI: its pipeline less model load (wall_s − Σ load_s)", cli_pipe, "", ""),
    ]
    lines = [f"# serve latency: Check to verdict against the `check` CLI ({res['profile']})", "",
             f"{res['date']}, {res['machine']}. Claim: \"{res['claim']}\" (examples/claims.json #{res['claim_no']}), "
             f"corpus: an index of examples/corpus. Warm-up check: examples/claims.json #{res['warm_no']}. "
             f"Server models loaded in {res['serve']['models_loaded_s']} s. Command: `{res['command']}`.", "",
             "| what | seconds | uptime before | uptime after |", "|---|---:|---|---|"]
    lines += [f"| {w} | {v:.2f} | {b.split('load average:')[-1].strip() if b else ''} | "
              f"{a.split('load average:')[-1].strip() if a else ''} |" for w, v, b, a in rows]
    lines += ["", f"- serve − CLI total: {serve_s - cli_total:+.2f} s (ratio {serve_s / cli_total:.2f}); "
              f"target ≤ +2 s: {'met' if serve_s <= cli_total + 2 else 'not met'}",
              f"- serve − CLI pipeline less load: {serve_s - cli_pipe:+.2f} s (ratio {serve_s / cli_pipe:.2f}); "
              f"within 2 s: {'yes' if serve_s <= cli_pipe + 2 else 'no'}",
              f"- serve's own pipeline for the check: {s['pipeline']['pipeline_wall_s']:.2f} s wall, "
              f"{s['pipeline']['load_s']:.2f} s of it model load; the POST was answered in {s['post_answered_s']:.3f} s",
              f"- labels: serve {s['label']}, CLI {c['label']}",
              "", "Stage seconds (total, of which load):", "",
              "| stage | serve | CLI | tokens in/out: serve | CLI |", "|---|---:|---:|---:|---:|"]
    for name in c["pipeline"]["stages_s"]:
        sv, cv = s["pipeline"]["stages_s"].get(name, {}), c["pipeline"]["stages_s"][name]
        lines.append(f"| {name} | {sv.get('total_s', 0):.2f} ({sv.get('load_s', 0):.2f}) | {cv['total_s']:.2f} "
                     f"({cv['load_s']:.2f}) | {sv.get('tokens_in')}/{sv.get('tokens_out')} | "
                     f"{cv.get('tokens_in')}/{cv.get('tokens_out')} |")
    lines += ["", "`load_s` counts the LLM (and trained verdict model) loads; the CLI's retrieval models load "
              "inside its retrieval stage's seconds (not in `load_s`), so \"pipeline less load\" still holds them.",
              "", "Loads are `uptime`'s 1-, 5- and 15-minute averages on a machine shared with other work; "
              "the timings are single runs, so read them with the load beside them.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--claim", type=int, default=0, help="index of the measured claim in examples/claims.json")
    ap.add_argument("--warm", type=int, default=1, help="index of the warm-up claim (another one: no cache of the same prompt)")
    ap.add_argument("--out-name", default="serve_latency")
    args = ap.parse_args()
    claims = orjson.loads((REPO / "examples" / "claims.json").read_bytes())
    claim, warm = claims[args.claim]["claim"], claims[args.warm]["claim"]
    res: dict[str, Any] = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, nice {os.nice(0)}",
                           "profile": args.profile, "claim": claim, "claim_no": args.claim, "warm_no": args.warm,
                           "command": "python " + " ".join(["benchmarks/speed/serve_latency.py", *sys.argv[1:]])}
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        work = Path(tmp)
        index = work / "index"
        subprocess.run(cli("index", str(REPO / "examples" / "corpus"), "--out", str(index), "--quiet"),
                       env=child_env(), cwd=REPO, check=True)
        res["serve"] = time_serve(index, work, args.profile, claim, warm)
        res["cli"] = time_cli(index, work, args.profile, claim)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out_name}.json").write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    text = report(res)
    (RESULTS / f"{args.out_name}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
