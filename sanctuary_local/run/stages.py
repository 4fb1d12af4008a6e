"""One function per stage, each ``(run, claims, level)``: the claims of ``claims`` not yet
in the stage's file are done at budget level ``level`` and appended to it. ``execute``
runs them in order; under a time budget ``execute_budgeted`` picks each stage's level."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

from sanctuary_local.records import Claim, ClaimEvidence, HydeResult, Prediction
from sanctuary_local.run.budget import BudgetPlanner, apply_level
from sanctuary_local.run.fallbacks import decompose_fallback, hyde_fallback, verdict_fallback
from sanctuary_local.run.followup_round import FollowupRound
from sanctuary_local.run.overlap import OverlappedRetrieval
from sanctuary_local.run.state import RunState
from sanctuary_local.run.upstream import with_upstream
from sanctuary_local.run.waves import engine_waves, generate, trained_waves, wave_size

__all__ = ["STEPS", "execute", "execute_budgeted", "stage_hyde"]

log = logging.getLogger("sanctuary_local")


def stage_decompose(run: RunState, claims: list[Claim], level: int) -> None:
    """Stage 0 (optional): each claim split into the parts stage 3 labels one by one."""
    from sanctuary_local.modes.decompose import run_decompose

    todo = [c for c in claims if c.index not in run.decompose] if run.cfg.decompose.enabled else []
    if todo:
        cfg = apply_level(run.cfg, level)
        generate(run, "decompose", run.decompose, todo, cfg.hyde.llm, wave_size(cfg.hyde.llm), level,
                 lambda backend, w: run_decompose(w, backend, cfg.decompose), decompose_fallback)


def stage_hyde(run: RunState, claims: list[Claim], level: int,
               on_wave: Callable[[list[HydeResult]], None] | None = None, n_waves: int = 1) -> None:
    """Stage 1: HyDE questions; ``on_wave`` gets each finished wave (overlapped stage 2)."""
    from sanctuary_local.stages import hyde as hyde_stage

    todo = [c for c in claims if c.index not in run.hyde]
    if not todo:
        return
    cfg = apply_level(run.cfg, level)
    size = wave_size(cfg.hyde.llm)
    if n_waves > 1:  # overlapping: at least n_waves waves so stage 2 starts early
        size = max(1, min(size, max(8, -(-len(todo) // n_waves))))
    generate(run, "hyde", run.hyde, todo, cfg.hyde.llm, size, level,
             lambda backend, w: hyde_stage.run_hyde(w, backend, cfg.hyde), lambda c, e: hyde_fallback(c, cfg, e),
             on_wave)


def stage_retrieval(run: RunState, claims: list[Claim], level: int) -> None:
    """Stage 2: retrieval in the worker pool (or Ray tasks), each claim recorded as its result comes in."""
    todo = [run.retrieval_input(run.hyde.records[c.index]) for c in claims
            if c.index not in run.evidence and c.index in run.hyde]
    if not todo:
        return
    run.stops.check()
    cfg = apply_level(run.cfg, level)
    with run.reporter.stage("retrieval", len(todo)) as st:
        def done(ev: ClaimEvidence) -> None:
            if run.stops.keep(ev):
                run.evidence.append(ev.claim_index, run.trusted(ev),
                                    {"seconds": float(ev.timings.get("total", 0.0)), "budget_level": level})
                st.advance()

        run.retrieve(todo, cfg.retrieval, models_dir=cfg.models_dir, workers=cfg.retrieval.workers, on_result=done,
                     should_stop=run.stops.stopping)
    run.stops.check()


def stage_hyde_overlapping_retrieval(run: RunState, claims: list[Claim], level: int) -> None:
    """Stages 1+2 at once (``RunState.overlapping``), see ``overlap.py``."""
    OverlappedRetrieval(run, level, stage_hyde).execute(claims)


def stage_followup(run: RunState, claims: list[Claim], level: int) -> None:
    """The optional follow-up round (``followup.enabled``), see ``followup_round.py``."""
    if run.cfg.followup.enabled:
        FollowupRound(run, level).execute(claims)


def stage_verdict(run: RunState, claims: list[Claim], level: int) -> None:
    """Stage 3: the verdict of every claim with evidence, completed by ``with_upstream``."""
    from sanctuary_local.stages.verdict import line as verdict_stage
    from sanctuary_local.modes import verdict_steps
    from sanctuary_local.stages.verdict.draft import Parts

    evidence = run.final_evidence()
    cfg = apply_level(run.cfg, level)

    def parts(c: Claim) -> Any:
        d = run.decompose.records.get(c.index) if cfg.decompose.enabled else None
        if d is None or len(d.components) < 2:
            return None
        return Parts(d.components, cfg.decompose.verdict_prompt, cfg.decompose.parts_reask)

    # each item carries its parts, so ``work`` needs nothing of ``run`` (Ray ships it to its actors)
    todo = [(c, run.hyde.records[c.index], evidence.records[c.index], parts(c))
            for c in claims if c.index not in run.verdict and c.index in evidence]
    if not todo:
        return
    run.stops.check()
    trained = cfg.verdict.mode == "trained"

    def work(model: Any, w: list[tuple[Claim, HydeResult, ClaimEvidence, Any]]) -> list[Prediction]:
        backend, tv = (None, model) if trained else (model, None)
        steps = verdict_steps(cfg.verdict, any(x[3] is not None for x in w))  # the enabled modes' steps
        return verdict_stage.run_verdict([x[0] for x in w], [x[1] for x in w], [x[2] for x in w], backend, cfg.verdict,
                                         [x[3] for x in w], tv, steps)

    with run.reporter.stage("verdict", len(todo)) as st:
        # trained mode: a classifier of milliseconds per claim, in this process whatever the engine
        # (serve's resident engine keeps it loaded: its own ``trained_waves``)
        waves_of = functools.partial(getattr(run.engine, "trained_waves", trained_waves), cfg.verdict) if trained \
            else engine_waves(run)
        stream = waves_of(st, cfg.verdict.llm, cfg.models_dir, todo, wave_size(cfg.verdict.llm), work,
                          lambda x, e: verdict_fallback(x[0], x[1], x[2], e))
        with closing(stream):
            for wave, preds, per in stream:
                for (c, *_), p in zip(wave, preds):
                    p = with_upstream(run, c, p, per, level, cfg)
                    run.verdict.append(c.index, p, {"seconds": per, "budget_level": level})
                    st.advance(int(p.meta.get("prompt_tokens", 0)), int(p.meta.get("completion_tokens", 0)))
                run.stops.check()


#: Stage name (``RunState.stage_names``) → the function that runs it.
STEPS: dict[str, Callable[[RunState, list[Claim], int], None]] = {
    "decompose": stage_decompose, "hyde": stage_hyde, "retrieval": stage_retrieval,
    "followup": stage_followup, "verdict": stage_verdict,
}


def stage_imported(run: RunState, claims: list[Claim]) -> None:
    """Stages 1–2 of ``--evidence-from``: each claim's questions and snippets from the file
    (``imported.EvidenceSource``), recorded as a run's stage files are."""
    for c in claims:
        if c.index not in run.hyde:
            run.hyde.append(c.index, run.store.hyde(c), {"seconds": 0.0, "budget_level": 0})
        if c.index not in run.evidence:
            run.evidence.append(c.index, run.store.evidence(c), {"seconds": 0.0, "budget_level": 0})


