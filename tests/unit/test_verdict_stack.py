"""Stacks of verdict models and their members: `verdict-model train --base stance`, `--pairs 0`
and `verdict-model stack`, through the real CLI, scikit-learn and the shipped models.

The training claims are the examples made six times over (one claim of each label), so
nothing needs ../shared.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.cli import main
from sanctuary_local.records import LABELS
from tests.support.verdict_model_support import claims_file, error_line


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A TF-IDF model, a claim-only TF-IDF model (--pairs 0), a stance model, and a stack of the three."""
    d = tmp_path_factory.mktemp("stack")
    claims = claims_file(d / "train.json")
    out = {"claims": claims}
    for name, extra in (("full", []), ("claim", ["--pairs", "0"]), ("stance", ["--base", "stance", "--c", "0.1"])):
        out[name] = d / name
        assert main(["verdict-model", "train", str(claims), "--out", str(out[name]), *extra]) in (0, None)
    out["stack"] = d / "stack"
    assert main(["verdict-model", "stack", "--out", str(out["stack"]), "--member", str(out["full"]),
                 "--member", f"{out['claim']}=2", "--member", str(out["stance"])]) in (0, None)
    return out


def _inputs(claims: Path):  # noqa: ANN202
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.verdict_model.evaluate import labelled

    return labelled(read_claims(claims), str(claims))


def test_stance_model_reads_back_what_was_fitted(models: dict[str, Path]) -> None:
    """The stored arrays give the probabilities the fitted scaler and regression give."""
    from sanctuary_local.verdict_model import stance
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.store import load_model

    card = json.loads((models["stance"] / "model_card.json").read_text())
    assert card["kind"] == "stance" and card["settings"]["c"] == 0.1
    xs = _inputs(models["claims"])
    scaler, lr = stance.fit(xs, TrainSettings(base="stance", c=0.1))
    expected = lr.predict_proba(scaler.transform(stance.features(xs)))
    got = load_model(str(models["stance"])).predict_proba(xs)
    assert got.shape == (len(xs), len(LABELS))
    np.testing.assert_allclose(got, expected, atol=1e-9)


def test_stance_features_read_each_pair() -> None:
    """A refuting answer raises the refutation cues; the claim's numbers missing from an answer
    that has numbers are noticed; pooling is over the pairs given."""
    from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput
    from sanctuary_local.verdict_model.stance import N_PAIR, claim_features

    claim = "The bridge cost 40 million dollars."
    plain = VerdictInput(claim, (QAPair("What did the bridge cost?", "The bridge cost 40 million dollars in 2019."),))
    hoax = VerdictInput(claim, (QAPair("What did the bridge cost?", "This is a hoax: it cost 95 million, fact checkers say."),))
    a, b = claim_features(plain), claim_features(hoax)
    assert a.shape == b.shape == (3 * N_PAIR + 9,)
    assert b[0] > a[0] == 0  # refutation cues, mean over pairs
    assert b[14] == 1.0 and a[14] == 0.0  # numbers, none of the claim's
    assert claim_features(VerdictInput(claim, ()))[-1] == 0  # no pairs: zero rows, counted as 0


def test_claim_only_model_ignores_the_evidence(models: dict[str, Path]) -> None:
    from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput
    from sanctuary_local.verdict_model.store import load_model

    m = load_model(str(models["claim"]))
    assert m.max_pairs == 0
    x = VerdictInput("A claim about vaccines and 5G masts.", (QAPair("Is it true?", "It is false and a hoax."),))
    bare = VerdictInput(x.claim, ())
    np.testing.assert_array_equal(m.predict_proba([x]), m.predict_proba([bare]))
    full = load_model(str(models["full"]))
    assert not np.array_equal(full.predict_proba([x]), full.predict_proba([bare]))


def test_stack_is_the_weighted_geometric_mean_of_its_members(models: dict[str, Path]) -> None:
    from sanctuary_local.verdict_model.store import load_model

    xs = _inputs(models["claims"])
    p = [load_model(str(models[k])).predict_proba(xs) for k in ("full", "claim", "stance")]
    w = np.array([1, 2, 1]) / 4
    z = sum(wk * np.log(pk) for wk, pk in zip(w, p))
    expected = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    stack = load_model(str(models["stack"]))
    np.testing.assert_allclose(stack.predict_proba(xs), expected, atol=1e-9)
    members = json.loads((models["stack"] / "members.json").read_text())["members"]
    assert [m["weight"] for m in members] == [1.0, 2.0, 1.0]
    assert all(len(m["files_sha256"]) == 64 and Path(m["model"]).is_absolute() for m in members)


