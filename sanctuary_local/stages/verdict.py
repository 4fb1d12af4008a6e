"""Stage 3 (paper §4.4, Appendix B): chain-of-thought verdict over the retrieved evidence.

The prompt (instructions, four worked examples, claim + metadata, every query with its
snippets and URLs) is fitted to the model's context: when it is too long the
lowest-scored snippets are dropped first — never the instructions, the claim or a
question — and what was dropped is recorded. The label is parsed tolerantly
(``parsing.parse_verdict_output``); the justification J is the reasoning text.

A small model often reasons until ``max_tokens`` and never writes its label line. Such a
claim is asked once more, in the same conversation (its reasoning as the assistant turn),
for the label alone (prompt ``verdict_label.txt``, ``verdict.label_reask``): a dozen
tokens, and the KV cache of the conversation is reused. It is flagged
``verdict_label_reasked``; only if that also fails does the stage-1 label stand in.

With ``verdict.citations`` on (prompt ``verdict_cited.txt``) the verdict also lists the
facts it rests on with ``[Evidence q.n] "quote"``; ``stages/citations.py`` checks them
without a model, a verdict with a failing citation (or none) is asked once more with the
checker's report (``verdict_cite_fix.txt``), and what still fails is flagged
(``citation_violations:N``, ``citations_missing``). ``meta.citations`` holds the validity
before and after the re-ask and every citation's URL and character span.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sanctuary_local.config import VerdictConfig
from sanctuary_local.io.predictions import MAX_EVIDENCE, NO_ANSWER, collapse_whitespace
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend
from sanctuary_local.prompts import load_prompt, prompt_hash, render
from sanctuary_local.records import Claim, ClaimEvidence, EvidenceItem, EvidenceSnippet, HydeResult, Prediction
from sanctuary_local.stages.citations import CitationReport, annotate, check_citations, numbered_snippets
from sanctuary_local.stages.hyde import claim_fields, hyde_prompt_hash
from sanctuary_local.stages.parsing import parse_verdict_output

log = logging.getLogger(__name__)
Key = tuple[int, int]  # (query position, snippet rank)


def verdict_prompt_hash(prompt: str = "verdict.txt", label_reask: str = "verdict_label.txt", *more: str) -> str:
    """Hash of the stage-3 templates, verdict and label re-ask (recorded in predictions)."""
    return prompt_hash(*(n for n in (prompt, label_reask, *more) if n))


def config_prompt_hash(cfg: VerdictConfig) -> str:
    """Hash of the templates ``cfg`` uses: the defaults give ``verdict_prompt_hash()``; with
    ``citations`` on, the cited prompt and the citation re-ask (no label re-ask: ``""``)."""
    if cfg.citations:
        return verdict_prompt_hash(cfg.citations_prompt, cfg.label_reask, cfg.citations_reask)
    return verdict_prompt_hash(cfg.prompt, cfg.label_reask)


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


def format_evidence(ev: ClaimEvidence, dropped: frozenset[Key] = frozenset()) -> str:
    """The ``{Queries and Evidence}`` block: each question, then its snippets with URLs."""
    lines = []
    for qi, qe in enumerate(ev.queries):
        lines.append(f"Question {qi + 1}: {qe.query.question}")
        kept = [(si, sn) for si, sn in enumerate(qe.snippets) if (qi, si) not in dropped]
        for n, (_, sn) in enumerate(kept, start=1):
            # Whitespace is collapsed for the prompt only; the evidence items stay verbatim.
            lines.append(f"  Evidence {qi + 1}.{n} (URL: {sn.chunk.url}): {' '.join(sn.chunk.text.split())}")
        if not kept:
            lines.append("  (no evidence retrieved)")
    return "\n".join(lines) if lines else "(no questions and no evidence)"


def _messages(claim: Claim, ev: ClaimEvidence, cfg: VerdictConfig, dropped: frozenset[Key],
              parts: Parts | None = None) -> tuple[ChatMessage, ...]:
    if parts is not None:  # decompose.enabled and more than one part: the parts prompt
        from sanctuary_local.stages.decompose import format_components

        text = render(load_prompt(parts.prompt), **claim_fields(claim), evidence=format_evidence(ev, dropped),
                      components=format_components(parts.components))
        return (ChatMessage("user", text),)
    prompt = cfg.citations_prompt if cfg.citations else cfg.prompt
    text = render(load_prompt(prompt), **claim_fields(claim), evidence=format_evidence(ev, dropped))
    return (ChatMessage("user", text),)


@dataclass(frozen=True, slots=True)
class Parts:
    """A decomposed claim's parts for stage 3 (``decompose.enabled``) and the prompt that lists them."""

    components: tuple[str, ...]
    prompt: str = "verdict_components.txt"
    reask_prompt: str = "verdict_parts_label.txt"
    """Asked once when the verdict does not label every part."""


