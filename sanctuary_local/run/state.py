"""The state of one run: its config, claims, stage files and reporter, and where it may stop."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sanctuary_local.config.settings import Config
from sanctuary_local.ids import file_sha256
from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.records import ClaimEvidence, Decomposition, HydeResult, Prediction
from sanctuary_local.run.budget import STAGES, BudgetPlanner, resume_planner
from sanctuary_local.run.options import RunOptions
from sanctuary_local.run.prepare import preflight, run_config, select_claims
from sanctuary_local.run.reporting import RunReporter
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import StageFile, run_identity

__all__ = ["RunState", "StopPoints", "open_stage_files"]

log = logging.getLogger("sanctuary_local")

#: Stage-file name (``stage_files.STAGE_FILES``) → the record type its lines hold.
_RECORDS = {"decompose": Decomposition, "hyde": HydeResult, "retrieval": ClaimEvidence,
            "followup_questions": HydeResult, "followup": ClaimEvidence, "verdict": Prediction}


class StopPoints:
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


def open_stage_files(out: Path) -> dict[str, StageFile]:
    """The run's stage files by name (``STAGE_FILES``), read back; a torn last line left by
    an interrupted run is cut (and logged)."""
    files = {name: StageFile(out / STAGE_FILES[name], rec.from_dict) for name, rec in _RECORDS.items()}
    for sf in files.values():
        if sf.repaired_bytes:
            log.warning("%s: cut a torn last line (%d bytes) left by an interrupted run", sf.path, sf.repaired_bytes)
    return files


class RunState:
    """State of one run: config, claims, stage files, reporter (the stages: ``run/stages.py``)."""

    def __init__(self, opts: RunOptions, stop: StopRequest | None = None) -> None:
        from sanctuary_local.corpus.source import open_source, retrieval_path
        from sanctuary_local.io.claims import read_claims
        from sanctuary_local.modes.trust import load_trust

        self.opts = opts
        self.stops = StopPoints(stop)
        self.cfg: Config = run_config(opts)
        cfg = self.cfg
        self.imported = opts.evidence_from is not None
        """``--evidence-from``: stages 1–2 come from another system's evidence file (``imported.py``)."""
        preflight(cfg, upstream=not self.imported)
        # read before the run identity is checked: a bad trust file stops the run before --force clears anything
        self.trust = load_trust(cfg.retrieval.trust_file, cfg.retrieval.trust_default)
        all_claims = read_claims(opts.claims)
        self.claims = select_claims(all_claims, opts.claims_range, opts.limit)
        if self.imported:  # checked against the claims before anything is written
            from sanctuary_local.run.imported import EvidenceSource

            self.store = EvidenceSource(Path(opts.evidence_from), self.claims, all_claims, Path(opts.claims))
            self.store_path = self.store.path
        else:
            self.store = open_source(opts.store)  # a knowledge store, or a corpus index (issue 28)
            self.store_path = retrieval_path(self.store, opts.store)
        self.by_index = {c.index: c for c in self.claims}
        self.out = Path(opts.out)
        identity = run_identity(self.out, cfg, file_sha256(str(opts.claims)), self.store, [c.index for c in self.claims],
                                opts)
        fingerprint = identity["fingerprint"]
        self.reporter = RunReporter(self.out, cfg, opts, quiet=opts.quiet, identity=identity)
        files = open_stage_files(self.out)
        self.decompose, self.hyde, self.evidence = files["decompose"], files["hyde"], files["retrieval"]
        self.followup_q, self.followup, self.verdict = files["followup_questions"], files["followup"], files["verdict"]
        if opts.reuse_from is not None:
            from sanctuary_local.run.reuse import reuse_stages

            reuse_stages(Path(opts.reuse_from), self.out, cfg, fingerprint, files, [c.index for c in self.claims])
        self.planner = BudgetPlanner(cfg, opts.budget_s, len(self.claims)) if opts.budget_s else None
        if self.planner is not None:  # a resumed run plans with the budget left to it
            resume_planner(self.planner, self.reporter.earlier_attempts(),
                           {k: files[k] for k in ("decompose", "hyde", "retrieval", "followup", "verdict")},
                           [c.index for c in self.claims])
        self.engine: Any = None
        """Where LLM waves and retrieval run: None = here (``waves.llm_waves``, the retrieval
        pool); ``pipeline`` sets a ``RayEngine`` for ``--engine ray``. Records are written here
        either way, by this one process."""
        self.t0 = time.perf_counter()

    def trusted(self, ev: ClaimEvidence) -> ClaimEvidence:
        """Stage-2 evidence as recorded: re-ranked by the user's trust weights when
        ``retrieval.trust_file`` is set (``modes/trust.py``), else as retrieved."""
        from sanctuary_local.modes.trust import apply_trust

        return apply_trust(ev, self.trust)

    def retrieval_input(self, h: HydeResult) -> HydeResult:
        """Stage 2's queries of a claim: its stage-1 questions, plus its parts when decomposed."""
        if not self.cfg.decompose.enabled:
            return h
        from sanctuary_local.modes.decompose import with_component_queries

        return with_component_queries(h, self.decompose.records.get(h.claim_index))

    def retrieve(self, todo: list[HydeResult], cfg: Any, **kw: Any) -> None:
        """Stage 2 for ``todo`` (``run_retrieval``'s keywords: ``on_result`` gets each claim's
        evidence as it comes in) in the retrieval pool, or as Ray tasks."""
        if self.engine is not None:
            return self.engine.retrieve(self.store_path, todo, cfg, **kw)
        from sanctuary_local.stages.evidence import run_retrieval

        run_retrieval(self.store_path, todo, cfg, **kw)

    def final_evidence(self) -> StageFile:
        """The evidence stage 3 reads: stage 2's, or with the follow-up round its merge."""
        return self.followup if self.cfg.followup.enabled else self.evidence

    def overlapping(self) -> bool:
        """Whether stages 1 and 2 overlap (``RunOptions.overlap``; default: on a GPU/server backend)."""
        if self.opts.engine == "ray":  # Ray runs the stages one after the other (docs/scale-out.md)
            return False
        if self.opts.overlap is not None:
            return self.opts.overlap
        return self.cfg.hyde.llm.backend in ("vllm", "openai_http")

    def stage_names(self) -> tuple[str, ...]:
        """The stages this run executes, in order (the enabled modes' own stages among them)."""
        from sanctuary_local.modes import run_stages

        return run_stages(self.cfg, STAGES)
