"""The optional follow-up round between stages 2 and 3 (``followup.enabled``)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from sanctuary_local.records import Claim, ClaimEvidence
from sanctuary_local.run.budget import apply_level
from sanctuary_local.run.fallbacks import followup_fallback
from sanctuary_local.run.state import RunState
from sanctuary_local.run.waves import engine_waves, wave_size

__all__ = ["FollowupRound"]


class FollowupRound:
    """The optional follow-up round (``modes/followup.py``): the stage-1 model writes new
    questions for the claims whose questions found nothing, stage 2 runs them, and the
    merged evidence is what stage 3 reads. Both steps are recorded claim by claim (a
    resumed run redoes neither); a claim without gaps costs no model call."""

    def __init__(self, run: RunState, level: int) -> None:
        self.run, self.level = run, level
        self.extra = {"budget_level": level}

    def execute(self, claims: list[Claim]) -> None:
        r = self.run
        todo = [c for c in claims if c.index not in r.followup and c.index in r.evidence]
        if not todo:
            return
        r.stops.check()
        cfg = apply_level(r.cfg, self.level)
        with r.reporter.stage("followup", len(todo)) as st:
            self.ask(cfg, st, [c for c in todo if c.index not in r.followup_q])
            self.retrieve(cfg, st, [r.followup_q.records[c.index] for c in todo])
        r.stops.check()

    def ask(self, cfg: Any, st: Any, ask: list[Claim]) -> None:
        """New questions (recorded in ``followup_q``) for the claims with gaps; none for the rest."""
        from sanctuary_local.modes import followup as fu

        r = self.run
        need = [(c, r.evidence.records[c.index]) for c in ask if fu.needs_followup(r.evidence.records[c.index], cfg.followup)]
        asked = {c.index for c, _ in need}
        for c in ask:
            if c.index not in asked:
                r.followup_q.append(c.index, fu.no_followup(c.index), {"seconds": 0.0, **self.extra})
        if not need:
            return
        stream = engine_waves(r)(st, cfg.hyde.llm, cfg.models_dir, need, wave_size(cfg.hyde.llm),
                           lambda backend, w: fu.run_followup(w, backend, cfg.followup),
                           lambda x, e: followup_fallback(x[0], e))
        with closing(stream):
            for wave, results, per in stream:
                for (c, _), q in zip(wave, results):
                    r.followup_q.append(c.index, q, {"seconds": per, **self.extra})
                    st.tokens(q.generation.prompt_tokens, q.generation.completion_tokens)
                r.stops.check()

    def retrieve(self, cfg: Any, st: Any, questions: list[Any]) -> None:
        """Stage 2 for the new questions; each claim's merged evidence recorded in ``followup``."""
        from sanctuary_local.modes import followup as fu
        r = self.run

        def done(ev: ClaimEvidence | None, q: Any) -> None:
            if ev is not None and not r.stops.keep(ev):
                return
            merged = fu.merge_evidence(r.evidence.records[q.claim_index], r.trusted(ev) if ev is not None else None, q)
            secs = float(r.followup_q.extras.get(q.claim_index, {}).get("seconds", 0.0))
            secs += float(ev.timings.get("total", 0.0)) if ev is not None else 0.0
            r.followup.append(q.claim_index, merged, {"seconds": secs, **self.extra})
            st.advance()

        for q in questions:
            if not q.queries:
                done(None, q)
        by_claim = {q.claim_index: q for q in questions if q.queries}
        if by_claim:
            r.retrieve(list(by_claim.values()), cfg.retrieval, models_dir=cfg.models_dir,
                       workers=cfg.retrieval.workers, on_result=lambda ev: done(ev, by_claim[ev.claim_index]),
                       should_stop=r.stops.stopping)
