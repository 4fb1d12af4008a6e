"""followup (issue 15, mode 2): which claims get follow-up questions, the request the model
sees, parsing of whatever it writes (scripted outputs: parsing only), and the merge of the
new round into the claim's evidence. The real-model run is tests/e2e/test_followup_e2e.py."""

from __future__ import annotations

import re

import pytest

from sanctuary_local.config.settings import FollowupConfig, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.records import Chunk, Claim, ClaimEvidence, EvidenceSnippet, HydeResult, Query, QueryEvidence
from sanctuary_local.run.budget import MAX_LEVEL, apply_level, cost_factor
from sanctuary_local.modes.followup import (
    build_followup_request, gap_queries, merge_evidence, needs_followup, no_followup, parse_followup,
)

CLAIM = Claim(index=7, text="The Eiffel Tower grows by 15 cm in summer.", date="01-07-2023", speaker="A blog")
TEXT = "Paris. The Eiffel Tower can grow by about 15 centimetres on hot days because iron expands. " * 3


def snip(doc: int, start: int, end: int, score: float = 0.6, text: str = TEXT) -> EvidenceSnippet:
    return EvidenceSnippet(Chunk(7, doc, f"https://example.org/{doc}", start, end, text[start:end]), score)


def q(n: int, question: str) -> Query:
    return Query(7, n, question, (f"hypothetical answer {n}",))


def evidence(*snippets_per_query: tuple[EvidenceSnippet, ...], flags: tuple[str, ...] = ()) -> ClaimEvidence:
    qs = tuple(QueryEvidence(q(i, f"Question number {i}?"), s) for i, s in enumerate(snippets_per_query))
    return ClaimEvidence(7, qs, flags, {"total": 1.0})


EV = evidence((snip(0, 7, 60),), (), (snip(1, 0, 40), snip(1, 100, 150)), ())


def test_gaps_are_the_questions_without_snippets() -> None:
    assert [x.number for x in gap_queries(EV)] == [1, 3]
    assert needs_followup(EV, FollowupConfig(min_gaps=2))
    assert not needs_followup(EV, FollowupConfig(min_gaps=3))
    assert not needs_followup(evidence((snip(0, 7, 60),)), FollowupConfig())
    # nothing to search: no follow-up round
    assert not needs_followup(evidence((), flags=("no_documents",)), FollowupConfig())
    assert not needs_followup(evidence((), flags=("retrieval_error: worker failed",)), FollowupConfig())


def test_request_shows_the_claim_what_was_found_and_the_gaps() -> None:
    req = build_followup_request(CLAIM, EV, FollowupConfig(max_questions=2, found_chars=30))
    text = req.messages[0].content
    assert not re.search(r"\{\{\s*\w+\s*\}\}", text)  # every placeholder filled
    assert CLAIM.text in text and "01-07-2023" in text and "A blog" in text
    found, gaps = text.split("Questions that found nothing:")
    assert "- Question number 0?" in found and "- Question number 2?" in found
    assert "Question number 1?" in gaps and "Question number 3?" in gaps and "Question number 0?" not in gaps
    assert "Found: Paris. The Eiffel Tower can …" in found  # cut at a word, ≤ found_chars
    assert "at most 2 new questions" in text
    assert req.tag == "followup:7" and req.sampling == FollowupConfig().sampling
    # the claim-specific part comes last: every claim shares the instructions as a prefix
    other = build_followup_request(Claim(index=8, text="Another claim."), EV, FollowupConfig())
    head = text.index("Claim: ")
    assert other.messages[0].content[:head] == text[:head]


def test_parse_keeps_new_questions_numbered_after_the_old_ones() -> None:
    out = ('{"evidence": {"How much does the Eiffel Tower expand in heat?": ["About 15 cm."], '
           '"question number 0": ["dup of an old question"], "Question-2": ["Answer-1"], '
           '"Which metal is the Eiffel Tower made of?": ["Puddled iron.", "Answer-2"], '
           '"When was the Eiffel Tower built?": ["1889."]}}')
    queries, flags = parse_followup(out, CLAIM, EV, FollowupConfig(max_questions=2))
    assert [(x.number, x.question, x.answers) for x in queries] == [
        (4, "How much does the Eiffel Tower expand in heat?", ("About 15 cm.",)),
        (5, "Which metal is the Eiffel Tower made of?", ("Puddled iron.",)),
    ]
    assert all(x.claim_index == 7 for x in queries)
    assert "followup_unusable" not in flags and not any(f.startswith("hyde_") for f in flags)


def test_a_question_written_as_the_answer_of_a_template_slot_is_taken() -> None:
    # what Qwen2.5-Coder-0.5B wrote on the first example claim
    out = ('{"evidence": {"Question-1": ["Did the Eiffel Tower grow by 15 cm in summer? A post says it gets taller."], '
           '"Question-2": ["Why did the Eiffel Tower grow?"], "Question-3": ["no question here"]}}')
    queries, flags = parse_followup(out, CLAIM, EV, FollowupConfig())
    assert [(x.question, x.answers) for x in queries] == [
        ("Did the Eiffel Tower grow by 15 cm in summer?", ("A post says it gets taller.",)),
        ("Why did the Eiffel Tower grow?", ())]


