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

``build`` appends one line per claim to a JSON-lines file (``{"claim_index", "evidence",
"retrieval"}``: the stage-2 record and the retrieval settings it was retrieved with,
``settings_identity``), flushed as it goes: an interrupted build resumes where it stopped,
and a half-written last line is dropped on reading. A resume with other retrieval settings is
refused (``check_settings``); lines written before the settings were recorded have none and
read as before.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import Claim, ClaimEvidence, HydeResult, Query
from sanctuary_local.verdict_model.inputs import VerdictInput, from_queries


def gold_question_queries(claim: Claim) -> tuple[Query, ...]:
    """The claim's gold questions as stage-2 queries (no answers)."""
    return tuple(Query(claim.index, n, q.question) for n, q in enumerate(claim.gold_questions) if q.question.strip())


def sample_order(claims: Sequence[Claim], limit: int | None, seed: int) -> list[Claim]:
    """The claims with gold questions, in a seeded random order, at most ``limit``: a build
    cut short is still a fair sample of the labels."""
    usable = [c for c in claims if gold_question_queries(c)]
    random.Random(seed).shuffle(usable)
    return usable[:limit] if limit else usable


def read_evidence(path: Path) -> dict[int, ClaimEvidence]:
    """``{claim index: its retrieved evidence}`` of an evidence file; a torn last line
    (an interrupted build) after a good one is dropped, a bad line elsewhere is an error naming
    it (so a file that is not evidence, e.g. a one-line claims file, is never cut as torn).
    A FIFO or a device is refused, never read."""
    return _read(path)[0]


#: Retrieval settings that change how stage 2 runs, not what it retrieves (as in the run
#: fingerprint, ``run.fingerprint.EXECUTION_SETTINGS``): left out of ``settings_identity``.
_EXECUTION_KEYS = ("workers", "index_cache")


def settings_identity(cfg: Any) -> dict[str, Any]:
    """The retrieval settings (``RetrievalConfig``) a record was retrieved with, as each line
    of an evidence file records them."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(cfg).items() if k not in _EXECUTION_KEYS}


def _flat(d: Any, prefix: str = "retrieval.") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    return {k: v for key, value in d.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def check_settings(path: Path, identity: dict[str, Any], recorded: list[tuple[int, dict[str, Any] | None]]) -> None:
    """Refuse to extend ``path`` with records retrieved with other settings than its own (one
    line naming the file and the first setting that differs); a file whose lines record no
    settings (written before they were recorded) cannot be checked, so it is refused too.
    ``recorded``: the file's settings per line, as ``_read`` gives them."""
    identity = orjson.loads(orjson.dumps(identity))  # as a line reads back (a tuple is a list)
    for n, found in recorded:
        if found is None:
            raise UserError(f"{path}:{n}: records no retrieval settings (written by an older version), so a resume "
                            "cannot check they are this run's; give a new --out")
        if found != identity:
            was, now = _flat(found), _flat(identity)
            key = next(k for k in sorted(set(was) | set(now)) if was.get(k, "(unset)") != now.get(k, "(unset)"))
            raise UserError(f"{path}:{n}: was retrieved with {key}={was.get(key, '(unset)')!r}, this run has "
                            f"{now.get(key, '(unset)')!r}; resume with the same --profile and --set, or give a new --out")


def _read(path: Path) -> tuple[dict[int, ClaimEvidence], list[tuple[int, dict[str, Any] | None]]]:
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
    from sanctuary_local.run.stage_files import STAGE_FILES

    return run / STAGE_FILES["retrieval"]


def read_run_evidence(run: Path, claims: Sequence[Claim], claims_path: Path) -> dict[int, ClaimEvidence]:
    """``{index in claims: stage-2 record}`` of a run over (a copy or a slice of) the training
    file ``claims_path``: the evidence retrieved for stage 1's own questions."""
    from sanctuary_local.run.stage_files import StageFile

    stage2 = run_evidence_file(run)
    if not stage2.is_file():
        raise UserError(f"{run}: no {stage2.name}: not a run directory, or its stage 2 has not started")
    index = _run_claims(run, claims, claims_path)
    return {index[i]: ev for i, ev in StageFile(stage2, ClaimEvidence.from_dict, repair=False).records.items() if i in index}


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


def _drop_torn_tail(path: Path) -> None:
    """Cut an interrupted build's half-written last line, so the next line starts clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


def build(claims: Sequence[Claim], store: Path, out: Path, *, profile: str = "cpu",
          overrides: dict[str, Any] | None = None, limit: int | None = None, seed: int = 0, workers: int = 1,
          progress: Callable[[int, int], None] | None = None,
          queries: Callable[[Claim], tuple[Query, ...]] = gold_question_queries, source: str = "claims") -> int:
    """Retrieve evidence for (a seeded sample of) ``claims`` from ``store`` into ``out``,
    skipping the claims already there; returns the number of claims in ``out``. ``queries``
    makes each claim's stage-2 queries (default: its gold questions); ``overrides`` change the
    profile's ``retrieval`` settings, as ``run --set`` does (another section is an error); ``source``
    names the claims in errors."""
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.io.store import KnowledgeStore
    from sanctuary_local.stages.evidence import run_retrieval

    other = sorted(set(overrides or {}) - {"retrieval"})
    if other:
        raise UserError(f"--set: only retrieval.* settings change what stage 2 retrieves, got {', '.join(other)}.*")
    if not store.is_dir() and not store.is_file():
        raise UserError(f"{store}: no such knowledge store")
    cfg = load_config(profile, overrides).retrieval
    cfg.index_cache = ""  # the training store is read once; no BM25 cache beside it
    identity = settings_identity(cfg)
    done, recorded = _read(out)  # read once: the records to skip and the settings they were retrieved with
    ordered = sample_order(claims, limit, seed)
    if not ordered:
        raise UserError(f"{source}: none of the {len(claims)} claims has gold questions to search with")
    todo = [c for c in ordered if c.index not in done]
    available = KnowledgeStore(str(store))
    todo = [c for c in todo if available.has(c.index)]
    if todo:  # records retrieved with other settings are never appended to a file's own
        check_settings(out, identity, recorded)
    if not done and not todo:  # the wrong store: an empty file and "evidence for 0 claims" said nothing of it
        raise UserError(f"{store}: holds none of the {len(claims)} claims to retrieve for; is it their knowledge store?")
    total = len(done) + len(todo)
    if progress:
        progress(len(done), total)
    out.parent.mkdir(parents=True, exist_ok=True)
    _drop_torn_tail(out)
    from sanctuary_local.io.safe_io import open_append

    with os.fdopen(open_append(out), "ab") as fh:  # a symlink or a FIFO at out: one line, never followed
        def write(ev: ClaimEvidence) -> None:
            fh.write(orjson.dumps({"claim_index": ev.claim_index, "evidence": ev.to_dict(), "retrieval": identity}) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
            done[ev.claim_index] = ev
            if progress:
                progress(len(done), total)

        hyde = [HydeResult(c.index, None, queries(c)) for c in todo]
        run_retrieval(str(store), hyde, cfg, workers=workers, on_result=write)
    return len(done)
