"""``sanctuary-local serve`` with the stand-in LLM of ``benchmarks/fake_llm.py`` (a fixed
question for stage 1, a label for stage 3, ``LATENCY_S`` seconds per request; retrieval
is real): ``python tests/serve_stub.py LATENCY_S SERVE_ARGS...``. Used by the serve tests
to run a real server process without a model."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import _load_benchmark  # noqa: E402

import sanctuary_local.llm as llm  # noqa: E402

llm.make_backend = _load_benchmark("fake_llm").FakeFactory(latency_s=float(sys.argv[1]))

from sanctuary_local.cli import main  # noqa: E402

sys.exit(main(["serve", *sys.argv[2:]]))