def test_stack_evaluates_and_fits_confidence(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    claims = models["claims"]
    assert main(["verdict-model", "eval", "--claims", str(claims), "--model", str(models["stack"]),
                 "--json", str(out)]) in (0, None)
    assert json.loads(out.read_text())["model"]["n"] == 24
    copy = tmp_path / "stack"
    shutil.copytree(models["stack"], copy)
    assert main(["verdict-model", "fit-confidence", str(copy), "--claims", str(claims), "--indices", "0:24",
                 "--target", "0.5"]) in (0, None)
    rule = json.loads((copy / "confidence_rule.json").read_text())
    assert rule["threshold"] is None or 0 <= rule["threshold"] <= 1


def test_a_member_changed_after_stacking_is_refused(models: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    member = tmp_path / "member"
    shutil.copytree(models["full"], member)
    stack = tmp_path / "stack"
    assert main(["verdict-model", "stack", "--out", str(stack), "--member", str(member),
                 "--member", str(models["stance"])]) in (0, None)
    assert main(["verdict-model", "train", str(models["claims"]), "--out", str(member), "--c", "0.3"]) in (0, None)
    line = error_line(capsys, ["verdict-model", "eval", "--claims", str(models["claims"]), "--model", str(stack)])
    assert "is not the one it was made with" in line and "member" in line


@pytest.mark.parametrize("args, expected", [
    (["--member", "{stack}"], "is a stack; a stack's members are single models"),
    (["--member", "{full}=0"], "finite weight > 0"),
    (["--member", "{full}=heavy"], "must be a number"),
    (["--member", "{full}", "--member", "{full}"], "names each member once"),
    (["--member", "{tmp}/absent"], "not found"),
])
def test_bad_members_are_one_line_and_write_nothing(models: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str], args: list[str],
                                                    expected: str) -> None:
    out = tmp_path / "new"
    argv = [a.format(stack=models["stack"], full=models["full"], tmp=tmp_path) for a in args]
    assert expected in error_line(capsys, ["verdict-model", "stack", "--out", str(out), *argv])
    assert not out.exists()


def test_the_shipped_default_is_a_stack_of_shipped_pinned_members() -> None:
    """The cpu default's members are shipped models with their own cards and commands, each
    trained on train only, and the stack reads as the geometric mean of them."""
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput
    from sanctuary_local.verdict_model.stack import combine
    from sanctuary_local.verdict_model.store import directory_sha256, load_model, read_card, read_confidence, resolve

    name = load_config("cpu").verdict.trained_model
    stack = load_model(name)
    card = read_card(resolve(name))
    assert card["kind"] == "stack" and card["command"].startswith("sanctuary-local verdict-model stack")
    assert read_confidence(stack.directory, stack.sha256)["threshold"] is not None
    for m in card["members"]:
        assert m["model"].startswith("packaged:")
        member = read_card(resolve(m["model"]))
        assert member["command"].startswith("sanctuary-local verdict-model train")
        assert member["files_sha256"] == directory_sha256(resolve(m["model"])) == m["files_sha256"]
        assert "dev" not in Path(member["train_data"]["path"]).name
        assert all("train_0-999" in Path(e["path"]).name for e in member["retrieved_evidence"])
    x = VerdictInput("Drinking hot water cures the flu.", (QAPair("Does hot water cure flu?", "No, doctors say it does not."),))
    expected = combine([m.predict_proba([x]) for m in stack.members], stack.weights)
    np.testing.assert_allclose(stack.predict_proba([x]), expected)


@pytest.mark.parametrize("members, expected", [
    ({"members": []}, "not a stack: it needs 'members'"),
    ({"members": [{"model": "x", "files_sha256": "0" * 64, "weight": -1}]}, "member 0 needs"),
    ({"members": [{"model": "absent-dir", "files_sha256": "0" * 64, "weight": 1}]}, "not found"),
    ([1, 2], "not a stack"),
])
def test_a_hand_edited_stack_is_one_line(models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         members: object, expected: str) -> None:
    """A members.json edited and its card re-pinned to match (so the hash check passes) is
    still read with care: one line naming what is wrong, never a traceback."""
    from sanctuary_local.verdict_model.store import directory_sha256

    stack = tmp_path / "stack"
    shutil.copytree(models["stack"], stack)
    (stack / "members.json").write_text(json.dumps(members))
    card = json.loads((stack / "model_card.json").read_text())
    card["files_sha256"] = directory_sha256(stack)
    (stack / "model_card.json").write_text(json.dumps(card))
    assert expected in error_line(capsys, ["verdict-model", "eval", "--claims", str(models["claims"]), "--model", str(stack)])