def _drop_order(ev: ClaimEvidence) -> list[Key]:
    """Snippets from lowest to highest score (ties: the deeper rank goes first)."""
    keys = [((qi, si), sn.score) for qi, qe in enumerate(ev.queries) for si, sn in enumerate(qe.snippets)]
    return [k for k, _ in sorted(keys, key=lambda kv: (kv[1], -kv[0][1]))]


def build_verdict_request(
    claim: Claim, hyde: HydeResult, ev: ClaimEvidence, cfg: VerdictConfig, backend: LLMBackend,
    parts: Parts | None = None,
) -> tuple[ChatRequest, list[str]]:
    """The stage-3 request fitted to ``llm.max_model_len - sampling.max_tokens`` tokens
    (counted with ``backend.count_tokens``), and notes on what was trimmed.

    Drops the k lowest-scored snippets for the smallest k that fits (binary search:
    prompt length is monotone in k). ``hyde`` is accepted for prompt variants that show
    the provisional label; the paper's Appendix B prompt does not."""
    budget = cfg.llm.max_model_len - cfg.sampling.max_tokens
    order = _drop_order(ev)
    notes: list[str] = []
    msgs = _messages(claim, ev, cfg, frozenset(), parts)
    if backend.count_tokens(msgs) > budget and order:
        lo, hi = 1, len(order)  # invariant: dropping hi snippets is the best we can do
        while lo < hi:
            mid = (lo + hi) // 2
            if backend.count_tokens(_messages(claim, ev, cfg, frozenset(order[:mid]), parts)) <= budget:
                hi = mid
            else:
                lo = mid + 1
        dropped = frozenset(order[:hi])
        msgs = _messages(claim, ev, cfg, dropped, parts)
        worst = max(ev.queries[qi].snippets[si].score for qi, si in dropped)
        notes.append(f"dropped {hi} of {len(order)} snippets (scores <= {worst:.4f}) to fit {budget} prompt tokens")
        notes.extend(
            f"dropped q{qi + 1}#{si + 1} {ev.queries[qi].snippets[si].chunk.chunk_id} score={ev.queries[qi].snippets[si].score:.4f}"
            for qi, si in order[:hi]
        )
    n = backend.count_tokens(msgs)
    if n > budget:
        notes.append(f"prompt is {n} tokens, over the {budget}-token budget even without evidence")
    req = ChatRequest(messages=msgs, sampling=cfg.sampling, json_schema=None, tag=f"verdict:{claim.index}")
    return req, notes


def parse_verdict(text: str, fallback_label: str | None) -> tuple[str, str, tuple[str, ...]]:
    """``(label, justification, flags)``; see ``parsing.parse_verdict_output``."""
    return parse_verdict_output(text, fallback_label)


