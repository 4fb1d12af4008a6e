"""``verdict-model train``: fit a verdict model on labelled claims and write its directory.

The directory is built beside ``--out`` and renamed into place only when complete (never
half a model); its ``model_card.json`` records the training data's SHA-256 and label counts,
the exact command, the library versions, the base model's SHA-256, the settings, the wall
time and the metrics on every eval range given (gold evidence, ``evaluate.evaluate``).
"""

from __future__ import annotations

import platform
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.ids import file_sha256
from sanctuary_local.io.claims import load_json_file, parse_claim, read_claims
from sanctuary_local.records import LABELS, Claim
from sanctuary_local.verdict_model.base import Progress, TrainSettings
from sanctuary_local.verdict_model.evaluate import evaluate, labelled
from sanctuary_local.verdict_model.store import (
    CARD, check_out_dir, directory_sha256, load_model, publish, staging_dir, write_json,
)

LIBRARIES = ("numpy", "scikit-learn", "torch", "transformers", "tokenizers", "sanctuary-local")


@dataclass(frozen=True, slots=True)
class EvalRange:
    """Claims ``start:stop`` of a claims file, scored on their gold evidence after training."""

    path: Path
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"{self.path.name}[{self.start}:{self.stop}]"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "not installed"
    return out


def read_training_claims(path: Path) -> tuple[list[Claim], list[dict[str, Any]]]:
    """The claims of a training file, and the entries skipped because their claim text is
    empty (AVeriTeC train has one, entry 1948). Any other bad entry stops with one line."""
    data = load_json_file(path, "claims file")
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array of claims at the top level, got {type(data).__name__}")
    claims, skipped = [], []
    for i, entry in enumerate(data):
        if isinstance(entry, dict) and isinstance(entry.get("claim"), str) and not entry["claim"].strip():
            skipped.append({"index": i, "reason": "empty claim text"})
            continue
        claims.append(parse_claim(entry, i, str(path)))
    return claims, skipped


def training_inputs(path: Path) -> tuple[list[Claim], list, list[dict[str, Any]]]:
    """The claims of a training file, their gold-evidence inputs, and the skipped entries;
    a one-line error if the file is unusable."""
    claims, skipped = read_training_claims(path)
    if not claims:
        raise UserError(f"{path}: no claims to train on")
    xs = labelled(claims, str(path))
    absent = [lab for lab in LABELS if not any(x.label == lab for x in xs)]
    if absent:
        raise UserError(f"{path}: no claim is labelled {', '.join(repr(a) for a in absent)}; a verdict model needs every label")
    return claims, xs, skipped


def evidence_inputs(claims: Sequence[Claim], claims_path: Path, evidence: Path) -> tuple[list, dict[str, Any]]:
    """The training claims that have retrieved evidence, as stage 3 reads them, and what the
    model card records of its source: another system's leaderboard CSV or predictions.json
    (``verdict_model.external``), a file of ``verdict-model evidence`` (gold questions as
    the queries; with a hypothetical answer each when the file's queries carry one) or a run
    directory (stage 1's own questions, ``evidence.read_run_evidence``)."""
    from sanctuary_local.verdict_model.evidence import (
        check_claims_match, inputs_from_evidence, read_evidence, read_run_evidence, run_evidence_file,
    )

    from sanctuary_local.verdict_model.external import external_inputs, is_evidence_file

    if evidence.is_file() and is_evidence_file(evidence):
        xs, _ = external_inputs(claims, claims_path, evidence)
        return xs, {"path": str(evidence), "source": "another system's evidence (leaderboard CSV or predictions.json)",
                    "sha256": file_sha256(evidence), "claims": len(xs),
                    "labels": dict(Counter(x.label for x in xs).most_common())}
    if evidence.is_dir():
        found, kind = read_run_evidence(evidence, claims, claims_path), "run (stage-1 questions)"
        sha = file_sha256(run_evidence_file(evidence))
    elif evidence.is_file():
        found, sha = read_evidence(evidence), file_sha256(evidence)
        check_claims_match(claims, found, evidence, claims_path)
        hypothetical = any(q.query.answers for ev in found.values() for q in ev.queries)
        kind = ("gold questions with the claim as their hypothetical answer (verdict_hyde_evidence.py build)"
                if hypothetical else "verdict-model evidence (gold questions)")
    elif evidence.exists():
        from sanctuary_local.io.safe_io import file_kind

        raise UserError(f"{evidence}: is {file_kind(evidence.stat().st_mode)}, not an evidence file or a run directory")
    else:
        raise UserError(f"{evidence}: no such evidence file or run directory (build one with 'verdict-model evidence')")
    xs = inputs_from_evidence(claims, found)
    if not xs:
        raise UserError(f"{evidence}: no claim of {claims_path} has retrieved evidence there")
    return xs, {"path": str(evidence), "source": kind, "sha256": sha, "claims": len(xs),
                "labels": dict(Counter(x.label for x in xs).most_common())}


