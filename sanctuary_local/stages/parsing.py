"""Tolerant parsers for LLM output (stage 1 JSON, stage 3 ``Reasoning … Label:`` text).

Nothing here raises on model output: small models write broken JSON, code fences,
markdown, abbreviations and truncated text, and one bad generation must never kill a
batch. Each parser reports *how* it succeeded through flags so runs can be audited.

Stage 1 ladder (issue 4): strict JSON → repaired JSON (fences, trailing commas, smart
quotes, truncation at max_tokens keeping the complete pairs) → line-based fallback →
nothing (the caller then builds a single query from the claim).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sanctuary_local.records import CONFLICTING, LABELS, NEE, REFUTED, SUPPORTED

# ------------------------------------------------------------------------ labels

_MARKUP = re.compile(r"[*_#`\"'<>\[\]{}()]")
_ABBREV = {
    "s": SUPPORTED, "supported": SUPPORTED, "support": SUPPORTED, "true": SUPPORTED,
    "r": REFUTED, "refuted": REFUTED, "refute": REFUTED, "false": REFUTED,
    "not supported": REFUTED, "unsupported": REFUTED,
    "nee": NEE, "nei": NEE, "not enough evidence": NEE, "not enough info": NEE,
    "insufficient evidence": NEE, "not enough information": NEE,
    "c": CONFLICTING, "ce": CONFLICTING, "ce/c": CONFLICTING, "cec": CONFLICTING, "c/e": CONFLICTING,
    "conflicting": CONFLICTING, "cherrypicking": CONFLICTING, "cherry-picking": CONFLICTING,
    "conflicting evidence": CONFLICTING, "conflicting evidence/cherrypicking": CONFLICTING,
    "conflicting evidence/cherry-picking": CONFLICTING, "conflicting evidence / cherrypicking": CONFLICTING,
}
# Substring rules, most specific first ("not enough" before "support" etc.).
_CONTAINS = (
    ("not enough", NEE), ("insufficient", NEE),
    ("conflict", CONFLICTING), ("cherry", CONFLICTING),
    ("not supported", REFUTED), ("unsupported", REFUTED), ("refute", REFUTED),
    ("support", SUPPORTED),
)


def normalize_label(raw: str | None) -> str | None:
    """Map a model's label spelling to one of ``LABELS``; ``None`` if absent or ambiguous.

    Tolerates case, markdown, quotes, trailing punctuation and the usual abbreviations
    (NEE, CE/C, C, "conflicting"). A text naming two different full labels (e.g. the
    template echoed back, "Supported | Refuted") is ambiguous → ``None``."""
    if not raw:
        return None
    text = _MARKUP.sub(" ", raw).strip().lower()
    text = re.sub(r"\s+", " ", text).strip(" .:;,!|-")
    if not text:
        return None
    named = {lab for lab in LABELS if lab.lower() in text}
    if len(named) > 1:
        return None
    if text in _ABBREV:
        return _ABBREV[text]
    if len(named) == 1:
        return named.pop()
    first = text.split(" ")[0].strip(".:;,!")
    if first in ("s", "r", "nee", "nei", "c", "ce", "ce/c", "cec"):
        return _ABBREV[first]
    for needle, label in _CONTAINS:
        if needle in text:
            return label
    return None


# ------------------------------------------------------------------- stage 1 JSON


@dataclass(frozen=True, slots=True)
class ParsedHyde:
    """What could be read from a stage-1 output (questions not yet deduplicated)."""

    label: str | None
    pairs: tuple[tuple[str, tuple[str, ...]], ...]
    flags: tuple[str, ...]


_FENCE = re.compile(r"```(?:json|JSON)?\s*")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _close_truncated(text: str) -> Any:
    """Cut a truncated JSON text after its last complete array/string value and close the
    open brackets; tries the latest cut first so that every complete pair is kept."""
    stack: list[str] = []
    in_str = esc = False
    cuts: list[tuple[int, str]] = []  # (end index, closing brackets needed there)
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if stack and stack[-1] == "]":
                    cuts.append((i + 1, "".join(reversed(stack))))
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            if ch == "[":  # a question whose first answer was cut still counts, answerless
                cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if not stack:
                break
            stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
    for end, closing in reversed(cuts[-200:]):
        obj = _load(_TRAILING_COMMA.sub(r"\1", text[:end] + closing))
        if isinstance(obj, dict) and _pairs_from(obj):
            return obj
    return None


def _as_answers(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, dict):
        items = list(value.values())
    else:
        items = [value]
    return tuple(s for s in (str(v).strip() for v in items if v is not None and not isinstance(v, (dict, list))) if s)


def _pairs_from(obj: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Question/answers pairs from the JSON shapes models actually write."""
    ev = obj.get("evidence", obj.get("questions", obj.get("qa_pairs"))) if isinstance(obj, dict) else obj
    pairs: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(ev, dict):
        for q, a in ev.items():
            if str(q).strip() and str(q).strip().lower() not in ("label",):
                pairs.append((str(q).strip(), _as_answers(a)))
    elif isinstance(ev, list):
        for item in ev:
            if isinstance(item, dict):
                q = item.get("question") or item.get("q") or item.get("Question")
                a = item.get("answers", item.get("answer", item.get("a", item.get("Answers"))))
                if isinstance(q, str) and q.strip():
                    pairs.append((q.strip(), _as_answers(a)))
            elif isinstance(item, str) and item.strip():
                pairs.append((item.strip(), ()))
    return pairs


