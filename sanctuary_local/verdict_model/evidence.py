"""Retrieved evidence for training claims: what stage 3 reads at run time, built for train.

A model trained only on gold answers (a sentence each) reads a run's evidence (chunks of
crawled pages, with text around the answer) as a different language: the MiniLM
cross-encoder called 23 of 50 held-out claims Conflicting that way. So the training claims
also get the pipeline's kind of evidence:

- the queries: each claim's gold questions (without their answers: stage 1's questions come
  with hypothetical answers that may be wrong, the gold ones never are);
- stage 2 as a run does it (``stages.evidence.run_retrieval``, the profile's settings) over a
  knowledge store of the training claims, e.g. the surrogate store that
  ``../shared/tools/make_surrogate_store.py --claims train.json`` builds;
- the pairs as stage 3 reads them (``inputs.from_queries``).

A finished ``sanctuary-local run`` over training claims is the other source
(``read_run_evidence``): its stage-2 records, retrieved for stage 1's own questions, exactly
what stage 3 reads at run time (at the cost of an LLM call per claim).

The build itself, stage 2 over the training claims, is run machinery: ``run/training_evidence.py``
(``verdict-model evidence``). It writes one line per claim (``{"claim_index", "evidence",
"retrieval"}``: the stage-2 record and the retrieval settings it was retrieved with); this
module reads such files (``read_evidence``), and a half-written last line is dropped on reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.run_files import STAGE_FILES, complete_lines
from sanctuary_local.io.safe_io import open_regular
from sanctuary_local.records import Claim, ClaimEvidence, Query
from sanctuary_local.verdict_model.inputs import VerdictInput, from_queries


def gold_question_queries(claim: Claim) -> tuple[Query, ...]:
    """The claim's gold questions as stage-2 queries (no answers)."""
    return tuple(Query(claim.index, n, q.question) for n, q in enumerate(claim.gold_questions) if q.question.strip())


def read_evidence(path: Path) -> dict[int, ClaimEvidence]:
    """``{claim index: its retrieved evidence}`` of an evidence file; a torn last line
    (an interrupted build) after a good one is dropped, a bad line elsewhere is an error naming
    it (so a file that is not evidence, e.g. a one-line claims file, is never cut as torn).
    A FIFO or a device is refused, never read."""
    return read_evidence_lines(path)[0]


def read_evidence_lines(path: Path) -> tuple[dict[int, ClaimEvidence], list[tuple[int, dict[str, Any] | None]]]:
    """The records of an evidence file and, per line, the settings it records (None: none)."""
    from sanctuary_local.io.safe_io import read_regular

    out: dict[int, ClaimEvidence] = {}
    settings: list[tuple[int, dict[str, Any] | None]] = []
    if not path.exists():
        return out, settings
    try:
        lines = read_regular(path, what="evidence file").split(b"\n")
    except OSError as exc:
        raise UserError(f"{path}: cannot read the evidence file: {exc.strerror or exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
            out[int(row["claim_index"])] = ClaimEvidence.from_dict(row["evidence"])
            settings.append((n, row.get("retrieval")))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            if n >= len(lines) - 1 and out:  # the last line, torn by an interrupted build
                continue
            raise UserError(f"{path}:{n}: not an evidence line ({type(e).__name__}: {e})") from None
    return out, settings


def check_claims_match(claims: Sequence[Claim], evidence: dict[int, ClaimEvidence], path: Path,
                       claims_path: Path) -> None:
    """An evidence file is keyed by claim index alone; its queries are each claim's gold
    questions (``gold_question_queries``), so a record whose questions are not those of the
    claim at its index was built from another claims file (or a reordered one): one line."""
    for c in claims:
        ev = evidence.get(c.index)
        gold = {q.question for q in c.gold_questions}
        if ev is not None and (stray := next((q.query.question for q in ev.queries if q.query.question not in gold), None)):
            raise UserError(f"{path}: the evidence of claim {c.index} was retrieved for {stray[:60]!r}, not the gold "
                            f"questions of claim {c.index} of {claims_path}; was it built from another claims file?")


def _run_claims(run: Path, claims: Sequence[Claim], claims_path: Path) -> dict[int, int]:
    """``{the run's claim index: the index in claims of the same claim}``, from the run's
    manifest: the run read ``claims_path`` itself, or a file (found by the path it records,
    with the SHA-256 it records) whose claims are matched by their text."""
    from sanctuary_local.ids import file_sha256

    try:
        inputs = orjson.loads((run / "manifest.json").read_bytes())["inputs"]
        path, sha = Path(inputs["claims"]), str(inputs["claims_sha256"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{run}: not a finished run directory (manifest.json: {type(e).__name__}: {e})") from None
    if sha == file_sha256(claims_path):
        return {c.index: c.index for c in claims}
    if not path.is_file() or file_sha256(path) != sha:
        raise UserError(f"{run}: its claims file {path} is not {claims_path} and is not there unchanged, "
                        "so its claims cannot be matched to the training claims")
    by_text = {" ".join(c.text.split()): c.index for c in claims}
    out = {}
    for c in read_claims(path):
        if (j := by_text.get(" ".join(c.text.split()))) is None:
            raise UserError(f"{run}: claim {c.index} of {path} is not a claim of {claims_path}")
        out[c.index] = j
    return out


def run_evidence_file(run: Path) -> Path:
    """The file of a run directory that holds its stage-2 records."""
    return run / STAGE_FILES["retrieval"]


def read_run_evidence(run: Path, claims: Sequence[Claim], claims_path: Path) -> dict[int, ClaimEvidence]:
    """``{index in claims: stage-2 record}`` of a run over (a copy or a slice of) the training
    file ``claims_path``: the evidence retrieved for stage 1's own questions."""
    stage2 = run_evidence_file(run)
    if not stage2.is_file():
        raise UserError(f"{run}: no {stage2.name}: not a run directory, or its stage 2 has not started")
    index = _run_claims(run, claims, claims_path)
    with open_regular(stage2, follow=True) as fh:  # read only, never cut: another run's file
        records, _, _ = complete_lines(fh.read(), ClaimEvidence.from_dict)
    return {index[i]: ev for i, ev in records.items() if i in index}


def inputs_from_evidence(claims: Sequence[Claim], evidence: dict[int, ClaimEvidence],
                         max_pairs: int = 10) -> list[VerdictInput]:
    """The labelled claims that have retrieved evidence with at least one snippet, as the
    model reads them at run time."""
    out = []
    for c in claims:
        ev = evidence.get(c.index)
        if ev is not None and c.gold_label and any(q.snippets for q in ev.queries):
            out.append(from_queries(c.text, ev.queries, max_pairs=max_pairs, label=c.gold_label))
    return out


