"""``run --evidence-from FILE``: stage 3 on another system's evidence, stages 1–2 skipped.

The file (a leaderboard CSV or a ``predictions.json``, ``io.evidence_file``) stands where the
knowledge store would: each of its question–answer pairs becomes a stage-1 question and the
one stage-2 snippet that answers it, in the file's order, so that stage 3, the outputs,
``report`` and ``eval`` read the run as any other. A snippet's source is the answer itself:
its span is ``0:len(answer)`` of that text (``doc_position`` is the pair's position), and its
URL is the file's (a leaderboard CSV carries none). Each claim's records are flagged
``evidence_from`` (not degrading). The run is fingerprinted on each claim's row, so a changed
file is refused on resume as a changed store is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import orjson

from sanctuary_local.io.evidence_file import ExternalEvidence, check_evidence_matches, read_evidence_file
from sanctuary_local.records import (
    Chunk, Claim, ClaimEvidence, EvidenceSnippet, HydeResult, Query, QueryEvidence,
)

FLAG = "evidence_from"


class EvidenceSource:
    """The evidence of ``path`` for the run's claims, in place of a knowledge store."""

    def __init__(self, path: Path, claims: Sequence[Claim], all_claims: Sequence[Claim], claims_path: Path) -> None:
        self.path = Path(path)
        self.rows: dict[int, ExternalEvidence] = read_evidence_file(self.path)
        check_evidence_matches(all_claims, self.rows, self.path, claims_path, [c.index for c in claims])

    def fingerprint(self, index: int) -> str:
        """What the run's fingerprint records of claim ``index``: its row's content."""
        row = self.rows[index]
        data = [row.claim, [[e.question, e.answer, e.url] for e in row.items]]
        return hashlib.sha256(orjson.dumps(data)).hexdigest()

    def hyde(self, claim: Claim) -> HydeResult:
        """The file's questions as the claim's stage-1 record (no provisional label)."""
        queries = tuple(Query(claim.index, k, e.question) for k, e in enumerate(self.rows[claim.index].items))
        return HydeResult(claim.index, None, queries, flags=(FLAG,))

    def evidence(self, claim: Claim) -> ClaimEvidence:
        """Each pair's answer as the one snippet of its question (score 1: no retrieval ranked it)."""
        queries = []
        for k, e in enumerate(self.rows[claim.index].items):
            chunk = Chunk(claim.index, k, e.url, 0, len(e.answer), e.answer, len(e.answer.split()))
            queries.append(QueryEvidence(Query(claim.index, k, e.question), (EvidenceSnippet(chunk, 1.0),)))
        return ClaimEvidence(claim.index, tuple(queries), flags=(FLAG,))
