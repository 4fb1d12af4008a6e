"""The run directory's format, read: one module for every reader of a run (``run/`` itself,
``report``, ``serve``, ``verdict-model train --evidence RUN_DIR``).

A run directory holds one JSON-lines file per stage (``STAGE_FILES``): a line per claim,
``{"claim_index", "record", "extra"}``, appended and fsync'ed as each claim finishes, the
first line of a claim the one that counts. Two readings:

- ``complete_lines``: what a resume or another run trusts, up to the first line that is torn
  (no newline: never fully written) or damaged; everything after it is redone;
- ``readable_records``: what a report shows, every line that parses, whatever lies between.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import open_regular
from sanctuary_local.records import ClaimEvidence

__all__ = ["STAGE_FILES", "complete_lines", "final_evidence", "read_stage2", "readable_records"]

T = TypeVar("T")

STAGE_FILES = {
    "decompose": "stage0_decompose.jsonl",  # decompose.enabled (issue 15, mode 3)
    "hyde": "stage1_hyde.jsonl",
    "retrieval": "stage2_evidence.jsonl",
    # followup.enabled (issue 15, mode 2): the follow-up questions, then the evidence with
    # their round merged in (what stage 3 reads then).
    "followup_questions": "stage2b_followup_questions.jsonl",
    "followup": "stage2c_followup_evidence.jsonl",
    "verdict": "stage3_predictions.jsonl",
}


def complete_lines(data: bytes, decode: Callable[[dict[str, Any]], T]) -> tuple[dict[int, T], dict[int, dict[str, Any]], int]:
    """The records and extras of a stage file's bytes up to its first torn or damaged line,
    and the offset where that line starts (``len(data)`` when none is)."""
    records: dict[int, T] = {}
    extras: dict[int, dict[str, Any]] = {}
    good_end = pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:  # torn last line: no newline → never fully written
            break
        line = data[pos:nl]
        try:
            obj = orjson.loads(line)
            rec = decode(obj["record"])
        except Exception:  # a damaged line: stop here, everything after is redone
            break
        idx = int(obj["claim_index"])
        records.setdefault(idx, rec)  # first write wins: exactly once
        extras.setdefault(idx, obj.get("extra") or {})
        pos = good_end = nl + 1
    return records, extras, good_end


def readable_records(path: Path, decode: Callable[[dict[str, Any]], T]) -> dict[int, T]:
    """Every record of a stage file that parses, by claim index (the first per claim);
    unreadable lines (a torn last line) are skipped, and a missing file, a FIFO or a device
    reads as no records."""
    out: dict[int, T] = {}
    try:
        with open_regular(path) as fh:  # a FIFO or a device is no stage file: skipped
            data = fh.read()
    except (OSError, UserError):
        return out
    for raw in data.splitlines():
        try:
            obj = orjson.loads(raw)
            out.setdefault(int(obj["claim_index"]), decode(obj["record"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return out


def read_stage2(path: Path) -> dict[int, ClaimEvidence]:
    """Stage-2 records by claim index (``readable_records``)."""
    return readable_records(path, ClaimEvidence.from_dict)


def final_evidence(run_dir: Path) -> dict[int, ClaimEvidence]:
    """The evidence stage 3 read, by claim index: stage 2's, with the follow-up round's
    merged in where it ran (``followup.enabled``)."""
    return {**read_stage2(run_dir / STAGE_FILES["retrieval"]), **read_stage2(run_dir / STAGE_FILES["followup"])}
