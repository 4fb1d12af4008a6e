"""The batched SANCTUARY pipeline — the only module that knows every stage.

Stage-major execution (paper §4, made batched): stage 1 (HyDE) for all pending claims
with its model loaded once → model released → stage 2 (retrieval) in a process pool →
stage 3 (verdict) for all claims with its model. Every finished record is fsync'ed to
its stage JSONL (``runstate.StageFile``) so a rerun resumes exactly where a crash or
``kill -9`` stopped. One bad claim never stops the run: it is flagged and still gets a
valid prediction. With ``budget_s`` a pilot measures the first claims and later claims
are degraded along a documented knob ladder (``budget.py``).

A ``StopRequest`` (first Ctrl-C / SIGTERM, see ``interrupt.py``) is honoured between
claims: the claim in flight finishes and is saved, outputs are written for the finished
claims, and ``RunInterrupted`` is raised. A stage file or output that cannot be written
raises ``StorageError`` naming the file and the cause.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sanctuary_local.budget import STAGES, BudgetPlanner, apply_level, knobs
from sanctuary_local.config import Config, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.ids import file_sha256
from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.models import set_offline_env
from sanctuary_local.records import ClaimEvidence, Claim, Decomposition, HydeResult, Prediction
from sanctuary_local.reporting import RunReporter
from sanctuary_local.run_types import RunOptions, RunSummary
from sanctuary_local.runstate import STAGE_FILES, StageFile, check_state, storage_error

__all__ = ["RunOptions", "RunSummary", "preflight", "run_pipeline", "select_claims"]

log = logging.getLogger("sanctuary_local")
R = TypeVar("R")

#: Flag prefixes that mark a claim as degraded (something failed; a fallback was used).
#: ``evidence_placeholder`` is not one: its cause (store_missing, retrieval_error, …) is
#: flagged on its own, and every query falling below the threshold is not a failure.
DEGRADING = (
    "store_missing", "store_problems", "no_documents", "retrieval_error",
    "hyde_llm_error", "hyde_claim_fallback", "verdict_llm_error", "verdict_label_fallback",
)


def select_claims(claims: list[Claim], claims_range: str | None, limit: int | None) -> list[Claim]:
    """``--claims-range a:b`` (python slice over claim indices) then ``--limit N``."""
    from sanctuary_local.io.claims import parse_claims_range

    if claims_range:
        selected = parse_claims_range(claims_range)
        claims = [c for c in claims if c.index in selected]
    if limit is not None:
        if limit < 0:
            raise UserError("--limit must be ≥ 0")
        claims = claims[:limit]
    return claims


#: Python module each backend needs (checked before anything runs).
_BACKEND_MODULES = {"vllm": ("vllm", "gpu"), "llama_cpp": ("llama_cpp", "cpu"), "openai_http": (None, None)}


def preflight(cfg: Config) -> None:
    """Check every model and backend the run needs before any work starts, and report
    all problems at once (a missing Phi-4 should not surface after an hour of stage 1)."""
    import importlib.util

    from sanctuary_local.models import resolve_model

    problems: list[str] = []
    for where, llm in (("hyde.llm", cfg.hyde.llm), ("verdict.llm", cfg.verdict.llm)):
        if llm.backend not in _BACKEND_MODULES:
            problems.append(f"{where}.backend: unknown backend '{llm.backend}' (valid: {', '.join(_BACKEND_MODULES)})")
            continue
        module, extra = _BACKEND_MODULES[llm.backend]
        if module and importlib.util.find_spec(module) is None:
            problems.append(f"{where}: backend '{llm.backend}' needs the package '{module}': pip install 'sanctuary-local[{extra}]'")
        if llm.backend == "openai_http" and not llm.base_url:
            problems.append(f"{where}: backend 'openai_http' needs base_url")
    roles = [("hyde.llm.model", cfg.hyde.llm), ("verdict.llm.model", cfg.verdict.llm),
             ("retrieval.sts.model", cfg.retrieval.sts), ("retrieval.retriever.model", cfg.retrieval.retriever)]
    from sanctuary_local.retrieval.embed import STATIC_PREFIX

    for where, section in roles:
        if getattr(section, "backend", None) == "openai_http":
            continue  # the server holds the model
        try:
            # "static:<model>" is distilled from <model> on first use: <model> must be there
            resolve_model(section.model.removeprefix(STATIC_PREFIX), cfg.models_dir)
        except UserError as exc:
            problems.append(f"{where}: {exc}")
    if not problems and cfg.verdict.llm.backend != "openai_http":
        from sanctuary_local.stages.calibration import prepared_calibration

        try:  # a calibration for another model or prompt stops the run before stage 1, not after it
            prepared_calibration(cfg.verdict, cfg.models_dir)
        except UserError as exc:
            problems.append(str(exc))
    if problems:
        raise UserError("cannot start the run:\n  - " + "\n  - ".join(problems))


def degraded_reasons(flags: Sequence[str]) -> list[str]:
    return sorted({f.split(":")[0] for f in flags if f.split(":")[0].startswith(DEGRADING)})


class _StopPoints:
    """Where a run may stop: between claims (``check``), on request (``StopRequest``) or on
    a fault raised in a pool callback thread (kept in ``fault``, re-raised by ``check``)."""

    def __init__(self, stop: StopRequest | None) -> None:
        self.stop = stop if stop is not None else StopRequest()
        self.fault: BaseException | None = None

    def check(self) -> None:
        if self.fault is not None:
            raise self.fault
        if self.stop.requested:
            raise RunInterrupted(self.stop.signum or 15)

    def stopping(self) -> bool:
        return self.stop.requested or self.fault is not None

    def keep(self, ev: ClaimEvidence) -> bool:
        """Whether to record a retrieval result: not a worker that died because the run
        is being stopped (a group Ctrl-C or SIGTERM); that claim is redone on resume."""
        from sanctuary_local.stages.evidence import WORKER_FAILED

        return not (self.stopping() and any(f.startswith(WORKER_FAILED) for f in ev.flags))


def _llm_waves(st: Any, llm_cfg: Any, models_dir: str, todo: list[Any], size: int,
               run: Callable[[Any, list[Any]], list[R]], fallback: Callable[[Any, Exception], R]):
    """Load a stage's model once, run ``todo`` wave by wave (a failing wave is split,
    see ``_resilient``), yield ``(wave, results, seconds per item)``, then release the
    model so the next stage's can load."""
    from sanctuary_local.llm import make_backend

    backend = st.timed_load(lambda: make_backend(llm_cfg, models_dir))
    try:
        for wave in _waves(todo, size):
            t = time.perf_counter()
            results = _resilient(wave, lambda w: run(backend, w), fallback)
            yield wave, results, (time.perf_counter() - t) / len(wave)
    finally:
        backend.close()


