"""What a person is shown of one claim, in the report and in ``serve``'s page alike: its
snippets numbered as the verdict prompt named them (``claim_snippets``), each inside its source
page's text (``snippet_in_context``), and the justification with its "Evidence q.n" mentions
linked to them (``linkify_citations``). Everything shown is HTML-escaped; a span or score that
is not a number (a hand-edited or hostile stage file) is read as None.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from sanctuary_local.records import ClaimEvidence, Prediction

#: Characters of the source page shown on each side of a snippet.
CONTEXT_CHARS = 400
#: An "Evidence q.n" a justification cites; not the label "Not Enough Evidence" followed by its
#: probability, as the trained verdict's justification lists it ("Not Enough Evidence 0.16").
_CITE = re.compile(r"(?<!Not Enough )\b(Evidence (\d+)\.(\d+))\b")


@dataclass(frozen=True, slots=True)
class ReportSnippet:
    """One snippet as the report shows it; ``label`` is how the verdict prompt named it."""

    label: str
    anchor: str
    question: str
    url: str
    doc_position: int | None
    start: int | None
    end: int | None
    text: str
    score: float | None


def _int(value: Any) -> int | None:
    """An int field of a run file as it is, or None when it is anything else."""
    return value if type(value) is int else None


def _float(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) and value == value else None


def _snippet(label: str, anchor: str, question: Any, url: Any, doc_position: Any, start: Any, end: Any,
             text: Any, score: Any) -> ReportSnippet:
    """A snippet with its fields checked: text as str, numbers as numbers or None."""
    return ReportSnippet(label, anchor, str(question), str(url), _int(doc_position), _int(start), _int(end),
                         str(text), _float(score))


def claim_snippets(pred: Prediction, ev: ClaimEvidence | None) -> list[ReportSnippet]:
    """The snippets of one claim, numbered as in the verdict prompt when stage 2 is known
    and so is what stage 3 dropped from its prompt (``meta.dropped``; a prediction with
    trim notes but no ``meta.dropped`` was made before it existed), else the prediction's
    evidence list (``evidence_all`` when present) numbered E1…"""
    dropped = _dropped(pred.meta)
    if ev is None or dropped is None:
        items = pred.evidence_all or pred.evidence
        return [_snippet(f"E{i}", f"e{i}", it.question, it.url, it.doc_position, it.start, it.end,
                         it.scraped_text, it.score) for i, it in enumerate(items, start=1)]
    from sanctuary_local.stages.evidence_view import numbered_snippets

    out = []
    for key, sn in numbered_snippets(ev, dropped).items():
        c, qi = sn.chunk, int(key.split(".")[0]) - 1
        out.append(_snippet(f"Evidence {key}", f"e-{key.replace('.', '-')}", ev.queries[qi].query.question, c.url,
                            c.doc_position, c.start, c.end, c.text, sn.score))
    return out


def _dropped(meta: dict[str, Any]) -> frozenset[tuple[int, int]] | None:
    """The ``(question, snippet)`` keys stage 3 dropped from its prompt, as recorded; None
    when they are unknown (trimmed, but recorded before ``meta.dropped``, or malformed)."""
    keys = meta.get("dropped")
    if keys is None:
        return None if meta.get("trimmed") else frozenset()
    try:
        return frozenset((int(q), int(n)) for q, n in keys)
    except (TypeError, ValueError):
        return None


def snippet_in_context(snip: ReportSnippet, doc_text: str | None) -> str:
    """The snippet in its page: escaped text around a ``<mark>`` holding exactly doc_text[start:end].
    ``doc_text`` None: no page to show; a page that does not hold the snippet at its span
    (a different store than the run's) gets a note and the snippet alone."""
    alone = f"<mark>{html.escape(snip.text)}</mark>"
    if doc_text is None:
        return alone
    if snip.start is None or snip.end is None or snip.doc_position is None:
        return f'<span class="note span-note">the run file gives no valid span for this snippet: the snippet alone</span>\n{alone}'
    if not (0 <= snip.start <= snip.end <= len(doc_text)) or doc_text[snip.start:snip.end] != snip.text:
        return (f'<span class="note span-note">document {snip.doc_position} of this store does not hold the snippet '
                f"at characters {snip.start}–{snip.end} (not the store the run used?): the snippet alone</span>\n{alone}")
    lo, hi = max(0, snip.start - CONTEXT_CHARS), min(len(doc_text), snip.end + CONTEXT_CHARS)
    before = ("…" if lo > 0 else "") + html.escape(doc_text[lo:snip.start])
    after = html.escape(doc_text[snip.end:hi]) + ("…" if hi < len(doc_text) else "")
    return f"{before}<mark>{html.escape(doc_text[snip.start:snip.end])}</mark>{after}"


def linkify_citations(justification: str, anchors: dict[str, str]) -> str:
    """Escape the justification; each "Evidence q.n" it names becomes a link to that snippet,
    or, when the prompt had no such snippet (the model made it up), is marked as such."""
    def link(m: re.Match[str]) -> str:
        anchor = anchors.get(m.group(1))
        if anchor is None:
            return f'<span class="cite-missing" title="the verdict prompt had no such snippet">{m.group(1)}</span>'
        return f'<a class="cite" href="#{anchor}">{m.group(1)}</a>'

    return _CITE.sub(link, html.escape(justification))
