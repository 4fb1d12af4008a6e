"""The evidence contract of stage 3 (verdict.citations): citation parsing, the deterministic
checker (ids, verbatim quotes up to whitespace, exact source spans) and the one re-ask.
A scripted backend stands in for the model here (parsing only); the real model runs the
mode in tests/e2e/test_llm_e2e.py."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.llm.base import ChatRequest, ChatResult
from sanctuary_local.prompts import load_prompt
from sanctuary_local.records import Chunk, EvidenceSnippet, HydeResult
from sanctuary_local.modes.citations import (
    CitationReport, annotate, check_citations, citation_rates, find_quote, parse_citations,
)
from sanctuary_local.stages.evidence_view import drop_order, numbered_snippets
from sanctuary_local.modes import verdict_steps
from sanctuary_local.stages.verdict import line
from sanctuary_local.stages.verdict.prompt import build_verdict_request
from tests.unit.test_hyde import CLAIM, ScriptedBackend
from tests.unit.test_verdict import DOC, HYDE, evidence


def run_verdict(claims, hyde, evidence, backend, cfg, parts=None):
    """Stage 3 with the steps of the modes its config and parts turn on, as a run has it."""
    decomposed = parts is not None and any(p is not None for p in parts)
    return line.run_verdict(claims, hyde, evidence, backend, cfg, parts, modes=verdict_steps(cfg, decomposed))


CFG = VerdictConfig(citations=True, label_reask="")


class FailingReask(ScriptedBackend):
    """Answers the first call; every later call fails."""

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        if self.calls:
            return [ChatResult("", finish_reason="error", error="down") for _ in requests]
        return super().generate(requests)


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
    ("the moon is rock, NASA says", "The moon is rock, NASA says"),  # the first letter's case may differ
    ("The Moon is rock", None),  # the rest's case matters
    ("rock, nasa says", None),
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
    assert lowest[1] == "1.2" and drop_order(ev)[0] == (0, 1)  # stage 3 drops the lowest-scored first
    kept = numbered_snippets(ev, {(0, 1)})  # as Draft.dropped carries it (meta["dropped"]: [[0, 1]])
    assert list(kept) == ["1.1", "2.1"] and kept["2.1"] is ev.queries[1].snippets[0]
    assert numbered_snippets(ev, [[0, 0]])["1.1"] is ev.queries[0].snippets[1]  # the next one moves up


def test_cited_prompt_is_used_only_with_the_switch() -> None:
    plain, _ = build_verdict_request(CLAIM, HYDE, evidence(), VerdictConfig(), ScriptedBackend([]))
    cited, _ = build_verdict_request(CLAIM, HYDE, evidence(), CFG, ScriptedBackend([]))
    assert "Citations:" not in plain.messages[-1].content and "Citations:" in cited.messages[-1].content


def test_clean_citations_are_not_reasked() -> None:
    backend = Sequenced([GOOD])
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], backend, CFG)
    assert len(backend.calls) == 1 and p.label == "Refuted"
    c = p.meta["citations"]
    assert c["before"] == c["after"] == {"n": 2, "valid": 2, "validity": 1.0, "clean": True} and not c["reasked"]
    assert c["reask"] is None and not c["replaced"] and "first_raw_text" not in c
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
    assert c["before"]["validity"] == 0.5 and c["after"]["validity"] == 1.0 and c["reasked"] and c["replaced"]
    assert c["reask"] == c["after"] and c["first_raw_text"] == bad and p.meta["raw_text"] == GOOD
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
    assert citation_rates(preds) == {"validity_before": 0.75, "validity_after": 0.75, "clean_before": 0.5,
                                     "clean_after": 0.5, "reasked": 0.5, "verdicts_with_valid_citation": 1.0}
    assert citation_rates([replace(p, meta={}) for p in preds])["validity_before"] is None


def test_annotate_leaves_other_lines_alone() -> None:
    report = check_citations(GOOD, numbered_snippets(evidence()))
    out = annotate("Reasoning: x\n" + GOOD.split("Citations:\n")[1], report)
    assert out.startswith("Reasoning: x\n") and out.count("(source: ") == 2
    assert out.splitlines()[-1] == "Label: Refuted" and len(out.splitlines()) == 4


# ------------------------------------------------------------ the checker's typed report

def test_each_check_says_ids_ok_quote_found_and_both_spans() -> None:
    snippets = numbered_snippets(evidence())
    text = ('- Rock. [Evidence 1.1] "moon is rock, NASA"\n- Gone. [Evidence 9.9] "The moon is rock, NASA says"\n'
            '- Cheese. [Evidence 1.2] "The moon is rock, NASA says"\n- Short. [Evidence 1.1] "rock"')
    ok, missing, absent, short = check_citations(text, snippets).checks
    assert (ok.ids_ok, ok.quote_found, ok.ok) == (True, True, True)
    assert (missing.ids_ok, missing.quote_found, missing.ok) == (False, False, False)
    assert (absent.ids_ok, absent.quote_found) == (True, False) and (short.ids_ok, short.quote_found) == (True, False)
    chunk = snippets["1.1"].chunk
    assert chunk.start > 0 and chunk.text[ok.snippet_start:ok.snippet_end] == "moon is rock, NASA"
    assert (ok.start, ok.end) == (chunk.start + ok.snippet_start, chunk.start + ok.snippet_end)
    assert DOC[ok.start:ok.end] == "moon is rock, NASA" and ok.url == chunk.url and ok.evidence_id == "1.1"
    assert all((c.start, c.end, c.snippet_start) == (-1, -1, -1) for c in (missing, absent, short))
    d = ok.to_dict()
    assert d["ok"] and d["ids_ok"] and d["quote_found"] and (d["start"], d["end"]) == (ok.start, ok.end)


def test_a_verbatim_quote_under_the_wrong_id_fails_and_says_where_it_is() -> None:
    snippets = numbered_snippets(evidence())
    (c,) = check_citations('- x [Evidence 1.1] "382 kg of lunar rock"', snippets).checks
    assert c.ids_ok and not c.quote_found and c.found_in == ("2.1",) and c.start == -1
    assert "(it is in Evidence 2.1)" in c.problem and "(it is in Evidence 2.1)" in CitationReport((c,)).feedback()
    (c,) = check_citations('- x [Evidence 1.1] "382 kg of lunar cheese"', snippets).checks
    assert c.found_in == () and c.problem == "the quote is not in the cited evidence word for word"


def test_a_citation_naming_several_ids_resolves_to_the_one_holding_the_quote() -> None:
    (c,) = check_citations('- x [Evidence 1.2, 2.1] "382 kg of lunar rock"', numbered_snippets(evidence())).checks
    assert c.ok and c.evidence_id == "2.1" and c.url == "https://example.org/apollo"
    (c,) = check_citations('- x [Evidence 1.1, 7.1] "382 kg of lunar rock"', numbered_snippets(evidence())).checks
    assert not c.ids_ok and "no Evidence 7.1" in c.problem  # one unknown id fails the citation


# A page with every kind of whitespace (tabs, CRLF, NBSP, runs), curly quotes, accents,
# CJK, an emoji (one code point beyond the BMP) and a decomposed é (e + U+0301).
UNI = ("Intro\u00a0line.\r\n\r\nLe  maire a dit :\t« Nous construirons\ttrois hôpitaux » — pas deux.\n"
       "中文 句子 在 这里。 Emoji 🌍 here,   and cafe\u0301 decomposed, “curly quoted” and it’s fine.\n\tEnd.")


def _uni_snippets(start: int) -> dict[str, EvidenceSnippet]:
    return {"1.1": EvidenceSnippet(Chunk(0, 3, "https://example.fr/page", start, len(UNI), UNI[start:]), 1.0)}


@pytest.mark.parametrize(("quote", "source"), [
    ("Nous construirons trois hôpitaux", "Nous construirons\ttrois hôpitaux"),
    ('« Nous construirons trois hôpitaux »', "« Nous construirons\ttrois hôpitaux »"),
    ("中文 句子 在 这里。", "中文 句子 在 这里。"),
    ("Emoji 🌍 here, and cafe\u0301 decomposed", "Emoji 🌍 here,   and cafe\u0301 decomposed"),
    ('"curly quoted" and it\'s fine', "“curly quoted” and it’s fine"),  # straight for curly quotes
    ("pas deux. 中文", "pas deux.\n中文"),
    ("Le maire a dit", "Le  maire a dit"),
    ("le maire a dit", "Le  maire a dit"),  # a quote may change its first letter's case
    ("Pas deux. 中文", "pas deux.\n中文"),
    ("it’s fine. End", "it’s fine.\n\tEnd"),
])
def test_spans_reconstruct_the_source_text_exactly(quote: str, source: str) -> None:
    start = UNI.index("Le  maire")
    (c,) = check_citations(f'- fact [Evidence 1.1] "{quote}"', _uni_snippets(start)).checks
    assert c.ok, c.problem
    assert UNI[c.start:c.end] == source and UNI[start:][c.snippet_start:c.snippet_end] == source
    assert (c.doc_position, c.url) == (3, "https://example.fr/page")


@pytest.mark.parametrize("quote", [
    "Nous Construirons trois hôpitaux",  # case is part of verbatim (but for the first letter)
    "maire A dit",
    "Nous construirons trois hopitaux",  # so are accents
    "Emoji 🌍 here, and café decomposed",  # composed é for the page's e + U+0301: no Unicode normalisation
    "Nous construirons ... hôpitaux",  # no ellipsis joins
    "Nous construironstrois hôpitaux",  # whitespace may vary in length, not vanish
])
def test_quotes_that_are_not_verbatim_fail(quote: str) -> None:
    (c,) = check_citations(f'- fact [Evidence 1.1] "{quote}"', _uni_snippets(0)).checks
    assert c.ids_ok and not c.quote_found and c.start == -1


def test_every_whitespace_respelled_window_of_a_page_maps_back_exactly() -> None:
    """Each run of 2-7 words of UNI, quoted with its whitespace as single spaces and its
    curly quotes straight, resolves to a span whose text is that window as the page has it."""
    chunk_start = UNI.index("maire")
    text = UNI[chunk_start:]
    words = [m.span() for m in re.finditer(r"\S+", text)]
    checked = 0
    for i in range(len(words)):
        for n in range(2, 8):
            if i + n > len(words):
                break
            a, b = words[i][0], words[i + n - 1][1]
            window = text[a:b]
            quote = " ".join(window.split()).translate(str.maketrans("“”’", "\"\"'"))
            if window.endswith((".", "…")) or len(quote) < 8 or quote.startswith("."):
                continue  # a trailing full stop is not part of the matched span: checked elsewhere
            span = find_quote(quote, text)
            assert span is not None, quote
            if text.count(window) == 1 and " ".join(text.split()).count(" ".join(window.split())) == 1:
                assert text[span[0]:span[1]] == window == UNI[chunk_start + span[0]:chunk_start + span[1]]
                checked += 1
    assert checked > 50


# ------------------------------------------------------------------- parsing model output

@pytest.mark.parametrize("text", [
    "", None, "Label: Refuted", "\x00\ufffd]]][[[ \"\" [Evidence", '- a fact [Evidence 1.1]', "[Evidence 1.1] [Evidence 1.2]",
    '- fact [Evidence one.two] "quoted words here"', '- fact [Evidence 1] "quoted words here"',
    "Citations:\n-\n- [\n- ]\"", "x" * 20000,
])
def test_garbage_output_yields_no_citations_and_no_crash(text: str | None) -> None:
    assert parse_citations(text) == []
    report = check_citations(text, numbered_snippets(evidence()))
    assert report.checks == () and report.validity is None and not report.clean
    assert "no Citations block" in report.feedback()


def test_partial_output_cut_inside_a_quote_is_checked_as_far_as_it_goes() -> None:
    cut = GOOD[: GOOD.index("back 382")].rstrip()  # max_tokens ran out inside the second quote
    assert cut.endswith('"brought')
    first, second = check_citations(cut, numbered_snippets(evidence())).checks
    assert first.ok and second.citation.quote == "brought" and not second.ok  # too short to prove anything


def test_the_label_parser_reads_the_cited_format() -> None:
    from sanctuary_local.stages.verdict.parsing import parse_verdict_output

    label, justification, flags = parse_verdict_output(GOOD, None)
    assert (label, flags) == ("Refuted", ()) and justification.startswith("1. The claim says cheese.")
    assert 'Citations:\n- The moon is rock. [Evidence 1.1] "The moon is rock, NASA says"' in justification
    # A citation whose sub-claim or quote names a label does not decide the verdict.
    tricky = GOOD.replace("The moon is rock. [", "Not Supported by NASA. [")
    assert parse_verdict_output(tricky, None)[0] == "Refuted"


# ---------------------------------------------------------------------------- the re-ask

def test_only_failing_verdicts_are_reasked_in_one_call_and_a_worse_answer_is_not_kept() -> None:
    bad = GOOD.replace("Evidence 2.1", "Evidence 4.1")
    worse = GOOD.replace("Evidence 2.1", "Evidence 4.1").replace("Evidence 1.1", "Evidence 5.1")
    claims = [CLAIM, replace(CLAIM, index=8), replace(CLAIM, index=9)]
    hydes = [replace(HYDE, claim_index=i) for i in (7, 8, 9)]
    backend = Sequenced([GOOD, bad, bad, worse, GOOD])
    p7, p8, p9 = run_verdict(claims, hydes, [evidence(7), evidence(8), evidence(9)], backend, CFG)
    assert [len(c) for c in backend.calls] == [3, 2]  # one call for the wave, one for both re-asks
    assert [r.tag for r in backend.calls[1]] == ["verdict:8:citations", "verdict:9:citations"]
    c8, c9 = p8.meta["citations"], p9.meta["citations"]
    assert c8["reasked"] and not c8["replaced"] and c8["reask"]["validity"] == 0.0 and c8["after"] == c8["before"]
    assert p8.meta["raw_text"] == bad and c8["reask_raw_text"] == worse and "citation_violations:1" in p8.flags
    assert "reask_raw_text" not in p9.meta["citations"] and p9.meta["citations"]["first_raw_text"] == bad
    assert c9["replaced"] and c9["after"]["clean"] and p9.meta["raw_text"] == GOOD
    assert not p7.meta["citations"]["reasked"] and "citations_reasked" not in p7.flags


def test_label_reask_comes_first_and_a_replacing_answer_drops_its_flag() -> None:
    no_label = GOOD.split("Label:")[0].rstrip()
    cfg = replace(CFG, label_reask="verdict_label.txt")
    backend = Sequenced([no_label, "Refuted"])  # clean once the label is added: no citation re-ask
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], backend, cfg)
    assert len(backend.calls) == 2 and "verdict_label_reasked" in p.flags and p.meta["citations"]["after"]["clean"]
    bad = no_label.replace("Evidence 2.1", "Evidence 4.1")
    backend = Sequenced([bad, "Refuted", GOOD.replace("Refuted", "Not Enough Evidence")])
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], backend, cfg)
    assert len(backend.calls) == 3 and backend.calls[2][0].messages[-2].content == bad + "\nLabel: Refuted"
    assert p.label == "Not Enough Evidence" and "verdict_label_reasked" not in p.flags  # the new answer's label
    assert p.meta["citations"]["first_raw_text"] == bad + "\nLabel: Refuted"


def test_a_failed_verdict_or_reask_call_is_not_a_citation_record() -> None:
    (p,) = run_verdict([CLAIM], [HYDE], [evidence()], ScriptedBackend([RuntimeError("down")]), CFG)
    assert "citations" not in p.meta and not any(f.startswith("citation") for f in p.flags)
    bad = GOOD.replace("Evidence 2.1", "Evidence 4.1")
    (q,) = run_verdict([CLAIM], [HYDE], [evidence()], FailingReask([bad]), CFG)
    c = q.meta["citations"]
    assert c["reasked"] and c["reask"] is None and not c["replaced"] and "citation_violations:1" in q.flags


def test_the_recorded_prompt_hash_follows_the_mode() -> None:
    from sanctuary_local.stages.verdict.prompt_hash import config_prompt_hash, verdict_prompt_hash

    (plain,) = run_verdict([CLAIM], [HYDE], [evidence()], Sequenced([GOOD]), VerdictConfig())
    (cited,) = run_verdict([CLAIM], [HYDE], [evidence()], Sequenced([GOOD]), CFG)
    assert plain.meta["verdict_prompt_hash"] == verdict_prompt_hash() == config_prompt_hash(VerdictConfig())
    assert cited.meta["verdict_prompt_hash"] == verdict_prompt_hash("verdict_cited.txt", "", "verdict_cite_fix.txt")
    assert cited.meta["verdict_prompt_hash"] != plain.meta["verdict_prompt_hash"]


# -------------------------------------------------------------- outputs and the switch

def test_cited_predictions_keep_every_official_row_valid(tmp_path) -> None:
    from sanctuary_local.io.leaderboard import check_official_rows, write_leaderboard_csv
    from sanctuary_local.io.predictions import (
        MAX_EVIDENCE, predictions_to_leaderboard, prediction_to_official, read_predictions_json, write_predictions_json,
    )
    from tests.reference.test_official_outputs import DOC as ODOC, _edge_cases

    claims, ev = _edge_cases()
    hyde = [HydeResult(c.index, "Refuted", ()) for c in claims]
    text = 'Reasoning:\n1. x\nCitations:\n- Rock. [Evidence 1.1] "The moon is rock, NASA says."\nLabel: Refuted'
    preds = run_verdict(claims, hyde, ev, Sequenced([text] * len(claims) * 2), CFG)
    path = write_leaderboard_csv(predictions_to_leaderboard(preds), tmp_path / "submission.csv")
    assert check_official_rows(path, max_pairs=MAX_EVIDENCE) == []
    assert read_predictions_json(write_predictions_json(preds, tmp_path / "p.json")) == preds
    for p in preds:
        row = prediction_to_official(p)
        assert set(row) >= {"claim_id", "claim", "evidence", "pred_label"} and isinstance(row["justification"], str)
        for item in (i for i in row["meta"]["citations"]["items"] if i["ok"]):
            assert ODOC[item["start"]:item["end"]] == "The moon\tis rock,\n\n  NASA says"  # a tab and newlines
            assert f"(source: {item['url']}, characters {item['start']}-{item['end']})" in row["justification"]
    assert {p.claim_index for p in preds if p.meta["citations"]["after"]["clean"]} == {4, 5}  # the others cite nothing real


def test_the_switch_is_off_by_default_and_set_from_the_command_line() -> None:
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.config.settings import PROFILE_NAMES, load_config
    from sanctuary_local.errors import UserError

    assert not any(load_config(name).verdict.citations for name in PROFILE_NAMES)
    assert load_config("cpu", parse_overrides(["verdict.mode=paper", "verdict.citations=true"])).verdict.citations is True
    # a trained verdict writes no text citations could check: one line says what to set
    with pytest.raises(UserError, match=r"cannot be combined with verdict.citations.*use verdict.mode = 'paper'"):
        load_config("cpu", parse_overrides(["verdict.mode=trained", "verdict.trained_model=m", "verdict.citations=true"]))
    with pytest.raises(UserError, match="verdict.citations must be true or false"):
        load_config("cpu", parse_overrides(["verdict.citations=True"]))  # TOML has no True: a string