class _Run:
    """State of one run: config, claims, stage files, reporter."""

    def __init__(self, opts: RunOptions, stop: StopRequest | None = None) -> None:
        from sanctuary_local.io.claims import read_claims
        from sanctuary_local.corpus.source import open_source, source_key

        self.opts = opts
        self.stops = _StopPoints(stop)
        cfg = load_config(opts.profile, opts.overrides)
        if opts.workers is not None:
            cfg.retrieval.workers = opts.workers
        if opts.models_dir:
            cfg.models_dir = opts.models_dir
        self.cfg: Config = cfg
        preflight(cfg)
        from sanctuary_local.stages.trust import load_trust

        # read before check_state: a bad trust file stops the run before --force clears anything
        self.trust = load_trust(cfg.retrieval.trust_file, cfg.retrieval.trust_default)
        self.store = open_source(opts.store)  # a knowledge store, or a corpus index (issue 28)
        self.claims = select_claims(read_claims(opts.claims), opts.claims_range, opts.limit)
        self.by_index = {c.index: c for c in self.claims}
        self.out = Path(opts.out)
        fingerprint = {
            "config": cfg.fingerprint(),
            "claims_file": file_sha256(str(opts.claims)),
            "store": source_key(opts.store),
            "budget_s": opts.budget_s,
        }
        check_state(self.out, fingerprint, opts.force)
        self.reporter = RunReporter(self.out, cfg, opts, quiet=opts.quiet)
        self.hyde = StageFile(self.out / STAGE_FILES["hyde"], HydeResult.from_dict)
        self.evidence = StageFile(self.out / STAGE_FILES["retrieval"], ClaimEvidence.from_dict)
        self.verdict = StageFile(self.out / STAGE_FILES["verdict"], Prediction.from_dict)
        self.decompose = StageFile(self.out / STAGE_FILES["decompose"], Decomposition.from_dict)
        self.followup_q = StageFile(self.out / STAGE_FILES["followup_questions"], HydeResult.from_dict)
        self.followup = StageFile(self.out / STAGE_FILES["followup"], ClaimEvidence.from_dict)
        for sf in (self.decompose, self.hyde, self.evidence, self.followup_q, self.followup, self.verdict):
            if sf.repaired_bytes:
                log.warning("%s: cut a torn last line (%d bytes) left by an interrupted run", sf.path, sf.repaired_bytes)
        if opts.reuse_from is not None:
            from sanctuary_local.reuse import reuse_stages

            files = {"decompose": self.decompose, "hyde": self.hyde, "retrieval": self.evidence,
                     "followup_questions": self.followup_q, "followup": self.followup, "verdict": self.verdict}
            reuse_stages(Path(opts.reuse_from), self.out, cfg, fingerprint, files, [c.index for c in self.claims])
        self.planner = (
            BudgetPlanner(cfg, opts.budget_s, len(self.claims)) if opts.budget_s else None
        )
        self.t0 = time.perf_counter()

    # ------------------------------------------------- stage 0: decomposition (optional)
    def stage_decompose(self, claims: list[Claim], level: int) -> None:
        from sanctuary_local.stages.decompose import run_decompose

        todo = [c for c in claims if c.index not in self.decompose] if self.cfg.decompose.enabled else []
        if todo:
            cfg = apply_level(self.cfg, level)
            _generate(self, "decompose", self.decompose, todo, cfg.hyde.llm, _wave_size(cfg.hyde.llm), level,
                      lambda backend, w: run_decompose(w, backend, cfg.decompose), _decompose_fallback)

    def trusted(self, ev: ClaimEvidence) -> ClaimEvidence:
        """Stage-2 evidence as recorded: re-ranked by the user's trust weights when
        ``retrieval.trust_file`` is set (``stages/trust.py``), else as retrieved."""
        from sanctuary_local.stages.trust import apply_trust

        return apply_trust(ev, self.trust)

    def retrieval_input(self, h: HydeResult) -> HydeResult:
        """Stage 2's queries of a claim: its stage-1 questions, plus its parts when decomposed."""
        if not self.cfg.decompose.enabled:
            return h
        from sanctuary_local.stages.decompose import with_component_queries

        return with_component_queries(h, self.decompose.records.get(h.claim_index))

    # ------------------------------------------------------------------ stage 1
    def stage_hyde(self, claims: list[Claim], level: int,
                   on_wave: Callable[[list[HydeResult]], None] | None = None, n_waves: int = 1) -> None:
        from sanctuary_local.stages import hyde as hyde_stage

        todo = [c for c in claims if c.index not in self.hyde]
        if not todo:
            return
        cfg = apply_level(self.cfg, level)
        size = _wave_size(cfg.hyde.llm)
        if n_waves > 1:  # overlapping: at least n_waves waves so stage 2 starts early
            size = max(1, min(size, max(8, -(-len(todo) // n_waves))))
        _generate(self, "hyde", self.hyde, todo, cfg.hyde.llm, size, level,
                  lambda backend, w: hyde_stage.run_hyde(w, backend, cfg.hyde), lambda c, e: _hyde_fallback(c, cfg, e),
                  on_wave)

    # ------------------------------------------------------------------ stage 2
    def stage_retrieval(self, claims: list[Claim], level: int) -> None:
        from sanctuary_local.stages.evidence import run_retrieval

        todo = [self.retrieval_input(self.hyde.records[c.index]) for c in claims
                if c.index not in self.evidence and c.index in self.hyde]
        if not todo:
            return
        self.stops.check()
        cfg = apply_level(self.cfg, level)
        with self.reporter.stage("retrieval", len(todo)) as st:
            def done(ev: ClaimEvidence) -> None:
                if self.stops.keep(ev):
                    self.evidence.append(ev.claim_index, self.trusted(ev),
                                         {"seconds": float(ev.timings.get("total", 0.0)), "budget_level": level})
                    st.advance()

            run_retrieval(self.opts.store, todo, cfg.retrieval, models_dir=cfg.models_dir,
                          workers=cfg.retrieval.workers, on_result=done, should_stop=self.stops.stopping)
        self.stops.check()

    # ------------------------------------------------------- stages 1+2 overlapped
    def stage_hyde_overlapping_retrieval(self, claims: list[Claim], level: int) -> None:
        _OverlappedRetrieval(self, level).execute(claims)

    def overlapping(self) -> bool:
        if self.opts.overlap is not None:
            return self.opts.overlap
        return self.cfg.hyde.llm.backend in ("vllm", "openai_http")

    # ------------------------------------------------ follow-up round (optional)
    def stage_followup(self, claims: list[Claim], level: int) -> None:
        if self.cfg.followup.enabled:
            _FollowupRound(self, level).execute(claims)

    def final_evidence(self) -> StageFile:
        """The evidence stage 3 reads: stage 2's, or with the follow-up round its merge."""
        return self.followup if self.cfg.followup.enabled else self.evidence

    # ------------------------------------------------------------------ stage 3
    def stage_verdict(self, claims: list[Claim], level: int) -> None:
        from sanctuary_local.stages import verdict as verdict_stage

        evidence = self.final_evidence()
        todo = [(c, self.hyde.records[c.index], evidence.records[c.index])
                for c in claims if c.index not in self.verdict and c.index in evidence]
        if not todo:
            return
        self.stops.check()
        cfg = apply_level(self.cfg, level)

        def parts(c: Claim) -> Any:
            d = self.decompose.records.get(c.index) if cfg.decompose.enabled else None
            if d is None or len(d.components) < 2:
                return None
            return verdict_stage.Parts(d.components, cfg.decompose.verdict_prompt, cfg.decompose.parts_reask)

        calibration = self.calibration(cfg)

        def run(backend: Any, w: list[tuple[Claim, HydeResult, ClaimEvidence]]) -> list[Prediction]:
            return verdict_stage.run_verdict([x[0] for x in w], [x[1] for x in w], [x[2] for x in w], backend, cfg.verdict,
                                             [parts(x[0]) for x in w], calibration)

        with self.reporter.stage("verdict", len(todo)) as st:
            waves = _llm_waves(st, cfg.verdict.llm, cfg.models_dir, todo, _wave_size(cfg.verdict.llm), run,
                               lambda x, e: _verdict_fallback(x[0], x[1], x[2], e))
            with closing(waves):
                for wave, preds, per in waves:
                    for (c, _, _), p in zip(wave, preds):
                        p = _with_upstream(self, c, p, per, level, cfg)
                        self.verdict.append(c.index, p, {"seconds": per, "budget_level": level})
                        st.advance(int(p.meta.get("prompt_tokens", 0)), int(p.meta.get("completion_tokens", 0)))
                    self.stops.check()

    def calibration(self, cfg: Config) -> Any:
        """Stage 3's calibration, checked against its model and prompts (None: raw scores)."""
        if cfg.verdict.llm.backend == "openai_http" and cfg.verdict.calibration:
            from sanctuary_local.stages.calibration import load_calibration

            return load_calibration(cfg.verdict.calibration)  # the server's model file is not ours to hash
        from sanctuary_local.stages.calibration import prepared_calibration

        return prepared_calibration(cfg.verdict, cfg.models_dir)

    # --------------------------------------------------------------- execution
    def execute(self) -> None:
        if self.planner is not None:
            return _execute_budgeted(self, self.planner)
        self.stage_decompose(self.claims, 0)
        if self.overlapping():
            self.stage_hyde_overlapping_retrieval(self.claims, 0)
        else:
            self.stage_hyde(self.claims, 0)
            self.stage_retrieval(self.claims, 0)
        self.stage_followup(self.claims, 0)
        self.stage_verdict(self.claims, 0)

    def stage_names(self) -> tuple[str, ...]:
        """The stages this run executes, in order (decomposition and follow-up round only when enabled)."""
        return (*(("decompose",) if self.cfg.decompose.enabled else ()), *STAGES[:-1],
                *(("followup",) if self.cfg.followup.enabled else ()), STAGES[-1])


def _execute_budgeted(run: _Run, planner: BudgetPlanner) -> None:
    """A pilot of the first claims at full settings, then each stage of the rest at the
    level the planner picks from the measured per-claim costs."""
    claims = run.claims
    pilot_n = min(len(claims), max(2, min(8, len(claims) // 20)))
    pilot, rest = claims[:pilot_n], claims[pilot_n:]
    stages = run.stage_names()  # the overlapped stages 1+2 are not used under a budget
    for name in stages:
        getattr(run, f"stage_{name}")(pilot, 0)
    for i, name in enumerate(stages):
        per_claim = run.reporter.per_claim_costs()
        level = planner.choose(time.perf_counter() - run.t0, pilot_n, per_claim, stages[i:], len(rest))
        log.info("budget: stage %s runs the remaining %d claims at level %d (projected %.1f s/claim, budget %.1f)",
                 name, len(rest), level, planner.projected_s or 0.0, planner.budget_s)
        run.reporter.note_budget(name, level, planner.projected_s)
        getattr(run, f"stage_{name}")(rest, level)


class _OverlappedRetrieval:
    """Stage 1 in waves; each finished wave's claims go straight to the retrieval pool, so
    CPU retrieval runs while the GPU generates the next wave. Results are identical to the
    stage-major order (every claim's retrieval depends only on its own queries)."""

    def __init__(self, run: _Run, level: int) -> None:
        self.run, self.level = run, level
        self.lock = threading.Lock()
        self.futures: list[Any] = []
        self.st: Any = None  # the retrieval stage's reporter and pool, while execute runs
        self.pool: Any = None

    def execute(self, claims: list[Claim]) -> None:
        from sanctuary_local.stages.evidence import RetrievalPool

        r = self.run
        todo = [c for c in claims if c.index not in r.evidence]
        if not todo:
            return r.stage_hyde(claims, self.level)
        r.stops.check()
        cfg = apply_level(r.cfg, self.level)
        with r.reporter.stage("retrieval", len(todo)) as st, RetrievalPool(
            r.opts.store, cfg.retrieval, models_dir=cfg.models_dir, workers=cfg.retrieval.workers
        ) as pool:
            self.st, self.pool = st, pool
            self.submit([r.hyde.records[c.index] for c in todo if c.index in r.hyde])  # resumed claims first
            r.stage_hyde(claims, self.level, on_wave=self.submit, n_waves=4)
            while wait(self.futures, timeout=0.5).not_done and not r.stops.stopping():
                pass
            if r.stops.stopping():
                pool.cancel_pending()  # closing the pool waits for the claims in flight
        r.stops.check()
        log.info("stages 1+2 overlapped for %d claims", len(todo))

    def submit(self, results: list[HydeResult]) -> None:
        for h in results:
            if h.claim_index not in self.run.evidence:
                fut = self.pool.submit(self.run.retrieval_input(h))
                self.futures.append(fut)
                fut.add_done_callback(self.done)

    def done(self, fut: Any) -> None:
        r = self.run
        if fut.cancelled() or not r.stops.keep(ev := fut.result()):
            return
        with self.lock:  # callbacks may come from the pool's thread
            try:
                r.evidence.append(ev.claim_index, r.trusted(ev), {"seconds": float(ev.timings.get("total", 0.0)),
                                                       "budget_level": self.level, "overlapped": True})
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread (stops.check)
                r.stops.fault = r.stops.fault or exc
                return
            self.st.advance()


class _FollowupRound:
    """The optional follow-up round (``stages/followup.py``): the stage-1 model writes new
    questions for the claims whose questions found nothing, stage 2 runs them, and the
    merged evidence is what stage 3 reads. Both steps are recorded claim by claim (a
    resumed run redoes neither); a claim without gaps costs no model call."""

    def __init__(self, run: _Run, level: int) -> None:
        self.run, self.level = run, level

    def execute(self, claims: list[Claim]) -> None:
        from sanctuary_local.stages import followup as fu
        from sanctuary_local.stages.evidence import run_retrieval

        r = self.run
        todo = [c for c in claims if c.index not in r.followup and c.index in r.evidence]
        if not todo:
            return
        r.stops.check()
        cfg = apply_level(r.cfg, self.level)
        extra = {"budget_level": self.level}
        with r.reporter.stage("followup", len(todo)) as st:
            ask = [c for c in todo if c.index not in r.followup_q]
            need = [(c, r.evidence.records[c.index]) for c in ask if fu.needs_followup(r.evidence.records[c.index], cfg.followup)]
            asked = {c.index for c, _ in need}
            for c in ask:
                if c.index not in asked:
                    r.followup_q.append(c.index, fu.no_followup(c.index), {"seconds": 0.0, **extra})
            if need:
                waves = _llm_waves(st, cfg.hyde.llm, cfg.models_dir, need, _wave_size(cfg.hyde.llm),
                                   lambda backend, w: fu.run_followup(w, backend, cfg.followup),
                                   lambda x, e: _followup_fallback(x[0], e))
                with closing(waves):
                    for wave, results, per in waves:
                        for (c, _), q in zip(wave, results):
                            r.followup_q.append(c.index, q, {"seconds": per, **extra})
                            st.tokens(q.generation.prompt_tokens, q.generation.completion_tokens)
                        r.stops.check()
            questions = [r.followup_q.records[c.index] for c in todo]

            def done(ev: ClaimEvidence | None, q: Any) -> None:
                if ev is not None and not r.stops.keep(ev):
                    return
                merged = fu.merge_evidence(r.evidence.records[q.claim_index], r.trusted(ev) if ev is not None else None, q)
                secs = float(r.followup_q.extras.get(q.claim_index, {}).get("seconds", 0.0))
                secs += float(ev.timings.get("total", 0.0)) if ev is not None else 0.0
                r.followup.append(q.claim_index, merged, {"seconds": secs, **extra})
                st.advance()

            for q in questions:
                if not q.queries:
                    done(None, q)
            by_claim = {q.claim_index: q for q in questions if q.queries}
            if by_claim:
                run_retrieval(r.opts.store, list(by_claim.values()), cfg.retrieval, models_dir=cfg.models_dir,
                              workers=cfg.retrieval.workers, on_result=lambda ev: done(ev, by_claim[ev.claim_index]),
                              should_stop=r.stops.stopping)
        r.stops.check()


def _decompose_fallback(claim: Claim, exc: Exception) -> Decomposition:
    return Decomposition(claim.index, (claim.text.strip(),), None, (), "", "",
                         (f"decompose_llm_error: {type(exc).__name__}: {exc}"[:300], "decompose_fallback"))


def _followup_fallback(claim: Claim, exc: Exception) -> HydeResult:
    return HydeResult(claim.index, None, (), "", (f"followup_llm_error: {type(exc).__name__}: {exc}"[:300], "followup_unusable"))


def _generate(run: _Run, name: str, sf: StageFile, todo: list[Claim], llm_cfg: Any, size: int, level: int,
              work: Callable[[Any, list[Claim]], list[Any]], fallback: Callable[[Claim, Exception], Any],
              on_wave: Callable[[list[Any]], None] | None = None) -> None:
    """An LLM stage over ``todo``: the model loaded once, wave by wave, each claim's record
    (a result with a ``generation``) appended to ``sf`` as soon as its wave is done."""
    run.stops.check()
    with run.reporter.stage(name, len(todo)) as st:
        waves = _llm_waves(st, llm_cfg, run.cfg.models_dir, todo, size, work, fallback)
        with closing(waves):
            for wave, results, per in waves:
                for c, r in zip(wave, results):
                    sf.append(c.index, r, {"seconds": per, "budget_level": level})
                    st.advance(r.generation.prompt_tokens, r.generation.completion_tokens)
                if on_wave is not None:
                    on_wave(results)
                run.stops.check()


def _with_upstream(run: _Run, claim: Claim, p: Prediction, verdict_s: float, level: int, cfg: Config) -> Prediction:
    """Attach per-stage timings, budget knobs and upstream (stage 1 and 2) flags to a prediction."""
    h_extra, e_extra = run.hyde.extras.get(claim.index, {}), run.evidence.extras.get(claim.index, {})
    timings = {"hyde_s": h_extra.get("seconds", 0.0), "retrieval_s": e_extra.get("seconds", 0.0), "verdict_s": verdict_s}
    upstream = [*run.hyde.records[claim.index].flags, *run.final_evidence().records[claim.index].flags]
    if run.cfg.decompose.enabled and claim.index in run.decompose:
        upstream = [*run.decompose.records[claim.index].flags, *upstream]
        timings["decompose_s"] = run.decompose.extras.get(claim.index, {}).get("seconds", 0.0)
    if run.cfg.followup.enabled:
        timings["followup_s"] = run.followup.extras.get(claim.index, {}).get("seconds", 0.0)
    flags = list(p.flags)
    for f in upstream:
        if f not in flags:
            flags.append(f)
    meta = dict(p.meta)
    if run.cfg.followup.enabled:
        from sanctuary_local.stages.followup import followup_prompt_hash

        q = run.followup_q.records[claim.index]
        n_first = len(run.evidence.records[claim.index].queries)
        new = run.final_evidence().records[claim.index].queries[n_first:]
        meta["followup"] = {"questions": [x.question for x in q.queries], "found": sum(bool(x.snippets) for x in new),
                            "prompt_tokens": q.generation.prompt_tokens, "completion_tokens": q.generation.completion_tokens,
                            "cached_tokens": q.generation.cached_tokens, "prompt_hash": followup_prompt_hash(cfg.followup.prompt)}
    if run.cfg.decompose.enabled and claim.index in run.decompose:
        from sanctuary_local.stages.decompose import decompose_prompt_hash

        d = run.decompose.records[claim.index]
        meta["decomposition"] = {"components": list(d.components), "exhaustive": d.exhaustive, "added": list(d.added),
                                 "prompt_tokens": d.generation.prompt_tokens, "completion_tokens": d.generation.completion_tokens,
                                 "prompt_hash": decompose_prompt_hash(cfg.decompose)}
    if run.planner is not None:
        lv = {"hyde": h_extra.get("budget_level", 0), "retrieval": e_extra.get("budget_level", 0), "verdict": level}
        meta["budget"] = {"levels": lv, "knobs": knobs(cfg)}
        if max(lv.values()) > 0:
            flags.append(f"budget_level:{max(lv.values())}")
    return dataclasses.replace(p, timings={**p.timings, **timings}, flags=tuple(flags), meta=meta,
                               claim_id=claim.claim_id, claim=claim.text)


def _waves(items: list[R], size: int) -> list[list[R]]:
    return [items[i : i + size] for i in range(0, len(items), size)] if items else []


def _wave_size(llm_cfg: Any) -> int:
    """Prompts per backend call: vLLM batches everything; CPU backends go claim by claim
    (each finished claim is persisted before the next starts)."""
    if llm_cfg.batch_size:
        return int(llm_cfg.batch_size)
    return {"vllm": 256, "openai_http": max(1, 2 * int(llm_cfg.concurrency))}.get(llm_cfg.backend, 1)


def _resilient(batch: list[Any], run: Callable[[list[Any]], list[R]], fallback: Callable[[Any, Exception], R]) -> list[R]:
    """Run a batch; on an exception (e.g. CUDA OOM) split it in halves and retry, down to
    single items, which then get the fallback record instead of stopping the run."""
    try:
        out = run(batch)
        if len(out) != len(batch):
            raise RuntimeError(f"stage returned {len(out)} results for {len(batch)} inputs")
        return out
    except Exception as exc:  # noqa: BLE001 - isolation boundary
        if len(batch) > 1:
            log.warning("batch of %d failed (%s); retrying in halves", len(batch), exc)
            mid = len(batch) // 2
            return _resilient(batch[:mid], run, fallback) + _resilient(batch[mid:], run, fallback)
        log.error("item failed: %s", exc)
        return [fallback(batch[0], exc)]


def _hyde_fallback(claim: Claim, cfg: Config, exc: Exception) -> HydeResult:
    from sanctuary_local.stages.hyde import parse_hyde

    r = parse_hyde("", claim, cfg.hyde)
    return dataclasses.replace(r, flags=(*r.flags, f"hyde_llm_error: {type(exc).__name__}: {exc}"[:300]))


def _verdict_fallback(claim: Claim, hyde: HydeResult, ev: ClaimEvidence, exc: Exception) -> Prediction:
    from sanctuary_local.stages.evidence_view import official_evidence
    from sanctuary_local.stages.parsing import parse_verdict_output as parse_verdict

    label, justification, flags = parse_verdict("", hyde.provisional_label)
    evidence, evidence_all, eflags = official_evidence(claim, ev)
    return Prediction(
        claim_index=claim.index, claim_id=claim.claim_id, claim=claim.text, label=label,
        evidence=evidence, justification=justification, provisional_label=hyde.provisional_label,
        flags=(*eflags, *flags, f"verdict_llm_error: {type(exc).__name__}: {exc}"[:300]), evidence_all=evidence_all,
    )


@contextmanager
def _storage_errors(out: Path) -> Iterator[None]:
    """An OSError on a path inside ``out``, or a full/read-only disk, → ``StorageError``."""
    try:
        yield
    except OSError as exc:
        name = exc.filename
        inside = isinstance(name, (str, Path)) and Path(os.path.abspath(name)).is_relative_to(os.path.abspath(out))
        if inside or exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise storage_error(exc) from exc
        raise


def run_pipeline(opts: RunOptions, stop: StopRequest | None = None) -> RunSummary:
    """Run (or resume) the whole pipeline; write every output file into ``opts.out``.

    ``stop`` (set by the first Ctrl-C/SIGTERM, see ``interrupt.py``) ends the run after
    the claim in flight: the outputs are written for the claims finished so far, then
    ``RunInterrupted`` is raised. ``StorageError``: ``opts.out`` cannot be written."""
    set_offline_env()  # before any Hugging Face library is imported
    with _storage_errors(opts.out):
        run = _Run(opts, stop)
    interrupted: RunInterrupted | None = None
    try:
        with _storage_errors(run.out):
            run.execute()
    except RunInterrupted as exc:
        interrupted = exc
    finally:
        run.reporter.close_progress()
    preds = [run.verdict.records[c.index] for c in run.claims if c.index in run.verdict]
    missing = [c.index for c in run.claims if c.index not in run.verdict]
    if missing and interrupted is None:  # cannot happen unless a stage was skipped by an exception above
        raise RuntimeError(f"claims without a prediction: {missing[:10]}")
    reasons: Counter[str] = Counter()
    n_degraded = 0
    for p in preds:
        rs = degraded_reasons(p.flags)
        n_degraded += bool(rs)
        reasons.update(rs)
    with _storage_errors(run.out):
        timings = run.reporter.finalize(preds, run.hyde, run.evidence, run.verdict, n_selected=len(run.claims),
                                        followup=run.followup if run.cfg.followup.enabled else None,
                                        decompose=run.decompose if run.cfg.decompose.enabled else None)
    if interrupted is not None:
        files = {"1": run.hyde, "2": run.evidence, **({"2b": run.followup} if run.cfg.followup.enabled else {}), "3": run.verdict}
        counts = ", ".join(f"stage {i} {sum(c.index in sf for c in run.claims)}/{len(run.claims)}" for i, sf in files.items())
        done = RunInterrupted(interrupted.signum, len(preds), len(run.claims), counts)
        log.warning("%s; rerun the same command to resume", done)
        raise done
    summary = RunSummary(
        out_dir=run.out, n_claims=len(preds), n_degraded=n_degraded, degraded_reasons=dict(reasons),
        label_counts=dict(Counter(p.label for p in preds)), timings=timings, predictions=preds,
    )
    run.reporter.print_summary(summary)
    return summary