def execute(run: RunState) -> None:
    """Every stage in order for all claims (stages 1+2 overlapped where that pays)."""
    if run.imported:
        stage_imported(run, run.claims)
        return stage_verdict(run, run.claims, 0)
    if run.planner is not None:
        return execute_budgeted(run, run.planner)
    stage_decompose(run, run.claims, 0)
    if run.overlapping():
        stage_hyde_overlapping_retrieval(run, run.claims, 0)
    else:
        stage_hyde(run, run.claims, 0)
        stage_retrieval(run, run.claims, 0)
    stage_followup(run, run.claims, 0)
    stage_verdict(run, run.claims, 0)


def pilot_size(n_claims: int, parallel: int = 1) -> int:
    """Claims of a budgeted run's pilot: 5 % of them, 2 to 8, and at least stage 1's batch
    (``hyde.llm.parallel``) so that the pilot measures the batched rate the rest will run at."""
    return min(n_claims, max(2, min(8, n_claims // 20), parallel))


def execute_budgeted(run: RunState, planner: BudgetPlanner) -> None:
    """A pilot of the first claims at full settings, then each stage of the rest at the
    level the planner picks from the measured per-claim costs."""
    claims = run.claims
    pilot_n = pilot_size(len(claims), run.cfg.hyde.llm.parallel)
    pilot, rest = claims[:pilot_n], claims[pilot_n:]
    stages = run.stage_names()  # the overlapped stages 1+2 are not used under a budget
    for name in stages:
        STEPS[name](run, pilot, 0)
    for i, name in enumerate(stages):
        per_claim = run.reporter.per_claim_costs()
        level = planner.choose(time.perf_counter() - run.t0, pilot_n, per_claim, stages[i:], len(rest))
        log.info("budget: stage %s runs the remaining %d claims at level %d (projected %.1f s/claim, budget %.1f)",
                 name, len(rest), level, planner.projected_s or 0.0, planner.budget_s)
        run.reporter.note_budget(name, level, planner.projected_s)
        STEPS[name](run, rest, level)
