"""The stage 3 parser: the label and the justification from a ``Reasoning … Label:`` text.

Like the stage 1 parsers (``stages/parsing.py``, which also holds the label normalisation this
reads through), nothing here raises on model output: a text with no label line gets one
inferred from its prose, or the fallback label, and a flag saying which.
"""

from __future__ import annotations

import re

from sanctuary_local.records import LABELS, NEE, REFUTED
from sanctuary_local.stages.parsing import _ABBREV, _ABSENT, _clean, _is_template, _mentions, _truncated_label, normalize_label

_LABEL_LINE = re.compile(
    r"^[ \t*#_`-]*(?:the[ \t]+)?(?:final[ \t]+)?(?:label|verdict)(?:[ \t]+is)?[ \t]*[*_`]*[ \t]*(?:[:\-\u2013][ \t]*(.*))?$",
    re.IGNORECASE | re.MULTILINE,
)  # a bare "**Label**" heading line counts too: its label is on the next line (never read across a newline)
_REASONING_HEAD = re.compile(r"^\s*[*#_`]*\s*reasoning\s*[*_`]*\s*:?\s*[*_`]*\s*", re.IGNORECASE)
# The start of an echoed prompt block (a few-shot example) after the model's own label.
_NEW_BLOCK = re.compile(
    r"^[ \t*#_]*(?:example[ \t]*\d|claim(?:[ \t]+date)?[ \t]*[*_]*:|question[ \t]*\d+[ \t]*:|evidence[ \t]*\d+\.\d)",
    re.IGNORECASE | re.MULTILINE,
)
# Quoted page text: between the fences ⟦ ⟧ (an unclosed ⟦ runs to its line's end), and ">" lines.
_FENCED = re.compile("\u27e6(?:[^\u27e6\u27e7]*\u27e7|[^\u27e6\u27e7\\n]*)")
_QUOTE_LINE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_AFTER_NAME = re.compile(r"\s[-\u2013\u2014]\s|[:;(,]|\.(?:\s|$)")  # what may follow a label name alone on a line


def _mask_quoted(text: str) -> str:
    """``text`` with quoted page text blanked out (same length, newlines kept)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return _QUOTE_LINE.sub(blank, _FENCED.sub(blank, text))


def _line_label(text: str, m: re.Match[str]) -> str | None:
    """The label of the label line ``m``. An empty one, or one that only echoes the
    template, takes it from the next non-empty line if that line is just a label name,
    maybe explained after a separator ("Refuted - the figures…"), never from prose."""
    raw = m.group(1) or ""
    label = normalize_label(raw)
    if label is None and (not _clean(raw) or _is_template(_clean(raw))):
        following = [ln for ln in text[m.end() :].splitlines() if ln.strip()]
        head = _clean(_AFTER_NAME.split(following[0], maxsplit=1)[0]) if following else ""
        label = _ABBREV.get(head) or _truncated_label(head)
    return label


def _label_from_lines(text: str) -> tuple[str | None, int]:
    """(label, start of its line) from the model's answer (``text`` already masked).

    The answer ends where an echoed prompt block (``Claim:``, ``EXAMPLE 3``, ``Question 1:``)
    starts after its first usable label line; within the answer the last usable label line
    wins (a model correcting itself)."""
    best: tuple[str | None, int] = (None, len(text))
    end = len(text)
    for m in _LABEL_LINE.finditer(text):
        label = _line_label(text, m) if m.start() < end else None
        if label is not None:
            if best[0] is None:
                block = _NEW_BLOCK.search(text, m.end())
                end = block.start() if block else len(text)
            best = (label, m.start())
    return best


def _infer_label(text: str) -> str | None:
    """The last label named in a text without a usable label line (``text`` already masked;
    echoed template lines are ignored). Negated support or absent evidence counts as Not
    Enough Evidence, unless the text also says Refuted (see ``_clean``)."""
    kept = []
    for line in text.splitlines():
        m = _LABEL_LINE.match(line)
        if not _is_template(_clean((m.group(1) or "") if m else line)):
            kept.append(line)
    cleaned = _clean("\n".join(kept), prose=True)
    found = _mentions(cleaned)
    if cleaned.rfind(_ABSENT) > max((pos for pos, _ in found), default=-1):
        return REFUTED if any(lab == REFUTED for _, lab in found) else NEE  # "refuted: no evidence supports it"
    return found[-1][1] if found else None


def parse_verdict_output(text: str, fallback_label: str | None) -> tuple[str, str, tuple[str, ...]]:
    """``(label, justification, flags)`` from a ``Reasoning: … Label: …`` output.

    Quoted page text (between ⟦ ⟧, or ``>`` lines) is never read for the label. The
    model's label line wins (``_label_from_lines``: text echoed after it is ignored); on
    that line the label that opens it wins (``normalize_label``), and it may sit alone on
    the next line, as in the paper's template. Without one, the label is inferred from the
    prose (flag ``verdict_label_inferred``; "… is not supported by the evidence" reads as
    Not Enough Evidence). Unparseable → ``fallback_label`` (the stage-1 label), else the
    majority class Refuted, with flag ``verdict_label_fallback``. The justification J is
    the reasoning text before the label line."""
    text = text or ""
    masked = _mask_quoted(text)
    flags: list[str] = []
    label, cut = _label_from_lines(masked)
    if label is None:
        label = _infer_label(masked)
        if label is not None:
            flags.append("verdict_label_inferred")
    if label is None:
        label = fallback_label if fallback_label in LABELS else REFUTED
        flags.append("verdict_label_fallback")
    justification = _REASONING_HEAD.sub("", text[:cut].strip(), count=1).strip() or text.strip()
    return label, justification, tuple(flags)