def _prediction(
    claim: Claim, hyde: HydeResult, ev: ClaimEvidence, res: ChatResult, notes: list[str], backend: LLMBackend,
    cited: CitationOutcome | None = None, prompts_hash: str = "", parts: Parts | None = None,
) -> Prediction:
    if res.ok:
        label, justification, vflags = parse_verdict(res.text, hyde.provisional_label)
    else:
        label, justification, _ = parse_verdict("", hyde.provisional_label)
        vflags = ("verdict_label_fallback", f"verdict_llm_error: {res.error}")
    components = None
    if parts is not None:
        label, components, pflags = _and_of_parts(res.text if res.ok else "", parts, label,
                                                  str(res.extra.get("parts_reask_text", "")))
        vflags = (*vflags, *pflags)
    if notes:
        vflags = (*vflags, "verdict_trimmed")
    if res.finish_reason == "length":
        vflags = (*vflags, "verdict_truncated")
    if res.extra.get("label_reasked"):
        vflags = (*vflags, "verdict_label_reasked")
    if cited is not None:
        vflags = (*vflags, *cited.flags())
        justification = annotate(justification, cited.after)
    evidence, evidence_all, eflags = official_evidence(claim, ev)
    meta = {
        "hyde_prompt_hash": hyde_prompt_hash(),
        "verdict_prompt_hash": prompts_hash or verdict_prompt_hash(),
        "backend": backend.name,
        "model": backend.model_id,
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "cached_tokens": res.cached_tokens,
        "seconds": res.seconds,
        "finish_reason": res.finish_reason,
        "hyde_generation": hyde.generation.to_dict(),
        "trimmed": notes,
        "raw_text": res.text,
    }
    if cited is not None:
        meta["citations"] = cited.to_dict()
    if components is not None:
        meta["components"] = components
    return Prediction(
        claim_index=claim.index,
        claim_id=claim.claim_id,
        claim=claim.text,
        label=label,
        evidence=evidence,
        justification=justification,
        provisional_label=hyde.provisional_label,
        flags=tuple(dict.fromkeys((*hyde.flags, *ev.flags, *eflags, *vflags))),
        timings={"verdict_s": res.seconds},
        meta=meta,
        evidence_all=evidence_all,
    )


def _and_of_parts(text: str, parts: Parts, model_label: str, reask_text: str = "") -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """The claim's label from its parts' labels (deterministic AND) when the verdict, or its
    one re-ask (``reask_text``), labels every part, else the model's own label; the
    per-part record and flags."""
    from sanctuary_local.stages.decompose import and_label, parse_component_labels

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


def run_verdict(
    claims: Sequence[Claim],
    hyde: Sequence[HydeResult],
    evidence: Sequence[ClaimEvidence],
    backend: LLMBackend,
    cfg: VerdictConfig,
    parts: Sequence[Parts | None] | None = None,
) -> list[Prediction]:
    """Stage 3 for a wave of claims: one ``generate`` call; predictions in claim order.
    ``parts`` (``decompose.enabled``): per claim its parts, or None to verify it whole."""
    if not (len(claims) == len(hyde) == len(evidence)):
        raise ValueError(f"run_verdict: {len(claims)} claims, {len(hyde)} hyde results, {len(evidence)} evidence records")
    for c, h, e in zip(claims, hyde, evidence, strict=True):
        if not (c.index == h.claim_index == e.claim_index):
            raise ValueError(f"run_verdict: records out of order at claim {c.index} (hyde {h.claim_index}, evidence {e.claim_index})")
    parts = list(parts) if parts is not None else [None] * len(claims)
    requests: list[ChatRequest | None] = []
    notes: list[list[str]] = []
    for c, h, e, pt in zip(claims, hyde, evidence, parts, strict=True):
        try:
            req, n = build_verdict_request(c, h, e, cfg, backend, pt)
        except Exception as exc:  # noqa: BLE001 - e.g. a token-count call failed: skip this claim only
            log.error("claim %s: cannot build the verdict prompt: %s", c.index, exc)
            req, n = None, [f"prompt build failed: {type(exc).__name__}: {exc}"]
        requests.append(req)
        notes.append(n)
    ready = [r for r in requests if r is not None]
    generated = backend.generate(ready) if ready else []
    if len(generated) != len(ready):
        raise RuntimeError(f"backend {backend.name} returned {len(generated)} results for {len(ready)} requests")
    outs = iter(generated)
    results = [next(outs) if r is not None else ChatResult("", finish_reason="error", error=n[0]) for r, n in zip(requests, notes)]
    if cfg.label_reask:
        results = reask_missing_labels(requests, results, backend, cfg)
    if any(pt is not None for pt in parts):
        results = reask_missing_part_labels(requests, results, parts, backend, cfg)
    cited: list[CitationOutcome | None] = [None] * len(results)
    if cfg.citations:
        results, cited = reask_bad_citations(requests, results, evidence, notes, backend, cfg)
    sha = config_prompt_hash(cfg)
    return [_prediction(c, h, e, r, n, backend, x, sha, pt)
            for c, h, e, r, n, x, pt in zip(claims, hyde, evidence, results, notes, cited, parts, strict=True)]


