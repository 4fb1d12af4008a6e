"""Follow-up questions for evidence gaps (issue 15, mode 2; Papelo, ClaimCLAIRE's gap filling).

Stage 2 leaves some questions without a snippet above the similarity threshold
(``no_snippets:qN``): the store holds nothing that close to the hypothetical answer, or
the question was asked in words the pages do not use. With ``followup.enabled`` a claim
with at least ``followup.min_gaps`` such questions gets one more round:

1. the stage-1 model (``hyde.llm``) writes up to ``followup.max_questions`` new
   question–answer pairs (the stage-1 JSON format) from the claim, what the answered
   questions found (their best snippet, cut to ``found_chars``) and the questions that
   found nothing (``build_followup_request``, prompt ``followup.txt``);
2. stage 2 runs the new questions on the claim's cached BM25 index (``indexes/``) —
   only their own segments are chunked and embedded;
3. the new questions and their snippets are appended to the claim's evidence
   (``merge_evidence``), numbered after the first ones, so the verdict prompt, the
   official evidence and the citations see one list. A new snippet that overlaps one the
   claim already has (same page, more than half of the shorter span) is dropped.

The records are the stages' own: the questions are a ``HydeResult`` (no label) in
``stage2b_followup_questions.jsonl`` and the merged evidence a ``ClaimEvidence`` in
``stage2c_followup_evidence.jsonl``; a claim without gaps gets an empty question record
and its evidence unchanged. Parsing never raises; a claim whose follow-up output is
unusable keeps its first evidence, flagged ``followup_unusable``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sanctuary_local.config.settings import FollowupConfig
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend
from sanctuary_local.prompts import load_prompt, prompt_hash, render
from sanctuary_local.records import Claim, ClaimEvidence, Generation, HydeResult, Query, QueryEvidence
from sanctuary_local.stages.hyde import claim_fields, is_placeholder
from sanctuary_local.stages.parsing import parse_hyde_output

__all__ = ["build_followup_request", "followup_prompt_hash", "gap_queries", "merge_evidence", "needs_followup",
           "no_followup", "parse_followup", "run_followup"]


def followup_prompt_hash(prompt: str = "followup.txt") -> str:
    return prompt_hash(prompt)


def gap_queries(ev: ClaimEvidence) -> list[Query]:
    """The claim's questions that kept no snippet."""
    return [qe.query for qe in ev.queries if not qe.snippets]


def needs_followup(ev: ClaimEvidence, cfg: FollowupConfig) -> bool:
    """At least ``min_gaps`` questions found nothing, and the claim had documents to search."""
    if any(f == "no_documents" or f.startswith(("store_missing", "retrieval_error")) for f in ev.flags):
        return False
    return len(gap_queries(ev)) >= cfg.min_gaps


def _found_block(ev: ClaimEvidence, chars: int) -> str:
    lines = []
    for qe in ev.queries:
        if qe.snippets:
            best = " ".join(qe.snippets[0].chunk.text.split())
            cut = best if len(best) <= chars else best[:chars].rsplit(" ", 1)[0] + " …"
            lines.append(f"- {qe.query.question}\n  Found: {cut}" if chars else f"- {qe.query.question}")
    return "\n".join(lines) if lines else "(none)"


def build_followup_request(claim: Claim, ev: ClaimEvidence, cfg: FollowupConfig) -> ChatRequest:
    """The follow-up chat request of one claim (call only when ``needs_followup``)."""
    gaps = "\n".join(f"- {q.question}" for q in gap_queries(ev)) or "(none)"
    text = render(load_prompt(cfg.prompt), **claim_fields(claim), found=_found_block(ev, cfg.found_chars),
                  gaps=gaps, n=str(cfg.max_questions))
    return ChatRequest(messages=(ChatMessage("user", text),), sampling=cfg.sampling, tag=f"followup:{claim.index}")


def _key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip("?. ")


def parse_followup(text: str, claim: Claim, ev: ClaimEvidence, cfg: FollowupConfig,
                   finish_reason: str = "") -> tuple[tuple[Query, ...], tuple[str, ...]]:
    """New queries (numbered after the claim's) and flags from a follow-up output; never
    raises. Questions already asked (up to case and spacing) and template slots are dropped
    (a slot whose first answer is a question gives that question: ``_promote_slot_questions``)."""
    try:
        parsed = parse_hyde_output(text, truncated=finish_reason == "length")
    except Exception as exc:  # noqa: BLE001 - a parser bug must not kill a wave
        return (), (f"followup_parse_error: {exc}"[:200], "followup_unusable")
    flags = [f.replace("hyde_", "followup_", 1) for f in parsed.flags if f != "hyde_no_label"]
    seen = {_key(qe.query.question) for qe in ev.queries}
    queries: list[Query] = []
    for question, answers in _promote_slot_questions(parsed.pairs):
        question = " ".join(question.split())
        k = _key(question)
        if not k or is_placeholder(question) or k in seen:
            continue
        seen.add(k)
        real = tuple(a for a in answers if not is_placeholder(a))
        queries.append(Query(claim.index, len(ev.queries) + len(queries), question, real))
        if len(queries) == cfg.max_questions:
            break
    if not queries:
        flags.append("followup_unusable")
    return tuple(queries), tuple(dict.fromkeys(flags))


