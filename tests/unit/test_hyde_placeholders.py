"""A weak model that copies the prompt's output-format slots gets the claim fallback."""

from sanctuary_local.config.settings import HydeConfig
from sanctuary_local.records import Claim
from sanctuary_local.stages.hyde import is_placeholder, parse_hyde

CLAIM = Claim(index=7, text="The Eiffel Tower grows by up to 15 cm in summer.")


def test_copied_format_slots_are_not_queries() -> None:
    raw = '{ "evidence": {"Question-1": ["Answer-1", "Answer-2"], "Question-2": ["Answer-1"] } ,"label": "Refuted"}'
    r = parse_hyde(raw, CLAIM, HydeConfig())
    assert [q.question for q in r.queries] == [CLAIM.text]
    assert "hyde_claim_fallback" in r.flags and "hyde_placeholders_dropped" in r.flags


def test_real_pairs_survive_and_placeholder_answers_are_removed() -> None:
    raw = ('{"label": "Supported", "evidence": {"How much does the tower expand in heat?": ["Answer-1", "About 15 cm."],'
           ' "Question-2": ["Answer-1"]}}')
    r = parse_hyde(raw, CLAIM, HydeConfig())
    assert [(q.question, q.answers) for q in r.queries] == [("How much does the tower expand in heat?", ("About 15 cm.",))]
    assert r.provisional_label == "Supported" and "hyde_placeholders_dropped" in r.flags
    assert "hyde_claim_fallback" not in r.flags


def test_placeholder_detector() -> None:
    assert all(is_placeholder(t) for t in ("Question-1", "answer 2", "<Question 3>", "QUESTION", "", "..."))
    assert not any(is_placeholder(t) for t in ("Was it built in 1889?", "A 2019 report", "Answer: yes, in 1889", "a3", "Q1"))
