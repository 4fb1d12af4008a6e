"""Tolerant parsers for LLM output: label names (both stages) and stage 1 JSON (stage 3's
``Reasoning … Label:`` text is ``stages/verdict/parsing.py``).

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

from sanctuary_local.records import CONFLICTING, NEE, REFUTED, SUPPORTED

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
# Longest first: "not supported" must be tried before "not", "conflicting evidence/…" before "conflicting".
_BY_LENGTH = sorted(_ABBREV.items(), key=lambda kv: -len(kv[0]))
# Substring rules, most specific first ("not enough" before "support" etc.). Negated
# support has already been rewritten to "refuted" by ``_clean``.
_CONTAINS = (
    ("not enough", NEE), ("not sufficient", NEE), ("insufficient", NEE),
    ("conflict", CONFLICTING), ("cherry", CONFLICTING),
    ("refute", REFUTED),
    ("support", SUPPORTED),
)
_CONTRACTION = re.compile(r"n['\u2019]t\b", re.IGNORECASE)
# "not supported", "unsupported", "no evidence supports", "cannot be supported", "does not
# support", "fails to support": a negation at most three words before a support word, with
# no punctuation in between, and not "not enough/sufficient …" (that is NEE) or "no
# doubt/question …"/"not only …" (those affirm).
_NEGATED_SUPPORT = re.compile(
    r"\b(?:un-?|(?:not|no|never|cannot|without|lacks?|lacking|fail(?:s|ed|ing)?|nothing|none|neither|little|scant|hardly"
    r"|barely)\b(?!\s+(?:enough|sufficient|doubt|question|only)\b)(?:\s+[\w-]+){0,3}?\s+)support\w*"
)
# "not refuted" (one word may sit between, but not a label word: "not supported (refuted)").
_NEGATED_REFUTE = re.compile(r"\b(?:not|never|cannot be)\s+(?:(?!support|refut)[\w-]+\s+)?refuted\b")
_NEITHER = re.compile(r"\bneither (?:supported|refuted) nor (?:supported|refuted)\b")
_PARTIAL = re.compile(r"\b(?:partial(?:ly)?|partly|half)[\s-]+(?:support(?:ed|s)?|true|correct|accurate|refuted|false)\b")
# Prose only: evidence said to be absent ("lacks evidence", "no credible evidence … supports").
_ABSENT_EVIDENCE = re.compile(
    r"\b(?:(?:lacks?|lacking|without|no|absence of|lack of)\s+(?:(?:any|credible|reliable|supporting|direct|clear|such|real"
    r"|concrete|solid|hard|corroborating|independent|verifiable|official)\s+)*(?:evidence|proof)\b(?:(?:\s+[\w-]+){0,4}?"
    r"\s+support\w*)?|(?:evidence|proof)\s+(?:is|was|remains)\s+(?:lacking|absent|missing|scarce)\b)"
)
_ABSENT = "\u2205"  # what ``_clean(prose=True)`` writes for absent support: a weak Not Enough Evidence
# Full label names as they appear in running text (after ``_clean``).
_MENTIONS = (
    (re.compile(r"\bnot (?:enough|sufficient) (?:evidence|info\w*)\b|\binsufficient evidence\b"), NEE),
    (re.compile(r"\bconflicting evidence\b|\bcherry-?picking\b"), CONFLICTING),
    (re.compile(r"\brefut(?:ed|es)\b"), REFUTED),
    (re.compile(r"\bsupport(?:ed|s)\b"), SUPPORTED),
)


def _clean(raw: str, prose: bool = False) -> str:
    """Lower-case text without markup, with negated forms rewritten so that no later rule
    can read them as a label: "not refuted" → dropped, "neither … nor …" → NEE, "partially
    supported" → conflicting; negated support → "refuted" on a label line (an explicit
    "Label: Not Supported" is Refuted) but, in ``prose``, → ``_ABSENT`` like absent evidence
    ("the claim is not supported by the evidence" / "lacks evidence" mean NEE there)."""
    text = _MARKUP.sub(" ", _CONTRACTION.sub(" not", raw)).lower()
    text = re.sub(r"\s+", " ", text).strip(" .:;,!|-")
    text = _PARTIAL.sub("conflicting evidence", _NEITHER.sub("not enough evidence", text))
    text = _NEGATED_REFUTE.sub(" ", text)
    if prose:
        return _ABSENT_EVIDENCE.sub(_ABSENT, _NEGATED_SUPPORT.sub(_ABSENT, text))
    return _NEGATED_SUPPORT.sub("refuted", text)


def _leading_label(text: str) -> str | None:
    """The label whose name (or abbreviation) opens ``text`` (a cleaned string)."""
    for alias, label in _BY_LENGTH:
        if text.startswith(alias) and (len(text) == len(alias) or not text[len(alias)].isalnum()):
            return label
    return None


def _truncated_label(text: str) -> str | None:
    """A label name cut short by the token limit ("Refu", "Not enough ev"): ``text`` (≥ 4
    characters) is the start of names that all mean the same label."""
    if len(text) < 4:
        return None
    labels = {label for alias, label in _ABBREV.items() if len(alias) > len(text) and alias.startswith(text)}
    return labels.pop() if len(labels) == 1 else None


def _is_template(text: str) -> bool:
    """The output-format line echoed back: "Supported | Refuted | …" or "Supported or
    Refuted" — several label names offered as alternatives, not a choice."""
    if "|" in text:
        parts = [p.strip(" .:;,!-") for p in text.split("|")]
        return sum(1 for p in parts if p in _ABBREV) >= 2
    parts = [p.strip(" .:;,!-") for p in text.split(" or ")]
    return len(parts) >= 2 and all(p in _ABBREV for p in parts)


def _mentions(text: str) -> list[tuple[int, str]]:
    """(position, label) of every full label name in a cleaned text."""
    return sorted((m.start(), label) for rx, label in _MENTIONS for m in rx.finditer(text))


def normalize_label(raw: str | None) -> str | None:
    """Map a model's label spelling to one of ``LABELS``; ``None`` if absent or ambiguous.

    Tolerates case, markdown, quotes, trailing punctuation and the usual abbreviations
    (NEE, CE/C, C, "conflicting"). The label that opens the text wins, so "Refuted (the
    claim is not supported)" is Refuted. Negated forms ("not supported", "unsupported",
    "no evidence supports", "cannot be supported") never mean Supported. The template
    echoed back ("Supported | Refuted | …") is ambiguous → ``None``."""
    if not raw:
        return None
    text = _clean(raw)
    if not text or _is_template(text):
        return None
    label = _leading_label(text) or _truncated_label(text)
    if label is not None:
        return label
    named = {lab for _, lab in _mentions(text)}
    if len(named) == 1:
        return named.pop()
    for needle, lab in _CONTAINS:
        if needle in text:
            return lab
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
