"""Stage 3 steps that generate text and read a label from it (the paper's path, §4.4).

- ``generate``: the reasoning for every prompt, one backend call per wave;
- ``reask_label``: a reasoning with no ``Label:`` line (ran into ``max_tokens``, or never
  wrote one) is asked once more, in the same conversation, for the label alone
  (``verdict.label_reask``); the conversation is cut to fit the context first;
- ``text_label``: the label from the text (``parsing.parse_verdict_output``), the parts'
  AND where every part is labelled (``parts.and_of_parts``), the stage-1 label only when
  nothing parses.

A decomposed claim whose verdict does not label every part is asked once more for the parts'
labels by the decomposition mode's own step (``modes/decompose.reask_parts``).
"""

from __future__ import annotations

import dataclasses

from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt
from sanctuary_local.stages.verdict.draft import Context, Draft
from sanctuary_local.stages.verdict.parsing import parse_verdict_output
from sanctuary_local.stages.verdict.parts import and_of_parts

#: Generation cap of the label re-ask: the longest label is under ten tokens.
LABEL_REASK_TOKENS = 12


def generate(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: one ``generate`` call for every built prompt; a claim without a prompt gets
    an error result naming why."""
    ready = [d.request for d in drafts if d.request is not None]
    generated = ctx.backend.generate(ready) if ready else []
    if len(generated) != len(ready):
        raise RuntimeError(f"backend {ctx.backend.name} returned {len(generated)} results for {len(ready)} requests")
    outs = iter(generated)
    out = []
    for d in drafts:
        res = next(outs) if d.request is not None else ChatResult(
            "", finish_reason="error", error=d.notes[0] if d.notes else "no verdict prompt")
        flags = ("verdict_truncated",) if res.finish_reason == "length" else ()
        out.append(dataclasses.replace(d, result=res, seconds=d.seconds + res.seconds, flags=(*d.flags, *flags)))
    return out


def _lacks_label_line(res: ChatResult | None) -> bool:
    """An answered reasoning without a ``Label:`` line (an inferred label counts as none)."""
    if res is None or not res.ok:
        return False
    flags = parse_verdict_output(res.text, None)[2]
    return "verdict_label_fallback" in flags or "verdict_label_inferred" in flags


def fit_conversation(ctx: Context, head: tuple[ChatMessage, ...], reasoning: str, ask: ChatMessage,
                     answer_tokens: int) -> tuple[ChatMessage, ...]:
    """``head`` + the reasoning as the assistant turn + ``ask``, within
    ``max_model_len - answer_tokens``: the reasoning's start is cut first (its end holds
    the conclusion), down to nothing (issue 26 defect 5: the re-ask could overflow)."""
    budget = ctx.cfg.llm.max_model_len - answer_tokens

    def conv(keep: int) -> tuple[ChatMessage, ...]:
        text = reasoning if keep >= len(reasoning) else "\u2026" + reasoning[len(reasoning) - keep:]
        return (*head, ChatMessage("assistant", text), ask)

    if ctx.backend.count_tokens(conv(len(reasoning))) <= budget:
        return conv(len(reasoning))
    lo, hi = 0, len(reasoning)  # the most characters kept that still fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ctx.backend.count_tokens(conv(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return conv(lo)


def reask_label(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: ask once more, for the label only, every answered request whose text has no
    label line. The answer is appended to the reasoning as a ``Label:`` line, so the text
    step reads it and the justification stays the reasoning. A failed follow-up leaves
    the draft unchanged (the fallback then applies)."""
    todo = [i for i, d in enumerate(drafts) if d.request is not None and _lacks_label_line(d.result)]
    if not todo:
        return drafts
    ask = ChatMessage("user", load_prompt(ctx.cfg.label_reask).strip())
    sampling = dataclasses.replace(ctx.cfg.sampling, max_tokens=LABEL_REASK_TOKENS)
    follow = [ChatRequest(fit_conversation(ctx, drafts[i].request.messages, drafts[i].result.text, ask, LABEL_REASK_TOKENS),
                          sampling=sampling, tag=f"{drafts[i].request.tag}:label") for i in todo]
    out = list(drafts)
    for i, ans in zip(todo, ctx.backend.generate(follow), strict=True):
        if not ans.ok or not ans.text.strip():
            continue
        first = ans.text.strip().splitlines()[0]
        line = first if first.lower().lstrip("*# ").startswith(("label", "verdict", "final")) else f"Label: {first}"
        d, r = drafts[i], drafts[i].result
        res = dataclasses.replace(r, text=f"{r.text.rstrip()}\n{line}", completion_tokens=r.completion_tokens + ans.completion_tokens,
                                  seconds=r.seconds + ans.seconds,
                                  extra={**r.extra, "label_reasked": True, "label_reask_text": ans.text})
        out[i] = dataclasses.replace(d, result=res, seconds=d.seconds + ans.seconds, flags=(*d.flags, "verdict_label_reasked"))
    return out


def text_label(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: the label and justification read from the generated text, for every draft
    that has no label yet (see the module docstring)."""
    out = []
    for d in drafts:
        if d.label is not None:
            out.append(d)
            continue
        res = d.result
        fallback = d.hyde.provisional_label
        if res is not None and res.ok:
            label, justification, vflags = parse_verdict_output(res.text, fallback)
        else:
            label, justification, _ = parse_verdict_output("", fallback)
            err = res.error if res is not None else "no verdict generated"
            vflags = ("verdict_label_fallback", f"verdict_llm_error: {err}")
        meta = dict(d.meta)
        if d.parts is not None:
            label, meta["components"], pflags = and_of_parts(res.text if res is not None and res.ok else "", d.parts, label,
                                                             str((res.extra if res is not None else {}).get("parts_reask_text", "")))
            vflags = (*vflags, *pflags)
        out.append(dataclasses.replace(d, label=label, justification=justification, flags=(*d.flags, *vflags), meta=meta))
    return out
