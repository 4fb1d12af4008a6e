"""Fetch manifest models from the Hugging Face hub (connected machine) and verify them offline.

``fetch`` is the only code in the project that touches the network: it runs
``huggingface_hub.snapshot_download`` (imported lazily; resumable — partial files are kept
under ``<dir>/.cache/huggingface`` and continued on the next call), copies any remote code a
``trust_remote_code`` model points at into the model directory, and records the sha256 of
every file in ``<dir>/.sanctuary-checksums.json``. ``verify`` reads only the disk.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError, require
from sanctuary_local.ids import file_sha256
from sanctuary_local.models.resolve import (
    CHECKSUMS_FILE,
    HubModel,
    Manifest,
    PackagedModel,
    fetch_hint,
    load_manifest,
    missing_files,
    source_model,
)

# "owner/repo--module.Class": transformers' syntax for code living in another hub repo.
_REMOTE_REF = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)--(?P<ref>[\w.]+)$")
# Written by huggingface_hub itself (resume state) or by Python; never part of a model.
_SKIP_PARTS = {".cache", "__pycache__"}
_CONFIG_FILES = ("config.json", "tokenizer_config.json")

Log = Callable[[str], None]


@dataclass
class ModelReport:
    """What ``verify`` found for one model."""

    name: str
    kind: str
    """``hub`` or ``packaged``."""
    path: str
    problems: list[str] = field(default_factory=list)
    """Each makes the model unusable or untrusted (missing/altered file …)."""
    warnings: list[str] = field(default_factory=list)
    """Worth knowing, not fatal (unpinned revision, unrecorded extra file …)."""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def model_files(directory: Path) -> list[str]:
    """Relative POSIX paths of the model's own files (no resume state, no checksums file)."""
    out = []
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory)
        if p.is_file() and not _SKIP_PARTS & set(rel.parts) and rel.as_posix() != CHECKSUMS_FILE:
            out.append(rel.as_posix())
    return out


def record_checksums(directory: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Hash every model file and write ``.sanctuary-checksums.json``; returns what was written."""
    files = {rel: {"sha256": file_sha256(str(directory / rel)), "size": (directory / rel).stat().st_size}
             for rel in model_files(directory)}
    record = dict(meta, files=files)
    (directory / CHECKSUMS_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", "utf-8")
    return record


def localise_auto_map(config: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Rewrite ``auto_map`` refs ``owner/repo--module.Class`` to ``module.Class``.

    Returns the new config and the set of repos whose ``*.py`` files must be copied next
    to it; transformers then loads the code from the model directory, offline.
    """
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict):
        return config, set()
    repos: set[str] = set()

    def local(ref: Any) -> Any:
        if isinstance(ref, list):  # tokenizer auto_map holds [slow, fast] pairs
            return [local(r) for r in ref]
        m = _REMOTE_REF.match(ref) if isinstance(ref, str) else None
        if m is None:
            return ref
        repos.add(m["repo"])
        return m["ref"]

    new = dict(config, auto_map={k: local(v) for k, v in auto_map.items()})
    return new, repos


def remote_refs(directory: Path) -> list[str]:
    """auto_map entries still pointing at another hub repo (loading them needs the network)."""
    found = []
    for name in _CONFIG_FILES:
        path = directory / name
        if path.is_file():
            _, repos = localise_auto_map(json.loads(path.read_text("utf-8")))
            found += [f"{name}: {r}" for r in sorted(repos)]
    return found


def _rich_tqdm() -> type | None:
    """tqdm's rich front-end (a progress bar per file); None falls back to plain tqdm."""
    try:
        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm as rich_tqdm
    except ImportError:  # pragma: no cover - tqdm ships with huggingface_hub
        return None
    warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
    return rich_tqdm


def _localise_remote_code(hub: Any, directory: Path, log: Log) -> list[dict[str, str]]:
    """Copy code that config files point at into ``directory``; patch the configs."""
    fetched: list[dict[str, str]] = []
    for name in _CONFIG_FILES:
        path = directory / name
        if not path.is_file():
            continue
        config, repos = localise_auto_map(json.loads(path.read_text("utf-8")))
        for repo in sorted(repos - {f["repo"] for f in fetched}):
            log(f"  remote code {repo} → {directory}")
            commit = hub.HfApi().model_info(repo).sha
            with tempfile.TemporaryDirectory() as tmp:
                hub.snapshot_download(repo, revision=commit, local_dir=tmp, allow_patterns=["*.py"])
                for py in Path(tmp).glob("*.py"):
                    shutil.copy2(py, directory / py.name)
            fetched.append({"repo": repo, "commit": commit})
        if repos:
            path.write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    return fetched


