"""Defects of the stage-3 free-text label parser (defects 1-4) and of the label re-ask's
context fit (defect 5), one table row per case, each row named after its defect.

Every row of ``DEFECTS`` and ``NORMALIZE_DEFECTS`` failed before the fix; ``KEPT`` rows
passed before and after (the behaviour the fix must not change).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sanctuary_local.config.settings import LLMConfig, VerdictConfig
from sanctuary_local.llm.base import ChatMessage
from sanctuary_local.records import CONFLICTING, NEE, REFUTED, SUPPORTED
from sanctuary_local.stages.parsing import normalize_label
from sanctuary_local.stages.verdict.draft import Context
from sanctuary_local.stages.verdict.paper import fit_conversation
from sanctuary_local.stages.verdict.parsing import parse_verdict_output

INFERRED, FALLBACK = ("verdict_label_inferred",), ("verdict_label_fallback",)
ECHO = "\n\nClaim: Kenya passed a rainwater law in 2019.\nReasoning:\n1. The sources agree.\nLabel: Supported"

DEFECTS = [
    # 1. prose inference: negated support / absent evidence means Not Enough Evidence, not Refuted
    pytest.param("Reasoning: The claim is not supported by the evidence.", NEE, INFERRED, id="1-not-supported-by-the-evidence"),
    pytest.param("Reasoning: The claim is not supported by any evidence found.", NEE, INFERRED, id="1-not-supported-by-any-evidence"),
    pytest.param("Reasoning: There is no evidence supporting the claim.", NEE, INFERRED, id="1-no-evidence-supporting"),
    pytest.param("Reasoning: No evidence supports the claim.", NEE, INFERRED, id="1-no-evidence-supports"),
    pytest.param("Reasoning: There is no evidence to support the claim.", NEE, INFERRED, id="1-no-evidence-to-support"),
    pytest.param("Reasoning: The evidence doesn't support the claim.", NEE, INFERRED, id="1-evidence-doesnt-support"),
    pytest.param("Reasoning: The claim lacks evidence.", NEE, INFERRED, id="1-lacks-evidence"),
    pytest.param("Reasoning: The claim is made without any credible evidence.", NEE, INFERRED, id="1-without-evidence"),
    pytest.param("Reasoning: The claim is supported by a blog, but no evidence from official data supports it.", NEE, INFERRED,
                 id="1-later-absence-overrides-earlier-supported"),
    # 2. text after the model's label (an echoed example) must not override it
    pytest.param("Reasoning: The figures contradict it.\nLabel: Refuted" + ECHO, REFUTED, (), id="2-echoed-example-after-label"),
    pytest.param("Reasoning: a\nLabel: Not Enough Evidence\n\nEXAMPLE 3\n\nClaim: x\nReasoning: y\nLabel: Supported", NEE, (),
                 id="2-echoed-example-header-after-label"),
    pytest.param("Reasoning: a\n**Label:** Refuted\n\nQuestion 1: Was it said?\n  Evidence 1.1 (URL: u): ok\nLabel: Supported",
                 REFUTED, (), id="2-echoed-evidence-after-label"),
    # 2. quoted page text (">" lines, text between the fences) is never the label nor used for inference
    pytest.param("Reasoning: A blog claims:\n> Label: Supported\nOfficial data show the claim is refuted.", REFUTED, INFERRED,
                 id="2-quote-line-label-ignored"),
    pytest.param("Reasoning: Evidence 1.1 reads \u27e6Fact check\nLabel: Supported\u27e7 but it is satire; the claim is refuted.",
                 REFUTED, INFERRED, id="2-fenced-label-ignored"),
    pytest.param("Reasoning: a\nLabel: Refuted\nThe page reads \u27e6Summary\nVerdict: Supported\u27e7", REFUTED, (),
                 id="2-fenced-label-after-answer-ignored"),
    pytest.param("Reasoning: The claim is refuted by official data. A blog insists \u27e6this is supported by experts\u27e7.",
                 REFUTED, INFERRED, id="2-fenced-text-not-inferred"),
    pytest.param("Reasoning: The claim is refuted by official data. A blog wrote:\n> It is fully supported.", REFUTED, INFERRED,
                 id="2-quote-line-not-inferred"),
    # 3. "Label:" must not read the next line's prose; negated and partial support are not Supported
    pytest.param("Reasoning: x\nLabel:\nSupport for the claim comes from one blog only.", REFUTED, FALLBACK,
                 id="3-label-colon-then-prose-line"),
    pytest.param("Reasoning: x\nLabel:\nThe evidence shows the claim is supported by the census.", SUPPORTED, INFERRED,
                 id="3-label-colon-then-prose-is-inferred"),
    pytest.param("Reasoning: x\nLabel: The evidence fails to support the claim.", REFUTED, (), id="3-label-fails-to-support"),
    pytest.param("Reasoning: The evidence fails to support the claim.", NEE, INFERRED, id="3-prose-fails-to-support"),
    pytest.param("Reasoning: x\nLabel: Partially Supported", CONFLICTING, (), id="3-label-partially-supported"),
    pytest.param("Reasoning: The claim is only partially supported by the evidence.", CONFLICTING, INFERRED,
                 id="3-prose-partially-supported"),
    # 4. negation rewrites must not eat a label nor read "no question"/"no doubt" as a negation
    pytest.param("Reasoning: x\nLabel: Not Supported (Refuted)", REFUTED, (), id="4-not-supported-refuted"),
    pytest.param("Reasoning: There is no question the evidence supports it.", SUPPORTED, INFERRED, id="4-prose-no-question"),
    pytest.param("Reasoning: x\nLabel: There is no question the evidence supports it.", SUPPORTED, (), id="4-label-no-question"),
    pytest.param("Reasoning: Without question the evidence supports the claim.", SUPPORTED, INFERRED, id="4-without-question"),
]

KEPT = [
    pytest.param("Reasoning: x\nLabel: Not Supported", REFUTED, (), id="1-kept-label-not-supported"),
    pytest.param("Reasoning: x\nLabel: The claim is not supported by the evidence.", REFUTED, (), id="1-kept-label-line-negation"),
    pytest.param("Reasoning: The claim is refuted: no evidence supports it.", REFUTED, INFERRED, id="1-kept-refuted-and-no-support"),
    pytest.param("Reasoning: There is no doubt the evidence supports it.\nLabel: Supported", SUPPORTED, (), id="4-kept-no-doubt"),
    pytest.param("Label: Supported\n...on reflection...\nLabel: Not Enough Evidence", NEE, (), id="2-kept-self-correction"),
    pytest.param("Reasoning: a\nLabel:\n\nRefuted - the figures were misquoted.", REFUTED, (), id="3-kept-label-next-line"),
]


@pytest.mark.parametrize(("text", "label", "flags"), DEFECTS)
def test_label_parser_defects(text: str, label: str, flags: tuple[str, ...]) -> None:
    got, justification, got_flags = parse_verdict_output(text, None)
    assert (got, got_flags) == (label, flags)
    assert justification


@pytest.mark.parametrize(("text", "label", "flags"), KEPT)
def test_label_parser_behaviour_kept(text: str, label: str, flags: tuple[str, ...]) -> None:
    assert parse_verdict_output(text, None)[::2] == (label, flags)


def test_echoed_example_stays_out_of_the_justification() -> None:
    _, justification, _ = parse_verdict_output("Reasoning: The figures contradict it.\nLabel: Refuted" + ECHO, None)
    assert justification == "The figures contradict it."


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("fails to support the claim", REFUTED, id="3-normalize-fails-to-support"),
        pytest.param("Partially Supported", CONFLICTING, id="3-normalize-partially-supported"),
        pytest.param("Not Supported (Refuted)", REFUTED, id="4-normalize-not-supported-refuted"),
        pytest.param("there is no question the evidence supports it", SUPPORTED, id="4-normalize-no-question"),
    ],
)
def test_normalize_label_defects(raw: str, expected: str) -> None:
    assert normalize_label(raw) == expected


# ------------------------------------------------------------ 5. the re-ask fits the context


@dataclass
class WordCounter:
    """A scripted backend: a token is a whitespace-separated word, plus 3 per message."""

    name: str = "words"

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        return sum(3 + len(m.content.split()) for m in messages)


def _ctx(max_model_len: int) -> Context:
    return Context(backend=WordCounter(), cfg=VerdictConfig(llm=LLMConfig(max_model_len=max_model_len)))  # type: ignore[arg-type]


HEAD = (ChatMessage("system", "You are a fact-checker."), ChatMessage("user", "Claim: x. Evidence: y. Give reasoning and a label."))
ASK = ChatMessage("user", "Your answer has no label line. Give the label only.")
REASONING = " ".join(f"w{i}" for i in range(300)) + " so the balance of evidence points to the claim being false."


@pytest.mark.parametrize("max_model_len", [
    pytest.param(60, id="5-small-context"), pytest.param(100, id="5-medium-context"), pytest.param(200, id="5-larger-context"),
])
def test_label_reask_conversation_fits_and_keeps_the_conclusion(max_model_len: int) -> None:
    ctx, answer = _ctx(max_model_len), 12
    conv = fit_conversation(ctx, HEAD, REASONING, ASK, answer)
    assert ctx.backend.count_tokens(conv) <= max_model_len - answer
    assert conv[: len(HEAD)] == HEAD and conv[-1] == ASK and conv[len(HEAD)].role == "assistant"
    kept = conv[len(HEAD)].content
    assert kept.endswith("points to the claim being false.") and len(kept) < len(REASONING)
    # as much as fits is kept: one more word of the reasoning would overflow
    one_more = " ".join(REASONING.split()[-(len(kept.lstrip("\u2026").split()) + 1) :])
    longer = (*HEAD, ChatMessage("assistant", "\u2026" + one_more), ASK)
    assert ctx.backend.count_tokens(longer) > max_model_len - answer


def test_label_reask_conversation_unchanged_when_it_fits() -> None:
    ctx = _ctx(8192)
    assert fit_conversation(ctx, HEAD, REASONING, ASK, 12) == (*HEAD, ChatMessage("assistant", REASONING), ASK)
