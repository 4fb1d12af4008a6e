"""The citation mode (``verdict.citations``; GAVEL §4.2–4.3): the verdict lists the facts it rests on,
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

Stage 3 takes the mode's two steps (``modes.MODES``): ``check_and_reask`` before the label is
read (a verdict with a failing citation, or none, is asked once more with the checker's report,
``verdict_cite_fix.txt``; the new answer replaces the first only if it names a label and cites
better) and ``annotate_citations`` after it (what still fails is flagged,
``citation_violations:N``, ``citations_missing``; ``meta.citations`` holds the validity before
and after the re-ask and every citation's URL and span).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt, render
from sanctuary_local.records import EvidenceSnippet, Prediction
from sanctuary_local.stages.evidence_view import numbered_snippets
from sanctuary_local.stages.verdict.draft import Context, Draft
from sanctuary_local.stages.verdict.parsing import parse_verdict_output

__all__ = ["Citation", "CitationCheck", "CitationOutcome", "CitationReport", "annotate_citations", "check_and_reask",
           "check_citations", "citation_rates", "find_quote", "parse_citations"]

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


# Stage 3's steps of the mode: check, re-ask once, annotate (``modes.MODES``)

#: Flags of the first answer that a replacing re-ask's answer makes untrue: its label
#: re-ask (the label is now the new answer's) and its truncation (re-derived from the new one).
_FIRST_ANSWER_FLAGS = frozenset({"verdict_label_reasked", "verdict_truncated"})


def _cite_fix_request(req: ChatRequest, res: ChatResult, report: CitationReport, reask_prompt: str,
                      sampling: Any) -> ChatRequest:
    """The one re-ask: the same conversation, the first answer, then the checker's report."""
    fix = render(load_prompt(reask_prompt), report=report.feedback())
    return ChatRequest(messages=(*req.messages, ChatMessage("assistant", res.text), ChatMessage("user", fix)),
                       sampling=sampling, tag=f"{req.tag}:citations")


def _better(new: CitationReport, old: CitationReport) -> bool:
    """More valid citations, or as many and fewer failing ones."""
    return (new.n_valid, -len(new.violations)) > (old.n_valid, -len(old.violations))


def _shown_snippets(d: Draft) -> dict[str, EvidenceSnippet]:
    """The numbered snippets the verdict prompt showed: neither trimmed nor withheld."""
    hidden = {d.evidence.queries[qi].snippets[si].chunk.chunk_id for qi, si in d.withheld}
    return {k: sn for k, sn in numbered_snippets(d.evidence, dropped=d.dropped).items() if sn.chunk.chunk_id not in hidden}


def check_and_reask(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: check every answered verdict's citations; ask once more, with the checker's
    report, those with a failing citation or none (one ``generate`` call for the wave)."""
    cfg = ctx.cfg
    snippets = [_shown_snippets(d) for d in drafts]
    before = [check_citations(d.result.text, sn) if d.request is not None and d.result is not None and d.result.ok else None
              for d, sn in zip(drafts, snippets, strict=True)]
    todo = [i for i, b in enumerate(before) if b is not None and not b.clean]
    asks = [_cite_fix_request(drafts[i].request, drafts[i].result, before[i], cfg.citations_reask, cfg.sampling) for i in todo]
    answers = ctx.backend.generate(asks) if todo else []
    results = [d.result for d in drafts]
    reask, reask_text = dict.fromkeys(todo), {}
    for i, ans in zip(todo, answers, strict=True):
        if not ans.ok:
            continue
        new = reask[i] = check_citations(ans.text, snippets[i])
        reask_text[i] = ans.text
        if "verdict_label_fallback" in parse_verdict_output(ans.text, None)[2] or not _better(new, before[i]):
            continue
        r = drafts[i].result
        kept = {k: v for k, v in r.extra.items() if not k.startswith("label_reask")}  # the label is the new answer's
        results[i] = dataclasses.replace(ans, completion_tokens=r.completion_tokens + ans.completion_tokens,
                                         seconds=r.seconds + ans.seconds, extra={**kept, "citations_replaced": True})
    out = []
    for i, (d, r, b) in enumerate(zip(drafts, results, before, strict=True)):
        if b is None:
            out.append(d)
            continue
        replaced = bool(r.extra.get("citations_replaced"))
        cited = CitationOutcome(b, reask[i] if replaced else b, i in reask, reask.get(i), replaced,
                                d.result.text if replaced else "", "" if replaced else reask_text.get(i, ""))
        extra_s = r.seconds - d.result.seconds
        flags = d.flags
        if replaced:  # the flags of the first answer's generation describe a text no longer kept
            flags = (*(f for f in flags if f not in _FIRST_ANSWER_FLAGS),
                     *(("verdict_truncated",) if r.finish_reason == "length" else ()))
        out.append(dataclasses.replace(d, result=r, cited=cited, seconds=d.seconds + extra_s, flags=flags))
    return out


def annotate_citations(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step (after the label is read): citation flags, the checked citations in
    ``meta.citations`` and the justification annotated with them."""
    out = []
    for d in drafts:
        if d.cited is None:
            out.append(d)
            continue
        out.append(dataclasses.replace(d, justification=annotate(d.justification, d.cited.after),
                                       flags=(*d.flags, *d.cited.flags()), meta={**d.meta, "citations": d.cited.to_dict()}))
    return out


def citation_rates(preds: Sequence[Prediction]) -> dict[str, float | None]:
    """For the quality harness, over the predictions with a citation check: the share of
    valid citations among all cited facts before and after the re-ask, the share of clean
    verdicts (at least one citation, none failing) before and after, the share re-asked
    and the share left with at least one valid citation. None where nothing applies."""
    cs = [p.meta["citations"] for p in preds if isinstance(p.meta.get("citations"), dict)]

    def share(key: str) -> float | None:
        n = sum(c[key]["n"] for c in cs)
        return round(sum(c[key]["valid"] for c in cs) / n, 3) if n else None

    def verdicts(test: Any) -> float | None:
        return round(sum(bool(test(c)) for c in cs) / len(cs), 3) if cs else None

    return {"validity_before": share("before"), "validity_after": share("after"),
            "clean_before": verdicts(lambda c: c["before"].get("clean")),
            "clean_after": verdicts(lambda c: c["after"].get("clean")),
            "reasked": verdicts(lambda c: c["reasked"]),
            "verdicts_with_valid_citation": verdicts(lambda c: c["after"]["valid"] > 0)}
