"""Before a run starts: which claims, which config, and is everything it needs there."""

from __future__ import annotations

import importlib.util
from typing import Any

from sanctuary_local.config.settings import Config, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.llm import BACKENDS, engine
from sanctuary_local.records import Claim
from sanctuary_local.run.options import RunOptions

__all__ = ["preflight", "run_config", "select_claims"]


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


def run_config(opts: RunOptions) -> Config:
    """The profile with the run's overrides, ``--workers`` and ``--models-dir`` applied."""
    cfg = load_config(opts.profile, opts.overrides)
    if opts.workers is not None:
        cfg.retrieval.workers = opts.workers
    if opts.models_dir:
        cfg.models_dir = opts.models_dir
    return cfg


def preflight(cfg: Config, upstream: bool = True) -> None:
    """Check every model and backend the run needs before any work starts, and report
    all problems at once (a missing Phi-4 should not surface after an hour of stage 1).
    ``upstream=False`` (``run --evidence-from``): stages 1–2 do not run, so only stage 3's
    models are checked, and the optional modes that need them are refused."""
    if not upstream and (on := [m for m in ("decompose", "followup") if getattr(cfg, m).enabled]):
        raise UserError(f"--evidence-from runs stage 3 alone: turn off {' and '.join(f'{m}.enabled' for m in on)}")
    problems = _backend_problems(cfg, upstream) + _model_problems(cfg, upstream) + _trained_problems(cfg)
    if problems:
        raise UserError("cannot start the run:\n  - " + "\n  - ".join(problems))


def _backend_problems(cfg: Config, upstream: bool = True) -> list[str]:
    problems: list[str] = []
    for where, llm in _llm_sections(cfg, upstream):
        if llm.backend not in BACKENDS:
            problems.append(f"{where}.backend: unknown backend '{llm.backend}' (valid: {', '.join(BACKENDS)})")
            continue
        module, extra = engine(llm.backend)
        if module and importlib.util.find_spec(module) is None:
            problems.append(f"{where}: backend '{llm.backend}' needs the package '{module}': pip install 'sanctuary-local[{extra}]'")
        if llm.backend == "openai_http" and not llm.base_url:
            problems.append(f"{where}: backend 'openai_http' needs base_url")
    return problems


def _model_problems(cfg: Config, upstream: bool = True) -> list[str]:
    from sanctuary_local.models.resolve import resolve_model
    from sanctuary_local.retrieval.embed import STATIC_PREFIX

    problems: list[str] = []
    roles = [(f"{where}.model", llm) for where, llm in _llm_sections(cfg, upstream)]
    if upstream:
        roles += [("retrieval.sts.model", cfg.retrieval.sts), ("retrieval.retriever.model", cfg.retrieval.retriever)]
    for where, section in roles:
        if getattr(section, "backend", None) == "openai_http":
            continue  # the server holds the model
        try:
            # "static:<model>" is distilled from <model> on first use: <model> must be there
            resolve_model(section.model.removeprefix(STATIC_PREFIX), cfg.models_dir)
        except UserError as exc:
            problems.append(f"{where}: {exc}")
    return problems


def _llm_sections(cfg: Config, upstream: bool = True) -> list[tuple[str, Any]]:
    """The LLMs the run loads: stage 1's unless its evidence comes from a file (``upstream``
    False), stage 3's only when its verdict is not the trained model."""
    out = [("hyde.llm", cfg.hyde.llm)] if upstream else []
    if cfg.verdict.mode != "trained":
        out.append(("verdict.llm", cfg.verdict.llm))
    return out


def _trained_problems(cfg: Config) -> list[str]:
    """The trained verdict model must be there, with a readable card and intact files, and
    load as stage 3 loads it (files edited and their card re-pinned pass the hash, not this);
    the packaged TF-IDF default loads in well under a second."""
    if cfg.verdict.mode != "trained":
        return []
    from sanctuary_local.stages.verdict.trained import load_trained, trained_threads

    try:
        load_trained(cfg.verdict.trained_model, cfg.verdict.trained_rule, trained_threads(cfg.verdict))
    except UserError as exc:
        return [f"verdict.trained_model: {exc}"]
    return []
