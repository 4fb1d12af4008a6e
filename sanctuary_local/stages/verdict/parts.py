"""Stage 3's reading of a claim given in parts (``Draft.parts``, which the decomposition
mode, ``modes/decompose.py``, makes): the parts as the prompt lists them, their labels read
back from the verdict (``Part N: <label>``), and the claim's label as their deterministic AND:

- any part Refuted → Refuted;
- every part Supported → Supported;
- else any part Conflicting Evidence/Cherrypicking → Conflicting Evidence/Cherrypicking;
- else → Not Enough Evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sanctuary_local.records import CONFLICTING, NEE, REFUTED, SUPPORTED
from sanctuary_local.stages.parsing import normalize_label
from sanctuary_local.stages.verdict.draft import Parts

__all__ = ["and_label", "and_of_parts", "format_components", "parse_component_labels"]

_PART_LABEL = re.compile(r"^\s*[*#_`\s]*part\s*(\d+)\s*[*_`]*\s*[:=\-]\s*[*_`]*\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def format_components(parts: Sequence[str]) -> str:
    return "\n".join(f"Part {i}: {p}" for i, p in enumerate(parts, start=1))


def parse_component_labels(text: str, n: int) -> list[str | None]:
    """The label of each of the ``n`` parts from ``Part N: <label>`` lines (the last line
    for a part wins); None for a part without a readable label."""
    labels: list[str | None] = [None] * n
    text = text or ""
    heads = list(re.finditer(r"^\s*[*#_`]*\s*parts\s*[*_`]*\s*:", text, re.IGNORECASE | re.MULTILINE))
    if heads:  # the Parts: block of the output format, not parts restated in the reasoning
        text = text[heads[-1].end():]
    for m in _PART_LABEL.finditer(text):
        k = int(m.group(1))
        if 1 <= k <= n:
            lbl = normalize_label(m.group(2))
            if lbl is not None:
                labels[k - 1] = lbl
    return labels


def and_label(labels: Sequence[str]) -> str:
    """The deterministic AND of the parts' labels (see the module docstring)."""
    if not labels:
        raise ValueError("and_label needs at least one label")
    if REFUTED in labels:
        return REFUTED
    if all(lbl == SUPPORTED for lbl in labels):
        return SUPPORTED
    if CONFLICTING in labels:
        return CONFLICTING
    return NEE


def and_of_parts(text: str, parts: Parts, model_label: str, reask_text: str = "") -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """The claim's label from its parts' labels (deterministic AND) when the verdict, or its
    one re-ask (``reask_text``), labels every part, else the model's own label; the
    per-part record and flags."""
    labels = parse_component_labels(text, len(parts.components))
    flags: tuple[str, ...] = ()
    if reask_text:
        again = parse_component_labels(reask_text, len(parts.components))
        labels = [a if a is not None else b for a, b in zip(labels, again, strict=True)]
        flags = ("components_reasked",)
    record: dict[str, Any] = {"parts": [{"text": p, "label": lbl} for p, lbl in zip(parts.components, labels, strict=True)],
                              "model_label": model_label, "and_label": None}
    if any(lbl is None for lbl in labels):
        return model_label, record, (*flags, "components_unparsed")
    final = and_label([lbl for lbl in labels if lbl is not None])
    record["and_label"] = final
    return final, record, (*flags, *(("components_and_overrode",) if final != model_label else ()))
