"""Stage-3 label parsing on realistic model outputs (issue 11, part 1).

Each case is a text a model could plausibly write for the paper's ``Reasoning: … Label:``
template: negations, markdown, the template echoed back, text cut at the token limit, the
label on the next line. Negated support must never come out as Supported (on a label line
it is Refuted, in prose Not Enough Evidence), and the label that opens the label line wins
over label words later on that line.
"""

from __future__ import annotations

import pytest

from sanctuary_local.records import CONFLICTING, NEE, REFUTED, SUPPORTED
from sanctuary_local.stages.parsing import normalize_label
from sanctuary_local.stages.verdict.parsing import parse_verdict_output

TEMPLATE = "Label: <Supported | Refuted | Not Enough Evidence | Conflicting Evidence/Cherrypicking>"
FORMAT_ECHO = (
    "OUTPUT FORMAT:\n\nReasoning:\n1. <concise rewrite of claim and intent>\n2. <evidence assessment>\n"
    "3. <contradictions / gaps / biases noted>\n4. <why the balance of evidence leads to the chosen label>\n" + TEMPLATE
)
INFERRED, FALLBACK = ("verdict_label_inferred",), ("verdict_label_fallback",)

CASES = [
    # --- negations
    ("Reasoning:\n1. The claim says X.\n2. Sources say Y.\nLabel: Refuted (the claim is not supported)", REFUTED, ()),
    # in prose, negated support is absent support: Not Enough Evidence (test_parsing_defects, defect 1)
    ("Reasoning: The figures show the opposite. The claim is not supported by the evidence.", NEE, INFERRED),
    ("Reasoning:\n1. No evidence supports the claim.\nLabel: Refuted", REFUTED, ()),
    ("Reasoning:\n1. The claim cannot be supported by any source found.", NEE, INFERRED),
    ("Reasoning: The evidence doesn't support the claim.", NEE, INFERRED),
    ("Reasoning: The claim is unsupported.", NEE, INFERRED),
    ("Reasoning: x\nLabel: Not Supported", REFUTED, ()),
    ("Reasoning: x\nLabel: Unsupported", REFUTED, ()),
    ("Reasoning: x\nLabel: isn't supported", REFUTED, ()),
    ("Reasoning: x\nLabel: The claim is not supported by the evidence.", REFUTED, ()),
    ("Reasoning: x\nLabel: Refuted\n\nNote: the claim is not supported by any official source.", REFUTED, ()),
    ("Reasoning: x\nLabel: Supported (though not refuted by every source)", SUPPORTED, ()),
    ("Reasoning: x\nLabel: Not enough evidence to support the claim", NEE, ()),
    ("Reasoning: There is not enough evidence to support or refute the claim.", NEE, INFERRED),
    ("Reasoning: x\nLabel: neither supported nor refuted", NEE, ()),
    # --- markdown and spelling
    ("**Reasoning:**\n1. a\n**Label:** Supported", SUPPORTED, ()),
    ("Reasoning: a\nLabel: **Not Enough Evidence**", NEE, ()),
    ("## Reasoning\n1. a\n**Label**\nRefuted", REFUTED, ()),
    ("Reasoning: a\n> Label: `Supported`", REFUTED, FALLBACK),  # a ">" line is quoted text, never the label (defect 2)
    ("Reasoning: a\nLABEL: REFUTED", REFUTED, ()),
    ("Reasoning: a\nFinal Verdict: Not Enough Evidence", NEE, ()),
    ("Reasoning: a\nVerdict - Refuted", REFUTED, ()),
    ("Reasoning: a\nLabel: Supported.", SUPPORTED, ()),
    ("Reasoning: a\nLabel: R", REFUTED, ()),
    ("Reasoning: a\nLabel: NEE", NEE, ()),
    ("Reasoning: a\nLabel: CE/C", CONFLICTING, ()),
    # --- the paper's label spelling and its variants
    ("Reasoning: a\nLabel: Conflicting Evidence/Cherrypicking", CONFLICTING, ()),
    ("Reasoning: a\nLabel: Conflicting Evidence/Cherry-picking", CONFLICTING, ()),
    ("Reasoning: a\nLabel: Conflicting Evidence / Cherrypicking", CONFLICTING, ()),
    ("Reasoning: a\nLabel: [Conflicting Evidence/Cherrypicking] (some evidence is supported, some refuted)", CONFLICTING, ()),
    # --- echoed template
    (f"{TEMPLATE}\n\nReasoning:\n1. The data contradict it.\nLabel: Refuted", REFUTED, ()),
    (f"Reasoning: a\n{TEMPLATE}\nNot Enough Evidence", NEE, ()),
    (f"Reasoning:\n1. Official figures show the claim is refuted.\n{TEMPLATE}", REFUTED, INFERRED),
    (f"Reasoning:\n1. The sources disagree about the date.\n{TEMPLATE}", REFUTED, FALLBACK),
    (f"Reasoning: a\nLabel: Supported\n{TEMPLATE}", SUPPORTED, ()),
    (f"{FORMAT_ECHO}\nReasoning:\n1. The claim is not supported by the agency.\n", NEE, INFERRED),
    ("Reasoning: The claim is supported by two reports.\nLabel: Supported | Refuted", SUPPORTED, INFERRED),
    # --- truncated at the token limit
    ("Reasoning:\n1. The claim says X.\nLabel: Refu", REFUTED, ()),
    ("Reasoning:\n1. a\nLabel: Not Enough Evi", NEE, ()),
    ("Reasoning:\n1. a\nLabel: Conflicting Evid", CONFLICTING, ()),
    ("Reasoning:\n1. The claim says crime doubled.\n2. Police data show a", REFUTED, FALLBACK),
    # --- label on the next line
    ("Reasoning: a\nLabel:\nSupported", SUPPORTED, ()),
    ("Reasoning: a\n**Label:**\n\n**Conflicting Evidence/Cherrypicking**", CONFLICTING, ()),
    ("Reasoning: a\nLabel:\n\nRefuted - the figures were misquoted.", REFUTED, ()),
    # --- several label lines: the last usable one of the answer wins (an echoed example after it is not the answer)
    ("Label: Refuted\n...on reflection...\nLabel: Not Supported", REFUTED, ()),
    ("Label: Supported\n...on reflection...\nLabel: Not Enough Evidence", NEE, ()),
]


