"""Stage 3 steps of the stance mode (issue 26): judge each passage, then the claim.

``verdict.mode = "stance"`` never shows the model all the evidence at once. For each of a
claim's distinct retrieved passages (at most ``verdict.stance_passages``, every question's
best passage first, a chunk retrieved for several questions judged once) the model is
asked whether that one passage supports the claim, refutes it, or neither, and the three
answers are **scored** by log-probability (``LLMBackend.score``), never parsed from text.
A short prompt per passage suits a small model better than one long prompt, and on
llama.cpp the instructions and the claim are a prefix shared by a claim's passages.

The passages' stance probabilities are aggregated into ``STANCE_FEATURES`` (mean and
maximum probability of support and of refutation, and how much evidence there was); the
calibration (``stages/calibration.py``, a logistic model fitted on dev claims 100–149 over
these features and stage 1's label) turns them into the four label probabilities in
``label_scoring.choose_label``. Without a calibration a fixed rule does (``stance_rule``).

The justification is written from the records (``justify_stances``): which passages the
label rests on, with their URLs and stance probabilities — not free text to re-parse.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from sanctuary_local.llm.base import ChatMessage, ScoreRequest, ScoreResult
from sanctuary_local.prompts import load_prompt, render
from sanctuary_local.records import LABELS, ClaimEvidence, EvidenceSnippet
from sanctuary_local.stages.evidence_view import neutralize, source_name
from sanctuary_local.stages.hyde import claim_fields
from sanctuary_local.stages.verdict_draft import (  # noqa: F401 - the records are this mode's public names
    STANCE_FEATURES, STANCES, Context, Draft, Key, PassageStance, StanceScores, stance_features,
)

def stance_rule(features: Sequence[float]) -> list[float]:
    """Label probabilities without a calibration: with ``S`` the strongest support and
    ``R`` the strongest refutation, Supported = S(1−R), Refuted = R(1−S), Not Enough
    Evidence = (1−S)(1−R), Conflicting = S·R (the four cases of "some passage supports" and
    "some passage refutes" taken as independent events)."""
    s, r = features[2], features[3]
    return [s * (1 - r), r * (1 - s), (1 - s) * (1 - r), s * r]


# ------------------------------------------------------------------ prompts
def passages(ev: ClaimEvidence, withheld: frozenset[Key] = frozenset()) -> list[tuple[Key, str, EvidenceSnippet]]:
    """A claim's distinct passages with the question each was first retrieved for, every
    question's best passage first, then every question's second, ... (round-robin);
    ``withheld`` ones (``Draft.withheld``) are not judged."""
    out, seen = [], set()
    depth = max((len(q.snippets) for q in ev.queries), default=0)
    for rank in range(depth):
        for qi, qe in enumerate(ev.queries):
            if (qi, rank) in withheld:
                continue
            if rank < len(qe.snippets) and qe.snippets[rank].chunk.chunk_id not in seen:
                seen.add(qe.snippets[rank].chunk.chunk_id)
                out.append(((qi, rank), qe.query.question, qe.snippets[rank]))
    return out


def _shown(text: str, words: int) -> str:
    """Page text as shown: neutralised (``evidence_view.neutralize``), at most ``words`` words."""
    parts = neutralize(text).split(" ")
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def stance_request(d: Draft, question: str, sn: EvidenceSnippet, ctx: Context, tag: str) -> ScoreRequest:
    """The stance question for one passage, shown as the model may read it (``Draft.view``)."""
    f = claim_fields(d.claim)
    text = render(load_prompt(ctx.cfg.stance_prompt), claim=neutralize(f["claim"]), date=neutralize(f["date"]),
                  speaker=neutralize(f["speaker"]), question=_shown(question, 60), url=source_name(sn.chunk.url),
                  passage=_shown(sn.chunk.text, ctx.cfg.stance_words))
    return ScoreRequest((ChatMessage("user", text),), STANCES, tag=tag)


# ------------------------------------------------------------------ steps
def score_stances(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: every claim's first ``stance_passages`` distinct passages scored, in one
    ``score`` call (claim by claim, so a claim's prompts share their prefix)."""
    plan: list[tuple[int, Key, EvidenceSnippet]] = []
    reqs: list[ScoreRequest] = []
    counts = []
    for i, d in enumerate(drafts):
        found = passages(d.evidence, d.withheld)
        counts.append(len(found))
        for key, question, sn in found[: ctx.cfg.stance_passages]:
            plan.append((i, key, sn))
            shown = d.view.queries[key[0]].snippets[key[1]]
            reqs.append(stance_request(d, question, shown, ctx, f"stance:{d.claim.index}:{key[0] + 1}.{key[1] + 1}"))
    try:
        got = ctx.backend.score(reqs) if reqs else []
    except Exception as exc:  # noqa: BLE001 - a backend that raises: every passage unjudged, flagged
        got = [ScoreResult(error=f"{type(exc).__name__}: {exc}")] * len(reqs)
    if len(got) != len(reqs):
        raise RuntimeError(f"backend {ctx.backend.name} returned {len(got)} stance scores for {len(reqs)} requests")
    judged: list[list[PassageStance]] = [[] for _ in drafts]
    errors: list[list[str]] = [[] for _ in drafts]
    seconds, tokens, exact = [0.0] * len(drafts), [0] * len(drafts), [True] * len(drafts)
    for (i, key, sn), res in zip(plan, got, strict=True):
        seconds[i] += res.seconds
        tokens[i] += res.prompt_tokens
        exact[i] = exact[i] and res.exact
        if not res.ok or len(res.logprobs) != len(STANCES) or all(math.isinf(x) for x in res.logprobs):
            errors[i].append(f"{key[0] + 1}.{key[1] + 1}: {res.error or 'no stance scores'}")
            continue
        judged[i].append(PassageStance(key, sn.chunk.chunk_id, sn.chunk.url, tuple(res.logprobs)))
    out = []
    for i, d in enumerate(drafts):
        st = StanceScores(tuple(judged[i]), counts[i], tuple(errors[i]), tokens[i], exact[i])
        flags = ("verdict_stance_failed",) if errors[i] and not judged[i] else ()
        out.append(dataclasses.replace(d, stance=st, seconds=d.seconds + seconds[i], flags=(*d.flags, *flags),
                                       meta={**d.meta, "score_prompt_tokens": tokens[i]}))
    return out


