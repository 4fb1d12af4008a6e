"""The focused reading of answers (``verdict-model train --answer-focus``): which words a model reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from sanctuary_local.cli import main
from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput, focused, render
from sanctuary_local.verdict_model.store import load_model

REPO = Path(__file__).resolve().parents[2]
FILLER = " ".join(f"Filler sentence number {k} talks about weather patterns somewhere else." for k in range(8))
ANSWER = "The tower in Paris was completed in 1889 for the World Fair."
CLAIM = "The Eiffel Tower was completed in 1889."
QUESTION = "When was the Eiffel Tower in Paris completed?"


def test_focused_reads_the_sentences_nearest_the_question_not_the_first_words() -> None:
    chunk = f"{FILLER} {ANSWER} {FILLER}"
    assert len(chunk.split()) > 48
    got = focused(chunk, QUESTION, CLAIM, 48)
    assert ANSWER in got and len(got.replace(" …", "").split()) <= 48
    assert ANSWER not in " ".join(chunk.split()[:48]), "the first 48 words would have missed the answer"


def test_focused_keeps_a_short_answer_whole_and_takes_the_first_of_equal_runs() -> None:
    assert focused(ANSWER, QUESTION, CLAIM, 48) == ANSWER
    nothing_shared = " ".join(f"Sentence {k} is about rain and clouds today." for k in range(12))
    assert focused(nothing_shared, QUESTION, CLAIM, 48).startswith("Sentence 0 ")


def test_a_model_trained_with_answer_focus_records_it_and_reads_focused_answers(tmp_path: Path) -> None:
    claims = json.loads((REPO / "examples" / "claims.json").read_text())
    (tmp_path / "train.json").write_text(json.dumps(claims * 4))
    rc = main(["verdict-model", "train", str(tmp_path / "train.json"), "--out", str(tmp_path / "model"),
               "--answer-focus"])
    assert rc in (0, None)
    card = json.loads((tmp_path / "model" / "model_card.json").read_text())
    assert card["settings"]["answer_focus"] is True
    model = load_model(str(tmp_path / "model"))
    assert model.answer_focus is True
    x = VerdictInput(CLAIM, (QAPair(QUESTION, f"{FILLER} {ANSWER} {FILLER}"),))
    already = replace(x, pairs=(QAPair(QUESTION, focused(x.pairs[0].answer, QUESTION, CLAIM, 48)),))
    assert render(x, focus=True) == render(already)
    np.testing.assert_allclose(model.predict_proba([x]), model.predict_proba([already]))
    model.answer_focus = False  # the same weights reading the first words see other text
    assert not np.allclose(model.predict_proba([x]), model.predict_proba([already]))
