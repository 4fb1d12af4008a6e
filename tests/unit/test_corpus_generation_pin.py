"""A corpus index read while `index` rebuilds it: a reader keeps the generation it opened.

A rerun of `index` renumbers the units (a new file sorts before the old ones) and removes the
generation it replaced. Before: an open ``CorpusIndex`` mapped ``texts.bin`` only on first
use (FileNotFoundError once its generation was removed), a pickled one (a retrieval worker)
reopened whatever generation was live by then, and `check` cited its sources from a fresh
``CorpusIndex(corpus)``: a rebuild during a check crashed it with a ValueError traceback
(or cited other documents). No models needed."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.corpus.build import build_index
from sanctuary_local.corpus.index import CorpusIndex
from sanctuary_local.corpus.source import CorpusSource, open_source
from sanctuary_local.errors import UserError
from sanctuary_local.records import EvidenceItem, Prediction


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for word in ("apple", "banana", "cherry", "grape"):
        (docs / f"{word}.txt").write_text(f"The {word} is a fruit; {word} trees grow on {word} farms.\n")
    (docs / "eiffel.txt").write_text("The Eiffel tower is 330 metres tall and stands in Paris.\n")
    return docs


def _rebuild_renumbered(docs: Path, ix: Path) -> None:
    """A new file that sorts first: every unit number now names another document."""
    (docs / "0.txt").write_text("Apples are red.\n")
    build_index(docs, ix)


def _unit_of(index: CorpusIndex, name: str) -> int:
    return next(u for u in range(index.n_units) if index.unit_meta(u)["path"] == name)


def test_an_open_index_reads_its_generation_after_it_was_removed_by_hand(tmp_path: Path) -> None:
    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    index = CorpusIndex(ix)
    unit = _unit_of(index, "eiffel.txt")
    _rebuild_renumbered(docs, ix)
    shutil.rmtree(ix / index.generation)  # a rerun keeps it (the lease); a user may still remove it
    assert index.unit_meta(unit)["path"] == "eiffel.txt"
    assert index.unit_text(unit).startswith("The Eiffel tower")


def test_a_rebuild_keeps_the_generation_an_open_index_reads_and_the_next_removes_it(tmp_path: Path) -> None:
    """Before: the rebuild removed it at once, and a run's retrieval workers, which open the
    run's generation when they start, flagged their claims store_missing."""
    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    index = CorpusIndex(ix)
    old = index.generation
    _rebuild_renumbered(docs, ix)
    assert (ix / old / "manifest.json").is_file()
    report = orjson.loads((ix / "index_report.json").read_bytes())
    assert report["still_read"] == [old]
    worker = pickle.loads(pickle.dumps(index))  # a worker starting now gets the run's generation
    assert worker.generation == old != CorpusIndex(ix).generation
    assert worker.unit_meta(_unit_of(index, "eiffel.txt"))["path"] == "eiffel.txt"
    worker.close()
    index.close()
    (docs / "1.txt").write_text("Bananas are yellow.\n")
    build_index(docs, ix)  # no reader left: the next run removes it
    assert not (ix / old).exists()
    assert orjson.loads((ix / "index_report.json").read_bytes())["still_read"] == []


def test_a_collected_index_drops_its_lease(tmp_path: Path) -> None:
    """serve opens an index per page and never closes it: collection must release it."""
    import gc

    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    old = CorpusIndex(ix).generation  # collected at once
    gc.collect()
    _rebuild_renumbered(docs, ix)
    assert not (ix / old).exists()


def test_a_pickled_index_reopens_its_own_generation_never_the_live_one(tmp_path: Path) -> None:
    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    index = CorpusIndex(ix)
    shipped = pickle.dumps(index)  # what a retrieval worker gets
    kept = tmp_path / "kept"
    shutil.copytree(ix / index.generation, kept)
    unit = _unit_of(index, "eiffel.txt")
    index.close()
    _rebuild_renumbered(docs, ix)
    with pytest.raises(UserError, match="is gone"):
        pickle.loads(shipped)  # not the new generation, whose unit numbers name other files
    shutil.copytree(kept, ix / index.generation)  # the old generation still on disk: it is the one reopened
    again = pickle.loads(shipped)
    assert again.generation == index.generation != CorpusIndex(ix).generation
    assert again.unit_meta(unit)["path"] == "eiffel.txt"


def test_index_says_which_generation_it_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    index = CorpusIndex(ix)
    (docs / "0.txt").write_text("Apples are red.\n")
    assert main(["index", str(docs), "--out", str(ix), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"kept {index.generation}: a check, run or serve still reads it" in " ".join(err.split())
    index.close()


def test_a_runs_retrieval_workers_open_the_generation_the_run_opened(tmp_path: Path) -> None:
    from sanctuary_local.corpus.source import retrieval_path

    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    source = open_source(ix)
    path = retrieval_path(source, ix)
    assert Path(path) == ix / source.index.generation
    assert isinstance(open_source(path), CorpusSource)
    assert open_source(path).fingerprint(0) == source.fingerprint(0)  # the same run identity
    assert retrieval_path(object(), "store.zip") == "store.zip"  # a knowledge store: as given


def test_check_cites_from_the_generation_it_retrieved_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`index` reruns while `check` runs: the printed sources are the run's, not the new
    generation's (before: ValueError traceback, "unit 4 [0:55] does not hold the snippet")."""
    import sanctuary_local.pipeline as pipeline

    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)

    def fake_run(opts, stop=None):  # retrieval from the generation the run was given, then a rebuild
        index = open_source(opts.store).index
        unit = _unit_of(index, "eiffel.txt")
        text = index.unit_text(unit)[:55]
        item = EvidenceItem("How tall is it?", text, index.unit_url(unit), text, unit, 0, 55, 0.9)
        _rebuild_renumbered(docs, ix)
        Path(opts.out).mkdir(parents=True)
        pred = Prediction(0, "0", "The Eiffel tower is 330 metres tall.", "Supported", (item,), "because")
        return SimpleNamespace(predictions=[pred], exit_code=0)

    monkeypatch.setattr(pipeline, "run_pipeline", fake_run)
    out = tmp_path / "check"
    code = main(["check", "The Eiffel tower is 330 metres tall.", "--corpus", str(ix), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "eiffel.txt: characters 0-55" in printed


def test_serves_resident_corpus_keeps_one_generation_per_index(tmp_path: Path) -> None:
    """serve's engine is handed each check's pinned generation: before, it kept every one it
    had seen open for its whole life, so no rerun of `index` could remove them."""
    import gc

    from sanctuary_local.corpus.index import pinned
    from sanctuary_local.serve.resident import ResidentEngine

    docs, ix = _folder(tmp_path), tmp_path / "ix"
    build_index(docs, ix)
    engine = ResidentEngine()
    first = pinned(CorpusIndex(ix))
    assert engine.source(first) is engine.source(first)  # kept open between checks
    _rebuild_renumbered(docs, ix)  # kept: the engine reads it
    assert first.is_dir()
    second = pinned(CorpusIndex(ix))
    assert engine.source(second).index.generation == second.name  # the next check: the new one
    gc.collect()
    (docs / "1.txt").write_text("Bananas are yellow.\n")
    build_index(docs, ix)
    assert not first.exists()  # no reader left
    assert second.is_dir()  # the engine still reads it
    engine.shutdown()
