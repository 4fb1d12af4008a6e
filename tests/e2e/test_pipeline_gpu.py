"""`run --profile paper` end to end on a GPU box (skipped without CUDA, vllm or the models).

Run as-is there after `sanctuary-local models fetch paper`:
``pytest -m gpu tests/e2e/test_pipeline_gpu.py``. Structure only (labels valid, provenance
exact, GPU memory reported); no quality or timing assertions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import MissingModel
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.models.resolve import resolve_model
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.records import LABELS

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _need_paper_models() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm", reason="vllm is not installed (pip install '.[gpu]')")
    cfg = load_config("paper")
    for name in (cfg.hyde.llm.model, cfg.verdict.llm.model, cfg.retrieval.sts.model, cfg.retrieval.retriever.model):
        try:
            resolve_model(name, REPO / "models")
        except MissingModel as exc:
            pytest.skip(str(exc))


def test_paper_profile_runs_examples_on_gpu(tmp_path: Path) -> None:
    _need_paper_models()
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=tmp_path,
                                      profile="paper", models_dir=str(REPO / "models"), quiet=True))
    assert summary.n_claims == 4 and all(p.label in LABELS for p in summary.predictions)
    store = KnowledgeStore(EXAMPLES / "store")
    for p in summary.predictions:
        docs = {d.position: d for d in store.load(p.claim_index).documents}
        for e in p.evidence:
            assert docs[e.doc_position].text[e.start : e.end] == e.answer
    timings = orjson.loads((tmp_path / "timings.json").read_bytes())
    assert timings["gpu"] is not None and timings["gpu"]["peak_memory_mb"] > 0
    assert timings["stages"]["hyde"]["tokens_out"] > 0 and timings["stages"]["verdict"]["tokens_out"] > 0