#: Generation cap of the label re-ask: the longest label is under ten tokens.
LABEL_REASK_TOKENS = 12


def _lacks_label(res: ChatResult) -> bool:
    return res.ok and "verdict_label_fallback" in parse_verdict_output(res.text, None)[2]


def reask_missing_labels(
    requests: Sequence[ChatRequest | None], results: list[ChatResult], backend: LLMBackend, cfg: VerdictConfig
) -> list[ChatResult]:
    """Ask once more, for the label only, every answered request whose text has no label.

    The follow-up continues the conversation (the reasoning as the assistant turn, then
    ``cfg.label_reask`` as the user turn); its answer is appended to the reasoning as a
    ``Label:`` line, so the usual parser reads it and the justification stays the
    reasoning. A failed follow-up leaves the result unchanged (the fallback then applies)."""
    todo = [i for i, (q, r) in enumerate(zip(requests, results)) if q is not None and _lacks_label(r)]
    if not todo:
        return results
    ask = ChatMessage("user", load_prompt(cfg.label_reask).strip())
    follow = [
        ChatRequest(messages=(*requests[i].messages, ChatMessage("assistant", results[i].text), ask),
                    sampling=dataclasses.replace(cfg.sampling, max_tokens=LABEL_REASK_TOKENS),
                    tag=f"{requests[i].tag}:label")
        for i in todo
    ]
    answers = backend.generate(follow)
    out = list(results)
    for i, ans in zip(todo, answers, strict=True):
        if not ans.ok or not ans.text.strip():
            continue
        first = ans.text.strip().splitlines()[0]
        line = first if first.lower().lstrip("*# ").startswith(("label", "verdict", "final")) else f"Label: {first}"
        r = results[i]
        out[i] = dataclasses.replace(
            r, text=f"{r.text.rstrip()}\n{line}", completion_tokens=r.completion_tokens + ans.completion_tokens,
            seconds=r.seconds + ans.seconds, extra={**r.extra, "label_reasked": True, "label_reask_text": ans.text},
        )
    return out


