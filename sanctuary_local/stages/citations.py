"""Evidence contract for stage 3 (GAVEL §4.2–4.3): the verdict lists the facts it rests on,
each bound to evidence ids and a short verbatim quote, and a deterministic checker — no
model call — validates every citation.

The verdict prompt numbers snippets "Evidence q.n" (question q, its n-th snippet kept in
the prompt, see ``verdict.format_evidence``). A citation line reads::

    - <sub-claim> [Evidence 1.2] "<quote>"        (or [Evidence 1.2, 2.1], [E1.2], [1.2])

A citation is valid when every id it names exists in the prompt, and its quote occurs in
one of them **verbatim up to whitespace and quote style**: runs of whitespace count as one
space and curly quotes/apostrophes as straight ones; letters, case and punctuation must
match, except the case of the quote's first letter (quoting "The tower grows" from "...
says the tower grows" is the usual capitalised quote, "[T]he" in legal style; the span
still points at the page's own "the"). A valid citation resolves to the URL and the exact
character span of the quote in its source document (``document.text[start:end]`` is the
quoted text as the page has it). A quote that is not in the cited snippet but is in
another one of the prompt is still a violation; the report names where it is
(``found_in``), so the re-ask can fix the id.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.records import ClaimEvidence, EvidenceSnippet

__all__ = ["Citation", "CitationCheck", "CitationOutcome", "CitationReport", "check_citations", "find_quote", "numbered_snippets",
           "parse_citations"]

_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*(?P<claim>.*?)\s*\[(?P<ids>(?:(?:Evidence|Ev\.?|E)\s*)?\d+\.\d+"
                   r"(?:\s*[,;]\s*(?:(?:Evidence|Ev\.?|E)\s*)?\d+\.\d+)*)\]\s*[:\-–]?\s*(?P<quote>[\"“”'‘’].*)$", re.I)
_ID = re.compile(r"(\d+)\.(\d+)")
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "‚": "'", "`": "'"})
#: Quotes shorter than this many characters (after normalising) prove nothing: invalid.
MIN_QUOTE_CHARS = 8


@dataclass(frozen=True, slots=True)
class Citation:
    """One citation line of a verdict: the sub-claim, the ids it names ("1.2"), the quote."""

    sub_claim: str
    ids: tuple[str, ...]
    quote: str
    line: int  # 1-based line in the verdict text


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """The checker's verdict on one citation: do its ids exist, is its quote in one of them,
    and where it is, the quote's span in the snippet (``snippet_start``/``snippet_end`` into
    ``chunk.text``) and in the source document (``start``/``end`` into ``document.text``:
    ``chunk.start`` + the span in the snippet, so ``document.text[start:end]`` is the quoted
    text exactly as the page has it)."""

    citation: Citation
    ids_ok: bool
    quote_found: bool = False
    problem: str = ""
    evidence_id: str = ""
    url: str = ""
    doc_position: int = -1
    snippet_start: int = -1
    snippet_end: int = -1
    start: int = -1
    end: int = -1
    found_in: tuple[str, ...] = ()
    """When the quote is not in the cited snippets: the other snippets of the prompt that hold it."""

    @property
    def ok(self) -> bool:
        """Valid: every id exists and the quote is in one of the cited snippets."""
        return self.ids_ok and self.quote_found

    def to_dict(self) -> dict[str, Any]:
        c = self.citation
        return {"sub_claim": c.sub_claim, "ids": list(c.ids), "quote": c.quote, "ok": self.ok, "ids_ok": self.ids_ok,
                "quote_found": self.quote_found, "problem": self.problem, "evidence_id": self.evidence_id,
                "url": self.url, "doc_position": self.doc_position, "snippet_start": self.snippet_start,
                "snippet_end": self.snippet_end, "start": self.start, "end": self.end, "found_in": list(self.found_in)}


@dataclass(frozen=True, slots=True)
class CitationReport:
    """All citations of one verdict, checked."""

    checks: tuple[CitationCheck, ...] = field(default_factory=tuple)

    @property
    def n_valid(self) -> int:
        return sum(c.ok for c in self.checks)

    @property
    def violations(self) -> tuple[CitationCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    @property
    def clean(self) -> bool:
        """At least one citation and none failing: nothing to re-ask."""
        return bool(self.checks) and not self.violations

    @property
    def validity(self) -> float | None:
        """Share of valid citations (None: the verdict cited nothing)."""
        return self.n_valid / len(self.checks) if self.checks else None

    def feedback(self) -> str:
        """What the re-ask tells the model (one line per failed citation)."""
        if not self.checks:
            return "- the answer has no Citations block: no line of the form - <fact> [Evidence q.n] \"<quote>\""
        return "\n".join(f"- line {c.citation.line} [{', '.join('Evidence ' + i for i in c.citation.ids)}] "
                         f"\"{c.citation.quote}\": {c.problem}" for c in self.violations)


@dataclass(frozen=True, slots=True)
class CitationOutcome:
    """The citation check of one verdict before and after its one re-ask.

    ``after`` checks the text the prediction keeps: the re-ask's answer when it replaced
    the first (``replaced``), else the first again. ``reask`` checks the re-ask's own
    answer whether kept or not (None: not re-asked, or the re-ask failed)."""

    before: CitationReport
    after: CitationReport
    reasked: bool
    reask: CitationReport | None = None
    replaced: bool = False
    first_text: str = ""
    """The first answer's raw text when the re-ask replaced it (else "")."""
    reask_text: str = ""
    """The re-ask's raw text when it was answered but not kept (else "")."""

    def flags(self) -> tuple[str, ...]:
        out = ("citations_reasked",) if self.reasked else ()
        if not self.after.checks:
            return (*out, "citations_missing")
        return (*out, f"citation_violations:{len(self.after.violations)}") if self.after.violations else out

    def to_dict(self) -> dict[str, Any]:
        out = {"before": _rate(self.before), "after": _rate(self.after), "reasked": self.reasked,
               "reask": _rate(self.reask) if self.reask is not None else None, "replaced": self.replaced,
               "items": [c.to_dict() for c in self.after.checks]}
        if self.replaced:
            out["first_raw_text"] = self.first_text
        elif self.reask is not None:
            out["reask_raw_text"] = self.reask_text
        return out


