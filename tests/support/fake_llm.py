"""A stand-in LLM for orchestration tests and the engine benchmarks (issue 30): every HyDE
prompt gets one question, every verdict prompt a label, after a fixed sleep per request.

It measures and tests the *engine* (scheduling, writing, retries, Ray's overhead), never a
model: the real models run in the end-to-end tests. ``tests/hostile/test_run_faults.py``'s stub is
this class with no latency. Swapped in for ``sanctuary_local.llm.make_backend`` with
``FakeFactory``; the Ray engine ships a factory from outside the package to its workers by
value, so the same swap reaches Ray's actors.

Fault hooks for ``tests/hostile/test_ray_engine.py``, each firing once per run directory (a marker
file says it fired): ``kill_on`` — the request whose tag is that (e.g. ``verdict:1``)
SIGKILLs its own process; ``hold_on`` — that request writes ``<marker>.reached`` and sleeps
``hold_s`` seconds (time for the test to kill the actor mid-claim)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sanctuary_local.llm.base import ChatResult

HYDE_TEXT = '{"label": "Supported", "evidence": {"What does the claim say?": ["It says so."]}}'
VERDICT_TEXT = "Label: Supported\nJustification: stub."


@dataclass(frozen=True)
class FakeFactory:
    """``make_backend``'s signature → a ``FixedLatencyLLM`` with these settings."""

    latency_s: float = 0.0
    kill_on: str | None = None
    hold_on: str | None = None
    hold_s: float = 60.0
    marker_dir: str | None = None

    def __call__(self, cfg: Any, models_dir: Any = "models") -> FixedLatencyLLM:
        return FixedLatencyLLM(cfg, models_dir, self)


class FixedLatencyLLM:
    """Answers every HyDE prompt with one question and every verdict prompt with a label,
    ``latency_s`` seconds per request (``time.sleep``: no CPU used)."""

    name = "stub"
    model_id = "stub"

    def __init__(self, cfg: Any = None, models_dir: Any = "models", spec: FakeFactory | None = None) -> None:
        self.spec = spec or FakeFactory()

    def generate(self, requests: list[Any]) -> list[ChatResult]:
        out = []
        for r in requests:
            self._faults(r.tag)
            if self.spec.latency_s:
                time.sleep(self.spec.latency_s)
            out.append(ChatResult(HYDE_TEXT if r.tag.startswith("hyde") else VERDICT_TEXT,
                                  prompt_tokens=10, completion_tokens=5, finish_reason="stop"))
        return out

    def _faults(self, tag: str) -> None:
        s = self.spec
        if s.marker_dir is None:
            return
        if tag == s.kill_on and _first(Path(s.marker_dir) / "killed"):
            os.kill(os.getpid(), signal.SIGKILL)
        if tag == s.hold_on and _first(Path(s.marker_dir) / "held"):
            (Path(s.marker_dir) / "held.reached").write_text(_actor_name())
            time.sleep(s.hold_s)

    def count_tokens(self, messages: Any) -> int:
        return sum(len(m.content) for m in messages) // 4

    def close(self) -> None:
        pass


def _actor_name() -> str:
    """The Ray actor this runs in ("" outside one)."""
    try:
        import ray

        return (ray.get_runtime_context().get_actor_name() or "") if ray.is_initialized() else ""
    except ImportError:
        return ""


def _first(marker: Path) -> bool:
    """True the first time (creates ``marker`` atomically), False after."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