def reask_missing_part_labels(
    requests: Sequence[ChatRequest | None], results: list[ChatResult], parts: Sequence[Parts | None],
    backend: LLMBackend, cfg: VerdictConfig,
) -> list[ChatResult]:
    """Ask once more, for the parts' labels only, every answered verdict of a decomposed
    claim that does not label every part (e.g. cut off by ``max_tokens``). The answer is
    kept in ``extra["parts_reask_text"]``; ``_and_of_parts`` fills the missing labels from it."""
    from sanctuary_local.stages.decompose import parse_component_labels

    todo = [i for i, (q, r, pt) in enumerate(zip(requests, results, parts)) if q is not None and pt is not None and r.ok
            and None in parse_component_labels(r.text, len(pt.components))]
    if not todo:
        return results
    follow = []
    for i in todo:
        pt = parts[i]
        assert pt is not None
        lines = "\n".join(f"Part {k}: <label of: {c}>" for k, c in enumerate(pt.components, start=1))
        ask = ChatMessage("user", render(load_prompt(pt.reask_prompt), parts=lines))
        follow.append(ChatRequest(messages=(*requests[i].messages, ChatMessage("assistant", results[i].text), ask),
                                  sampling=dataclasses.replace(cfg.sampling, max_tokens=24 * len(pt.components) + 16),
                                  tag=f"{requests[i].tag}:parts"))
    out = list(results)
    for i, ans in zip(todo, backend.generate(follow), strict=True):
        if ans.ok and ans.text.strip():
            r = out[i]
            out[i] = dataclasses.replace(r, completion_tokens=r.completion_tokens + ans.completion_tokens,
                                         seconds=r.seconds + ans.seconds, extra={**r.extra, "parts_reask_text": ans.text})
    return out


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


def _cite_fix_request(req: ChatRequest, res: ChatResult, report: CitationReport, cfg: VerdictConfig) -> ChatRequest:
    """The one re-ask: the same conversation, the first answer, then the checker's report."""
    fix = render(load_prompt(cfg.citations_reask), report=report.feedback())
    return ChatRequest(messages=(*req.messages, ChatMessage("assistant", res.text), ChatMessage("user", fix)),
                       sampling=cfg.sampling, tag=f"{req.tag}:citations")


def _better(new: CitationReport, old: CitationReport) -> bool:
    """More valid citations, or as many and fewer failing ones."""
    return (new.n_valid, -len(new.violations)) > (old.n_valid, -len(old.violations))


def reask_bad_citations(
    requests: Sequence[ChatRequest | None], results: list[ChatResult], evidence: Sequence[ClaimEvidence],
    notes: Sequence[list[str]], backend: LLMBackend, cfg: VerdictConfig,
) -> tuple[list[ChatResult], list[CitationOutcome | None]]:
    """Check every answered verdict's citations; ask once more, with the checker's report,
    those with a failing citation or none (one ``generate`` call for the wave); the new
    answer replaces the first only if it names a label and is ``_better``."""
    snippets = [numbered_snippets(e, n) for e, n in zip(evidence, notes, strict=True)]
    before = [check_citations(r.text, sn) if r.ok else None for r, sn in zip(results, snippets, strict=True)]
    todo = [i for i, (q, b) in enumerate(zip(requests, before)) if q is not None and b is not None and not b.clean]
    answers = backend.generate([_cite_fix_request(requests[i], results[i], before[i], cfg) for i in todo]) if todo else []
    out, reask, reask_text = list(results), dict.fromkeys(todo), {}
    for i, ans in zip(todo, answers, strict=True):
        if not ans.ok:
            continue
        new = reask[i] = check_citations(ans.text, snippets[i])
        reask_text[i] = ans.text
        if "verdict_label_fallback" in parse_verdict_output(ans.text, None)[2] or not _better(new, before[i]):
            continue
        r = results[i]
        kept = {k: v for k, v in r.extra.items() if not k.startswith("label_reask")}  # the label is the new answer's
        out[i] = dataclasses.replace(ans, completion_tokens=r.completion_tokens + ans.completion_tokens,
                                     seconds=r.seconds + ans.seconds, extra={**kept, "citations_replaced": True})
    outcomes: list[CitationOutcome | None] = []
    for i, (r, b) in enumerate(zip(out, before, strict=True)):
        replaced = bool(r.extra.get("citations_replaced"))
        outcomes.append(None if b is None else CitationOutcome(
            b, reask[i] if replaced else b, i in reask, reask.get(i), replaced, results[i].text if replaced else "",
            "" if replaced else reask_text.get(i, "")))
    return out, outcomes


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