_LABEL_KEY = re.compile(r"""["']?label["']?\s*[:=]\s*["']?([^"'\n,}]+)""", re.IGNORECASE)
_QUESTION_KEY = re.compile(r'"([^"\n]{3,}?\?)"\s*:')
_QUESTION_LINE = re.compile(r"^\s*(?:[-*\d.)\s]*)?(?:\*\*)?(?:q(?:uestion)?\s*[-\d]*\s*[:.)]\s*)?(?:\*\*)?(.{5,}\?)\s*(?:\*\*)?\s*$", re.IGNORECASE)
_ANSWER_LINE = re.compile(r"^\s*(?:[-*\d.)\s]*)?(?:\*\*)?(?:a(?:nswer)?\s*[-\d]*\s*[:.)])?\s*(?:\*\*)?\s*(.+?)\s*$", re.IGNORECASE)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _line_fallback(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """Pairs from text that is not JSON: ``"Q?": ["A"]`` fragments, else question lines
    (ending in ``?``) each followed by its answer lines."""
    pairs = []
    keys = list(_QUESTION_KEY.finditer(text))
    for m, nxt in zip(keys, [*keys[1:], None]):
        # Answers: the quoted strings between this question key and the next one.
        span = text[m.end() : nxt.start() if nxt else len(text)]
        pairs.append((m.group(1).strip(), tuple(a.strip() for a in _QUOTED.findall(span) if a.strip())))
    if pairs:
        return pairs
    current: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        qm = _QUESTION_LINE.match(line)
        if qm:
            if current:
                pairs.append((current[0], tuple(current[1])))
            question = qm.group(1).strip().strip('"')
            tail = re.split(r'["{\[]', question)[-1].strip()  # drop a JSON prefix on the same line
            current = (tail if len(tail) >= 5 else question, [])
        elif current and line.strip():
            am = _ANSWER_LINE.match(line)
            if am and am.group(1).strip('"[],{} '):
                current[1].append(am.group(1).strip('"[],{} '))
    if current:
        pairs.append((current[0], tuple(current[1])))
    return pairs


def parse_hyde_output(text: str, truncated: bool = False) -> ParsedHyde:
    """Read label and Q-A pairs from a stage-1 output; never raises (see module doc)."""
    flags: list[str] = []
    cleaned = _FENCE.sub("", (text or "").translate(_SMART)).strip()
    start, end = cleaned.find("{"), cleaned.rfind("}")
    obj = _load(cleaned[start : end + 1]) if 0 <= start < end else None
    if obj is not None and (cleaned != (text or "").strip() or start > 0 or end < len(cleaned) - 1):
        flags.append("hyde_repaired")
    if obj is None and 0 <= start < end:
        obj = _load(_TRAILING_COMMA.sub(r"\1", cleaned[start : end + 1]))
        if obj is not None:
            flags.append("hyde_repaired")
    if (obj is None or not _pairs_from(obj)) and start >= 0:
        closed = _close_truncated(cleaned[start:])
        if closed is not None:
            obj = closed
            flags.append("hyde_truncated" if truncated else "hyde_repaired")
    pairs = _pairs_from(obj) if obj is not None else []
    label_raw = obj.get("label") if isinstance(obj, dict) else None
    if not pairs:
        pairs = _line_fallback(cleaned)
        if pairs:
            flags.append("hyde_line_fallback")
    if not isinstance(label_raw, str):
        m = _LABEL_KEY.search(cleaned)
        label_raw = m.group(1) if m else None
    label = normalize_label(label_raw)
    if label == NEE:  # stage 1 never abstains (§4.1): treat NEE as no provisional label
        label = None
    if label is None:
        flags.append("hyde_no_label")
    if truncated and "hyde_truncated" not in flags:
        flags.append("hyde_truncated")
    return ParsedHyde(label=label, pairs=tuple(pairs), flags=tuple(dict.fromkeys(flags)))


# ----------------------------------------------------------------- stage 3 verdict

_LABEL_LINE = re.compile(r"^[\s>*#_`-]*(?:final\s+)?(?:label|verdict)\s*[*_`]*\s*[:\-–]\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_REASONING_HEAD = re.compile(r"^\s*[*#_`]*\s*reasoning\s*[*_`]*\s*:?\s*[*_`]*\s*", re.IGNORECASE)


def parse_verdict_output(text: str, fallback_label: str | None) -> tuple[str, str, tuple[str, ...]]:
    """``(label, justification, flags)`` from a ``Reasoning: … Label: …`` output.

    The last ``Label:`` line wins (the label may also sit on the next line, as in the
    paper's template). Without one, the last full label name in the text is used
    (flag ``verdict_label_inferred``). Unparseable → ``fallback_label`` (the stage-1
    label), else the majority class Refuted, with flag ``verdict_label_fallback``.
    The justification J is the reasoning text before the label line."""
    text = text or ""
    flags: list[str] = []
    label: str | None = None
    cut = len(text)
    matches = list(_LABEL_LINE.finditer(text))
    for m in reversed(matches):
        raw = m.group(1)
        if not _MARKUP.sub("", raw).strip():
            following = [ln for ln in text[m.end() :].splitlines() if ln.strip()]
            raw = following[0] if following else ""
        label = normalize_label(raw)
        if label is not None:
            cut = m.start()
            break
    if label is None:
        lowered = text.lower()
        found = [(lowered.rfind(lab.lower()), lab) for lab in LABELS if lab.lower() in lowered]
        if found:
            label = max(found)[1]
            flags.append("verdict_label_inferred")
    if label is None:
        label = fallback_label if fallback_label in LABELS else REFUTED
        flags.append("verdict_label_fallback")
    justification = _REASONING_HEAD.sub("", text[:cut].strip(), count=1).strip() or text.strip()
    return label, justification, tuple(flags)
