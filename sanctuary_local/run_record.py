"""What a run records about itself besides its outputs: ``timings.json`` (per-stage wall
time, load time, tokens, per-claim distribution, memory, budget decisions) and
``manifest.json`` (version, argv, config, models with file hashes, prompt hashes, package
versions, inputs, host). Pure functions of what ``reporting.RunReporter`` measured."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
from collections import Counter
from importlib import metadata
from typing import TYPE_CHECKING, Any

import orjson

from sanctuary_local import __version__
from sanctuary_local.config import Config
from sanctuary_local.errors import UserError
from sanctuary_local.ids import file_sha256

if TYPE_CHECKING:
    from sanctuary_local.records import Prediction
    from sanctuary_local.run_types import RunOptions
    from sanctuary_local.runstate import StageFile

__all__ = ["PACKAGES", "peak_rss_mb", "run_manifest", "run_timings"]

#: Distributions whose versions the manifest records (those installed).
PACKAGES = ("sanctuary-local", "torch", "transformers", "sentence-transformers", "faiss-cpu", "faiss-gpu-cu12",
            "vllm", "llama-cpp-python", "bm25s", "chonkie", "numpy", "nltk")


def peak_rss_mb() -> float:
    """Peak resident memory of this process and of its (finished) worker processes, MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, kids) / 1024.0, 1)


def run_timings(preds: list[Prediction], files: dict[str, StageFile], stats: dict[str, dict[str, Any]], wall: float,
                gpu: dict[str, Any] | None, budget_s: float | None, budget_notes: list[dict[str, Any]]) -> dict[str, Any]:
    """``timings.json`` of ``preds``: ``stats`` as ``RunReporter.stage`` counted them, each
    claim's seconds from its stage files' extras, ``wall`` seconds since the run started."""
    idx = [p.claim_index for p in preds]
    stages: dict[str, Any] = {}
    for name, st in stats.items():
        secs = [float(files[name].extras.get(i, {}).get("seconds", 0.0)) for i in idx]
        stages[name] = {
            "total_s": round(st["total_s"], 3), "load_s": round(st["load_s"], 3), "claims_this_run": st["n"],
            "per_claim": _dist(secs), "tokens_in": st["tokens_in"], "tokens_out": st["tokens_out"],
            "tokens_per_s_out": round(st["tokens_out"] / st["total_s"], 2) if st["total_s"] else None,
        }
    out: dict[str, Any] = {
        "n_claims": len(preds), "wall_s": round(wall, 3),
        "wall_s_per_claim": round(wall / len(preds), 3) if preds else None,
        "peak_rss_mb": peak_rss_mb(), "gpu": gpu, "stages": stages,
    }
    if budget_s:
        achieved = sum(stages[s]["per_claim"]["mean"] or 0.0 for s in stages)
        out["budget"] = {"budget_s_per_claim": budget_s, "decisions": budget_notes,
                         "achieved_s_per_claim": round(wall / max(1, len(preds)), 3),
                         "achieved_stage_sum_s_per_claim": round(achieved, 3),
                         "levels": dict(Counter(str(p.meta.get("budget", {}).get("levels", {}).get("verdict", 0)) for p in preds))}
    return out


def run_manifest(cfg: Config, opts: RunOptions) -> dict[str, Any]:
    """``manifest.json``: everything needed to tell what produced a run's outputs."""
    models = {}
    for role, name in (("hyde_llm", cfg.hyde.llm.model), ("verdict_llm", cfg.verdict.llm.model),
                       ("sts_embedder", cfg.retrieval.sts.model), ("retrieval_embedder", cfg.retrieval.retriever.model)):
        models[role] = _model_entry(name, cfg.models_dir)
    try:
        from sanctuary_local.stages.hyde import hyde_prompt_hash
        from sanctuary_local.stages.verdict_hash import config_prompt_hash

        prompts = {"hyde": hyde_prompt_hash(cfg.hyde.prompt), "verdict": config_prompt_hash(cfg.verdict)}
    except Exception as exc:  # noqa: BLE001 - the manifest must still be written
        prompts = {"error": str(exc)}
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return {
        "sanctuary_local": __version__, "argv": opts.argv, "config": cfg.to_dict(),
        "config_fingerprint": cfg.fingerprint(), "seed": cfg.seed, "models": models,
        "prompts": prompts, "packages": versions,
        "inputs": {"claims": str(opts.claims), "claims_sha256": file_sha256(str(opts.claims)), "store": str(opts.store)},
        "host": {"node": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
                 "cpu_count": os.cpu_count()},
    }


def _dist(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "p50": None, "p95": None}
    s = sorted(xs)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return {"mean": round(statistics.fmean(s), 4), "p50": round(statistics.median(s), 4), "p95": round(p95, 4)}


def _model_entry(name: str, models_dir: str) -> dict[str, Any]:
    """Model id and file hashes (large files: size only unless a checksum record exists)."""
    from sanctuary_local.models import resolve_model

    try:
        path = resolve_model(name, models_dir)
    except UserError as exc:
        return {"name": name, "error": str(exc)}
    entry: dict[str, Any] = {"name": name, "path": str(path)}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    hashes = {}
    for f in files[:200]:
        rel = f.name if path.is_file() else str(f.relative_to(path))
        size = f.stat().st_size
        hashes[rel] = {"size": size, "sha256": file_sha256(str(f)) if size <= 512 * 2**20 else None}
    entry["files"] = hashes
    record = path / ".sanctuary-checksums.json" if path.is_dir() else None
    if record is not None and record.exists():
        entry["checksums_record"] = orjson.loads(record.read_bytes())
    return entry
