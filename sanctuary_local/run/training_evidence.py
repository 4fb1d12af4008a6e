"""Stage 2 over training claims: the evidence ``verdict-model evidence`` retrieves, so that a
trained verdict learns from what stage 3 reads at run time (``verdict_model/evidence.py`` reads
it back).

``build`` appends one line per claim to a JSON-lines file (``{"claim_index", "evidence",
"retrieval"}``: the stage-2 record and the retrieval settings it was retrieved with,
``settings_identity``), flushed as it goes: an interrupted build resumes where it stopped,
and a half-written last line is cut first. A resume with other retrieval settings is
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
from sanctuary_local.records import Claim, ClaimEvidence, HydeResult, Query
from sanctuary_local.verdict_model.evidence import gold_question_queries, read_evidence_lines

__all__ = ["build", "check_settings", "sample_order", "settings_identity"]


def sample_order(claims: Sequence[Claim], limit: int | None, seed: int) -> list[Claim]:
    """The claims with gold questions, in a seeded random order, at most ``limit``: a build
    cut short is still a fair sample of the labels."""
    usable = [c for c in claims if gold_question_queries(c)]
    random.Random(seed).shuffle(usable)
    return usable[:limit] if limit else usable


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
    done, recorded = read_evidence_lines(out)  # read once: the records to skip and the settings they were retrieved with
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
