"""The per-pair TF-IDF verdict model (`verdict-model train --base tfidf --per-pair`, kind
`pair-tfidf`), trained for real by scikit-learn on ``tests/data/real_web_slice``: twelve train
claims with the FEVER-8 baseline's real retrieved evidence. Nothing needs ``../shared``."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.cli import main
from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model import pair_tfidf
from sanctuary_local.verdict_model.base import TrainSettings
from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput
from sanctuary_local.verdict_model.pair_encoder import pool
from sanctuary_local.verdict_model.store import load_model, read_card, resolve
from sanctuary_local.verdict_model.train import evidence_inputs, training_inputs

SLICE = Path(__file__).resolve().parents[1] / "data" / "real_web_slice"
CLAIMS, EVIDENCE = SLICE / "claims.json", SLICE / "evidence.csv"
SHIPPED = "packaged:verdict-tfidf-pairs"  # the default stack's member that reads each pair
SETTINGS = TrainSettings(**read_card(resolve(SHIPPED))["settings"])


@pytest.fixture(scope="module")
def web_slice() -> list:
    claims, _, _ = training_inputs(CLAIMS)
    xs, _ = evidence_inputs(claims, CLAIMS, EVIDENCE)
    assert len(xs) == 12 and all(len(x.pairs) == 10 for x in xs)
    return xs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pair_tfidf") / "m"
    rc = main(["verdict-model", "train", str(CLAIMS), "--out", str(out), "--no-gold", "--evidence", str(EVIDENCE),
               "--per-pair", "--c", "0.3", "--answer-words", "100"])
    assert rc in (0, None)
    return out


def test_train_writes_a_pair_tfidf_model_that_reads_back_what_was_fitted(model_dir: Path, web_slice: list) -> None:
    assert (SETTINGS.base, SETTINGS.per_pair, SETTINGS.c, SETTINGS.answer_words) == ("tfidf", True, 0.3, 100)
    card = json.loads((model_dir / "model_card.json").read_text())
    assert card["kind"] == "pair-tfidf" and card["settings"]["per_pair"] and card["settings"]["c"] == 0.3
    assert card["training"]["pairs"] == 120  # ten real pairs for each of the twelve claims
    vec, lr, loss = pair_tfidf.fit(web_slice, SETTINGS)
    assert card["training"]["loss"] == pytest.approx(loss, abs=1e-5)
    model = load_model(str(model_dir))
    got = model.predict_proba(web_slice)
    assert got.shape == (12, len(LABELS))
    np.testing.assert_allclose(got.sum(1), 1.0)
    np.testing.assert_allclose(got, pair_tfidf.predict(vec, lr.coef_, lr.intercept_, web_slice, SETTINGS), atol=1e-5)
    right = np.mean(got.argmax(1) == np.array([LABELS.index(x.label) for x in web_slice]))
    assert right >= 0.75  # it fits its own claims, not only a number


def test_the_training_loss_falls_step_by_step(web_slice: list) -> None:
    """The solver's steps, capped one at a time from the same start. At the shipped C (0.3)
    twelve claims converge in three steps and barely move the loss, so the steps are watched at
    C 10; the shipped setting's fall is checked too."""
    from dataclasses import replace

    def run(s: TrainSettings, caps: tuple[int, ...]) -> tuple[list[int], list[float]]:
        iters, losses = [], []
        for cap in caps:
            with warnings.catch_warnings():  # below convergence scikit-learn warns, as it should
                warnings.simplefilter("ignore")
                _, lr, loss = pair_tfidf.fit(web_slice, s, max_iter=cap)
            iters.append(int(np.max(lr.n_iter_)))
            losses.append(loss)
        return iters, losses

    iters, losses = run(replace(SETTINGS, c=10.0), (1, 2, 3, 4, 2000))
    assert iters[:4] == [1, 2, 3, 4] and iters[-1] > 4
    assert losses[0] < math.log(len(LABELS)) - 0.1  # one step below the uniform start
    for before, after in zip(losses, losses[1:]):
        assert after <= before + 1e-9, losses
    assert losses[-1] < 0.8 < losses[0], losses
    _, shipped = run(SETTINGS, (1, 2000))
    assert shipped[1] < shipped[0] < math.log(len(LABELS)), shipped


def test_a_claim_is_its_pairs_pooled(model_dir: Path, web_slice: list) -> None:
    """Each pair is read alone: the claim's probabilities are the renormalised geometric mean
    of what the model says of each of its pairs given alone."""
    model = load_model(str(model_dir))
    x = web_slice[0]
    each = model.predict_proba([VerdictInput(x.claim, (p,)) for p in x.pairs])
    np.testing.assert_allclose(model.predict_proba([x])[0], pool(each, "logmean"), atol=1e-12)
    assert not np.allclose(each[0], each[1])  # different pairs say different things
    alone = model.predict_proba([VerdictInput(x.claim, ())])  # no evidence: one empty pair, still a distribution
    assert alone.shape == (1, 4) and alone.sum() == pytest.approx(1.0)


def test_a_pairs_text_ties_the_answer_to_its_claim() -> None:
    x = VerdictInput("The mayor banned cars in Paris in 2020.",
                     (QAPair("Did Paris ban cars?", "No, Paris never banned cars; the mayor proposed limits."),))
    text = pair_tfidf.pair_text(x)
    assert text.startswith("Q: Did Paris ban cars? A: No, Paris never banned cars;")
    assert "xxparis" in text and "xxmayor" in text and "xxcars" in text and "xxbanned" in text
    assert "xxthe" not in text and "xxin" not in text  # words of three letters or fewer are not marked
    assert "nnno" in text and "nnnever" in text
    assert pair_tfidf.pair_text(VerdictInput("A claim.", ())) == ""

