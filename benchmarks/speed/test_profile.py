"""Time a set of test modules with pytest's own clock (issue 29: how long `make test` takes).

    python benchmarks/speed/test_profile.py --label after tests/e2e/test_citations_e2e.py tests/e2e/test_reuse.py -k "e2e"

Runs ``python -m pytest -q --durations=0 ARGS`` once (from the repository root, with this
Python), keeps its whole output, and writes ``benchmarks/results/speed/test_profile_<label>.md``
(the command, ``uptime`` before and after, pytest's summary line, its per-phase durations
verbatim) and ``.json`` (the same as data: every duration line as ``{seconds, phase, test}``).
``--from-log LOG`` reads a pytest output already written (a `make test` log) instead of
running pytest; the load is then the one noted with ``--load`` (what ``uptime`` said then).
Run it alone, and compare timings only within one session on one machine: llama.cpp slows
down by an order of magnitude when anything else shares its cores (docs/development.md).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import uptime

ROOT = Path(__file__).resolve().parents[2]
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)$")
SUMMARY = re.compile(r"\d+ (passed|failed|errors?|skipped|deselected)\b.* in \d")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="names the result files: test_profile_<label>.md/.json")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results" / "speed")
    ap.add_argument("--from-log", type=Path, help="a pytest output to read instead of running pytest")
    ap.add_argument("--load", default="not recorded", help="with --from-log: the uptime line of that run")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="test paths and pytest options")
    args = ap.parse_args()
    if args.from_log:
        cmd, before, after, wall, code = ["python", "(read from)", str(args.from_log)], args.load, args.load, 0.0, 0
        lines = args.from_log.read_text(encoding="utf-8", errors="replace").splitlines()
    else:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *args.pytest_args]
        before, t0 = uptime(), time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall, after, code = time.monotonic() - t0, uptime(), proc.returncode
        lines = proc.stdout.splitlines()
    durations = [{"seconds": float(m[1]), "phase": m[2], "test": m[3]} for m in map(DURATION.match, lines) if m]
    summary = next((ln.strip("= ") for ln in reversed(lines) if SUMMARY.search(ln)), "")
    data = {"command": " ".join(["python", *cmd[1:]]), "uptime_before": before, "uptime_after": after,
            "wall_s": round(wall, 1), "exit_code": code, "summary": summary, "durations": durations}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"test_profile_{args.label}"
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    raw = [ln for ln in lines if DURATION.match(ln)]
    stem.with_suffix(".md").write_text(
        f"# Test profile: {args.label}\n\n"
        + (f"Read from the pytest log `{args.from_log}`.\n\n" if args.from_log
           else f"`{data['command']}` (exit {code}, wall {wall:.0f} s)\n\n") +
        f"Load before: `{before}`  \nLoad after: `{after}`\n\n**{summary}**\n\n"
        "pytest's durations, verbatim:\n\n```\n" + "\n".join(raw) + "\n```\n", encoding="utf-8")
    print(f"{summary}; wrote {stem}.md/.json")
    return code


if __name__ == "__main__":
    sys.exit(main())