@pytest.mark.parametrize("garbage", ["", "I cannot help with that.", '{"evidence": {}}', '{"evidence": {"Question-1": ["Answer-1"]}}',
                                     "\x00\xff" * 50, '{"evidence": {"Question number 1?": ["x"]}}'])
def test_unusable_output_gives_no_questions_and_a_flag(garbage: str) -> None:
    queries, flags = parse_followup(garbage, CLAIM, EV, FollowupConfig())
    assert queries == () and "followup_unusable" in flags


def test_parse_repairs_a_truncated_object() -> None:
    out = '```json\n{"evidence": {"Did the tower grow 15 cm in July 2023?": ["Yes, thermal expansion"], "Who measured'
    queries, flags = parse_followup(out, CLAIM, EV, FollowupConfig(), finish_reason="length")
    assert [x.question for x in queries][:1] == ["Did the tower grow 15 cm in July 2023?"]
    assert any(f.startswith("followup_") for f in flags)


def test_merge_appends_the_round_and_drops_overlapping_snippets() -> None:
    new_q = (q(4, "How much does the tower expand?"), q(5, "Which metal?"))
    questions = HydeResult(7, None, new_q, "raw", ("followup_repaired",))
    extra = ClaimEvidence(7, (QueryEvidence(new_q[0], (snip(0, 10, 58), snip(2, 0, 50))), QueryEvidence(new_q[1])),
                          ("no_snippets:q5",), {"total": 2.5, "bm25": 0.1})
    merged = merge_evidence(EV, extra, questions)
    assert merged.queries[:4] == EV.queries  # the first round is untouched
    assert [qe.query.number for qe in merged.queries] == [0, 1, 2, 3, 4, 5]
    assert [(s.chunk.doc_position, s.chunk.start) for s in merged.queries[4].snippets] == [(2, 0)]  # (0, 10-58) overlaps (0, 7-60)
    assert merged.queries[5].snippets == ()
    for f in ("followup_repaired", "followup_questions:2", "followup_found:1", "followup_duplicates_dropped:1", "no_snippets:q5"):
        assert f in merged.flags
    assert merged.timings["total"] == 1.0 and merged.timings["followup_total"] == 2.5
    again = ClaimEvidence.from_dict(merged.to_dict())
    assert again == merged


def test_merge_without_a_round_and_after_a_failed_round() -> None:
    assert merge_evidence(EV, None, no_followup(7)) == EV
    failed = HydeResult(7, None, (), "", ("followup_llm_error: timeout", "followup_unusable"))
    merged = merge_evidence(EV, None, failed)
    assert merged.queries == EV.queries and "followup_unusable" in merged.flags
    err = ClaimEvidence(7, (QueryEvidence(q(4, "x?")),), ("retrieval_error: worker failed",))
    merged = merge_evidence(EV, err, HydeResult(7, None, (q(4, "x?"),)))
    assert "followup_retrieval_error: worker failed" in merged.flags and "retrieval_error: worker failed" not in merged.flags


def test_a_claim_with_nothing_keeps_its_placeholder_until_the_round_finds_something() -> None:
    below = QueryEvidence(q(0, "Question number 0?"), (snip(0, 0, 30, 0.2),))
    first = ClaimEvidence(7, (QueryEvidence(q(0, "Question number 0?")),), ("no_snippets:q0",), {}, below)
    nq = q(1, "New?")
    none = merge_evidence(first, ClaimEvidence(7, (QueryEvidence(nq),)), HydeResult(7, None, (nq,)))
    assert none.below_threshold == below
    found = merge_evidence(first, ClaimEvidence(7, (QueryEvidence(nq, (snip(1, 0, 30),)),)), HydeResult(7, None, (nq,)))
    assert found.below_threshold is None and found.queries[1].snippets


def test_config_switch_and_budget_ladder() -> None:
    cfg = load_config("cpu")
    assert cfg.followup.enabled is False  # off until measured
    on = load_config("cpu", {"followup": {"enabled": True, "max_questions": 2}})
    assert on.followup.enabled and on.followup.max_questions == 2
    with pytest.raises(UserError, match="followup.enabled must be true or false"):
        load_config("cpu", {"followup": {"enabled": "yes"}})
    with pytest.raises(UserError, match="followup.max_questions"):
        load_config("cpu", {"followup": {"max_questions": 0}})
    floor = apply_level(on, MAX_LEVEL)
    assert floor.followup.max_questions == 1 and floor.followup.sampling.max_tokens < on.followup.sampling.max_tokens
    assert cost_factor(on, 0, "followup") == 1.0 and cost_factor(on, MAX_LEVEL, "followup") < 1.0
