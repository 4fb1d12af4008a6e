"""Stage 3 steps of the scored mode (issue 26): score the four labels, then calibrate.

``score_labels`` asks the backend for ``log P(label | prompt)`` of every label string as
the beginning of the model's answer (``LLMBackend.score``): straight after the evidence
(``verdict_scored.txt``), or — with ``verdict.reasoning_tokens`` — after the model's own
reasoning, as the answer to ``verdict_scored_label.txt``. Nothing is parsed: the label
cannot come from quoted page text, only from the model's scores.

``choose_label`` applies the calibration (``stages/calibration.py``; raw scores when
none is configured) and takes the best label; in stance mode it reads the passages'
stances (``stages/stance.py``) instead of label scores. A claim whose scoring failed (a backend
without log-probabilities, or an error) keeps no label here; the text step after it then
reads one from the reasoning — or, without reasoning, from the scored prompt's answer
generated for it (``generate_unscored``) — flagged ``verdict_text_parsed``.
"""

from __future__ import annotations

import dataclasses
import math

from sanctuary_local.llm.base import ChatMessage, ScoreRequest, ScoreResult
from sanctuary_local.prompts import load_prompt
from sanctuary_local.records import LABELS
from sanctuary_local.stages.calibration import softmax
from sanctuary_local.stages.stance import stance_rule
from sanctuary_local.stages.verdict_draft import Context, Draft, LabelScores
from sanctuary_local.stages.verdict_paper import fit_conversation
from sanctuary_local.stages.verdict_prompt import LABEL_TOKENS


def _score_request(d: Draft, ctx: Context) -> ScoreRequest | None:
    if d.request is None:
        return None
    if not ctx.cfg.reasoning_tokens:
        return ScoreRequest(d.request.messages, LABELS, tag=f"{d.request.tag}:labels")
    if d.result is None or not d.result.ok:
        return None
    ask = ChatMessage("user", load_prompt(ctx.cfg.scored_label_prompt).strip())
    conv = fit_conversation(ctx, d.request.messages, d.result.text, ask, LABEL_TOKENS)
    return ScoreRequest(conv, LABELS, tag=f"{d.request.tag}:labels")


def score_labels(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: one ``score`` call for every claim with a prompt (and, with reasoning, an
    answered reasoning)."""
    reqs = [_score_request(d, ctx) for d in drafts]
    ready = [r for r in reqs if r is not None]
    try:
        got = ctx.backend.score(ready) if ready else []
    except Exception as exc:  # noqa: BLE001 - a backend without scores (or one that raises) falls back to text
        got = [ScoreResult(error=f"{type(exc).__name__}: {exc}")] * len(ready)
    if len(got) != len(ready):
        raise RuntimeError(f"backend {ctx.backend.name} returned {len(got)} label scores for {len(ready)} requests")
    results = iter(got)
    out = []
    for d, r in zip(drafts, reqs, strict=True):
        res = next(results) if r is not None else None
        if res is None or not res.ok or len(res.logprobs) != len(LABELS) or all(math.isinf(x) for x in res.logprobs):
            why = res.error if res is not None and res.error else "no label scores"
            out.append(dataclasses.replace(d, meta={**d.meta, "label_scores_error": why}))
            continue
        scores = LabelScores(res.logprobs, tuple(softmax(res.logprobs)), False, res.exact, res.seconds)
        meta = {**d.meta, "score_prompt_tokens": res.prompt_tokens}
        out.append(dataclasses.replace(d, scores=scores, seconds=d.seconds + res.seconds, meta=meta))
    return out


def choose_label(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: the label with the best calibrated probability, from the label scores
    (scored mode) or the passages' stances (stance mode) and stage 1's label. Without a
    calibration: the raw label scores, or ``stance_rule`` over the stances."""
    cal, out = ctx.calibration, []
    for d in drafts:
        if d.scores is None and d.stance is None:
            out.append(d)
            continue
        logprobs = d.scores.logprobs if d.scores is not None else ()
        features = d.stance.features if d.stance is not None else ()
        if cal is not None:
            probs, calibrated = tuple(cal.probabilities(logprobs, d.hyde.provisional_label, features)), True
        elif d.scores is not None:
            probs, calibrated = d.scores.probabilities, False
        else:
            probs, calibrated = tuple(stance_rule(features)), False
        exact = d.scores.exact if d.scores is not None else d.stance.exact if d.stance is not None else True
        seconds = d.scores.seconds if d.scores is not None else 0.0
        s = LabelScores(logprobs, probs, calibrated, exact, seconds)
        best = max(range(len(LABELS)), key=lambda i: s.probabilities[i])
        justification = d.result.text.strip() if d.result is not None and d.result.ok else ""
        kind = "verdict_scored" if d.scores is not None else "verdict_stance"
        flags = (kind,) if s.exact else (kind, "verdict_scored_first_token")
        out.append(dataclasses.replace(d, scores=s, label=LABELS[best], justification=justification,
                                       flags=(*d.flags, *flags)))
    return out


def mark_text_parsed(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step (scored mode, before the text step): flag the claims whose scores are missing,
    so a label read from text is never mistaken for a scored one."""
    return [d if d.scores is not None else d.with_flags("verdict_text_parsed") for d in drafts]


def generate_unscored(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step (scored mode without reasoning, before the text step): a claim left without
    scores has no text to read its label from, so its scored prompt — which asks for the
    label only — is generated (at most ``LABEL_TOKENS`` tokens) for ``text_label`` to
    parse. Claims with scores, or without a prompt, are left alone."""
    todo = [i for i, d in enumerate(drafts) if d.scores is None and d.request is not None and d.result is None]
    if not todo:
        return drafts
    sampling = dataclasses.replace(ctx.cfg.sampling, max_tokens=LABEL_TOKENS)
    asks = [dataclasses.replace(drafts[i].request, sampling=sampling, tag=f"{drafts[i].request.tag}:text") for i in todo]
    answers = ctx.backend.generate(asks)
    if len(answers) != len(asks):
        raise RuntimeError(f"backend {ctx.backend.name} returned {len(answers)} results for {len(asks)} requests")
    out = list(drafts)
    for i, res in zip(todo, answers, strict=True):
        out[i] = dataclasses.replace(drafts[i], result=res, seconds=drafts[i].seconds + res.seconds)
    return out
