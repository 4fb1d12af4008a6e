"""`sanctuary-local check` stopped by SIGTERM while a model call runs (the stand-in LLM of
tests/support/fake_llm.py, 60 s per request): it ends after its short grace with exit code
143, like a second Ctrl-C, leaves no process and removes its temporary run folder. Before,
one SIGTERM waited for the claim in flight, which for `check` is the whole check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sanctuary_local import procs
from tests.support.serve_support import ROOT, TINY, build_index

DRIVER = """
import sys
sys.path.insert(0, {root!r})
from tests.support.fake_llm import FakeFactory
import sanctuary_local.llm as llm
llm.make_backend = FakeFactory(latency_s=60.0)
from sanctuary_local.cli import main
sys.exit(main(["check", "Water boils at 70 degrees.", "--corpus", sys.argv[1], "--profile", {tiny!r}]))
"""


def test_sigterm_ends_check_within_its_grace(tmp_path: Path, repo_dir: Path) -> None:
    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=str(ROOT), tiny=TINY))
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(index)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list(temp.glob("sanctuary-check-*/run/run.log")):
        time.sleep(0.1)
    time.sleep(2)  # inside stage 1's model call
    kids = procs.descendants(proc.pid)
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    print(f"check: SIGTERM to exit {time.monotonic() - t:.2f} s (grace 3 s, model call 60 s)")
    assert proc.returncode == 143, err[-2000:]
    assert "no stop point reached in time: stopping now" in err
    deadline = time.monotonic() + 15
    while procs.alive(kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not procs.alive(kids)
    assert list(temp.iterdir()) == [], list(temp.iterdir())  # the temporary run folder is gone
