"""Per-claim latency budget (``run --budget-s``): measure, project, degrade — never silently.

The shared task allows 60 s per claim on average (paper §5.5). With a budget set, the
pipeline runs a *pilot* of the first claims through all three stages at full settings,
projects the total from the measured per-claim seconds, and if the projection is over
budget picks the lowest degradation level below whose estimated cost fits. The level
is re-checked at every later stage boundary with fresh measurements (a stage that ran
slower than estimated pushes the remaining stages to a higher level).

The knobs, in the documented order in which they are degraded:
  1. fewer stage-1 questions (``hyde.max_questions``)
  2. a smaller coarse top-k (``retrieval.top_k_segments``) and fewer snippets per query
  3. shorter generations (``hyde.sampling.max_tokens``, ``verdict.sampling.max_tokens``,
     and with the optional rounds ``followup.sampling.max_tokens`` and
     ``decompose.sampling.max_tokens``; at the floor one follow-up question per claim
     and no exhaustiveness check)
Every claim records the level and the knob values it ran with (``Prediction.meta["budget"]``
and the flag ``budget_level:N``).

A resumed run plans with the budget left to it (``resume_planner``): the wall seconds
its earlier attempts spent (``manifest.json``'s ``attempts``) count as spent, their
measured per-claim costs stand in for stages this attempt has not measured yet, the
level starts at the highest one its finished claims ran at, and only the claims still
without a record of a stage are projected for it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.config.settings import Config

# (max_questions, top_k_segments, max_snippets, max_tokens factor) per level.
LEVELS: tuple[tuple[int, int, int, float], ...] = (
    (10, 125, 8, 1.0),   # 0: as configured (values here are the paper's; configured values win)
    (7, 125, 8, 1.0),    # 1: fewer questions
    (7, 64, 6, 1.0),     # 2: + smaller top-k
    (5, 32, 4, 0.6),     # 3: + shorter max_tokens
    (3, 16, 3, 0.35),    # 4: floor
)
MAX_LEVEL = len(LEVELS) - 1
STAGES = ("hyde", "retrieval", "verdict")


def apply_level(cfg: Config, level: int) -> Config:
    """A copy of ``cfg`` degraded to ``level`` (knobs only ever go down from the configured values)."""
    if level <= 0:
        return cfg
    q, k, s, f = LEVELS[min(level, MAX_LEVEL)]
    c = copy.deepcopy(cfg)
    c.hyde.max_questions = max(1, min(c.hyde.max_questions, q))
    c.hyde.min_questions = min(c.hyde.min_questions, c.hyde.max_questions)
    c.retrieval.top_k_segments = min(c.retrieval.top_k_segments, k)
    c.retrieval.max_snippets = min(c.retrieval.max_snippets, s)
    c.hyde.sampling.max_tokens = max(64, int(c.hyde.sampling.max_tokens * f))
    c.verdict.sampling.max_tokens = max(64, int(c.verdict.sampling.max_tokens * f))
    c.followup.sampling.max_tokens = max(64, int(c.followup.sampling.max_tokens * f))
    c.decompose.sampling.max_tokens = max(64, int(c.decompose.sampling.max_tokens * f))
    if level >= MAX_LEVEL:
        c.followup.max_questions = 1
        c.decompose.check_rounds = 0
    return c


def knobs(cfg: Config) -> dict[str, int]:
    """The knob values a claim actually ran with (recorded per claim)."""
    return {
        "hyde.max_questions": cfg.hyde.max_questions,
        "retrieval.top_k_segments": cfg.retrieval.top_k_segments,
        "retrieval.max_snippets": cfg.retrieval.max_snippets,
        "hyde.max_tokens": cfg.hyde.sampling.max_tokens,
        "verdict.max_tokens": cfg.verdict.sampling.max_tokens,
    }


def cost_factor(base: Config, level: int, stage: str) -> float:
    """Estimated cost of ``stage`` at ``level`` relative to level 0.

    A rough, documented model: stage-1 time is dominated by generated tokens, which
    scale with the number of Q-A pairs and the token cap; stage-2 time with queries ×
    retrieved segments; stage-3 time with the generated reasoning (token cap) plus a
    prompt share that scales with the snippets. Measurements replace it stage by stage."""
    b, d = knobs(base), knobs(apply_level(base, level))
    q = d["hyde.max_questions"] / b["hyde.max_questions"]
    if stage == "hyde":
        return min(q, d["hyde.max_tokens"] / b["hyde.max_tokens"])
    if stage in ("followup", "decompose"):  # short generations: their token cap dominates
        return d["hyde.max_tokens"] / b["hyde.max_tokens"]
    if stage == "retrieval":
        k = d["retrieval.top_k_segments"] / b["retrieval.top_k_segments"]
        return 0.3 + 0.7 * q * math.sqrt(k)  # fixed part: load + segment + index
    s = d["retrieval.max_snippets"] / b["retrieval.max_snippets"]
    return 0.6 * d["verdict.max_tokens"] / b["verdict.max_tokens"] + 0.4 * q * s


@dataclass
class BudgetPlanner:
    """Chooses degradation levels so the run's mean seconds per claim stays within budget."""

    base: Config
    budget_s: float
    n_claims: int
    level: int = 0
    projected_s: float | None = None  # projected mean seconds/claim when the level was chosen
    prior_s: float = 0.0
    """Wall seconds earlier attempts of this run spent (a resumed run)."""
    prior_per_claim: dict[str, float] = field(default_factory=dict)
    """Seconds per claim of each stage as earlier attempts measured them."""
    pending: dict[str, int] = field(default_factory=dict)
    """Claims without a record of each stage when this attempt started (absent: all)."""

    def choose(self, spent_s: float, n_done: int, per_claim: dict[str, float], remaining_stages: tuple[str, ...],
               n_remaining: int) -> int:
        """Pick the lowest level ≥ the current one whose projected mean fits the budget.

        ``spent_s``: wall seconds so far; ``per_claim``: measured seconds per claim of each
        remaining stage at the *current* level (level-0 estimates are scaled)."""
        if n_remaining <= 0:
            return self.level
        total_budget = self.budget_s * self.n_claims
        spent_s += self.prior_s
        per_claim = {**self.prior_per_claim, **per_claim}  # this attempt's measurements win
        for level in range(self.level, MAX_LEVEL + 1):
            est = 0.0
            for st in remaining_stages:
                cur = cost_factor(self.base, self.level, st) or 1.0
                n = min(n_remaining, self.pending.get(st, n_remaining))
                est += per_claim.get(st, 0.0) / cur * cost_factor(self.base, level, st) * n
            projected_total = spent_s + est
            if projected_total <= total_budget or level == MAX_LEVEL:
                self.level = level
                self.projected_s = projected_total / self.n_claims
                return level
        return self.level  # pragma: no cover


def resume_planner(planner: BudgetPlanner, earlier: dict[str, Any], files: dict[str, Any], indices: Sequence[int]) -> None:
    """Give a resumed run's planner what its earlier attempts spent and measured.

    ``earlier``: ``{"wall_s": seconds, "stages": {stage: {"total_s", "n"}}}`` summed over
    the earlier attempts (``RunReporter.earlier_attempts``); ``files``: stage name →
    ``StageFile`` (records and their ``budget_level`` extras)."""
    planner.prior_s = float(earlier.get("wall_s") or 0.0)
    planner.prior_per_claim = {name: float(st["total_s"]) / int(st["n"])
                               for name, st in (earlier.get("stages") or {}).items() if int(st.get("n") or 0) > 0}
    planner.pending = {name: sum(1 for i in indices if i not in sf) for name, sf in files.items()}
    levels = [int(extra.get("budget_level", 0)) for sf in files.values() for extra in sf.extras.values()]
    planner.level = min(MAX_LEVEL, max([planner.level, *levels]))
