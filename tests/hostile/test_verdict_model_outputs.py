"""What `verdict-model evidence | fit-rule | eval` write: never over an input (the claims file,
the knowledge store, a shipped model), never blocking on a FIFO, and one error line naming the
path, before any work, for a path that cannot be written. Real TF-IDF models and the real stage 2
over examples/store."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from tests.support.verdict_model_support import claims_file as _claims, error_line as _error

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "examples" / "store"


def _tree(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(p.relative_to(d).as_posix().encode() + (p.read_bytes() if p.is_file() else b"/"))
    return h.hexdigest()


def _cli(argv: list[str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """The command in its own process: a FIFO opened the plain way blocks it for ever."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sanctuary_local.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("outputs")
    assert main(["verdict-model", "train", str(_claims(d / "train.json")), "--out", str(d / "model")]) in (0, None)
    return d / "model"


def test_evidence_out_that_is_an_input_is_refused_and_left_alone(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--out the claims file itself erased it (its one line read as a torn evidence line, cut
    away, then evidence appended); --out inside the store wrote into the store."""
    claims = _claims(tmp_path / "train.json")
    before, store_before = claims.read_bytes(), _tree(STORE)
    ev = ["verdict-model", "evidence", str(claims), "--store", str(STORE)]
    assert "is the input" in _error(capsys, [*ev, "--out", str(claims)])
    assert claims.read_bytes() == before
    assert "is inside the input" in _error(capsys, [*ev, "--out", str(STORE / "ev.jsonl")])
    assert _tree(STORE) == store_before
    other = _claims(tmp_path / "other.json", copies=1)  # any one-line file that is not evidence
    kept = other.read_bytes()
    assert f"{other}:1: not an evidence line" in _error(capsys, [*ev, "--out", str(other)])
    assert other.read_bytes() == kept
    (tmp_path / "adir").mkdir()
    assert "adir" in _error(capsys, [*ev, "--out", str(tmp_path / "adir")])
    assert "is not a directory" in _error(capsys, [*ev, "--out", str(claims / "ev.jsonl")])


def test_a_fifo_is_refused_not_waited_on(model: Path, tmp_path: Path) -> None:
    claims = _claims(tmp_path / "train.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for argv in (["verdict-model", "evidence", str(claims), "--store", str(STORE), "--out", str(fifo)],
                 ["verdict-model", "fit-rule", str(model), "--claims", str(claims), "--indices", "0:8",
                  "--evidence", str(fifo)],
                 ["verdict-model", "eval", "--claims", str(claims), "--model", str(model), "--json", str(fifo)]):
        r = _cli(argv)
        assert r.returncode == 2 and "Traceback" not in r.stderr and str(fifo) in r.stderr, (argv, r.stderr)
    r = _cli(["verdict-model", "train", str(claims), "--out", str(tmp_path / "m"), "--evidence", str(fifo)])
    assert "is a FIFO (named pipe), not an evidence file" in " ".join(r.stderr.split()), r.stderr  # not "no such file"


def test_fit_rule_never_writes_into_a_shipped_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sanctuary_local.verdict_model.store import packaged_dir

    claims = _claims(tmp_path / "dev.json", copies=2)
    shipped = packaged_dir() / "verdict-tfidf"
    before = _tree(shipped)
    for name in ("packaged:verdict-tfidf", str(shipped)):
        err = _error(capsys, ["verdict-model", "fit-rule", name, "--claims", str(claims), "--indices", "0:8"])
        assert "shipped" in err, err
    assert _tree(shipped) == before


def test_fit_rule_bad_evidence_and_rule_paths_are_one_line(model: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    claims = _claims(tmp_path / "dev.json", copies=2)
    fit = ["verdict-model", "fit-rule", str(model), "--claims", str(claims), "--indices", "0:8"]
    assert "no such evidence file" in _error(capsys, [*fit, "--evidence", str(tmp_path / "nope.jsonl")])
    assert "is a directory" in _error(capsys, [*fit, "--evidence", str(tmp_path)])
    (model / "decision_rule.json").mkdir()
    try:
        assert "decision_rule.json" in _error(capsys, fit)
    finally:
        (model / "decision_rule.json").rmdir()


def test_eval_json_is_checked_before_the_work(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sanctuary_local.verdict_model.store import packaged_dir

    claims = _claims(tmp_path / "dev.json", copies=1)
    ev = ["verdict-model", "eval", "--claims", str(claims)]
    assert "is a directory" in _error(capsys, [*ev, "--model", str(model), "--json", str(tmp_path)])
    shipped = packaged_dir() / "verdict-tfidf"
    before = _tree(shipped)
    err = _error(capsys, [*ev, "--model", "packaged:verdict-tfidf", "--json", str(shipped / "metrics.json")])
    assert "is inside the input" in err and _tree(shipped) == before
    assert main([*ev, "--model", str(model), "--json", str(tmp_path / "new" / "m.json")]) in (0, None)
    assert json.loads((tmp_path / "new" / "m.json").read_text())["model"]["n"] == 4


def test_an_open_ended_range_runs_to_the_last_claim(model: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """'--indices 2:' (either bound may be left out, as --claims-range) said "0:9223372036854775807
    is outside its 8 claims"; it now means claims 2 to the end, and one past the end is one line."""
    claims = _claims(tmp_path / "dev.json", copies=2)
    out = tmp_path / "m.json"
    assert main(["verdict-model", "eval", "--claims", str(claims), "--model", str(model), "--indices", "2:",
                 "--json", str(out)]) in (0, None)
    got = json.loads(out.read_text())
    assert got["indices"] == "2:8" and got["model"]["n"] == 6
    err = _error(capsys, ["verdict-model", "eval", "--claims", str(claims), "--model", str(model), "--indices", "8:"])
    assert f"{claims}: --indices 8: is outside its 8 claims" in err, err
    assert main(["verdict-model", "fit-rule", str(model), "--claims", str(claims), "--indices", "4:"]) in (0, None)
    assert json.loads((model / "decision_rule.json").read_text())["fitted_on"] == "dev.json[4:8]"
    (model / "decision_rule.json").unlink()
    assert main(["verdict-model", "train", str(claims), "--out", str(tmp_path / "m2"), "--eval-claims", str(claims),
                 "--eval-indices", "4:"]) in (0, None)
    assert json.loads((tmp_path / "m2" / "model_card.json").read_text())["eval"]["dev.json[4:8]"]["model"]["n"] == 4


def test_evidence_of_another_claims_file_is_refused(model: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An evidence file is keyed by claim index alone: one built from another claims file (or the
    same file reordered) was joined to the wrong claims and their labels without a word. Its
    queries are each claim's gold questions, so a record whose questions are not its claim's is
    one line, in train and in fit-rule."""
    claims = _claims(tmp_path / "train.json")
    ev = tmp_path / "ev.jsonl"
    assert main(["verdict-model", "evidence", str(claims), "--store", str(STORE), "--out", str(ev)]) in (0, None)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(list(reversed(json.loads(claims.read_text())))))
    err = _error(capsys, ["verdict-model", "train", str(other), "--out", str(tmp_path / "m"), "--evidence", str(ev)])
    assert f"{ev}" in err and "not the gold questions of claim" in err and str(other) in err, err
    assert not (tmp_path / "m").exists()
    err = _error(capsys, ["verdict-model", "fit-rule", str(model), "--claims", str(other), "--indices", "0:24",
                          "--evidence", str(ev)])
    assert "not the gold questions of claim" in err and not (model / "decision_rule.json").exists(), err
    assert main(["verdict-model", "train", str(claims), "--out", str(tmp_path / "ok"), "--evidence", str(ev)]) in (0, None)
    kept = ev.read_bytes()  # resuming the file from the other claims file would mix the two
    err = _error(capsys, ["verdict-model", "evidence", str(other), "--store", str(STORE), "--out", str(ev)])
    assert "not the gold questions of claim" in err and ev.read_bytes() == kept, err


def test_a_store_without_the_claims_is_one_line_not_an_empty_file(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The wrong --store (one holding none of the claims) said "evidence for 0 claims", exit 0,
    and left an empty evidence file."""
    claims = _claims(tmp_path / "train.json")
    (tmp_path / "store").mkdir()
    out = tmp_path / "ev.jsonl"
    err = _error(capsys, ["verdict-model", "evidence", str(claims), "--store", str(tmp_path / "store"), "--out", str(out)])
    assert "holds none of the" in err and str(tmp_path / "store") in err, err
    assert not out.exists()
    data = json.loads(claims.read_text())
    for entry in data:
        entry["questions"] = []
    claims.write_text(json.dumps(data))
    err = _error(capsys, ["verdict-model", "evidence", str(claims), "--store", str(STORE), "--out", str(out)])
    assert f"{claims}: none of the 24 claims has gold questions" in err and not out.exists(), err


def test_a_signal_between_publishs_two_renames_waits_for_the_second(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C delivered right after the old model is moved aside: the new one is still renamed
    into place (and the old one removed) before KeyboardInterrupt, never a missing --out."""
    import signal

    from sanctuary_local.verdict_model import store

    out, tmp = tmp_path / "model", tmp_path / ".model.partial-1"
    for d, text in ((out, "old"), (tmp, "new")):
        d.mkdir()
        (d / "weights").write_text(text)
    real, done = os.replace, []

    def replace(src: Path, dst: Path) -> None:
        real(src, dst)
        done.append(Path(dst).name)
        if len(done) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(store.os, "replace", replace)
    previous, term = signal.signal(signal.SIGINT, signal.default_int_handler), signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.publish(tmp, out)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are restored
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == [f".model.old-{os.getpid()}", "model"]
    assert (out / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
