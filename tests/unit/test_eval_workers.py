"""``eval --workers N``: never more METEOR processes than usable cores or claims.

Audit finding: the pool uses the fork context, which starts all ``max_workers`` processes
at once, and N was passed as it was: ``--workers 100000`` tried to fork 100 000 processes;
``--workers 0`` or ``-3`` ran silently in-process. These tests fail on the code before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sanctuary_local.cli import main
from sanctuary_local.evaluation import meteor


class _Pool:
    started: list[int] = []

    def __init__(self, max_workers: int, **_: Any) -> None:
        _Pool.started.append(max_workers)

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def map(self, fn: Any, jobs: Any, chunksize: int = 1) -> Any:  # noqa: ARG002 - the pool's signature
        return map(fn, jobs)


def test_workers_are_capped_by_cores_and_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meteor, "ProcessPoolExecutor", _Pool)
    monkeypatch.setattr(meteor.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    pairs = [[("Is the moon made of rock?", "Yes, of rock.")] for _ in range(10)]
    _Pool.started.clear()
    meteor.batch_utilities(pairs, pairs, workers=100_000)
    assert _Pool.started == [4]
    meteor.batch_utilities(pairs[:9], pairs[:9], workers=None)
    assert _Pool.started == [4, 4]


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_is_an_error(tmp_path: Path, workers: str, capsys: pytest.CaptureFixture[str]) -> None:
    pred, gold = tmp_path / "p.json", tmp_path / "g.json"
    pred.write_text("[]", encoding="utf-8")
    gold.write_text("[]", encoding="utf-8")
    assert main(["eval", "--pred", str(pred), "--gold", str(gold), "--workers", workers]) == 2
    assert f"--workers must be >= 1 (got {workers})" in capsys.readouterr().err
