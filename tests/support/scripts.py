"""Benchmark scripts imported as modules, for the tests of their own logic (the quality
harness, the injection benchmark, the real-page flags): ``load_script("quality.e2e")`` is
``benchmarks/quality/e2e.py`` imported by its package name, so its own imports of
``benchmarks.common`` and its siblings resolve as when it runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    """The script ``benchmarks/<name with dots as slashes>.py`` as a module."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"benchmarks.{name}")