def fetch_model(model: HubModel, models_dir: Path, log: Log = print) -> Path:
    """Download one model (resumable), localise its remote code, record checksums."""
    hub = require("huggingface_hub", "gpu", "models fetch")
    directory = models_dir / model.dir
    directory.mkdir(parents=True, exist_ok=True)
    log(f"fetching {model.name}: {model.repo}@{model.revision} (~{model.size_gb} GB) → {directory}")
    hub.snapshot_download(
        model.repo,
        revision=model.revision,
        local_dir=directory,
        allow_patterns=list(model.allow_patterns) or None,
        tqdm_class=_rich_tqdm(),
    )
    commit = hub.HfApi().model_info(model.repo, revision=model.revision).sha
    code = _localise_remote_code(hub, directory, log) if model.trust_remote_code else []
    lacking = missing_files(model, directory)
    if lacking:
        raise UserError(f"{model.repo}@{model.revision} has no file matching {', '.join(lacking)}: manifest out of date?")
    meta = {
        "name": model.name, "repo": model.repo, "revision": model.revision, "commit": commit,
        "remote_code": code, "patched": [n for n in _CONFIG_FILES if code and (directory / n).is_file()],
        "fetched_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    record_checksums(directory, meta)
    log(f"  ok: {len(model_files(directory))} files, checksums in {directory / CHECKSUMS_FILE}")
    return directory


def fetch_profile(profile: str, models_dir: Path, only: str | None = None,
                  manifest: Manifest | None = None, log: Log = print) -> list[Path]:
    """Fetch every hub model of ``profile`` (or just ``only``); packaged ones are skipped."""
    manifest = manifest or load_manifest()
    names = sorted({source_model(m) for m in manifest.profile(profile).values()})  # static: distilled here
    if only is not None:
        if only not in names:
            raise UserError(f"model '{only}' is not in profile '{profile}' (its models: {', '.join(names)})")
        names = [only]
    hub_names = [n for n in names if n in manifest.models]
    for n in names:
        if n not in manifest.models:
            log(f"{n}: packaged in a PyPI package (the 'cpu' extra), nothing to fetch")
    return [fetch_model(manifest.models[n], models_dir, log) for n in hub_names]


def verify_hub_model(model: HubModel, models_dir: Path, quick: bool = False) -> ModelReport:
    """Offline check of one fetched model against its recorded checksums."""
    directory = models_dir / model.dir
    rep = ModelReport(model.name, "hub", str(directory))
    if not model.pinned:
        rep.warnings.append(f"revision '{model.revision}' is not pinned to a commit")
    if not directory.is_dir():
        rep.problems.append(f"missing: {directory} (fetch it: {fetch_hint(model.name, models_dir)})")
        return rep
    rep.problems += [f"no file matches '{pat}'" for pat in missing_files(model, directory)]
    record_path = directory / CHECKSUMS_FILE
    if not record_path.is_file():
        rep.problems.append(f"no {CHECKSUMS_FILE} (not fetched by `models fetch`, or interrupted)")
        return rep
    recorded: dict[str, dict[str, Any]] = json.loads(record_path.read_text("utf-8")).get("files", {})
    for rel, want in sorted(recorded.items()):
        path = directory / rel
        if not path.is_file():
            rep.problems.append(f"missing file: {rel}")
        elif path.stat().st_size != want["size"]:
            rep.problems.append(f"altered file (size {path.stat().st_size} != {want['size']}): {rel}")
        elif not quick and file_sha256(str(path)) != want["sha256"]:
            rep.problems.append(f"altered file (sha256 differs): {rel}")
    rep.warnings += [f"unrecorded file: {rel}" for rel in model_files(directory) if rel not in recorded]
    rep.problems += [f"remote code still referenced ({ref}); re-run fetch" for ref in remote_refs(directory)]
    return rep


def verify_packaged(model: PackagedModel) -> ModelReport:
    """Locate (or assemble) a packaged model's file and re-hash it fully against the manifest.

    Split models: every part must also be installed at its pinned version — a missing or
    altered part is reported by package name with the pip command that fixes it (a problem
    while nothing usable is assembled, a warning when the assembled file is intact)."""
    from sanctuary_local.errors import MissingModel
    from sanctuary_local.models.parts import RECORD_SUFFIX, locate_parts
    from sanctuary_local.models.resolve import resolve_model

    rep = ModelReport(model.name, "packaged", f"packaged:{model.name}")
    try:
        path = resolve_model(f"packaged:{model.name}")
    except (MissingModel, OSError, ValueError) as exc:  # ValueError: the GGUF assembled wrong
        rep.problems.append(str(exc))
        return rep
    target = path / model.file if path.is_dir() else path
    rep.path = str(target)
    if not target.is_file():
        rep.problems.append(f"missing file: {target}")
        return rep
    actual = file_sha256(str(target))
    if actual != model.sha256:
        fix = (f": delete it and {target.name}{RECORD_SUFFIX}, the next run re-assembles it from the parts"
               if model.split else "")
        rep.problems.append(f"sha256 of {target} is {actual}, the manifest expects {model.sha256}{fix}")
    if model.split:
        try:
            locate_parts(model)
        except MissingModel as exc:
            rep.warnings.append(f"{exc} (the assembled file is intact, but could not be rebuilt)")
    return rep


def verify(profile: str | None, models_dir: Path, quick: bool = False,
           manifest: Manifest | None = None) -> list[ModelReport]:
    """Verify every model of ``profile`` (None: of every profile), offline."""
    manifest = manifest or load_manifest()
    profiles = [profile] if profile else sorted(manifest.profiles)
    names = sorted({source_model(m) for p in profiles for m in manifest.profile(p).values()})
    reports = []
    for name in names:
        if name.startswith("packaged:"):
            reports.append(verify_packaged(manifest.packaged[name.removeprefix("packaged:")]))
        else:
            reports.append(verify_hub_model(manifest.models[name], models_dir, quick))
    return reports