@pytest.mark.parametrize(("text", "label", "flags"), CASES)
def test_realistic_verdict_outputs(text: str, label: str, flags: tuple[str, ...]) -> None:
    got, justification, got_flags = parse_verdict_output(text, None)
    assert (got, got_flags) == (label, flags)
    assert justification


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(("text", "label", "flags"), [c for c in CASES if "support" in c[0].lower()])
def test_negated_support_never_reads_as_supported(text: str, label: str, flags: tuple[str, ...]) -> None:
    """Every case that says some form of "not supported" and nothing else positive must not be Supported."""
    negated = any(n in text.lower() for n in ("not supported", "unsupported", "no evidence supports", "cannot be supported",
                                               "doesn't support", "isn't supported"))
    if negated and "Label: Supported" not in text:
        assert parse_verdict_output(text, SUPPORTED)[0] != SUPPORTED


def test_label_line_justification_stops_before_the_label() -> None:
    _, justification, _ = parse_verdict_output("Reasoning:\n1. The claim.\n2. Evidence.\nLabel: Refuted (not supported)", None)
    assert justification == "1. The claim.\n2. Evidence."


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Refuted (the claim is not supported)", REFUTED), ("not supported", REFUTED), ("Unsupported.", REFUTED),
        ("no evidence supports it", REFUTED), ("cannot be supported", REFUTED), ("Supported, not refuted", SUPPORTED),
        ("<Supported | Refuted | Not Enough Evidence | Conflicting Evidence/Cherrypicking>", None),
        ("Supported or Refuted", None), ("Refu", REFUTED), ("Supp", SUPPORTED), ("not", None),
        ("Not Enough Evidence (the claim is not supported)", NEE), ("Conflicting Evidence/Cherrypicking", CONFLICTING),
    ],
)
def test_normalize_label_negations_and_openings(raw: str, expected: str | None) -> None:
    assert normalize_label(raw) == expected
