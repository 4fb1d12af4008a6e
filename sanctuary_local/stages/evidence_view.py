"""What stage 3 shows the model of a claim's evidence, and what a prediction keeps of it.

Two views of the same ``ClaimEvidence``:

- **for scorers** (``official_evidence``): the verbatim snippets with their exact spans,
  ranked round-robin, at most ``MAX_EVIDENCE`` (the official scorer reads 10);
- **for the model** (``format_evidence``): every question with its snippets as fenced,
  neutralised, one-line quotations. Web pages are untrusted (issue 27): the text between
  the fences ``⟦ … ⟧`` is declared data by the prompt; questions, URLs and snippets are
  collapsed to one line (no injected ``Label:`` or ``Evidence:`` lines), chat-template
  special tokens and label-like phrases are defused, and the fence characters themselves
  are removed from the quoted text. Only the prompt's copy changes: stored evidence and
  its spans stay byte-exact.

The model view also deduplicates (a chunk retrieved for several questions is quoted once,
later mentions point back to it: issue 26 defect 6) and says when snippets were trimmed to
fit the context (defect 7) instead of "no evidence retrieved".

``suspected_injection`` reports instruction-like patterns in a claim's evidence (the
``suspected_injection`` flag), and ``guarded`` applies ``verdict.flagged`` to the snippets
it flags (issue 27: the paper mode's free-text reasoning obeyed page text even fenced):
"redact" (the default) cuts the matching lines and sentences from the model's copy
(``redact``); "withhold" leaves the whole snippet out, silently — its number is skipped, no
notice is shown (a "passage withheld" notice itself pushed the model towards Refuted, and
losing the whole snippet moved labels as often as the attacks did); "show" shows it
neutralised. Stored evidence, spans and the report keep the page's words.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

from sanctuary_local.io.predictions import MAX_EVIDENCE, NO_ANSWER, collapse_whitespace
from sanctuary_local.records import Claim, ClaimEvidence, EvidenceItem, EvidenceSnippet

Key = tuple[int, int]  # (query position, snippet rank)

#: The fences around quoted page text; declared in the verdict prompts.
FENCE_OPEN, FENCE_CLOSE = "\u27e6", "\u27e7"
#: Longest URL shown to the model (a URL is a source name, not a place for text).
MAX_URL_CHARS = 200

# Chat-template control tokens of the model families we run (Qwen/ChatML, Gemma, Llama
# with its numbered reserved tokens, Phi, Mistral), reasoning tags and generic role
# markers: in page text they are defused so a page cannot open a turn of its own.
_SPECIAL = re.compile(
    r"<\|[a-z0-9_ ]{1,40}\|>|<\s*/?\s*(?:start_of_turn|end_of_turn|s|bos|eos|pad|system|user|assistant|think)\s*>"
    r"|\[/?INST\]|<</?SYS>>",
    re.IGNORECASE)
# "Label: Supported", "Verdict - Refuted", "the label is: ...", "final answer: ..." inside quoted text.
_LABEL_LIKE = re.compile(r"\b(label|verdict|final answer|answer)(?:\s+is)?\s*[:=\-\u2013\u2014\uff1a]+", re.IGNORECASE)
_FENCES = re.compile(f"[{FENCE_OPEN}{FENCE_CLOSE}]")

# Phrases aimed at the model, wherever they stand in a line.
_PHRASES = (
    re.compile(r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}\b(?:previous|above|prior|earlier|all|any|other)\b"
               r"[^.\n]{0,30}\b(?:instructions?|evidence|rules|text|prompts?|context)\b", re.IGNORECASE),
    re.compile(r"\b(?:you are|act as|pretend to be|as an ai)\b[^.\n]{0,40}\b(?:assistant|model|fact-?checker|ai)\b",
               re.IGNORECASE),
    re.compile(r"\b(?:answer|respond|reply|output|label|classify|mark|rate)\b[^.\n]{0,40}"
               r"\b(?:supported|refuted|not enough evidence|conflicting evidence)\b", re.IGNORECASE),
    re.compile(r"\b(?:system prompt|new instructions?|instructions? for the (?:ai|model|assistant))\b", re.IGNORECASE),
)
# Lines in the pipeline's own prompt and output formats. A "Label:" line is the pipeline's
# own output format, whatever follows; a "Verdict:" / "Rating:" line is ordinary fact-check
# prose ("Verdict: False") unless it names one of the pipeline's labels.
_LINES = (
    re.compile(r"^\s*>?\s*label\s*:", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*>?\s*(?:verdict|rating|ruling|final answer)\s*[:=\-\u2013\u2014]+\s*[*_\"'\u201c]*\s*"
               r"(?:supported|refuted|not enough evidence|conflicting evidence|cherry-?picking)\b",
               re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*(?:question|evidence)\s*\d+(?:\.\d+)?\s*[:(]", re.IGNORECASE | re.MULTILINE),
)
_INJECTION_PATTERNS = (*_PHRASES, *_LINES, _SPECIAL)
#: Redaction also cuts the answer format's other lines from a flagged snippet (not a reason to flag).
_FORMAT_LINES = re.compile(r"^\s*>?\s*(?:justification|reasoning)\s*:", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# ------------------------------------------------------------------ for scorers
def _item(question: str, sn: EvidenceSnippet) -> EvidenceItem:
    """One evidence item: question and answer with whitespace collapsed (what scorers
    read), the verbatim snippet in ``scraped_text`` with its exact span."""
    c = sn.chunk
    return EvidenceItem(collapse_whitespace(question), collapse_whitespace(c.text), c.url, c.text,
                        c.doc_position, c.start, c.end, sn.score)


def evidence_items(ev: ClaimEvidence) -> tuple[EvidenceItem, ...]:
    """Every retrieved snippet as evidence, ranked round-robin by rank — every query's
    best snippet first (in query order), then every query's second, ... — so that a
    scorer reading only the first items still sees every question."""
    items = []
    depth = max((len(q.snippets) for q in ev.queries), default=0)
    for rank in range(depth):
        for qe in ev.queries:
            if rank < len(qe.snippets):
                items.append(_item(qe.query.question, qe.snippets[rank]))
    return tuple(items)


def placeholder_evidence(claim: Claim, ev: ClaimEvidence) -> tuple[EvidenceItem, str]:
    """The one pair a claim without any retrieved snippet still emits, and its flag.

    An empty ``evi`` cell is read as NaN by the official scorer, whose ``.split`` then
    stops the whole evaluation. The best candidate below the similarity threshold is
    used when stage 2 kept one (``evidence_placeholder:below_threshold``), else the
    first question (or the claim) with ``NO_ANSWER`` (``evidence_placeholder:no_answer``)."""
    below = ev.below_threshold
    if below is not None and below.snippets:
        return _item(below.query.question, below.snippets[0]), "evidence_placeholder:below_threshold"
    question = ev.queries[0].query.question if ev.queries else claim.text
    return EvidenceItem(collapse_whitespace(question), NO_ANSWER, ""), "evidence_placeholder:no_answer"


def official_evidence(
    claim: Claim, ev: ClaimEvidence, limit: int = MAX_EVIDENCE
) -> tuple[tuple[EvidenceItem, ...], tuple[EvidenceItem, ...], tuple[str, ...]]:
    """``(evidence, evidence_all, flags)`` of a prediction: the first ``limit`` ranked
    items (the official scorer reads 10), every ranked item, and — when nothing was
    retrieved — one placeholder pair with its flag (see ``placeholder_evidence``)."""
    ranked = evidence_items(ev)
    if ranked:
        return ranked[:limit], ranked, ()
    item, flag = placeholder_evidence(claim, ev)
    return (item,), (), (flag,)


# ------------------------------------------------------------------ for the model
def neutralize(text: str) -> str:
    """Page text as the model sees it: one line, fence characters removed, chat-template
    tokens defused (``<|im_start|>`` → ``(im_start)``), label-like phrases quoted
    (``Label: Supported`` → ``label (quoted) Supported``)."""
    text = _FENCES.sub(" ", text)
    text = _SPECIAL.sub(lambda m: "(" + re.sub(r"[^A-Za-z_ /]", "", m.group(0)).strip() + ")", text)
    text = _LABEL_LIKE.sub(lambda m: f"{m.group(1).lower()} (quoted)", text)
    return " ".join(text.split())


def redact(text: str) -> str:
    """The model's copy of a flagged snippet (``verdict.flagged = "redact"``): everything
    from the first chat-template token on is cut (a forged conversation), then every line in
    the prompt's or the answer's format (``Label:``, ``Question 2:``, ``Evidence 1.1 (…)``,
    ``Justification:``) and every sentence with an instruction-like phrase, then every
    occurrence of a sentence repeated to flood the window. What is left is the page."""
    if (m := _SPECIAL.search(text)) is not None:
        text = text[:m.start()]
    lines = []
    for line in text.splitlines():
        if any(rx.search(line) for rx in _LINES) or _FORMAT_LINES.search(line):
            continue
        lines.append(" ".join(x for x in _SENTENCE_END.split(line) if not any(rx.search(x) for rx in _PHRASES)))
    text = "\n".join(lines)
    counts: dict[str, int] = {}
    for sentence in _SENTENCE_END.split(text):
        if len(_WORD.findall(sentence)) >= FLOOD_NGRAM:
            counts[sentence.strip()] = counts.get(sentence.strip(), 0) + 1
    for sentence, n in counts.items():
        if n >= FLOOD_REPEATS:
            text = text.replace(sentence, " ")
    return text


def redact_url(url: str) -> str:
    """A flagged URL as the model sees it: up to its first whitespace (a URL has none), or
    only its host when that part still holds an instruction-like phrase."""
    first = next(iter(url.split()), "")
    return urlsplit(first).netloc if _matches(first) else first


def guarded(ev: ClaimEvidence, how: str) -> tuple[ClaimEvidence, frozenset[Key]]:
    """``(the evidence as stage 3 shows it to the model, the snippets it leaves out)``
    under ``verdict.flagged``: "redact" gives flagged snippets a ``redact``-ed text and URL
    (the copy's spans no longer match its text: it is never stored); "withhold" names them
    to be left out; "show" changes nothing."""
    flagged = withheld_keys(ev) if how != "show" else frozenset()
    if not flagged:
        return ev, frozenset()  # nothing flagged, or "show": the stored evidence itself
    if how == "withhold":
        return ev, flagged

    def shown(qi: int, si: int, sn: EvidenceSnippet) -> EvidenceSnippet:
        if (qi, si) not in flagged:
            return sn
        return dataclasses.replace(sn, chunk=dataclasses.replace(sn.chunk, text=redact(sn.chunk.text),
                                                                 url=redact_url(sn.chunk.url)))

    queries = tuple(dataclasses.replace(qe, snippets=tuple(shown(qi, si, sn) for si, sn in enumerate(qe.snippets)))
                    for qi, qe in enumerate(ev.queries))
    return dataclasses.replace(ev, queries=queries), frozenset()


def source_name(url: str) -> str:
    """A URL as the prompt shows it: neutralised, one line, at most ``MAX_URL_CHARS``."""
    shown = neutralize(url)
    return shown if len(shown) <= MAX_URL_CHARS else shown[: MAX_URL_CHARS - 1] + "\u2026"


def drop_order(ev: ClaimEvidence, withheld: frozenset[Key] = frozenset()) -> list[Key]:
    """Snippets from lowest to highest score (ties: the deeper rank goes first): the
    order in which the prompt fitter drops them (``withheld`` ones are never shown, so
    never dropped)."""
    keys = [((qi, si), sn.score) for qi, qe in enumerate(ev.queries) for si, sn in enumerate(qe.snippets)
            if (qi, si) not in withheld]
    return [k for k, _ in sorted(keys, key=lambda kv: (kv[1], -kv[0][1]))]


def format_evidence(ev: ClaimEvidence, dropped: frozenset[Key] = frozenset(),
                    withheld: frozenset[Key] = frozenset()) -> str:
    """The ``{evidence}`` block: each question, then its kept snippets numbered ``q.n``
    with their source and the fenced quotation; a chunk already quoted under an earlier
    number is referred to by that number; trimmed snippets are counted, not hidden;
    ``withheld`` ones (``withheld_keys``) are left out without a word, their number skipped
    so that every other snippet keeps the number citations and the report give it."""
    lines: list[str] = []
    seen: dict[str, str] = {}  # chunk id → the number it was first quoted under
    for qi, qe in enumerate(ev.queries):
        lines.append(f"Question {qi + 1}: {neutralize(qe.query.question)}")
        kept = [(si, sn) for si, sn in enumerate(qe.snippets) if (qi, si) not in dropped]
        shown = 0
        for n, (si, sn) in enumerate(kept, start=1):
            if (qi, si) in withheld:
                continue
            shown += 1
            number = f"{qi + 1}.{n}"
            first = seen.setdefault(sn.chunk.chunk_id, number)
            if first != number:
                lines.append(f"  Evidence {number}: the same passage as Evidence {first}")
            else:
                lines.append(f"  Evidence {number} (URL: {source_name(sn.chunk.url)}): "
                             f"{FENCE_OPEN}{neutralize(sn.chunk.text)}{FENCE_CLOSE}")
        trimmed = len(qe.snippets) - len(kept)
        if trimmed:
            lines.append(f"  ({trimmed} more snippet{'s' if trimmed > 1 else ''} trimmed to fit the context window)")
        elif not shown:
            lines.append("  (no evidence retrieved)")
    return "\n".join(lines) if lines else "(no questions and no evidence)"


def suspected_injection(ev: ClaimEvidence) -> list[str]:
    """``q.n`` numbers of snippets (and ``url:q.n`` of URLs) whose text holds
    instruction-like patterns aimed at the model (see ``_INJECTION_PATTERNS``) or one
    phrase repeated to flood the window (``_flooded``)."""
    hits = []
    for qi, qe in enumerate(ev.queries):
        for si, sn in enumerate(qe.snippets):
            if _matches(sn.chunk.text):
                hits.append(f"{qi + 1}.{si + 1}")
            if _suspicious_url(sn.chunk.url):
                hits.append(f"url:{qi + 1}.{si + 1}")
    return hits


def withheld_keys(ev: ClaimEvidence) -> frozenset[Key]:
    """The snippets ``suspected_injection`` flags, by text or by URL: what stage 3 keeps
    from the model with ``verdict.flagged = "withhold"``."""
    return frozenset((qi, si) for qi, qe in enumerate(ev.queries) for si, sn in enumerate(qe.snippets) if _flagged(sn))


def _flagged(sn: EvidenceSnippet) -> bool:
    return _matches(sn.chunk.text) or _suspicious_url(sn.chunk.url)


def _suspicious_url(url: str) -> bool:
    return _matches(url) or any(c in url for c in "\n\r")


def _matches(text: str) -> bool:
    return any(rx.search(text) for rx in _INJECTION_PATTERNS) or _flooded(text)


#: A name for each detection pattern, in ``_INJECTION_PATTERNS`` order (for reports).
PATTERN_NAMES = ("ignore-instructions", "role-play", "answer-as-label", "system-prompt",
                 "label-line", "verdict-label-line", "question-evidence-line", "chat-token")


def why_flagged(text: str) -> list[str]:
    """The names of the patterns ``text`` matches (``PATTERN_NAMES``, plus ``flooding``);
    empty for text the detector leaves alone."""
    names = [name for name, rx in zip(PATTERN_NAMES, _INJECTION_PATTERNS, strict=True) if rx.search(text)]
    return names + ["flooding"] if _flooded(text) else names


#: Flooding: a run of ``FLOOD_NGRAM`` words (at least 3 of them distinct) occurring
#: ``FLOOD_REPEATS`` times or more in one snippet — one sentence repeated to fill the window.
FLOOD_NGRAM, FLOOD_REPEATS = 6, 5
_WORD = re.compile(r"\w+")


def _flooded(text: str) -> bool:
    words = _WORD.findall(text.lower())
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - FLOOD_NGRAM + 1):
        gram = tuple(words[i:i + FLOOD_NGRAM])
        n = counts[gram] = counts.get(gram, 0) + 1
        if n >= FLOOD_REPEATS and len(set(gram)) >= 3:
            return True
    return False


def keys_of(pairs: Iterable[Iterable[int]]) -> frozenset[Key]:
    """Dropped keys as recorded in a prediction's ``meta.dropped`` (``[[q, s], ...]``)."""
    return frozenset((int(a), int(b)) for a, b in pairs)


def numbered_snippets(ev: ClaimEvidence, dropped: Collection[tuple[int, int]] = frozenset()) -> dict[str, EvidenceSnippet]:
    """``{"q.n": snippet}`` exactly as the verdict prompt numbered them: the ``(question,
    snippet)`` keys stage 3 ``dropped`` to fit its prompt (``Draft.dropped``, recorded as
    ``Prediction.meta["dropped"]``) are skipped."""
    dropped, out = frozenset(map(tuple, dropped)), {}
    for qi, qe in enumerate(ev.queries):
        kept = [sn for si, sn in enumerate(qe.snippets) if (qi, si) not in dropped]
        out.update({f"{qi + 1}.{n}": sn for n, sn in enumerate(kept, start=1)})
    return out
