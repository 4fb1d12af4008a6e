"""The evidence contract of stage 3 (verdict.citations): citation parsing, the deterministic
checker (ids, verbatim quotes up to whitespace, exact source spans) and the one re-ask.
A scripted backend stands in for the model here (parsing only); the real model runs the
mode in tests/test_llm_e2e.py."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sanctuary_local.config import VerdictConfig
from sanctuary_local.llm.base import ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt
from sanctuary_local.records import Chunk, EvidenceSnippet
from sanctuary_local.stages.citations import (
    annotate, check_citations, find_quote, numbered_snippets, parse_citations,
)
from sanctuary_local.stages.verdict import build_verdict_request, citation_rates, run_verdict
from test_hyde import CLAIM, ScriptedBackend
from test_verdict import DOC, HYDE, evidence

CFG = VerdictConfig(citations=True, label_reask="")


class Sequenced(ScriptedBackend):
    """Each call takes the next outputs (a re-ask gets the answers after the first ones)."""

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self.calls.append(requests)
        outs, self.outputs = self.outputs[: len(requests)], self.outputs[len(requests):]
        return [ChatResult(o, 10, 5, "stop", 0.1) for o in outs]


GOOD = ('Reasoning:\n1. The claim says cheese.\n2. NASA says rock.\nCitations:\n'
        '- The moon is rock. [Evidence 1.1] "The moon is rock, NASA says"\n'
        '- Apollo brought rock back. [Evidence 2.1] "brought back 382 kg of  lunar rock"\nLabel: Refuted')


def test_the_prompts_own_examples_pass_the_checker() -> None:
    """Every citation in verdict_cited.txt's worked examples is valid against its example."""
    text = load_prompt("verdict_cited.txt")
    examples = text.split("EXAMPLE ")[1:]
    assert len(examples) == 4
    for ex in examples:
        ev = {f"{q}.{n}": EvidenceSnippet(Chunk(0, 0, url, 0, len(body), body), 1.0)
              for q, n, url, body in re.findall(r"Evidence (\d+)\.(\d+) \(URL: (\S+)\): (.+)", ex)}
        report = check_citations(ex.split("Citations:")[1], ev)
        assert report.clean and len(report.checks) >= 1, report.feedback()


def test_citation_formats_are_parsed_and_other_lines_ignored() -> None:
    text = ('Reasoning: 2. see [Evidence 1.1] for more\n'
            '- A fact. [Evidence 1.1] "quoted words here"\n'
            '* Another fact [E2.1, Evidence 1.2]: “curly quoted words”\n'
            '3) Third. [1.1] \'single quoted words\'\n'
            '- no id "just a quote"\nLabel: Refuted')
    cits = parse_citations(text)
    assert [(c.ids, c.quote, c.line) for c in cits] == [
        (("1.1",), "quoted words here", 2), (("2.1", "1.2"), "curly quoted words", 3), (("1.1",), "single quoted words", 4)]
    assert cits[1].sub_claim == "Another fact"


@pytest.mark.parametrize(("quote", "found"), [
    ("The moon is rock, NASA says", "The moon is rock, NASA says"),
    ("rock, NASA says.\nApollo  brought", "rock, NASA says.\nApollo brought"),  # whitespace runs are one space
    ("the moon is rock", None),  # case matters
    ("The moon is cheese", None),
    ("rock", None),  # too short to prove anything
])
def test_find_quote_is_verbatim_up_to_whitespace(quote: str, found: str | None) -> None:
    span = find_quote(quote, DOC)
    assert (DOC[span[0]:span[1]] if span else None) == found


def test_find_quote_unicode_and_curly_quotes_map_back_exactly() -> None:
    doc = "Der Bürgermeister sagte:\t„Wir bauen   drei Krankenhäuser“ – nicht zwei."
    span = find_quote('"Wir bauen drei Krankenhäuser"', doc)
    assert doc[span[0]:span[1]] == "„Wir bauen   drei Krankenhäuser“"


def test_checker_names_each_violation_and_spans_reconstruct() -> None:
    ev = evidence()
    snippets = numbered_snippets(ev)
    text = GOOD + '\n- Made of cheese. [Evidence 3.1] "The moon is made of cheese"\n- Cheese. [Evidence 1.2] "The moon is rock, NASA says"'
    report = check_citations(text, snippets)
    assert [c.ok for c in report.checks] == [True, True, False, False]
    assert "no Evidence 3.1" in report.checks[2].problem and "not in the cited evidence" in report.checks[3].problem
    for c in report.checks[:2]:
        assert DOC[c.start:c.end].split() == c.citation.quote.split()  # the document's own text at that span
        assert c.url == snippets[c.evidence_id].chunk.url
    assert report.validity == 0.5 and "line" in report.feedback()