def _fit(xs: list, s: TrainSettings, tmp: Path, progress: Progress | None) -> tuple[dict, dict]:
    if s.base == "tfidf" and s.per_pair:
        from sanctuary_local.verdict_model.pair_tfidf import train_pair_tfidf

        return train_pair_tfidf(xs, s, tmp, progress), {"name": "tfidf", "sha256": None}
    if s.base == "tfidf":
        from sanctuary_local.verdict_model.tfidf import train_tfidf

        return train_tfidf(xs, s, tmp, progress), {"name": "tfidf", "sha256": None}
    if s.base == "stance":
        from sanctuary_local.verdict_model.stance import train_stance

        return train_stance(xs, s, tmp, progress), {"name": "stance", "sha256": None}
    from sanctuary_local.models.resolve import resolve_model

    base_dir = resolve_model(s.base)
    if s.per_pair:
        from sanctuary_local.verdict_model.pair_encoder import train_pair_encoder

        info = train_pair_encoder(xs, s, base_dir, tmp, progress)
    else:
        from sanctuary_local.verdict_model.encoder import train_encoder

        info = train_encoder(xs, s, base_dir, tmp, progress)
    return info, {"name": s.base, "path": str(base_dir), "sha256": directory_sha256(base_dir)}


def _kind(s: TrainSettings) -> str:
    if s.base == "stance":
        return s.base
    if s.base == "tfidf":
        return "pair-tfidf" if s.per_pair else "tfidf"
    return "pair-encoder" if s.per_pair else "encoder"


def train(train_path: Path, out: Path, settings: TrainSettings, evals: Sequence[EvalRange] = (),
          command: str = "", progress: Progress | None = None, evidence: Sequence[Path] = (),
          gold: bool = True) -> dict[str, Any]:
    """Train, score the eval ranges with the written model, publish ``out``; returns the card.

    The training inputs are each claim's gold evidence (``gold``) and the evidence retrieved
    for the claims in each of ``evidence`` (``evidence_inputs``): all, or the retrieved alone."""
    claims, xs, skipped = training_inputs(train_path)
    n_claims, gold_labels = len(xs), dict(Counter(x.label for x in xs).most_common())
    retrieved: list[dict[str, Any]] | None = None
    if evidence:
        found = [evidence_inputs(claims, train_path, e) for e in evidence]
        retrieved = [info for _, info in found]
        xs = [*(xs if gold else []), *(x for rxs, _ in found for x in rxs)]
    elif not gold:
        raise UserError("training without the gold evidence needs an evidence file (--evidence)")
    eval_sets = []
    for e in evals:  # read before training: a bad eval file fails fast, not after an hour
        claims = read_claims(e.path)
        if not 0 <= e.start < e.stop <= len(claims):
            raise UserError(f"{e.path}: eval range {e.start}:{e.stop} is outside its {len(claims)} claims")
        eval_sets.append((e, labelled(claims[e.start:e.stop], f"{e.path} [{e.start}:{e.stop}]")))
    check_out_dir(out, [train_path, *evidence, *(e.path for e in evals)])
    tmp = staging_dir(out)
    t0 = time.perf_counter()
    try:
        info, base = _fit(xs, settings, tmp, progress)
        wall = time.perf_counter() - t0
        card: dict[str, Any] = {
            "kind": _kind(settings),
            "labels": list(LABELS), "settings": asdict(settings), "base_model": base, "training": info,
            "train_data": {"path": str(train_path), "sha256": file_sha256(train_path), "claims": n_claims,
                           "labels": gold_labels, "inputs": len(xs),
                           "skipped": skipped, "gold_evidence": gold},
            "retrieved_evidence": retrieved,
            "command": command, "libraries": _versions(), "train_seconds": round(wall, 1),
            "files_sha256": directory_sha256(tmp),
        }
        write_json(tmp / CARD, card)
        model = load_model(str(tmp), settings.threads)
        card["eval"] = {e.name: evaluate(model, exs) for e, exs in eval_sets}
        write_json(tmp / CARD, card)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return card


def stack(out: Path, members: Sequence[tuple[str, float]], command: str = "") -> dict[str, Any]:
    """Write a stack of ``members`` (name, weight) to ``out`` (``verdict_model.stack``), each
    member loaded once and pinned by its files' SHA-256; returns the card. A member that is
    itself a stack, or one named twice, is refused."""
    from sanctuary_local.verdict_model.stack import MEMBERS
    from sanctuary_local.verdict_model.store import PACKAGED, verify

    if len({m for m, _ in members}) != len(members):
        raise UserError("a stack names each member once")
    pinned = []
    for name, weight in members:
        _, card, sha = verify(name)
        if card["kind"] == "stack":
            raise UserError(f"--member {name}: is a stack; a stack's members are single models")
        stored = name if name.startswith(PACKAGED) else str(Path(name).expanduser().resolve())
        pinned.append({"model": stored, "kind": card["kind"], "files_sha256": sha, "weight": weight})
    # a member directory is an input: --out may not replace it or hold it
    check_out_dir(out, [Path(m["model"]) for m in pinned if not m["model"].startswith(PACKAGED)])
    tmp = staging_dir(out)
    try:
        write_json(tmp / MEMBERS, {"members": pinned})
        card: dict[str, Any] = {"kind": "stack", "labels": list(LABELS), "settings": {}, "members": pinned,
                                "command": command, "libraries": _versions(), "files_sha256": directory_sha256(tmp)}
        write_json(tmp / CARD, card)
        load_model(str(tmp))  # the stack loads: every member is there and is the one pinned
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return card
