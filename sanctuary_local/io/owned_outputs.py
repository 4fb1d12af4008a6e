"""Fixed-name outputs written into a folder the user chose, which may hold the user's own files.

``eval --out DIR`` writes ``metrics.json``, ``per_claim.csv``… into any folder (by default
a run's). It records the SHA-256 of every file it wrote in a manifest in that folder
(``<command>_manifest.json``); a later run replaces a file only when it is absent or still
holds bytes the manifest records. Anything else at one of its names — the user's own file,
a file edited since, a symbolic link, a FIFO, a device, a directory — is refused, in one
line naming it, before anything is written (a FIFO is opened non-blocking, a link is never
followed). Each file is written atomically (temp file + rename: a link planted after the
check is replaced, not followed). The manifest is written first with the old and the new
hash of every file and, once all are in place, with the new ones only: a run killed
half-way leaves every file it wrote recognisable. A folder without a manifest may hold the
outputs of a version that wrote none: ``earlier`` recognises them by their content.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, file_kind, open_regular, read_regular

__all__ = ["OwnedOutputs"]

#: Bytes of a manifest read at most (it lists a handful of names and hashes).
MANIFEST_LIMIT = 1 << 20


def _sha256(path: Path) -> str | None:
    """The file's SHA-256; ``None`` when it is absent; ``""`` when it is not a regular file
    (a link, a FIFO, a device, a directory) or cannot be read."""
    digest = hashlib.sha256()
    try:
        with open_regular(path, follow=False) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    except (OSError, UserError):
        return ""
    return digest.hexdigest()


def _kind(path: Path) -> str:
    """What is at ``path``, in words ("a symbolic link", "a FIFO (named pipe)", …)."""
    try:
        kind = file_kind(os.lstat(path).st_mode)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return "a file it cannot read" if kind == "a regular file" else kind


@dataclass(frozen=True, slots=True)
class OwnedOutputs:
    """The files ``command`` writes into ``folder``, recognised by its manifest."""

    folder: Path
    command: str
    #: Without a manifest: the names in ``folder`` an earlier version of ``command`` (which
    #: wrote none) recognisably wrote, by their content.
    earlier: Callable[[Path], set[str]] | None = None

    @property
    def manifest(self) -> Path:
        return self.folder / f"{self.command}_manifest.json"

    def _refuse(self, name: str, why: str) -> UserError:
        return UserError(f"{self.folder / name}: {why}; `{self.command}` replaces only the files it wrote "
                         f"(listed in {self.manifest.name}): choose a new or empty --out, or remove it")

    def recorded(self) -> dict[str, list[str]]:
        """The manifest's ``{name: [sha256, …]}``; ``{}`` when there is none yet; a manifest
        that is not one (the user's file, a link, damaged) is refused."""
        if _sha256(self.manifest) is None:
            return {}
        try:
            data = orjson.loads(read_regular(self.manifest, MANIFEST_LIMIT, "manifest", follow=False))
        except (OSError, UserError, orjson.JSONDecodeError):
            data = None
        files = data.get("files") if isinstance(data, dict) and data.get("written_by") == self._by else None
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, list) and all(isinstance(h, str) for h in v) for k, v in files.items()):
            raise self._refuse(self.manifest.name, f"is not a manifest written by `{self.command}`")
        return files

    @property
    def _by(self) -> str:
        return f"sanctuary-local {self.command}"

    def check(self, names: Iterable[str]) -> dict[str, list[str]]:
        """A ``UserError`` naming the first of ``names`` in ``folder`` that this command may
        not replace; returns the manifest's records."""
        recorded = self.recorded()
        earlier = self.earlier(self.folder) if self.earlier is not None and not recorded else set()
        for name in names:
            digest = _sha256(self.folder / name)
            if digest == "":
                raise self._refuse(name, f"is {_kind(self.folder / name)}, not a file it wrote")
            if digest is not None and name in earlier:
                recorded[name] = [digest]
            elif digest is not None and digest not in recorded.get(name, ()):
                raise self._refuse(name, f"was not written by `{self.command}` (or was changed since)")
        return recorded

    def _write_manifest(self, files: Mapping[str, list[str]]) -> None:
        data = {"written_by": self._by, "files": dict(sorted(files.items()))}
        atomic_write_bytes(self.manifest, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")

    def write(self, files: Mapping[str, bytes]) -> dict[str, Path]:
        """Check (``check``), then write ``{name: bytes}`` into ``folder``; returns the paths.
        Earlier records of names not written now are kept (their files are still ours)."""
        recorded = self.check(files)
        new = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        self._write_manifest(recorded | {n: list(dict.fromkeys([*recorded.get(n, ()), h])) for n, h in new.items()})
        paths = {name: atomic_write_bytes(self.folder / name, data) for name, data in files.items()}
        self._write_manifest(recorded | {n: [h] for n, h in new.items()})
        return paths
