"""Resume and the run fingerprint end to end, in-process (issue 29): the stage-1/3 LLM is
the stub of ``test_run_faults`` (the point is which records are kept), retrieval is real.

Another worker or thread count resumes without redoing a claim; a store page changed
under the same path is refused, and ``--force`` then keeps the completed claims and
redoes the rest; a resumed ``--budget-s`` run plans with what its first attempt spent."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.run.budget import BudgetPlanner
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import STATE_FILE
from tests.hostile.test_run_faults import EXAMPLES, TINY, fault_before, use_stub

STAGES = [STAGE_FILES[s] for s in ("hyde", "retrieval", "verdict")]


@pytest.fixture(autouse=True)
def stub_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    use_stub(monkeypatch)


def _opts(out: Path, store: Path = EXAMPLES / "store", **kw: Any) -> RunOptions:
    return RunOptions(claims=EXAMPLES / "claims.json", store=store, out=out, profile=TINY, quiet=True, **kw)


def _lines(out: Path, name: str) -> dict[int, bytes]:
    data = (out / name).read_bytes() if (out / name).exists() else b""
    return {orjson.loads(line)["claim_index"]: line for line in data.splitlines()}


def test_another_worker_or_thread_count_resumes_without_redoing_a_claim(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_pipeline(_opts(out, workers=1, limit=2))
    before = {name: (out / name).read_bytes() for name in STAGES}
    threads = {"hyde": {"llm": {"n_threads": 1}}, "verdict": {"llm": {"n_threads": 1}}}
    summary = run_pipeline(_opts(out, workers=2, limit=2, overrides=threads))
    assert summary.n_claims == 2
    assert {name: (out / name).read_bytes() for name in STAGES} == before  # nothing recomputed
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["status"] == "complete" and len(manifest["attempts"]) == 2
    assert manifest["code"]["id"] == manifest["fingerprint"]["code"]
    run_pipeline(_opts(out, workers=2, limit=4))  # a larger selection resumes too
    assert sorted(_lines(out, STAGE_FILES["verdict"])) == [0, 1, 2, 3]


def test_a_changed_store_page_is_refused_and_force_keeps_the_completed_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    shutil.copytree(EXAMPLES / "store", store)
    out, stop = tmp_path / "run", StopRequest()
    fault_before(monkeypatch, STAGE_FILES["verdict"], 1, lambda: stop.request(signal.SIGINT))
    with pytest.raises(RunInterrupted):
        run_pipeline(_opts(out, store, workers=1, limit=2), stop=stop)
    monkeypatch.undo()
    use_stub(monkeypatch)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["status"] == "interrupted" and manifest["code"]["id"]  # says what made the partial files
    assert sorted(_lines(out, STAGE_FILES["verdict"])) == [0] and sorted(_lines(out, STAGE_FILES["hyde"])) == [0, 1]
    completed = _lines(out, STAGE_FILES["verdict"])[0]

    page = store / "1.json"
    page.write_bytes(page.read_bytes().replace(b"the", b"a", 1))  # same path, other pages
    with pytest.raises(UserError, match=r"changed: store \(claims 1\)"):
        run_pipeline(_opts(out, store, workers=1, limit=2))
    assert sorted(_lines(out, STAGE_FILES["hyde"])) == [0, 1]  # refused: nothing discarded
    summary = run_pipeline(_opts(out, store, workers=1, limit=2, force=True))
    assert summary.n_claims == 2
    assert _lines(out, STAGE_FILES["verdict"])[0] == completed  # the completed claim was kept as it was
    state = orjson.loads((out / STATE_FILE).read_bytes())
    assert state["history"][-1]["kept_claims"] == [0] and state["history"][-1]["changed"] == ["store (claims 1)"]
    run_pipeline(_opts(out, store, workers=1, limit=2))  # the new fingerprint resumes


def test_a_resumed_budget_run_counts_what_its_first_attempt_spent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, stop = tmp_path / "run", StopRequest()
    fault_before(monkeypatch, STAGE_FILES["verdict"], 3, lambda: stop.request(signal.SIGTERM))
    with pytest.raises(RunInterrupted):
        run_pipeline(_opts(out, workers=1, budget_s=50.0), stop=stop)
    monkeypatch.undo()
    use_stub(monkeypatch)
    first = orjson.loads((out / "manifest.json").read_bytes())["attempts"][0]
    assert first["wall_s"] > 0 and first["stages"]["verdict"]["n"] == 3
    seen: list[BudgetPlanner] = []
    real = BudgetPlanner.choose

    def choose(self: BudgetPlanner, *args: Any, **kw: Any) -> int:
        seen.append(self)
        return real(self, *args, **kw)

    monkeypatch.setattr(BudgetPlanner, "choose", choose)
    run_pipeline(_opts(out, workers=1, budget_s=50.0))
    planner = seen[0]
    assert planner.prior_s == pytest.approx(first["wall_s"])
    assert planner.prior_per_claim["verdict"] == pytest.approx(first["stages"]["verdict"]["total_s"] / 3)
    assert planner.pending == {"decompose": 4, "hyde": 0, "retrieval": 0, "followup": 4, "verdict": 1}
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert [a["status"] for a in manifest["attempts"]] == ["interrupted", "complete"]
