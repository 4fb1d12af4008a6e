"""What the benchmark scripts share: where the repository, ``../shared`` and the results are,
the default claims, the ``a:b`` range of claims a script is given, and the machine's load. A script, run as ``python benchmarks/TOPIC/x.py``, first puts the repository on ``sys.path``
and then imports it as ``from benchmarks.common import ...``; its results go to
``benchmarks/results/TOPIC/`` (``results_dir``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: AVeriTeC dev claims with gold (``../shared``): the claims the quality benchmarks run on.
DEFAULT_CLAIMS = SHARED / "data" / "averitec" / "dev_part_a.json"
RESULTS = REPO / "benchmarks" / "results"


def results_dir(script: str) -> Path:
    """``benchmarks/results/TOPIC``: a script's results sit in the folder named as its own."""
    return RESULTS / Path(script).resolve().parent.name


def parse_range(text: str) -> tuple[int, int]:
    """``"a:b"`` (``":b"`` = ``"0:b"``) as ``(a, b)``."""
    lo, _, hi = text.partition(":")
    return int(lo or 0), int(hi)


def uptime() -> str:
    """`uptime`'s line (load averages over 1, 5, 15 min), recorded beside every timing."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def write_result(out: Path, label: str, meta: dict, result: dict, markdown: str) -> None:
    """``out/<label>.json`` (the meta, then the result) and ``out/<label>.md``; the markdown is printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{label}.json").write_text(json.dumps({"meta": meta, **result}, indent=1) + "\n")
    (out / f"{label}.md").write_text(markdown)
    print(markdown)