def test_numbering_skips_the_snippets_dropped_from_the_prompt() -> None:
    ev = evidence()
    lowest = min((sn.score, f"{qi + 1}.{si + 1}") for qi, q in enumerate(ev.queries) for si, sn in enumerate(q.snippets))
    kept = numbered_snippets(ev, ["dropped 1 of 3 snippets (scores <= 0.4000) to fit 100 prompt tokens"])
    assert len(kept) == 2 and lowest[1] == "1.2" and "1.2" not in kept


def test_cited_prompt_is_used_only_with_the_switch() -> None:
    plain, _ = build_verdict_request(CLAIM, HYDE, evidence(), VerdictConfig(), ScriptedBackend([]))
    cited, _ = build_verdict_request(CLAIM, HYDE, evidence(), CFG, ScriptedBackend([]))
    assert "Citations:" not in plain.messages[-1].content and "Citations:" in cited.messages[-1].content


def test_clean_citations_are_not_reasked() -> None:
    backend = Sequenced([GOOD])
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], backend, CFG)
    assert len(backend.calls) == 1 and p.label == "Refuted"
    c = p.meta["citations"]
    assert c["before"] == c["after"] == {"n": 2, "valid": 2, "validity": 1.0} and not c["reasked"]
    assert not [f for f in p.flags if f.startswith("citation")]
    assert "(source: https://nasa.gov/moon, characters 23-50)" in p.justification
    assert all(DOC[i["start"]:i["end"]] for i in c["items"])


def test_bad_citations_are_reasked_once_with_the_report() -> None:
    bad = GOOD.replace("Evidence 2.1", "Evidence 4.1")
    backend = Sequenced([bad, GOOD])
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], backend, CFG)
    assert len(backend.calls) == 2
    follow = backend.calls[1][0].messages
    assert follow[-2].content == bad and "no Evidence 4.1 in the prompt" in follow[-1].content
    c = p.meta["citations"]
    assert c["before"]["validity"] == 0.5 and c["after"]["validity"] == 1.0 and c["reasked"]
    assert "citations_reasked" in p.flags and not any(f.startswith("citation_violations") for f in p.flags)


def test_still_bad_after_the_reask_is_flagged_and_a_labelless_reask_is_ignored() -> None:
    bad = GOOD.replace("Evidence 2.1", "Evidence 4.1")
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], Sequenced([bad, bad]), CFG)
    assert "citation_violations:1" in p.flags and "citations_reasked" in p.flags
    (q,) = run_verdict([CLAIM], [HYDE], [evidence()], Sequenced([bad, "I cannot do that."]), CFG)
    assert q.meta["raw_text"] == bad and q.meta["citations"]["after"]["validity"] == 0.5
    (r,) = run_verdict([CLAIM], [HYDE], [evidence()], Sequenced(["Reasoning: rock.\nLabel: Refuted", "Label: Refuted"]), CFG)
    assert "citations_missing" in r.flags and r.meta["citations"]["before"]["n"] == 0


def test_citation_rates_aggregate_over_predictions() -> None:
    bad = GOOD.replace("Evidence 2.1", "Evidence 4.1")
    preds = run_verdict([CLAIM, replace(CLAIM, index=8)], [HYDE, replace(HYDE, claim_index=8)],
                        [evidence(), evidence(8)], Sequenced([GOOD, bad, bad]), CFG)
    assert citation_rates(preds) == {"validity_before": 0.75, "validity_after": 0.75, "reasked": 0.5,
                                     "verdicts_with_valid_citation": 1.0}
    assert citation_rates([replace(p, meta={}) for p in preds])["validity_before"] is None


def test_annotate_leaves_other_lines_alone() -> None:
    report = check_citations(GOOD, numbered_snippets(evidence()))
    out = annotate("Reasoning: x\n" + GOOD.split("Citations:\n")[1], report)
    assert out.startswith("Reasoning: x\n") and out.count("(source: ") == 2
    assert out.splitlines()[-1] == "Label: Refuted" and len(out.splitlines()) == 4