def justify_stances(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: the justification of a stance verdict, from its records: the label
    probabilities and the passages that weigh most for and against the claim."""
    return [dataclasses.replace(d, justification=stance_justification(d)) if d.stance is not None and d.label else d
            for d in drafts]


def stance_justification(d: Draft) -> str:
    st = d.stance
    assert st is not None
    probs = d.scores.probabilities if d.scores is not None else ()
    ranked = ", ".join(f"{lab} {p:.2f}" for lab, p in sorted(zip(LABELS, probs, strict=True), key=lambda kv: -kv[1]))
    kind = "calibrated" if d.scores is not None and d.scores.calibrated else "rule"
    if not st.passages:
        why = "no retrieved passage could be judged"
    else:
        lines = []
        for idx, name in ((1, "refutes"), (0, "supports")):
            best = max(st.passages, key=lambda p: p.probabilities[idx])
            lines.append(f"the passage most likely to {name[:-1]} it is Evidence {best.key[0] + 1}.{best.key[1] + 1} "
                         f"({best.url or 'no URL'}; P({name[:-1]}) {best.probabilities[idx]:.2f})")
        why = f"{len(st.passages)} passage{'s' if len(st.passages) != 1 else ''} judged one by one; " + "; ".join(lines)
    return f"Label {d.label} ({kind} label probabilities: {ranked}): {why}."

