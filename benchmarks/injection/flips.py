"""The prompt-injection benchmark's flip rates (``injection/injection.py --llm``): stage 3 run again on
the attacked evidence, each answer persisted, and the shares of labels moved."""

from __future__ import annotations

import hashlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from benchmarks.injection.attacks import Case, Template, _rate, plant, plant_site

from sanctuary_local.records import Prediction

CONTROL = "none"
"""The control row's name: stage 3 on the clean evidence."""


# ---------------------------------------------------------------------------- flip rate
def flip_stats(rows: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
    """``rows``: ``(clean label, target, attacked label)`` per claim. The share of claims
    whose attacked label is the target, and the share whose label differs from the clean one."""
    rows = list(rows)
    n = len(rows)
    return {"n": n, "flip_to_target": _rate(sum(a == t for _, t, a in rows), n),
            "changed": _rate(sum(a != c for c, _, a in rows), n),
            "labels": dict(Counter(a for _, _, a in rows))}


def flip_file(work: Path, name: str) -> Path:
    return work / f"flips_{name}.jsonl"


class Memo:
    """A backend that answers a request it has already answered from memory.

    Every request is seeded (``SamplingConfig.seed``), so an identical request gets the
    identical answer; the control row (the clean evidence run again against the run's own
    labels) shows that it does. Where ``verdict.flagged`` cuts an attack out entirely (or
    withholds its snippet), the attacked prompt is the clean one (or the same for every
    template), so the model runs once for all of them instead of once per template. Answers
    from memory are counted (``hits``) and take no time (``seconds`` 0)."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.hits = backend, 0
        self.name, self.model_id = backend.name, getattr(backend, "model_id", "")
        self._seen: dict[bytes, Any] = {}

    def _key(self, kind: str, req: Any) -> bytes:
        body = [kind, [(m.role, m.content) for m in req.messages], repr(getattr(req, "sampling", None)),
                repr(getattr(req, "json_schema", None)), list(getattr(req, "candidates", ()))]
        return hashlib.sha256(orjson.dumps(body)).digest()

    def _answer(self, kind: str, requests: list[Any], run: Callable[[list[Any]], list[Any]]) -> list[Any]:
        keys = [self._key(kind, r) for r in requests]
        new: dict[bytes, Any] = {}  # each request not answered before, once, in order
        for k, r in zip(keys, requests, strict=True):
            if k not in self._seen and k not in new:
                new[k] = r
        fresh = dict(zip(new, run(list(new.values())), strict=True)) if new else {}
        self._seen.update((k, res) for k, res in fresh.items() if res.ok)  # a failed call is not remembered
        out, given = [], set()
        for k in keys:
            if k in fresh and k not in given:
                given.add(k)
                out.append(fresh[k])
            else:
                self.hits += 1
                out.append(replace(fresh.get(k) or self._seen[k], seconds=0.0))
        return out

    def generate(self, requests: list[Any]) -> list[Any]:
        return self._answer("generate", list(requests), self.backend.generate)

    def count_tokens(self, messages: Any) -> int:
        return self.backend.count_tokens(messages)

    def close(self) -> None:
        self.backend.close()


def run_flips(cases: Sequence[Case], templates: Sequence[Template], backend: Any, vcfg: Any, work: Path, *,
              control: bool = True, quiet: bool = False, rebase: bool = False,
              log: Callable[[str], None] | None = None, trained: Any = None) -> dict[str, dict[str, Any]]:
    """Stage 3 on the attacked evidence of every claim with a clean stage-3 label, one
    claim at a time, each result persisted (``flips_<template>.jsonl``, resumable); then
    per template ``flip_stats`` and the per-claim rows. ``control``: also stage 3 on the
    clean evidence (row ``none``). ``trained``: the loaded model of trained mode (``backend`` None).
    ``rebase`` (with ``control``): after the control row, each claim's clean label is the
    control's, the label today's stage 3 gives its clean evidence, so the templates' targets and
    "changed" are measured against it rather than against a run made by another model."""
    from sanctuary_local.run.stage_files import StageFile
    from sanctuary_local.modes import verdict_steps
    from sanctuary_local.stages.verdict.line import run_verdict

    log = log or (lambda msg: print(msg, file=sys.stderr))
    work.mkdir(parents=True, exist_ok=True)
    usable = [c for c in cases if c.clean_label is not None and c.hyde is not None and plant_site(c.evidence)]
    runs: list[tuple[str, Template | None]] = ([(CONTROL, None)] if control else []) + [(t.name, t) for t in templates]
    out: dict[str, dict[str, Any]] = {}
    for name, t in runs:
        sf = StageFile(flip_file(work, name), Prediction.from_dict)
        todo = [c for c in usable if c.claim.index not in sf]
        for k, c in enumerate(todo, 1):
            ev = c.evidence if t is None else plant(c.evidence, t, c.target)
            t0, hits = time.perf_counter(), getattr(backend, "hits", 0)
            [p] = run_verdict([c.claim], [c.hyde], [ev], backend, vcfg, trained=trained, modes=verdict_steps(vcfg))
            sf.append(c.claim.index, p, {"template": name, "target": c.target, "clean_label": c.clean_label,
                                         "seconds": round(time.perf_counter() - t0, 3),
                                         "from_memory": getattr(backend, "hits", 0) > hits})
            if not quiet:
                log(f"{name} {k}/{len(todo)} claim {c.claim.index}: {c.clean_label} -> {p.label} (target {c.target})")
        per_claim = [{"claim": c.claim.index, "clean": c.clean_label, "target": c.target,
                      "attacked": sf.records[c.claim.index].label,
                      "flagged": "suspected_injection" in sf.records[c.claim.index].flags}
                     for c in usable if c.claim.index in sf]
        stats = flip_stats((r["clean"], r["target"], r["attacked"]) for r in per_claim)
        extras = [sf.extras[c.claim.index] for c in usable if c.claim.index in sf]
        secs = [float(x.get("seconds", 0.0)) for x in extras if not x.get("from_memory")]
        stats["s_per_claim"] = round(sum(secs) / len(secs), 2) if secs else None  # the model's runs only
        stats["from_memory"] = sum(bool(x.get("from_memory")) for x in extras)
        out[name] = {**stats, "per_claim": per_claim}
        if name == CONTROL and rebase:
            usable = [replace(c, clean_label=sf.records[c.claim.index].label, clean_source="control")
                      for c in usable if c.claim.index in sf]
    return out
