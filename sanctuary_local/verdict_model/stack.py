"""A stack: verdict models that read the same claim, their probabilities combined.

Each member gives the four labels' probabilities; the stack's are their weighted geometric
mean, renormalised (a product of experts: ``softmax(Σ wₖ · log pₖ)`` with the weights summing
to 1). A label every member finds likely stays likely; one member's certainty alone does not
carry the claim. The members are other model directories or shipped models, named in
``members.json`` with the SHA-256 of their files as they were when the stack was made, so a
member retrained or changed afterwards is an error on load, never a silent other stack.

``members.json`` is the stack's one file (its hash is the stack's ``files_sha256``); loading
the members is ``store.load_model``'s work, so this module imports no loader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sanctuary_local.errors import UserError
from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import VerdictModel, softmax
from sanctuary_local.verdict_model.inputs import VerdictInput

MEMBERS = "members.json"


def parse_member(spec: str) -> tuple[str, float]:
    """``NAME`` or ``NAME=WEIGHT`` (weight 1 by default) → (name, weight); one line if bad."""
    name, sep, weight = spec.rpartition("=")
    if not sep:
        return spec, 1.0
    try:
        w = float(weight)
    except ValueError:
        raise UserError(f"--member {spec!r}: the weight after '=' must be a number") from None
    if not (math.isfinite(w) and w > 0) or not name:
        raise UserError(f"--member {spec!r}: give a model name and a finite weight > 0, e.g. packaged:verdict-tfidf-web=1")
    return name, w


def read_members(directory: Path) -> list[dict[str, Any]]:
    """The stack's members (``model``, ``files_sha256``, ``weight``), checked; one line if bad."""
    path = directory / MEMBERS
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable stack members: {exc}") from None
    members = spec.get("members") if isinstance(spec, dict) else None
    if not (isinstance(members, list) and members):
        raise UserError(f"{path}: not a stack: it needs 'members', a non-empty list")
    for i, m in enumerate(members):
        ok = (isinstance(m, dict) and isinstance(m.get("model"), str) and m["model"]
              and isinstance(m.get("files_sha256"), str) and len(m["files_sha256"]) == 64
              and type(m.get("weight")) in (int, float) and math.isfinite(m["weight"]) and m["weight"] > 0)
        if not ok:
            raise UserError(f"{path}: member {i} needs 'model' (a name), 'files_sha256' (64 hex digits) "
                            "and 'weight' (a number > 0)")
    return members


def member_path(directory: Path, name: str) -> str:
    """Where a member named in ``directory``'s stack is: a shipped name or absolute path as
    given, a relative path from the stack's own directory (so a stack can carry its members)."""
    if name.startswith("packaged:") or Path(name).is_absolute():
        return name
    return str(directory / name)


class StackModel:
    """A stack of loaded verdict models and their weights."""

    kind = "stack"

    def __init__(self, directory: Path, sha256: str, members: Sequence[VerdictModel], weights: Sequence[float]) -> None:
        if len(members) != len(weights) or not members:
            raise ValueError("a stack needs one weight per member, and at least one member")
        self.directory, self.sha256, self.members = directory, sha256, list(members)
        total = float(sum(weights))
        self.weights = [float(w) / total for w in weights]
        reader = next((m for m in self.members if getattr(m, "max_pairs", 10) > 0), self.members[0])
        self.answer_words, self.answer_focus = reader.answer_words, reader.answer_focus

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        if not xs:
            return np.zeros((0, len(LABELS)))
        return combine([m.predict_proba(xs) for m in self.members], self.weights)


def combine(probs: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """The weighted geometric mean of the members' probabilities (weights scaled to sum to 1,
    so that they weigh the members against each other and never sharpen or flatten the
    result), renormalised per row."""
    total = float(sum(weights))
    z = sum(w / total * np.log(np.clip(p, 1e-12, 1.0)) for p, w in zip(probs, weights, strict=True))
    return softmax(np.asarray(z, dtype=float))