def _promote_slot_questions(pairs: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """Small models copy the output format's slot as the key (``"Question-1": ["Why did
    …?"]``) and write the question as its first answer: such a question is taken, the
    text after its question mark (if any) as its answer."""
    out = []
    for question, answers in pairs:
        if is_placeholder(question) and answers and "?" in answers[0]:
            head, _, rest = answers[0].partition("?")
            question, answers = head.strip() + "?", ((rest.strip(),) if rest.strip() else ()) + tuple(answers[1:])
        out.append((question, answers))
    return out


def no_followup(claim_index: int) -> HydeResult:
    """The question record of a claim that needed no follow-up (no gaps)."""
    return HydeResult(claim_index, None, ())


def _result(claim: Claim, ev: ClaimEvidence, res: ChatResult, cfg: FollowupConfig) -> HydeResult:
    gen = Generation(res.prompt_tokens, res.completion_tokens, res.seconds, res.finish_reason, res.cached_tokens)
    if not res.ok:
        return HydeResult(claim.index, None, (), "", (f"followup_llm_error: {res.error}"[:300], "followup_unusable"), gen)
    queries, flags = parse_followup(res.text, claim, ev, cfg, res.finish_reason)
    return HydeResult(claim.index, None, queries, res.text, flags, gen)


def run_followup(items: Sequence[tuple[Claim, ClaimEvidence]], backend: LLMBackend,
                 cfg: FollowupConfig) -> list[HydeResult]:
    """Follow-up questions for a wave of claims that ``needs_followup``: one ``generate`` call."""
    if not items:
        return []
    results = backend.generate([build_followup_request(c, ev, cfg) for c, ev in items])
    if len(results) != len(items):
        raise RuntimeError(f"backend {backend.name} returned {len(results)} results for {len(items)} requests")
    return [_result(c, ev, r, cfg) for (c, ev), r in zip(items, results, strict=True)]


def _overlaps(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Same document and the spans share more than half of the shorter one."""
    if a[0] != b[0]:
        return False
    shared = min(a[2], b[2]) - max(a[1], b[1])
    return shared > 0.5 * max(1, min(a[2] - a[1], b[2] - b[1]))


def merge_evidence(first: ClaimEvidence, extra: ClaimEvidence | None, questions: HydeResult) -> ClaimEvidence:
    """``first`` with the follow-up round appended: new queries after the old ones, their
    snippets minus those overlapping a snippet the claim already has, flags and timings
    (``followup_``-prefixed) added. ``extra`` None: the round did not run (no questions)."""
    flags = [*first.flags, *questions.flags]
    if questions.queries:
        flags.append(f"followup_questions:{len(questions.queries)}")
    if extra is None:
        return dataclasses.replace(first, flags=tuple(dict.fromkeys(flags)))
    have = [(sn.chunk.doc_position, sn.chunk.start, sn.chunk.end) for qe in first.queries for sn in qe.snippets]
    added: list[QueryEvidence] = []
    n_dropped = 0
    for qe in extra.queries:
        kept = []
        for sn in qe.snippets:
            span = (sn.chunk.doc_position, sn.chunk.start, sn.chunk.end)
            if any(_overlaps(span, h) for h in have):
                n_dropped += 1
                continue
            kept.append(sn)
            have.append(span)
        added.append(QueryEvidence(qe.query, tuple(kept)))
    found = sum(bool(qe.snippets) for qe in added)
    flags += [f for f in extra.flags if f.startswith(("no_hits:", "no_snippets:"))]
    flags += [f"followup_{f}" for f in extra.flags if f.startswith("retrieval_error")]
    flags.append(f"followup_found:{found}")
    if n_dropped:
        flags.append(f"followup_duplicates_dropped:{n_dropped}")
    timings = {**first.timings, **{f"followup_{k}": v for k, v in extra.timings.items()}}
    below = first.below_threshold
    if not any(qe.snippets for qe in first.queries) and found:
        below = None  # the placeholder is for claims with no snippet at all
    return ClaimEvidence(first.claim_index, (*first.queries, *added), tuple(dict.fromkeys(flags)), timings, below)
