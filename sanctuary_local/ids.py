"""Deterministic ids: a short hash of the parts that identify a record.

Never random (uuid4) — reruns must produce identical ids (house style)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def stable_id(kind: str, *parts: object) -> str:
    """``kind-<16 hex>`` from the ``repr`` of each part, joined by a separator."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(repr(p).encode("utf-8"))
        h.update(b"\x1f")
    return f"{kind}-{h.hexdigest()}"


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
