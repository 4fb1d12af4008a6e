"""The report's HTML: a claim's page (verdict, justification with its citations linked,
every snippet highlighted inside its source page's text) and the index of all claims.

Everything shown is HTML-escaped; a span or score that is not a number (a hand-edited or
hostile stage file) is shown as "?". Pages carry their CSS inline and load nothing.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from functools import lru_cache
from importlib import resources
from string import Template

from sanctuary_local.claim_view import ReportSnippet, linkify_citations, snippet_in_context
from sanctuary_local.records import Prediction

__all__ = ["page_name", "render_claim", "render_index"]

#: Source URLs that become links: plain http(s) only. A store is scraped web text, so a
#: ``javascript:`` or ``data:`` URL (escaping does not defuse those) stays text.
_LINKABLE = re.compile(r"https?://[^\s\x00-\x1f\x7f]+", re.IGNORECASE)


@lru_cache(maxsize=None)
def _template(name: str) -> Template:
    return Template(resources.files("sanctuary_local.templates").joinpath(name).read_text("utf-8"))


def _source(url: str) -> str:
    """The snippet's URL: a link when it is plain http(s), else escaped text."""
    if _LINKABLE.fullmatch(url):
        return f'<a href="{html.escape(url, quote=True)}" rel="noreferrer noopener" dir="auto">{html.escape(url)}</a>'
    return f'<span class="url" dir="auto">{html.escape(url)}</span>'


def _is_degrading(flag: str) -> bool:
    from sanctuary_local.flag_help import DEGRADING

    return flag.split(":")[0].startswith(DEGRADING)


def _flags_html(flags: tuple[str, ...]) -> str:
    """Degrading flags (errors, fallbacks) in full in a box of their own, the others as chips."""
    bad, other = [f for f in flags if _is_degrading(f)], [f for f in flags if not _is_degrading(f)]
    chips = "".join(f'<li class="flag">{html.escape(f)}</li>' for f in other)
    out = f'<ul class="flags" id="flags">{chips}</ul>' if other else ""
    if bad:
        items = "\n".join(f'<li class="degrading">{html.escape(f)}</li>' for f in bad)
        out = _template("report_problems.html").substitute(items=items) + out
    return out or '<p class="meta">no flags</p>'


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _evidence_block(s: ReportSnippet, doc_text: str | None) -> str:
    return _template("report_evidence.html").substitute(
        anchor=s.anchor, label=html.escape(s.label), question=html.escape(s.question), source=_source(s.url),
        doc_position=_num(s.doc_position), start=_num(s.start), end=_num(s.end),
        score="?" if s.score is None else f"{s.score:.3f}", context=snippet_in_context(s, doc_text))


#: The claim page's link back to the run's index page (left out of a page that stands alone).
ALL_CLAIMS_LINK = '<a href="index.html">All claims</a> ·'


def render_claim(pred: Prediction, snippets: list[ReportSnippet], docs: dict[int, str] | None,
                 no_docs_reason: str = "the knowledge store could not be read", alone: bool = False) -> str:
    """One claim's page; ``docs`` maps document position → text (None: no store, for
    ``no_docs_reason``, which the page states). ``alone``: a page with no index page beside
    it (``check --report``), so without the link to one."""
    blocks = [_evidence_block(s, None if docs is None else docs.get(s.doc_position, "")) for s in snippets]
    note = "" if docs is not None else _template("report_store_note.html").substitute(reason=html.escape(no_docs_reason))
    return _template("report_claim.html").substitute(
        css=_template("report.css").template, all_claims="" if alone else ALL_CLAIMS_LINK,
        claim_index=pred.claim_index, claim_id=html.escape(str(pred.claim_id)),
        claim=html.escape(pred.claim),
        verdict=html.escape(pred.label), verdict_class=re.sub(r"[^A-Za-z]", "", pred.label), uncertain=_uncertain_html(pred),
        provisional=html.escape(pred.provisional_label or "none"), flags=_flags_html(tuple(map(str, pred.flags))),
        justification=_parts_html(pred) + linkify_citations(pred.justification or "(no justification)", {s.label: s.anchor for s in snippets}),
        n_evidence=len(snippets), store_note=note, evidence="\n".join(blocks) or '<p class="meta">no evidence</p>')


def _uncertain_html(pred: Prediction, element_id: str = "uncertain") -> str:
    """The mark of a claim its verdict model is not sure of, with its two likeliest labels."""
    from sanctuary_local.verdict_model.confidence import uncertain_note

    note = uncertain_note(pred.label, pred.meta)
    where = f' id="{element_id}"' if element_id else ""
    return f'<span class="uncertain"{where}>{html.escape(note)}</span>' if note else ""


def _parts_html(pred: Prediction) -> str:
    """The parts of a decomposed claim (``decompose.enabled``) with their labels and how the
    claim's label follows from them; "" for a claim verified whole."""
    comp = pred.meta.get("components") if isinstance(pred.meta, dict) else None
    if not isinstance(comp, dict) or not isinstance(comp.get("parts"), list):
        return ""
    items = []
    for part in comp["parts"]:
        if not isinstance(part, dict):
            continue
        lbl = part.get("label") if isinstance(part.get("label"), str) else None
        badge = (f'<span class="verdict v-{re.sub(r"[^A-Za-z]", "", lbl)}">{html.escape(lbl)}</span>' if lbl
                 else '<span class="meta">no label</span>')
        items.append(f"<li><bdi>{html.escape(str(part.get('text', '')))}</bdi> {badge}</li>")
    how = ("the claim's label is the AND of its parts' labels" if comp.get("and_label")
           else "not every part got a label: the model's own label stands")
    return f'<p class="meta">Parts of the claim ({html.escape(how)}):</p><ol class="parts">{"".join(items)}</ol>'


def _index_row(p: Prediction) -> str:
    from sanctuary_local.flag_help import degraded_reasons

    reasons = degraded_reasons([str(f) for f in p.flags])
    degraded = f'<br><span class="degraded">degraded: {html.escape(", ".join(reasons))}</span>' if reasons else ""
    row_class = ' class="degraded"' if reasons else ""
    unsure = _uncertain_html(p, "")
    return (f"<tr{row_class}><td>{p.claim_index}</td>"
            f'<td><a href="{page_name(p)}" dir="auto">{html.escape(p.claim)}</a></td>'
            f'<td><span class="verdict v-{re.sub(r"[^A-Za-z]", "", p.label)}">{html.escape(p.label)}</span>'
            f"{'<br>' + unsure if unsure else ''}</td>"
            f"<td>{len(p.flags)}{degraded}</td></tr>")



def render_index(run_name: str, preds: list[Prediction], info: str = "") -> str:
    """The index: every claim with its verdict, flag count (degraded ones named) and a link;
    ``info`` is a line about the run (see ``run_info``)."""
    from sanctuary_local.flag_help import degraded_reasons

    counts = Counter(p.label for p in preds)
    return _template("report_index.html").substitute(
        css=_template("report.css").template, run_name=html.escape(run_name), n_claims=len(preds),
        label_counts=html.escape(", ".join(f"{n} {lab}" for lab, n in sorted(counts.items()))) or "no claims",
        n_degraded=sum(bool(degraded_reasons([str(f) for f in p.flags])) for p in preds),
        rows="\n".join(map(_index_row, preds)), run_info=html.escape(info))


def page_name(pred: Prediction) -> str:
    return f"claim_{pred.claim_index}.html"


