"""Hungarian METEOR: reference figures of the official scorer on the FEVER-8 baseline, and unit checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.errors import UserError

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
BASELINE = SHARED / "data" / "fever8_baseline"


def _wordnet_or_skip() -> None:
    from sanctuary_local.evaluation.nltk_data import find_wordnet_dir

    try:
        find_wordnet_dir()
    except UserError as exc:
        pytest.skip(f"WordNet 3.0 not installed: {exc}")


@pytest.fixture(scope="module")
def baseline_report():
    if not BASELINE.is_dir():
        pytest.skip(f"{BASELINE} absent (shared data not available)")
    _wordnet_or_skip()
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions

    data = align(load_gold(BASELINE / "solution_dev_part_a.csv"), load_predictions(BASELINE / "submission_part_a.csv"))
    return evaluate(data, workers=2)


def test_reference_figures_match_official_scorer(baseline_report) -> None:
    # ../shared/README.md: Q-only 0.5431, Q+A 0.3680, old AVeriTeC score @0.25 0.5280.
    assert len(baseline_report.claims) == 250
    assert round(baseline_report.q_only, 4) == 0.5431
    assert round(baseline_report.qa, 4) == 0.3680
    assert round(baseline_report.averitec[0.25], 4) == 0.5280
    scores = [baseline_report.averitec[t] for t in sorted(baseline_report.averitec)]
    assert scores == sorted(scores, reverse=True)  # a higher bar never admits more claims


def test_gold_claims_json_gives_the_same_figures(baseline_report) -> None:
    claims = SHARED / "data" / "averitec" / "dev_part_a.json"
    if not claims.is_file():
        pytest.skip(f"{claims} absent")
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions

    # First 40 claims suffice: same per-claim utilities as the solution CSV.
    gold = load_gold(claims)[:40]
    pred = load_predictions(BASELINE / "submission_part_a.csv")
    report = evaluate(align(gold, pred), workers=1)
    by_id = {c.claim_id: c for c in baseline_report.claims}
    for c in report.claims:
        assert c.qa == pytest.approx(by_id[c.claim_id].qa, abs=1e-12)
        assert c.q_only == pytest.approx(by_id[c.claim_id].q_only, abs=1e-12)
    assert report.by_claim_type and all(0.0 <= v["averitec_score"] <= 1.0 for v in report.by_claim_type.values())


def test_meteor_matches_nltk_doc_example() -> None:
    _wordnet_or_skip()
    from sanctuary_local.evaluation.meteor import meteor

    hyp = "It is a guide to action which ensures that the military always obeys the commands of the party"
    ref = "It is a guide to action that ensures that the military will forever heed Party commands"
    assert round(meteor(ref, hyp), 4) == 0.6944  # nltk's own docstring value
    assert meteor("this is a cat", "non matching hypothesis") == 0.0


def test_word_tokenize_splits_sentences_like_nltk() -> None:
    from sanctuary_local.evaluation.tokenize import word_tokenize

    # Punkt keeps "Dr." (abbreviation) but splits at "ago."; Treebank splits "n't" and "$".
    assert word_tokenize("Dr. Smith didn't pay $5 ago. Then he left.") == (
        "Dr.", "Smith", "did", "n't", "pay", "$", "5", "ago", ".", "Then", "he", "left", ".",
    )  # fmt: skip


def test_hungarian_utility() -> None:
    from sanctuary_local.evaluation.meteor import hungarian_utility, question_strings

    m = np.array([[0.9, 0.8], [0.85, 0.1], [0.0, 0.0]])
    # best assignment: (0,1)+(1,0) = 1.65 over 2 gold strings
    assert hungarian_utility(m) == pytest.approx(1.65 / 2)
    assert hungarian_utility(np.zeros((0, 3))) == 0.0
    assert hungarian_utility(np.array([[1.0, 1.0, 1.0]])) == pytest.approx(1 / 3)  # unmatched gold count 0
    with pytest.raises(ValueError):
        hungarian_utility(np.zeros((2, 0)))
    assert question_strings([("a", "1"), ("a", "2"), ("b", "3")], dedup=True) == ["a", "b"]


def test_only_first_ten_predictions_count() -> None:
    _wordnet_or_skip()
    from sanctuary_local.evaluation.meteor import claim_utilities

    gold = [("Who won the election?", "Joe Biden won the 2020 election.")]
    filler = [("Unrelated question number?", "Nothing here.")] * 10
    _, qa_late = claim_utilities(filler + gold, gold)
    _, qa_early = claim_utilities(gold + filler, gold)
    assert qa_late < 0.5 < qa_early
