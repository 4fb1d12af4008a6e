"""Crash-safe stage files: append-only JSONL, one line per finished claim, fsync'ed.

A run directory holds one ``stageN_*.jsonl`` per stage. Each line is
``{"claim_index": i, "record": {...}, "extra": {...}}``. On resume the finished claims
are read back and skipped; a torn last line (the process was killed mid-write) is cut
off, so every claim ends up present exactly once.

``run_state.json`` records the fingerprint of everything that changes results (config,
claims file, store); a rerun with another fingerprint refuses to mix with the old
partial results unless ``force`` is given (which clears them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.leaderboard import atomic_write_bytes

T = TypeVar("T")

STAGE_FILES = {
    "hyde": "stage1_hyde.jsonl",
    "retrieval": "stage2_evidence.jsonl",
    "verdict": "stage3_predictions.jsonl",
}
STATE_FILE = "run_state.json"


class StageFile(Generic[T]):
    """Append-only, fsync'ed JSONL of one stage's records, keyed by claim index."""

    def __init__(self, path: Path, decode: Callable[[dict[str, Any]], T]) -> None:
        self.path = path
        self._decode = decode
        self.records: dict[int, T] = {}
        self.extras: dict[int, dict[str, Any]] = {}
        self.repaired_bytes = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good_end = 0
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn last line: no newline → never fully written
                break
            line = data[pos:nl]
            try:
                obj = orjson.loads(line)
                rec = self._decode(obj["record"])
            except Exception:  # a damaged line: stop here, everything after is redone
                break
            idx = int(obj["claim_index"])
            self.records.setdefault(idx, rec)  # first write wins: exactly once
            self.extras.setdefault(idx, obj.get("extra") or {})
            pos = good_end = nl + 1
        if good_end < len(data):
            self.repaired_bytes = len(data) - good_end
            with open(self.path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())

    def __contains__(self, claim_index: int) -> bool:
        return claim_index in self.records

    def append(self, claim_index: int, record: Any, extra: dict[str, Any] | None = None) -> None:
        """Persist one finished record (flush + fsync before returning)."""
        if claim_index in self.records:
            return
        line = orjson.dumps(
            {"claim_index": claim_index, "record": record.to_dict(), "extra": extra or {}},
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
        with open(self.path, "ab") as f:
            f.write(line + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[claim_index] = record
        self.extras[claim_index] = extra or {}

    def pending(self, indices: Iterable[int]) -> list[int]:
        return [i for i in indices if i not in self.records]


def check_state(out: Path, fingerprint: dict[str, Any], force: bool) -> None:
    """Refuse to mix partial results of a different configuration (unless ``force``)."""
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    if state_path.exists():
        try:
            old = orjson.loads(state_path.read_bytes())
        except orjson.JSONDecodeError:
            old = {}
        if old.get("fingerprint") != fingerprint:
            changed = sorted(k for k in set(old.get("fingerprint", {})) | set(fingerprint)
                             if old.get("fingerprint", {}).get(k) != fingerprint.get(k))
            if not force:
                raise UserError(
                    f"{out} holds results of a different run (changed: {', '.join(changed) or 'unknown'}). "
                    "Use another --out, or --force to discard the old partial results."
                )
            clear_stage_files(out)
    elif force:
        clear_stage_files(out)
    atomic_write_bytes(state_path, orjson.dumps({"fingerprint": fingerprint}, option=orjson.OPT_INDENT_2))


def clear_stage_files(out: Path) -> None:
    for name in STAGE_FILES.values():
        (out / name).unlink(missing_ok=True)
