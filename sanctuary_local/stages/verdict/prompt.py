"""Stage 3, step 1: the verdict prompt of every claim, fitted to the model's context.

The prompt (instructions, claim + metadata, every question with its fenced snippets;
``evidence_view.format_evidence``) must leave room for the answer: ``max_model_len`` less
the tokens the reasoning may take (``answer_tokens``). When it is too long the lowest-scored
snippets are dropped first — never the instructions, the claim or a question — and the
dropped snippets are carried as data (``Draft.dropped``) and shown as trimmed. Each request
names the template's text before its first placeholder (``ChatRequest.cache_prefix``), which
llama.cpp keeps evaluated in memory and on disk (``llm.prefix_cache``).

Before that, ``guard_flagged`` (the first step of every mode) applies ``verdict.flagged``
to the snippets ``evidence_view`` flags as instruction-like (issue 27): their redacted copy
(``Draft.shown``), or their keys to leave out (``Draft.withheld``). Every prompt of stage 3
is built from that view, never from the stored evidence directly.

Claim text and metadata are untrusted too: they are neutralised like page text.
"""

from __future__ import annotations

import dataclasses
import logging

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.llm.base import ChatMessage, ChatRequest, LLMBackend
from sanctuary_local.prompts import fixed_head, load_prompt, render
from sanctuary_local.records import Claim, ClaimEvidence
from sanctuary_local.stages.evidence_view import drop_order, format_evidence, guarded, neutralize
from sanctuary_local.stages.hyde import claim_fields
from sanctuary_local.stages.verdict.draft import Context, Draft, Key, Parts
from sanctuary_local.stages.verdict.parts import format_components

log = logging.getLogger(__name__)

def shown_fields(claim: Claim) -> dict[str, str]:
    """The claim and its metadata as the verdict prompt shows them (neutralised, one line)."""
    return {k: neutralize(v) for k, v in claim_fields(claim).items()}


def template_of(cfg: VerdictConfig, parts: Parts | None) -> str:
    if parts is not None:
        return parts.prompt
    return cfg.citations_prompt if cfg.citations else cfg.prompt


def answer_tokens(cfg: VerdictConfig) -> int:
    """Tokens the prompt must leave free: the reasoning's ``max_tokens``."""
    return cfg.sampling.max_tokens


def messages(claim: Claim, ev: ClaimEvidence, template: str, dropped: frozenset[Key],
             parts: Parts | None = None, withheld: frozenset[Key] = frozenset()) -> tuple[ChatMessage, ...]:
    fields = shown_fields(claim)
    if parts is not None:
        fields["components"] = format_components(parts.components)
    return (ChatMessage("user", render(load_prompt(template), **fields, evidence=format_evidence(ev, dropped, withheld))),)


def fit_prompt(claim: Claim, ev: ClaimEvidence, template: str, budget: int, backend: LLMBackend,
               parts: Parts | None = None, withheld: frozenset[Key] = frozenset(),
               ) -> tuple[tuple[ChatMessage, ...], frozenset[Key], list[str]]:
    """The messages within ``budget`` tokens, the dropped snippets and notes on them.

    Drops the k lowest-scored snippets for the smallest k that fits (binary search:
    prompt length is monotone in k); ``withheld`` snippets are never shown."""
    order = drop_order(ev, withheld)
    notes: list[str] = []
    msgs, dropped = messages(claim, ev, template, frozenset(), parts, withheld), frozenset[Key]()
    if backend.count_tokens(msgs) > budget and order:
        lo, hi = 1, len(order)  # invariant: dropping hi snippets is the best we can do
        while lo < hi:
            mid = (lo + hi) // 2
            if backend.count_tokens(messages(claim, ev, template, frozenset(order[:mid]), parts, withheld)) <= budget:
                hi = mid
            else:
                lo = mid + 1
        dropped = frozenset(order[:hi])
        msgs = messages(claim, ev, template, dropped, parts, withheld)
        worst = max(ev.queries[qi].snippets[si].score for qi, si in dropped)
        notes.append(f"dropped {hi} of {len(order)} snippets (scores <= {worst:.4f}) to fit {budget} prompt tokens")
        notes.extend(
            f"dropped q{qi + 1}#{si + 1} {ev.queries[qi].snippets[si].chunk.chunk_id} score={ev.queries[qi].snippets[si].score:.4f}"
            for qi, si in order[:hi]
        )
    n = backend.count_tokens(msgs)
    if n > budget:
        notes.append(f"prompt is {n} tokens, over the {budget}-token budget even without evidence")
    return msgs, dropped, notes


def guard_flagged(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: what the model may read of each claim's evidence under ``verdict.flagged``
    (``evidence_view.guarded``): ``Draft.shown`` and ``Draft.withheld``."""
    out = []
    for d in drafts:
        shown, withheld = guarded(d.evidence, ctx.cfg.flagged)
        out.append(dataclasses.replace(d, shown=None if shown is d.evidence else shown, withheld=withheld))
    return out


def build_prompts(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: every claim's verdict request (``Draft.request``); a claim whose prompt
    cannot be built (e.g. a token-count call failed) keeps ``request = None`` and a note."""
    cfg, out = ctx.cfg, []
    budget = cfg.llm.max_model_len - answer_tokens(cfg)
    for d in drafts:
        try:
            msgs, dropped, notes = fit_prompt(d.claim, d.view, template_of(cfg, d.parts), budget, ctx.backend,
                                              d.parts, d.withheld)
        except Exception as exc:  # noqa: BLE001 - skip this claim only
            log.error("claim %s: cannot build the verdict prompt: %s", d.claim.index, exc)
            out.append(dataclasses.replace(d, notes=(f"prompt build failed: {type(exc).__name__}: {exc}",)))
            continue
        req = ChatRequest(messages=msgs, sampling=cfg.sampling, json_schema=None, tag=f"verdict:{d.claim.index}",
                          cache_prefix=fixed_head(load_prompt(template_of(cfg, d.parts))))
        flags = ("verdict_trimmed",) if notes else ()
        out.append(dataclasses.replace(d, request=req, dropped=dropped, notes=tuple(notes), flags=(*d.flags, *flags)))
    return out


def build_verdict_request(claim: Claim, hyde: object, ev: ClaimEvidence, cfg: VerdictConfig, backend: LLMBackend,
                          parts: Parts | None = None) -> tuple[ChatRequest, list[str]]:
    """One claim's request and trim notes (the step above for a single claim)."""
    from sanctuary_local.records import HydeResult

    h = hyde if isinstance(hyde, HydeResult) else HydeResult(claim.index, None, ())
    ctx = Context(backend, cfg)
    (d,) = build_prompts(guard_flagged([Draft(claim, h, ev, parts)], ctx), ctx)
    if d.request is None:
        raise RuntimeError(d.notes[0] if d.notes else "the verdict prompt could not be built")
    return d.request, list(d.notes)
