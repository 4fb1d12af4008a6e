"""What a trained verdict model reads: one claim and its question–answer evidence.

The same record is built from two sources, so that a model trained on one reads the other:

- ``from_gold``: a labelled claim's gold questions and answers (AVeriTeC train, or dev for
  ``verdict-model eval``); a Boolean answer carries its explanation, as the annotators wrote it;
- ``from_items``: the pipeline's evidence items (the question, and a retrieved snippet as its
  answer), after stage 3's redaction of text that looks like an instruction to a model.

``render`` turns it into the one text the models read; answers are cut to ``answer_words``
so that every question fits the encoder's window: their first words, or (``focus``) the run of
whole sentences that shares most content words with the question and the claim.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sanctuary_local.records import Claim, EvidenceItem, QueryEvidence

#: The text of a gold answer the annotators could not find.
UNANSWERABLE = "No answer could be found."


@dataclass(frozen=True, slots=True)
class QAPair:
    """One question and the answer the evidence gives it (a gold answer or a snippet)."""

    question: str
    answer: str
    url: str = ""


@dataclass(frozen=True, slots=True)
class VerdictInput:
    """A claim and its evidence, as a trained verdict model reads it."""

    claim: str
    pairs: tuple[QAPair, ...] = ()
    label: str | None = None
    """The gold label, when known (training and evaluation)."""


def _gold_answer(answer: str, answer_type: str, explanation: str) -> str:
    if answer_type == "Unanswerable" or not answer.strip():
        return UNANSWERABLE
    if explanation.strip():
        return f"{answer.strip()}. {explanation.strip()}"
    return answer.strip()


def from_gold(claim: Claim) -> VerdictInput:
    """A claim with its gold question–answer pairs (one pair per answer)."""
    pairs = []
    for q in claim.gold_questions:
        answers = q.answers or ()
        if not answers:
            pairs.append(QAPair(q.question, UNANSWERABLE))
        for a in answers:
            pairs.append(QAPair(q.question, _gold_answer(a.answer, a.answer_type, a.boolean_explanation), a.source_url))
    return VerdictInput(claim.text, tuple(pairs), claim.gold_label)


def from_items(claim: Claim, items: Sequence[EvidenceItem]) -> VerdictInput:
    """A claim with the pipeline's evidence items (question, snippet text, URL)."""
    return VerdictInput(claim.text, tuple(QAPair(i.question, i.answer, i.url) for i in items), claim.gold_label)


def from_queries(claim: str, queries: Sequence[QueryEvidence], withheld: frozenset[tuple[int, int]] = frozenset(),
                 max_pairs: int = 10, label: str | None = None) -> VerdictInput:
    """A claim with stage 2's snippets as answers: every question's best snippet first
    (round-robin by rank, as the official evidence is ranked), ``(query, rank)`` pairs in
    ``withheld`` left out, at most ``max_pairs``. Stage 3 reads a run's evidence this way,
    and ``verdict_model.evidence`` the evidence retrieved for training claims."""
    pairs = []
    depth = max((len(q.snippets) for q in queries), default=0)
    for rank in range(depth):
        for qi, qe in enumerate(queries):
            if rank < len(qe.snippets) and (qi, rank) not in withheld:
                sn = qe.snippets[rank]
                pairs.append(QAPair(qe.query.question, sn.chunk.text, sn.chunk.url))
    return VerdictInput(claim, tuple(pairs[:max_pairs]), label)


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("the a an of to in and or is was were be been are on for with that this by as at from it its "
                  "has have had not no yes did does do what who when where which how why".split())


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def focused(answer: str, question: str, claim: str, words: int) -> str:
    """The part of ``answer`` a model reads when it must fit in ``words`` words: of the runs of
    whole sentences that fit, the one sharing most content words with ``question`` and ``claim``
    (the first on a tie), cut as ``_cut`` cuts; an answer that fits is read whole."""
    if len(answer.split()) <= words:
        return _cut(answer, words)
    asked = _content_words(question) | _content_words(claim)
    sentences = [s for s in _SENTENCE_END.split(answer.strip()) if s.strip()]
    best, best_score = sentences[0], -1
    for i in range(len(sentences)):
        run, n = [sentences[i]], len(sentences[i].split())
        for s in sentences[i + 1:]:
            if n + len(s.split()) > words:
                break
            run.append(s)
            n += len(s.split())
        score = len(asked & _content_words(" ".join(run)))
        if score > best_score:
            best, best_score = " ".join(run), score
    return _cut(best, words)


def excerpt(answer: str, question: str, claim: str, words: int) -> str:
    """What a person is shown of ``answer`` in ``words`` words: its ``focused`` part, marked with
    … where text before or after it is left out (the console of ``check``, the justification)."""
    text = " ".join(answer.split())
    part = focused(text, question, claim, words).removesuffix(" …")
    return ("" if text.startswith(part) else "… ") + part + ("" if text.endswith(part) else " …")


def answer_text(p: QAPair, claim: str, words: int, focus: bool = False) -> str:
    """What a model reads of the pair's answer: its first ``words`` words, or its ``focused`` part."""
    return focused(p.answer, p.question, claim, words) if focus else _cut(p.answer, words)


def render_evidence(x: VerdictInput, answer_words: int = 48, max_pairs: int = 10, focus: bool = False) -> str:
    """The evidence as one text: ``Q: … A: …`` per pair, answers cut to ``answer_words``
    (their ``focused`` part with ``focus``)."""
    return " ".join(f"Q: {' '.join(p.question.split())} A: {answer_text(p, x.claim, answer_words, focus)}"
                    for p in x.pairs[:max_pairs])


def render(x: VerdictInput, answer_words: int = 48, max_pairs: int = 10, focus: bool = False) -> str:
    """Claim and evidence as one text (the TF-IDF model's input)."""
    return f"Claim: {' '.join(x.claim.split())} {render_evidence(x, answer_words, max_pairs, focus)}"


def without(x: VerdictInput, k: int) -> VerdictInput:
    """The input with its ``k``-th pair left out (what a pair weighs: the justification)."""
    return VerdictInput(x.claim, x.pairs[:k] + x.pairs[k + 1:], x.label)
