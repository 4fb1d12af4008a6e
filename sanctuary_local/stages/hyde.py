"""Stage 1 (paper §4.1, Appendix A): provisional label + hypothetical Q-A pairs (HyDE).

One prompt per claim, all claims of a wave in one ``backend.generate`` call. Parsing
never raises (``parsing.parse_hyde_output``); a claim whose output is unusable gets a
single query made from the claim text, flagged ``hyde_claim_fallback``, so stage 2
always has something to retrieve with.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from sanctuary_local.config.settings import HydeConfig
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend
from sanctuary_local.prompts import fixed_head, load_prompt, load_schema, prompt_hash, render
from sanctuary_local.records import Claim, Generation, HydeResult, Query
from sanctuary_local.stages.parsing import parse_hyde_output

log = logging.getLogger(__name__)
SCHEMA_FILE = "hyde_schema.json"
_UNKNOWN = "Unknown"
#: Template placeholders a weak model copies from the prompt's output format
#: ("Question-1": ["Answer-1"]): they carry no content and would be useless queries.
_PLACEHOLDER = re.compile(r"^\W*(?:(?:question|answer)[\s_-]*\d*)?\W*$", re.I)


def is_placeholder(text: str) -> bool:
    """True for empty strings and copied template slots such as 'Question-1' or '<Answer-2>'."""
    return bool(_PLACEHOLDER.match(text.strip()))


def _drop_placeholders(pairs: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[list[tuple[str, tuple[str, ...]]], bool]:
    kept, dropped = [], False
    for q, answers in pairs:
        real = tuple(a for a in answers if not is_placeholder(a))
        dropped |= len(real) != len(answers)
        if is_placeholder(q):
            dropped = True
            continue
        kept.append((q, real))
    return kept, dropped


def hyde_prompt_hash(prompt: str = "hyde.txt") -> str:
    """Hash of the stage-1 template and its output schema (recorded in predictions)."""
    return prompt_hash(prompt, SCHEMA_FILE)


def claim_fields(claim: Claim) -> dict[str, str]:
    """The claim and its metadata m as the prompts show them (missing → 'Unknown')."""
    return {
        "claim": claim.text.strip(),
        "date": claim.date or _UNKNOWN,
        "speaker": claim.speaker or _UNKNOWN,
        "location": claim.location or _UNKNOWN,
        "reporting_source": claim.reporting_source or _UNKNOWN,
    }


def build_hyde_request(claim: Claim, cfg: HydeConfig) -> ChatRequest:
    """The stage-1 chat request; the JSON schema is attached when ``llm.structured_output``."""
    template = load_prompt(cfg.prompt)
    return ChatRequest(
        messages=(ChatMessage("user", render(template, **claim_fields(claim))),),
        sampling=cfg.sampling,
        json_schema=load_schema(SCHEMA_FILE) if cfg.llm.structured_output else None,
        tag=f"hyde:{claim.index}",
        cache_prefix=fixed_head(template),
    )


def _dedupe(pairs: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """Merge questions that differ only in case/spacing, keeping first position and all answers."""
    merged: dict[str, tuple[str, list[str]]] = {}
    for question, answers in pairs:
        key = " ".join(question.lower().split()).rstrip("?. ")
        if not key:
            continue
        q, ans = merged.setdefault(key, (" ".join(question.split()), []))
        ans.extend(a for a in answers if a not in ans)
    return [(q, tuple(a)) for q, a in merged.values()]


def _claim_fallback(claim: Claim, flags: Sequence[str], raw: str = "", gen: Generation | None = None) -> HydeResult:
    query = Query(claim_index=claim.index, number=0, question=claim.text.strip(), answers=())
    return HydeResult(
        claim_index=claim.index,
        provisional_label=None,
        queries=(query,),
        raw_text=raw,
        flags=tuple(dict.fromkeys((*flags, "hyde_claim_fallback"))),
        generation=gen or Generation(),
    )


def parse_hyde(text: str, claim: Claim, cfg: HydeConfig, finish_reason: str = "") -> HydeResult:
    """A ``HydeResult`` from a stage-1 output, whatever the model wrote (never raises).

    Questions are deduplicated and clamped to ``cfg.max_questions``; ``Query.number`` is
    the position. Fewer than ``cfg.min_questions`` adds flag ``hyde_few_questions``."""
    try:
        parsed = parse_hyde_output(text, truncated=finish_reason == "length")
        pairs, dropped = _drop_placeholders(_dedupe(parsed.pairs))
    except Exception as exc:  # noqa: BLE001 - belt and braces: a parser bug must not kill a batch
        log.error("claim %s: stage-1 parser failed: %s", claim.index, exc)
        return _claim_fallback(claim, ("hyde_no_label", f"hyde_parse_error: {exc}"), text)
    extra = ("hyde_placeholders_dropped",) if dropped else ()
    if not pairs:
        return _claim_fallback(claim, (*parsed.flags, *extra), text)
    flags = [*parsed.flags, *extra]
    if len(pairs) > cfg.max_questions:
        flags.append("hyde_clamped")
        pairs = pairs[: cfg.max_questions]
    elif len(pairs) < cfg.min_questions:
        flags.append("hyde_few_questions")
    queries = tuple(Query(claim.index, i, q, a) for i, (q, a) in enumerate(pairs))
    return HydeResult(claim.index, parsed.label, queries, raw_text=text, flags=tuple(flags))


def _result(claim: Claim, res: ChatResult, cfg: HydeConfig) -> HydeResult:
    gen = Generation(res.prompt_tokens, res.completion_tokens, res.seconds, res.finish_reason, res.cached_tokens)
    if not res.ok:
        return _claim_fallback(claim, ("hyde_no_label", f"hyde_llm_error: {res.error}"), gen=gen)
    out = parse_hyde(res.text, claim, cfg, res.finish_reason)
    return HydeResult(out.claim_index, out.provisional_label, out.queries, out.raw_text, out.flags, gen)


def run_hyde(claims: Sequence[Claim], backend: LLMBackend, cfg: HydeConfig) -> list[HydeResult]:
    """Stage 1 for a wave of claims: one ``generate`` call, results in claim order."""
    if not claims:
        return []
    results = backend.generate([build_hyde_request(c, cfg) for c in claims])
    if len(results) != len(claims):
        raise RuntimeError(f"backend {backend.name} returned {len(results)} results for {len(claims)} requests")
    return [_result(c, r, cfg) for c, r in zip(claims, results, strict=True)]