def _rate(r: CitationReport) -> dict[str, Any]:
    """One check's counts: citations, valid ones, their share, and whether the verdict is
    clean (at least one citation, none failing)."""
    return {"n": len(r.checks), "valid": r.n_valid, "validity": r.validity, "clean": r.clean}


def parse_citations(text: str) -> list[Citation]:
    """Every citation line of a verdict; lines that do not match the format are ignored."""
    out = []
    for n, line in enumerate((text or "").splitlines(), start=1):
        m = _LINE.match(line)
        if m is None:
            continue
        quote = _strip_quote(m.group("quote"))
        ids = tuple(f"{a}.{b}" for a, b in _ID.findall(m.group("ids")))
        out.append(Citation(m.group("claim").strip(" -:"), ids, quote, n))
    return out


def _strip_quote(raw: str) -> str:
    q = raw.strip().translate(_QUOTES)
    mark = q[:1]
    end = q.rfind(mark, 1)
    return q[1:end] if end > 0 else q[1:]


def _normalise(text: str) -> tuple[str, list[int]]:
    """``text`` with whitespace runs as one space and straight quotes, and for each output
    character the index of the input character it came from."""
    out: list[str] = []
    where: list[int] = []
    space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space and out:
                out.append(" ")
                where.append(i)
            space = True
            continue
        out.append(ch.translate(_QUOTES))
        where.append(i)
        space = False
    return "".join(out), where


def find_quote(quote: str, text: str) -> tuple[int, int] | None:
    """``(start, end)`` in ``text`` of ``quote`` matched verbatim up to whitespace, quote
    style and the case of its first letter, or None. ``text[start:end]`` is the matched
    text as ``text`` has it (first occurrence; an exact-case match wins)."""
    q, _ = _normalise(quote.strip().strip(".…").strip())
    q = q.strip()
    if len(q) < MIN_QUOTE_CHARS:
        return None
    norm, where = _normalise(text)
    for variant in (q, *_first_letter_recased(q)):
        at = norm.find(variant)
        if at >= 0:
            return where[at], where[at + len(q) - 1] + 1
    return None


def _first_letter_recased(q: str) -> tuple[str, ...]:
    """``q`` with its first letter in the other case, when that is one character."""
    other = q[0].swapcase()
    return (other + q[1:],) if len(other) == 1 and other != q[0] else ()


def numbered_snippets(ev: ClaimEvidence, dropped: Collection[tuple[int, int]] = frozenset()) -> dict[str, EvidenceSnippet]:
    """``{"q.n": snippet}`` exactly as the verdict prompt numbered them: the ``(question,
    snippet)`` keys stage 3 ``dropped`` to fit its prompt (``Draft.dropped``, recorded as
    ``Prediction.meta["dropped"]``) are skipped."""
    dropped, out = frozenset(map(tuple, dropped)), {}
    for qi, qe in enumerate(ev.queries):
        kept = [sn for si, sn in enumerate(qe.snippets) if (qi, si) not in dropped]
        out.update({f"{qi + 1}.{n}": sn for n, sn in enumerate(kept, start=1)})
    return out


def _check_one(c: Citation, snippets: dict[str, EvidenceSnippet]) -> CitationCheck:
    missing = [i for i in c.ids if i not in snippets]
    if missing:
        return CitationCheck(c, False, problem=f"no Evidence {', '.join(missing)} in the prompt")
    if len(_normalise(c.quote)[0].strip()) < MIN_QUOTE_CHARS:
        return CitationCheck(c, True, problem=f"the quote is shorter than {MIN_QUOTE_CHARS} characters")
    for i in c.ids:
        chunk = snippets[i].chunk
        span = find_quote(c.quote, chunk.text)
        if span is not None:
            return CitationCheck(c, True, True, "", i, chunk.url, chunk.doc_position, span[0], span[1],
                                 chunk.start + span[0], chunk.start + span[1])
    elsewhere = tuple(k for k, sn in snippets.items() if k not in c.ids and find_quote(c.quote, sn.chunk.text))
    where = f" (it is in Evidence {', '.join(elsewhere)})" if elsewhere else ""
    return CitationCheck(c, True, problem=f"the quote is not in the cited evidence word for word{where}", found_in=elsewhere)


def check_citations(text: str, snippets: dict[str, EvidenceSnippet]) -> CitationReport:
    """Check every citation of a verdict text against the prompt's numbered snippets."""
    return CitationReport(tuple(_check_one(c, snippets) for c in parse_citations(text)))


def annotate(justification: str, report: CitationReport) -> str:
    """The justification with each valid citation line followed by its source: URL and span
    (lines are matched by their parsed quote and ids, not by position)."""
    valid = {(c.citation.quote, c.citation.ids): c for c in report.checks if c.ok}
    out = []
    for line in justification.splitlines():
        parsed = parse_citations(line)
        hit = valid.get((parsed[0].quote, parsed[0].ids)) if parsed else None
        out.append(f"{line} (source: {hit.url}, characters {hit.start}-{hit.end})" if hit else line)
    return "\n".join(out)
