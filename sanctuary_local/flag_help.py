"""Plain-language meaning of the flags a prediction carries (``Prediction.flags``).

A flag is ``kind`` or ``kind:value`` (``no_snippets:q2``, ``empty_documents:3``,
``hyde_llm_error: RuntimeError: …``). ``FLAG_TEXT`` maps a whole flag (for flags whose
value changes the meaning, e.g. ``evidence_placeholder:no_answer``) or its kind to one
sentence; add a line when a stage starts emitting a new flag. A flag not in the table
gets ``UNKNOWN_TEXT``. Which flags make a claim *degraded* (exit code 3, counted in the
summary and the report) is ``DEGRADING``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Flag prefixes that mark a claim as degraded (something failed; a fallback was used).
#: ``evidence_placeholder`` is not one: its cause (store_missing, retrieval_error, …) is
#: flagged on its own, and every query falling below the threshold is not a failure.
DEGRADING = (
    "store_missing", "store_problems", "no_documents", "retrieval_error",
    "hyde_llm_error", "hyde_claim_fallback", "verdict_llm_error", "verdict_label_fallback",
    "verdict_stance_failed",  # a retired mode's: runs made before still count it
)

FLAG_TEXT: dict[str, str] = {
    # run --evidence-from: stages 1-2 read from another system's evidence file
    "evidence_from": "the questions and answers come from another system's evidence file (stages 1-2 not run)",
    # stage 0: claim decomposition (decompose.enabled)
    "decompose_fallback": "the claim could not be split into parts; it was checked whole",
    "decompose_line_fallback": "the claim's parts were read line by line from malformed model output",
    "decompose_clamped": "the model gave more parts than allowed; the extra ones were dropped",
    "decompose_added": "the coverage check added parts the first split had missed",
    "decompose_not_exhaustive": "the coverage check still found parts of the claim missing",
    "decompose_check_error": "the coverage check of the claim's parts failed",
    "decompose_llm_error": "the decomposition model failed for this claim; it was checked whole",
    "decompose_parse_error": "the decomposition model's output could not be read; the claim was checked whole",
    "components": "the claim was split into this many parts, each labelled on its own",
    "components_reasked": "the verdict did not label every part and was asked once more",
    "components_unparsed": "some parts stayed unlabelled; the model's overall label was kept",
    # stage 1: HyDE questions
    "hyde_truncated": "question generation hit its token limit; fewer questions were asked",
    "hyde_repaired": "the generated questions were malformed JSON and were repaired",
    "hyde_line_fallback": "the generated questions were not JSON; they were read line by line",
    "hyde_claim_fallback": "no usable questions were generated; the claim itself was the only search query",
    "hyde_no_label": "question generation gave no provisional label",
    "hyde_placeholders_dropped": "template questions copied from the prompt ('Question-1') were dropped",
    "hyde_clamped": "more questions than allowed were generated; the extra ones were dropped",
    "hyde_few_questions": "fewer questions than the configured minimum were generated",
    "hyde_llm_error": "the question-generation model failed for this claim; the claim was the only search query",
    "hyde_parse_error": "the generated questions could not be read; the claim was the only search query",
    # stage 2: retrieval
    "store_missing": "the knowledge store has no file for this claim, so there was no evidence to search",
    "store_problems": "this many lines of the claim's store file could not be read (`sanctuary-local inspect` lists them)",
    "no_documents": "the claim's knowledge store holds no documents",
    "empty_documents": "this many documents in the claim's store have no text and were skipped",
    "no_queries": "there were no questions to search with",
    "no_hits": "keyword search (BM25) found nothing for these questions",
    "no_snippets": "for these questions nothing in the store was similar enough to count as evidence",
    "retrieval_error": "retrieval failed for this claim",
    "trust_dropped": "snippets from sources rated untrustworthy were dropped (retrieval.trust_file)",
    "trust_reweighted": "snippet scores were re-weighted by source trust (retrieval.trust_file)",
    "evidence_placeholder:below_threshold": "no snippet passed the similarity threshold; the best one below it stands in as evidence",
    "evidence_placeholder:no_answer": "no snippet was found; the official evidence says 'No answer could be found.'",
    # follow-up questions (followup.enabled)
    "followup_questions": "questions that found nothing got this many follow-up questions",
    "followup_found": "this many follow-up questions found evidence",
    "followup_unusable": "the follow-up questions could not be used",
    "followup_duplicates_dropped": "snippets the follow-up questions found twice were dropped",
    "followup_llm_error": "the follow-up question model failed for this claim",
    "followup_parse_error": "the follow-up questions could not be read",
    "followup_retrieval_error": "retrieval for the follow-up questions failed",
    # stage 3: verdict
    "verdict_label_inferred": "the verdict had no 'Label:' line; its label was read from the text",
    "verdict_label_reasked": "the verdict named no label and was asked once more for it",
    "verdict_label_fallback": "the verdict named no label; the provisional label (or the majority class) was used",
    "verdict_llm_error": "the verdict model failed for this claim",
    "verdict_truncated": "the verdict hit its token limit before it finished",
    "verdict_trimmed": "the evidence did not fit the model's context; the lowest-scored snippets were left out of the prompt",
    # stage 3's retired modes "scored" and "stance" (docs/verdicts.md): only in runs made before
    "verdict_scored": "the label was chosen from the model's scores for the four labels",
    "verdict_scored_first_token": "the label scores compare the labels' first tokens only",
    "verdict_stance": "the label was chosen from the model's scored stance towards each passage, judged one by one",
    "verdict_stance_failed": "no passage could be judged (the model returned no scores): the label rests on stage 1 alone",
    "verdict_text_parsed": "no label scores were available; the label was read from the verdict's text",
    "suspected_injection": ("evidence contains instruction-like text aimed at the model; unless verdict.flagged is 'show', "
                            "it was cut from what the model read, but the verdict may still have been targeted"),
    "citations_reasked": "the verdict's citations failed the check and it was asked once more",
    "citation_violations": "this many of the verdict's citations do not match their evidence",
    "citations_missing": "the verdict cites no evidence",
    # whole run
    "budget_level": "the latency budget lowered this claim's settings to this level (fewer questions, snippets or tokens)",
}

UNKNOWN_TEXT = "no description for this flag yet (see docs/llm.md and docs/retrieval.md)"


def flag_kind(flag: str) -> str:
    """The table key of ``flag``: the whole flag when the table has it, else what precedes ``:``."""
    return flag if flag in FLAG_TEXT else flag.split(":", 1)[0].strip()


def explain(flag: str) -> str:
    """One sentence saying what ``flag`` means."""
    return FLAG_TEXT.get(flag_kind(flag), UNKNOWN_TEXT)


def legend(flags: Iterable[str]) -> list[tuple[str, list[str], str]]:
    """``(kind, short values, sentence)`` once per kind, in first-seen order. Short values
    (``q2``, ``3``) are listed; long ones (error messages) are left to predictions.json."""
    seen: dict[str, list[str]] = {}
    for flag in flags:
        kind = flag_kind(flag)
        values = seen.setdefault(kind, [])
        value = flag[len(kind):].lstrip(":").strip()
        if value and len(value) <= 12 and value not in values:
            values.append(value)
    return [(kind, values, FLAG_TEXT.get(kind, UNKNOWN_TEXT)) for kind, values in seen.items()]


def degraded_reasons(flags: Sequence[str]) -> list[str]:
    """The kinds of a prediction's flags that make it degraded (``DEGRADING``), sorted."""
    return sorted({f.split(":")[0] for f in flags if f.split(":")[0].startswith(DEGRADING)})
