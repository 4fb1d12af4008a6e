"""``sanctuary-local serve`` with the stand-in LLM of ``benchmarks/fake_llm.py`` (a fixed
question for stage 1, a label for stage 3, ``LATENCY_S`` seconds per request; retrieval
is real): ``python tests/support/serve_stub.py LATENCY_S SERVE_ARGS...``. Used by the serve tests
to run a real server process without a model.

With ``SERVE_STUB_CHILD=1`` in the environment the backend, when it is made, starts a
process as a server-backed backend would (``vllm serve``, a llama.cpp server): a plain
``Popen``, no death signal, which itself starts another; both sleep ten minutes. Their
command lines end in ``serve-stub-child`` and ``serve-stub-grandchild``. With
``SERVE_STUB_HOLD`` the start itself starts them and then waits (``hold``), so a test can
signal it mid-start."""

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: ``tests.support``

from tests.support.fake_llm import FakeFactory  # noqa: E402

import sanctuary_local.llm as llm  # noqa: E402

factory = FakeFactory(latency_s=float(sys.argv[1]))
GRANDCHILD = "import time; time.sleep(600)"
CHILD = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}, 'serve-stub-grandchild']); "
         "time.sleep(600)")


def with_child(cfg, models_dir="models"):
    subprocess.Popen([sys.executable, "-c", CHILD, "serve-stub-child"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return factory(cfg, models_dir)


llm.make_backend = with_child if os.environ.get("SERVE_STUB_CHILD") == "1" else factory


def hold(step):
    """``step`` that first starts the child process tree, then writes ``SERVE_STUB_HELD`` and
    sleeps ten minutes: a start held where a signal can reach it."""
    def held(*args, **kwargs):
        subprocess.Popen([sys.executable, "-c", CHILD, "serve-stub-child"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        Path(os.environ["SERVE_STUB_HELD"]).write_text("held")
        time.sleep(600)
        return step(*args, **kwargs)
    return held


# SERVE_STUB_HOLD: hold the start in its settings check ("settings") or once --data is half made ("data")
if os.environ.get("SERVE_STUB_HOLD") == "settings":
    import sanctuary_local.serve.app as serve_app  # noqa: E402

    serve_app.check_settings = hold(serve_app.check_settings)
elif os.environ.get("SERVE_STUB_HOLD") == "data":
    import sanctuary_local.serve.security as serve_security  # noqa: E402

    serve_security.load_secret = hold(serve_security.load_secret)

from sanctuary_local.cli import main  # noqa: E402

sys.exit(main(["serve", *sys.argv[2:]]))
