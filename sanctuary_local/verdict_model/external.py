"""Another system's evidence (``io.evidence_file``) as the inputs a verdict model reads.

``verdict-model eval --evidence`` and ``train --evidence`` read a leaderboard CSV or a
``predictions.json`` this way: each claim's question–answer pairs, in the file's order, with
the claim's gold label from the claims file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.io.evidence_file import ExternalEvidence, check_evidence_matches, read_evidence_file
from sanctuary_local.records import Claim
from sanctuary_local.verdict_model.inputs import VerdictInput, from_items


def is_evidence_file(path: Path) -> bool:
    """A leaderboard CSV or a predictions JSON (not a ``verdict-model evidence`` JSONL file)."""
    if path.suffix.lower() == ".csv":
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return head.startswith(b"[") or head.startswith(b"id,claim")


def external_inputs(claims: Sequence[Claim], claims_path: Path, evidence: Path,
                    selected: Sequence[Claim] | None = None) -> tuple[list[VerdictInput], dict[int, ExternalEvidence]]:
    """The inputs of ``selected`` (default: every claim the file has a row for) on the evidence
    in ``evidence``, and the file's rows; one line when the file was made for another claims
    file, or lacks a selected claim."""
    found = read_evidence_file(evidence)
    check_evidence_matches(claims, found, evidence, claims_path,
                           None if selected is None else [c.index for c in selected])
    chosen = list(selected) if selected is not None else [c for c in claims if c.index in found]
    if not chosen:
        raise UserError(f"{evidence}: no claim of {claims_path} has evidence there")
    return [from_items(c, found[c.index].items) for c in chosen], found
