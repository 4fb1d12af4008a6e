"""What a run is asked to do and what it gives back (shared by ``pipeline`` and
``reporting`` without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sanctuary_local.records import Prediction

__all__ = ["RunOptions", "RunSummary"]


@dataclass
class RunOptions:
    """What ``sanctuary-local run`` was asked to do."""

    claims: Path
    store: Path
    out: Path
    profile: str = "cpu"
    limit: int | None = None
    claims_range: str | None = None
    workers: int | None = None
    budget_s: float | None = None
    force: bool = False
    """A changed fingerprint: keep the completed claims of ``out`` and redo the rest."""
    restart: bool = False
    """Discard every result in ``out`` and start over."""
    quiet: bool = False
    show_config: bool = False
    """Print the effective config (JSON) on the console; it is saved to ``config.json`` either way."""
    overrides: dict[str, Any] | None = None
    models_dir: str | None = None
    overlap: bool | None = None
    """Run stage 2 (CPU pool) while stage 1 generates the next wave. None: on when stage 1
    runs on a GPU/server backend (vllm, openai_http), where the CPU is otherwise idle."""
    reuse_from: Path | None = None
    """Another run directory whose finished stages this run copies where their inputs are
    unchanged (``reuse.py``)."""
    engine: str = "local"
    """Where the stages run: ``local`` (this process and its retrieval pool) or ``ray`` (a Ray
    cluster, ``run/ray_engine.py``); the same records either way, so it is not fingerprinted."""
    ray_address: str | None = None
    """``--engine ray``: the cluster to join (``auto``, ``ray://…``, ``HOST:PORT``); None starts a
    local one for the run and stops it at the end."""
    ray_actors: int | None = None
    """``--engine ray``: model-holding actors per LLM stage (None: one per GPU on a GPU backend,
    one per ``n_threads`` CPUs on a CPU one)."""
    resident: Any = None
    """An engine the caller keeps across runs (``llm_waves``, ``retrieve`` and ``close`` as
    ``run/ray_engine.py``'s; ``close`` after each run must keep its models): ``serve``'s
    models, loaded once per process. Overrides ``engine``; the same records, so it is not
    fingerprinted."""
    evidence_from: Path | None = None
    """Another system's evidence (a leaderboard CSV or a predictions.json): stages 1–2 are
    skipped and stage 3 reads it (``imported.py``); ``store`` then names the same file."""
    argv: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    """The outcome of a run (also written to ``timings.json``/``manifest.json``)."""

    out_dir: Path
    n_claims: int
    n_degraded: int
    degraded_reasons: dict[str, int]
    label_counts: dict[str, int]
    timings: dict[str, Any]
    predictions: list[Prediction]

    @property
    def exit_code(self) -> int:
        """0: every claim clean; 3: finished, but some claims are degraded (flagged)."""
        return 3 if self.n_degraded else 0
