"""Stage 3 step of the citation mode (``verdict.citations``; GAVEL, issue 15).

The verdict lists the facts it rests on with ``[Evidence q.n] "quote"``;
``stages/citations.py`` checks them without a model. A verdict with a failing citation
(or none) is asked once more with the checker's report (``verdict_cite_fix.txt``); the
new answer replaces the first only if it names a label and cites better. What still
fails is flagged (``citation_violations:N``, ``citations_missing``); ``meta.citations``
holds the validity before and after the re-ask and every citation's URL and span.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt, render
from sanctuary_local.records import EvidenceSnippet, Prediction
from sanctuary_local.stages.citations import CitationOutcome, CitationReport, annotate, check_citations, numbered_snippets
from sanctuary_local.stages.verdict.draft import Context, Draft
from sanctuary_local.stages.verdict.parsing import parse_verdict_output


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
