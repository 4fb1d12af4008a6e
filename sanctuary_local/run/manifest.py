"""``manifest.json``: what produced a run directory's files, and the attempts that did.

Written when the run starts (so a run killed before its end still says what made its
partial files), after every stage, at most every ``reporting.MANIFEST_EVERY_S`` seconds
while a stage runs, and at the end. It holds the code identity (with the git commit in a
checkout), the run fingerprint (``fingerprint.py``), the effective
config, models with their file hashes, the prompt template hashes the predictions
record, library versions, host, ``status`` (running, complete, interrupted) and
``attempts``: one entry per ``run`` invocation on this directory (start time, argv, wall
seconds, per-stage seconds and claims), which a resumed ``--budget-s`` run counts as
spent (``budget.resume_planner``).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from sanctuary_local import __version__
from sanctuary_local.config.settings import Config
from sanctuary_local.errors import UserError
from sanctuary_local.ids import file_sha256
from sanctuary_local.io.safe_io import atomic_write_bytes, read_regular

if TYPE_CHECKING:
    from sanctuary_local.run.options import RunOptions

__all__ = ["MANIFEST_FILE", "PACKAGES", "RunManifest"]

MANIFEST_FILE = "manifest.json"
PACKAGES = ("sanctuary-local", "torch", "transformers", "sentence-transformers", "faiss-cpu", "faiss-gpu-cu12",
            "vllm", "llama-cpp-python", "bm25s", "chonkie", "numpy", "nltk")
#: Largest earlier manifest read back (it is a few hundred KB at most).
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY


class RunManifest:
    """The manifest of one run directory: its fixed part (computed once) and the attempts."""

    def __init__(self, out: Path, cfg: Config, opts: RunOptions, identity: dict[str, Any], t0: float) -> None:
        self.out, self.cfg, self.opts, self.identity, self.t0 = out, cfg, opts, identity, t0
        self.attempts = _earlier_attempts(out / MANIFEST_FILE)
        self.attempt: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": opts.argv,
                                        "wall_s": 0.0, "stages": {}, "status": "running"}
        self._fixed: dict[str, Any] | None = None
        self._lock = threading.Lock()  # stage callbacks may come from a pool's thread
        self._written_at = 0.0

    def earlier_attempts(self) -> dict[str, Any]:
        """Wall seconds and per-stage ``{"total_s", "n"}`` summed over the earlier attempts."""
        stages: dict[str, dict[str, float]] = {}
        for a in self.attempts:
            for name, st in (a.get("stages") or {}).items():
                if isinstance(st, dict):
                    acc = stages.setdefault(name, {"total_s": 0.0, "n": 0})
                    acc["total_s"] += float(st.get("total_s") or 0.0)
                    acc["n"] += int(st.get("n") or 0)
        return {"wall_s": sum(float(a.get("wall_s") or 0.0) for a in self.attempts), "stages": stages}

    def age(self) -> float:
        """Seconds since the manifest was last written."""
        return time.perf_counter() - self._written_at

    def write(self, stages: dict[str, dict[str, Any]], status: str = "running") -> None:
        """Write it with this attempt's per-stage figures ``stages`` and ``status``; not
        when ``out`` has gone (the stage file written next reports that, and a run never
        recreates a removed output directory behind its user's back)."""
        if not self.out.is_dir():
            return
        with self._lock:
            if self._fixed is None:
                self._fixed = self._fixed_part()
            now = time.perf_counter()
            self.attempt.update(status=status, wall_s=round(now - self.t0, 3), stages=stages)
            data = {**self._fixed, "status": status, "attempts": [*self.attempts, self.attempt]}
            atomic_write_bytes(self.out / MANIFEST_FILE, orjson.dumps(data, option=_JSON))
            self._written_at = now

    def _fixed_part(self) -> dict[str, Any]:
        cfg, opts = self.cfg, self.opts
        models = {role: _model_entry(name, cfg.models_dir) for role, name in (
            ("hyde_llm", cfg.hyde.llm.model), ("verdict_llm", cfg.verdict.llm.model),
            ("sts_embedder", cfg.retrieval.sts.model), ("retrieval_embedder", cfg.retrieval.retriever.model))}
        fingerprint = self.identity.get("fingerprint") or {}
        from sanctuary_local.run.fingerprint import libraries_identity

        versions = libraries_identity(PACKAGES)
        return {
            "sanctuary_local": __version__, "code": self.identity.get("code"), "fingerprint": fingerprint,
            "argv": opts.argv, "config": cfg.to_dict(), "config_fingerprint": fingerprint.get("config"),
            "seed": cfg.seed, "models": models, "prompts": _template_hashes(cfg), "packages": versions,
            "inputs": {"claims": str(opts.claims), "claims_sha256": file_sha256(str(opts.claims)), "store": str(opts.store)},
            "host": {"node": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
                     "cpu_count": os.cpu_count()},
        }


def _template_hashes(cfg: Config) -> dict[str, str]:
    """The prompt template hashes the predictions record (``fingerprint.prompts`` adds
    each stage's settings); ``{"error": …}`` rather than no manifest."""
    try:
        from sanctuary_local.modes.decompose import decompose_prompt_hash
        from sanctuary_local.modes.followup import followup_prompt_hash
        from sanctuary_local.stages.hyde import hyde_prompt_hash
        from sanctuary_local.stages.verdict.prompt_hash import config_prompt_hash

        return {"hyde": hyde_prompt_hash(cfg.hyde.prompt), "decompose": decompose_prompt_hash(cfg.decompose),
                "followup": followup_prompt_hash(cfg.followup.prompt), "verdict": config_prompt_hash(cfg.verdict)}
    except Exception as exc:  # noqa: BLE001 - the manifest must still be written
        return {"error": str(exc)}


def _earlier_attempts(path: Path) -> list[dict[str, Any]]:
    """The ``attempts`` an earlier manifest of this run directory recorded (none when it
    is missing, damaged or not a regular file)."""
    try:
        data = orjson.loads(read_regular(path, MAX_MANIFEST_BYTES, "manifest"))
    except Exception:  # noqa: BLE001 - FileNotFoundError, a FIFO, a link to /dev/zero, bad JSON
        return []
    attempts = data.get("attempts") if isinstance(data, dict) else None
    return [a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []


#: SHA-256 of model files this process hashed already, by (path, size, mtime): a server
#: (``serve``) writes a manifest per check and would hash the same weights every time.
_HASHED: dict[tuple[str, int, int], str] = {}


def _sha256_once(f: Path, st: os.stat_result) -> str:
    key = (str(f), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = file_sha256(str(f))
    return _HASHED[key]


def _model_entry(name: str, models_dir: str) -> dict[str, Any]:
    """Model id and file hashes (large files: size only unless a checksum record exists)."""
    from sanctuary_local.models.resolve import resolve_model

    try:
        path = resolve_model(name, models_dir)
    except UserError as exc:
        return {"name": name, "error": str(exc)}
    entry: dict[str, Any] = {"name": name, "path": str(path)}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    hashes = {}
    for f in files[:200]:
        rel = f.name if path.is_file() else str(f.relative_to(path))
        st = f.stat()
        hashes[rel] = {"size": st.st_size, "sha256": _sha256_once(f, st) if st.st_size <= 512 * 2**20 else None}
    entry["files"] = hashes
    record = path / ".sanctuary-checksums.json" if path.is_dir() else None
    if record is not None and record.exists():
        entry["checksums_record"] = orjson.loads(record.read_bytes())
    return entry
