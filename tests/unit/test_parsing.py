"""Tolerant parsers of stage-1 and stage-3 outputs: malformed outputs, property tests."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanctuary_local.records import CONFLICTING, LABELS, NEE, REFUTED, SUPPORTED
from sanctuary_local.stages.parsing import normalize_label, parse_hyde_output
from sanctuary_local.stages.verdict.parsing import parse_verdict_output

GOOD = {"label": "Refuted", "evidence": {"Is A true?": ["No.", "Maybe."], "Who said A?": ["Bob."]}}
GOOD_PAIRS = (("Is A true?", ("No.", "Maybe.")), ("Who said A?", ("Bob.",)))


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Supported", SUPPORTED), ("supported.", SUPPORTED), ("**Refuted**", REFUTED), ("REFUTED", REFUTED),
        ("NEE", NEE), ("not enough evidence", NEE), ("Not Enough Info", NEE), ("insufficient evidence", NEE),
        ("CE/C", CONFLICTING), ("C", CONFLICTING), ("conflicting", CONFLICTING), ("Cherry-picking", CONFLICTING),
        ("Conflicting Evidence/Cherrypicking", CONFLICTING), ("`Conflicting Evidence / Cherrypicking`", CONFLICTING),
        ("not supported", REFUTED), ("[Supported]", SUPPORTED), ("'Refuted' (the claim is false)", REFUTED),
        ("Supported | Refuted | Not Enough Evidence", None), ("", None), (None, None), ("banana", None), ("***", None),
    ],
)
def test_normalize_label(raw, expected):
    assert normalize_label(raw) == expected


def test_strict_json():
    p = parse_hyde_output(json.dumps(GOOD))
    assert p.label == REFUTED and p.pairs == GOOD_PAIRS and p.flags == ()


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + json.dumps(GOOD) + "\n```",
        "Here is the output:\n" + json.dumps(GOOD, indent=2) + "\nHope this helps!",
        json.dumps(GOOD)[:-2] + ",}}".replace("}}", "},}"),  # trailing commas
        json.dumps(GOOD).replace('"', "\u201c", 1).replace('"', "\u201d", 1),  # smart quotes
    ],
)
def test_repaired_json(text):
    p = parse_hyde_output(text)
    assert p.label == REFUTED and p.pairs == GOOD_PAIRS and "hyde_repaired" in p.flags


def test_truncation_keeps_complete_pairs():
    full = json.dumps(GOOD)
    cut = full[: full.index("Bob") + 1]  # the last answer is cut mid-string
    p = parse_hyde_output(cut, truncated=True)
    assert p.pairs[0] == GOOD_PAIRS[0]
    assert p.pairs[1] == ("Who said A?", ())  # the question survives, the broken answer does not
    assert "hyde_truncated" in p.flags and p.label == REFUTED


def test_other_shapes():
    listy = {"label": "supported", "evidence": [{"question": "Q one?", "answers": ["a"]}, {"question": "Q two?", "answer": "b"}]}
    p = parse_hyde_output(json.dumps(listy))
    assert p.label == SUPPORTED and p.pairs == (("Q one?", ("a",)), ("Q two?", ("b",)))
    p = parse_hyde_output('{"label": "CE/C", "evidence": {"Q?": "single answer"}}')
    assert p.label == CONFLICTING and p.pairs == (("Q?", ("single answer",)),)


def test_line_fallback_and_nee_label():
    text = "Label: Not Enough Evidence\n1. Question: Did the mayor say it?\nAnswer: Yes, in 2020.\n2. Where was it said?\n- In Lyon."
    p = parse_hyde_output(text)
    assert p.pairs == (("Did the mayor say it?", ("Yes, in 2020.",)), ("Where was it said?", ("In Lyon.",)))
    assert p.label is None  # stage 1 never abstains (§4.1)
    assert "hyde_line_fallback" in p.flags and "hyde_no_label" in p.flags


def test_jsonish_fragments():
    text = 'label: Refuted  "Is the sky green?": ["No, it is blue.", "Only at dusk"  "Who claims it?": ["A blog."]'
    p = parse_hyde_output(text)
    assert p.label == REFUTED and ("Is the sky green?", ("No, it is blue.", "Only at dusk")) in p.pairs


@pytest.mark.parametrize("text", ["", "   ", "garbage", "{", "}{", "[[[[", '{"label": 3}', "null", "\x00\x01"])
def test_nothing_usable(text):
    p = parse_hyde_output(text)
    assert p.pairs == () and "hyde_no_label" in p.flags


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_hyde_parser_never_raises(text):
    p = parse_hyde_output(text, truncated=True)
    assert p.label in (None, SUPPORTED, REFUTED, CONFLICTING)
    assert all(isinstance(q, str) and q for q, _ in p.pairs)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=len(json.dumps(GOOD))))
def test_any_truncation_of_valid_json_is_safe(n):
    p = parse_hyde_output(json.dumps(GOOD)[:n], truncated=True)
    for q, answers in p.pairs:  # whatever survives is a prefix of the truth, never garbage
        assert (q, answers) in GOOD_PAIRS or any(q == gq and set(answers) <= set(ga) for gq, ga in GOOD_PAIRS)


# ----------------------------------------------------------------------- verdict


@pytest.mark.parametrize(
    "text, label, flags",
    [
        ("Reasoning:\n1. a\n2. b\n3. c\n4. d\nLabel: Supported", SUPPORTED, ()),
        ("Reasoning:\n1. a\n**Label:** **NEE**", NEE, ()),
        ("Reasoning: x\nLabel:\n\nConflicting Evidence/Cherrypicking\n", CONFLICTING, ()),
        ("## Reasoning\n1. x\n### Final Label: refuted.", REFUTED, ()),
        ("1. x\nlabel - CE/C", CONFLICTING, ()),
        ("Reasoning: the claim is Refuted by the data.", REFUTED, ("verdict_label_inferred",)),
        ("Label: Supported\n...on reflection...\nLabel: Refuted", REFUTED, ()),
    ],
)
def test_verdict_labels(text, label, flags):
    got, justification, got_flags = parse_verdict_output(text, None)
    assert got == label and got_flags == flags and justification


def test_verdict_justification_is_reasoning():
    label, j, _ = parse_verdict_output("Reasoning:\n1. The claim.\n2. Evidence.\nLabel: Refuted", None)
    assert j == "1. The claim.\n2. Evidence."


@pytest.mark.parametrize("fallback, expected", [(SUPPORTED, SUPPORTED), (None, REFUTED), ("bogus", REFUTED)])
def test_verdict_fallback(fallback, expected):
    label, j, flags = parse_verdict_output("I cannot decide.", fallback)
    assert label == expected and flags == ("verdict_label_fallback",) and j == "I cannot decide."


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from([None, *LABELS]))
def test_verdict_parser_never_raises(text, fallback):
    label, justification, flags = parse_verdict_output(text, fallback)
    assert label in LABELS and isinstance(justification, str)
