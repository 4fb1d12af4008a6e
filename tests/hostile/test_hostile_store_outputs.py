"""Hostile knowledge stores and hostile output directories (issue 27, defects 1-4, 9-11).

Invariants, each checked on every hostile input below:
- the input gives either a ``UserError`` (exit code 2) whose message is one line naming
  the file, or the claim goes on with the problem recorded (``StoreLoad.problems``);
- nothing is written outside the output directory and no file is overwritten through a
  symlink planted at an output path;
- no read hangs longer than 5 s on a FIFO or a device;
- no input makes memory blow up (a child process under a 1 GiB address-space limit, or
  tracemalloc for the line cap);
- outputs get the mode the umask gives (0644 under umask 022), not 0600.
No LLM is loaded; every test takes seconds.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from sanctuary_local.cli import main as cli_main
from sanctuary_local.errors import UserError
from sanctuary_local.io import store as store_mod
from sanctuary_local.io.leaderboard import LeaderboardRow, atomic_write_bytes, write_leaderboard_csv
from sanctuary_local.io.predictions import write_predictions_json
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import HydeResult, Prediction, Query
from sanctuary_local.report.build import write_report
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import STATE_FILE, StageFile, check_state

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DEADLINE_S = 5.0
EVIL = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
GOOD_DOC = {"claim_id": "0", "type": "search", "query": "q", "url": "http://a", "url2text": ["one", "two"]}
VICTIM_TEXT = "precious data outside --out\n"


# ----------------------------------------------------------------------- helpers


def _one_line_naming(exc: BaseException, *names: str) -> None:
    msg = str(exc)
    assert "\n" not in msg, f"not one line: {msg!r}"
    for name in names:
        assert name in msg, f"{name!r} not named in {msg!r}"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _unblock_fifo(path: Path) -> None:
    """Let a reader stuck in open()/read() of FIFO ``path`` go on (it then reads EOF)."""
    for _ in range(50):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError:
            time.sleep(0.05)


def _with_deadline(fn: Callable[[], Any], fifo: Path | None = None) -> dict[str, Any]:
    """Run ``fn`` in a thread; fail when it runs past DEADLINE_S (a FIFO it waits on is
    then unblocked so the thread ends). Returns {"value": …} or {"error": exc}."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(DEADLINE_S)
    hung = t.is_alive()
    if hung and fifo is not None:
        _unblock_fifo(fifo)
        t.join(DEADLINE_S)
    assert not hung, f"hung for more than {DEADLINE_S} s"
    out["seconds"] = time.monotonic() - t0
    return out


_CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
t0 = time.monotonic()
try:
{body}
    out = {{"ok": True}}
except MemoryError:
    out = {{"ok": False, "kind": "MemoryError", "message": ""}}
except Exception as exc:
    from sanctuary_local.errors import UserError
    kind = "UserError" if isinstance(exc, UserError) else type(exc).__name__
    out = {{"ok": False, "kind": kind, "message": str(exc)}}
out["seconds"] = time.monotonic() - t0
# VmHWM, this process's own peak: ru_maxrss keeps the forking parent's peak across exec,
# so a big pytest process (models loaded by earlier tests) would count against the child.
out["maxrss_mb"] = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0] / 1024
print(json.dumps(out))
"""


def _in_child(body: str, limit: int = 1 << 30, timeout: float = 60) -> dict[str, Any]:
    """Run ``body`` (Python, indented 4) in a child limited to ``limit`` bytes of address space."""
    code = _CHILD.format(limit=limit, body=body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    victim = outside / name
    victim.write_text(VICTIM_TEXT, "utf-8")
    return victim


def _plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def _pred(i: int = 0) -> Prediction:
    return Prediction(claim_index=i, claim_id=str(i), claim=f"claim {i}", label="Refuted", justification="Label: Refuted")


def _evidence_record(i: int, **chunk: Any) -> dict[str, Any]:
    c = {"claim_index": i, "doc_position": 0, "url": "http://a", "start": 0, "end": 3, "text": "one", **chunk}
    q = {"claim_index": i, "number": 0, "question": "Q?", "answers": []}
    return {"claim_index": i, "queries": [{"query": q, "snippets": [{"chunk": c, "score": 0.5}]}], "flags": []}


def _run_dir(tmp_path: Path, store: Path | str | None, **chunk: Any) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_predictions_json([_pred(0)], run / "predictions.json")
    line = {"claim_index": 0, "record": _evidence_record(0, **chunk), "extra": {}}
    (run / STAGE_FILES["retrieval"]).write_bytes(orjson.dumps(line) + b"\n")
    if store is not None:
        (run / STATE_FILE).write_bytes(orjson.dumps({"fingerprint": {"store": str(store)}}))
    return run


# ------------------------------------------------- defect 1: XSS in the HTML report


def _no_markup(text: str, name: str) -> None:
    """EVIL's tags never appear as tags (escaped, they are text: &lt;script&gt;)."""
    low = text.lower()
    assert "<script" not in low and "<img" not in low, f"{name}: hostile markup written as markup"


@pytest.mark.parametrize("store_kind", ["claim_file_missing", "claim_file_present", "no_store"])
def test_report_escapes_non_integer_spans(tmp_path: Path, store_kind: str) -> None:
    """A stage-2 chunk whose start/end/doc_position is a string holding markup: the page
    holds it as text (escaped) or not at all, and the report is still written."""
    store = tmp_path / "store"
    store.mkdir()
    if store_kind == "claim_file_present":
        (store / "0.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n")
    run = _run_dir(tmp_path, None if store_kind == "no_store" else store, start=EVIL, end=EVIL, doc_position=EVIL)
    summary = write_report(run)
    pages = {p.name: p.read_text("utf-8") for p in summary.index.parent.iterdir()}
    assert set(pages) == {"index.html", "claim_0.html"}
    for name, text in pages.items():
        _no_markup(text, name)


def test_report_escapes_non_numeric_score_and_text(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_predictions_json([_pred(0)], run / "predictions.json")
    rec = _evidence_record(0, url=EVIL, text=EVIL, start=-5, end=10**9)
    rec["queries"][0]["query"]["question"] = EVIL
    (run / STAGE_FILES["retrieval"]).write_bytes(orjson.dumps({"claim_index": 0, "record": rec}) + b"\n")
    text = (write_report(run).index.parent / "claim_0.html").read_text("utf-8")
    _no_markup(text, "claim_0.html")
    assert "&lt;script&gt;" in text, "the hostile text is shown, as text"


# ------------------------------------------------------- defect 2: symlinked outputs


def test_report_pages_are_not_written_through_symlinks(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, None)
    victims = {name: _victim(tmp_path, f"{name}.victim") for name in ("index.html", "claim_0.html")}
    for name, victim in victims.items():
        _plant(run / "report" / name, victim)
    try:
        write_report(run)
    except UserError as exc:
        _one_line_naming(exc, "report")
    for name, victim in victims.items():
        assert victim.read_text("utf-8") == VICTIM_TEXT, f"{name} was written through its symlink"


@pytest.mark.parametrize("writer", ["predictions.json", "submission.csv", "run_state.json", "inspect.json"])
def test_atomic_outputs_replace_a_planted_symlink(tmp_path: Path, writer: str) -> None:
    out = tmp_path / "out"
    victim = _victim(tmp_path)
    link = _plant(out / writer, victim)
    if writer == "predictions.json":
        write_predictions_json([_pred(0)], link)
    elif writer == "submission.csv":
        write_leaderboard_csv([LeaderboardRow("0", "c", "", "Refuted", "pred")], link)
    elif writer == "run_state.json":
        (out / STATE_FILE).unlink()
        _plant(out / STATE_FILE, victim)
        check_state(out, {"store": "x"}, force=True)
    else:
        atomic_write_bytes(link, b"{}\n")
    assert victim.read_text("utf-8") == VICTIM_TEXT
    assert not (out / writer).is_symlink()


def test_stage_file_append_never_writes_through_a_symlink(tmp_path: Path) -> None:
    out = tmp_path / "out"
    victim = _victim(tmp_path)
    link = _plant(out / STAGE_FILES["hyde"], victim)
    try:
        sf = StageFile(link, HydeResult.from_dict)
        sf.append(0, HydeResult(0, "Refuted", (Query(0, 0, "q?", ()),)))
    except UserError as exc:
        _one_line_naming(exc, str(link))
    assert victim.read_text("utf-8") == VICTIM_TEXT


def test_stage_file_repair_never_truncates_through_a_symlink(tmp_path: Path) -> None:
    """A torn last line is cut on resume: never in a file outside --out."""
    out = tmp_path / "out"
    victim = _victim(tmp_path)
    victim.write_text("no newline at the end, looks torn", "utf-8")
    link = _plant(out / STAGE_FILES["hyde"], victim)
    try:
        StageFile(link, HydeResult.from_dict)
    except UserError as exc:
        _one_line_naming(exc, str(link))
    assert victim.read_text("utf-8") == "no newline at the end, looks torn"


def test_run_log_and_config_are_not_written_through_symlinks(tmp_path: Path) -> None:
    import logging

    from sanctuary_local.config.settings import load_config
    from sanctuary_local.run.options import RunOptions
    from sanctuary_local.run.reporting import RunReporter

    out = tmp_path / "out"
    victims = {name: _victim(tmp_path, f"{name}.victim") for name in ("run.log", "config.json")}
    for name, victim in victims.items():
        _plant(out / name, victim)
    root = logging.getLogger("sanctuary_local")
    before = list(root.handlers)
    try:
        rep = RunReporter(out, load_config("cpu"), RunOptions(claims=Path("c"), store=Path("s"), out=out), quiet=True)
        logging.getLogger("sanctuary_local").info("a line for run.log")
        rep.close_progress()
    except UserError as exc:
        _one_line_naming(exc, str(out))
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
                h.close()
    for name, victim in victims.items():
        assert victim.read_text("utf-8") == VICTIM_TEXT, f"{name} was written through its symlink"


def test_bench_outputs_are_not_written_through_symlinks(tmp_path: Path) -> None:
    from sanctuary_local.machine import bench

    timings = {"n_claims": 1, "wall_s": 3.0, "stages": {s: {"per_claim": {"mean": 1.0, "p50": 1.0, "p95": 1.0}}
                                                        for s in bench.STAGES}}
    try:
        res = bench.summarize(timings, "cpu", "t")
    except (KeyError, TypeError, UserError):
        pytest.skip("bench.summarize needs a fuller timings.json")
    out = tmp_path / "results"
    victims = {n: _victim(tmp_path, f"{n}.victim") for n in ("bench_t.json", "bench_t.md", "bench_t.png")}
    for name, victim in victims.items():
        _plant(out / name, victim)
    bench.write_result(res, out)
    for name, victim in victims.items():
        assert victim.read_text("utf-8") == VICTIM_TEXT, f"{name} was written through its symlink"


def test_eval_outputs_are_not_written_through_symlinks(tmp_path: Path) -> None:
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.predictions import gold_to_solution, leaderboard_to_predictions

    gold = read_claims(EXAMPLES / "claims.json")[:2]
    pred = tmp_path / "pred.json"
    write_predictions_json(leaderboard_to_predictions(gold_to_solution(gold)), pred)
    out = tmp_path / "eval"
    victims = {n: _victim(tmp_path, f"{n}.victim") for n in ("metrics.json", "per_claim.csv", "confusion.png")}
    for name, victim in victims.items():
        _plant(out / name, victim)
    rc = cli_main(["eval", "--pred", str(pred), "--gold", str(EXAMPLES / "claims.json"), "--out", str(out),
                   "--workers", "1", "--claims-range", "0:2"])
    assert rc in (0, 2)
    for name, victim in victims.items():
        assert victim.read_text("utf-8") == VICTIM_TEXT, f"{name} was written through its symlink"


# ------------------------------------------------------ defect 3: FIFOs and devices


def test_store_file_that_is_a_fifo_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "0.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n")
    fifo = _fifo(store / "5.json")
    ks = KnowledgeStore(store)
    res = _with_deadline(lambda: (ks.load(5), ks.fingerprint(5), ks.n_bytes(5)), fifo)
    assert "error" not in res, res.get("error")
    load = res["value"][0]
    assert load.documents == [] and len(load.problems) == 1
    assert "5.json" in str(load.problems[0]) and "FIFO" in str(load.problems[0]) and "\n" not in str(load.problems[0])
    assert ks.load(0).documents, "the other claims go on"


def test_store_path_that_is_a_fifo_is_a_one_line_error(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "store.zip")
    res = _with_deadline(lambda: KnowledgeStore(fifo), fifo)
    assert isinstance(res.get("error"), UserError), res
    _one_line_naming(res["error"], str(fifo))


def test_cli_inspect_on_a_fifo_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path / "store")
    res = _with_deadline(lambda: cli_main(["inspect", "--store", str(fifo)]), fifo)
    assert res.get("value") == 2, res
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(fifo) in err


def test_dev_zero_as_the_store_path_is_a_one_line_error() -> None:
    res = _in_child(
        "    from sanctuary_local.io.store import KnowledgeStore\n"
        "    KnowledgeStore('/dev/zero')\n")
    assert res["kind"] == "UserError" and "/dev/zero" in res["message"] and "\n" not in res["message"], res
    assert res["seconds"] < DEADLINE_S


def test_dev_zero_as_a_store_file_is_a_problem(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "3.json").symlink_to("/dev/zero")
    res = _in_child(
        "    from sanctuary_local.io.store import KnowledgeStore\n"
        f"    ks = KnowledgeStore({str(store)!r})\n"
        "    load = ks.load(3)\n"
        "    ks.fingerprint(3)\n"
        "    assert load.documents == [] and len(load.problems) == 1, load\n"
        "    p = str(load.problems[0])\n"
        "    assert '3.json' in p and 'character device' in p, p\n")
    assert res["ok"], res
    assert res["seconds"] < DEADLINE_S


def test_dev_zero_through_run_state_json_is_named_on_the_pages(tmp_path: Path) -> None:
    """`report` reads the store the run used from run_state.json: /dev/zero there is a
    store problem stated on every page, not 5 GB of memory."""
    run = _run_dir(tmp_path, "/dev/zero")
    res = _in_child(
        "    from pathlib import Path\n"
        "    from sanctuary_local.report.build import write_report\n"
        f"    s = write_report(Path({str(run)!r}))\n"
        "    assert '/dev/zero' in s.store_problem, s\n")
    assert res["ok"], res
    assert res["seconds"] < DEADLINE_S


@pytest.mark.parametrize("name", [STATE_FILE, "config.json", "timings.json"])
def test_run_files_linked_to_dev_zero_do_not_eat_memory(tmp_path: Path, name: str) -> None:
    run = _run_dir(tmp_path, tmp_path / "store")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to("/dev/zero")
    res = _in_child(
        "    from pathlib import Path\n"
        "    from sanctuary_local.report.build import write_report\n"
        f"    write_report(Path({str(run)!r}))\n")
    assert res["ok"] or res["kind"] == "UserError", res
    assert res["seconds"] < DEADLINE_S


@pytest.mark.parametrize("name", ["config.json", STATE_FILE])
def test_reuse_from_a_run_with_a_fifo_or_dev_zero_is_a_one_line_error(tmp_path: Path, name: str) -> None:
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.run.reuse import reuse_stages

    cfg = load_config("cpu")
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    if name == STATE_FILE:
        (src / "config.json").write_bytes(orjson.dumps(cfg.to_dict()))
    fifo = _fifo(src / name)
    res = _with_deadline(lambda: reuse_stages(src, out, cfg, {}, {}, [0]), fifo)
    assert isinstance(res.get("error"), UserError), res
    _one_line_naming(res["error"], str(fifo))
    fifo.unlink()
    (src / name).symlink_to("/dev/zero")
    res = _in_child(
        "    from pathlib import Path\n"
        "    from sanctuary_local.config.settings import load_config\n"
        "    from sanctuary_local.run.reuse import reuse_stages\n"
        f"    reuse_stages(Path({str(src)!r}), Path({str(out)!r}), load_config('cpu'), {{}}, {{}}, [0])\n")
    assert res["kind"] == "UserError" and str(src / name) in res["message"] and "\n" not in res["message"], res
    assert res["seconds"] < DEADLINE_S


def test_check_state_on_a_fifo_run_state_does_not_hang(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fifo = _fifo(out / STATE_FILE)
    res = _with_deadline(lambda: check_state(out, {"store": "x"}, force=False), fifo)
    if "error" in res:
        assert isinstance(res["error"], UserError), res
        _one_line_naming(res["error"], str(fifo))


def test_stage_file_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fifo = _fifo(out / STAGE_FILES["hyde"])
    res = _with_deadline(lambda: StageFile(fifo, HydeResult.from_dict), fifo)
    assert isinstance(res.get("error"), UserError), res
    _one_line_naming(res["error"], str(fifo))


def test_report_with_a_fifo_stage_file_does_not_hang(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, None)
    (run / STAGE_FILES["retrieval"]).unlink()
    fifo = _fifo(run / STAGE_FILES["retrieval"])
    res = _with_deadline(lambda: write_report(run), fifo)
    assert "error" not in res or isinstance(res["error"], UserError), res


# --------------------------------------------------------------- defect 4: line cap


def _big_line(n_bytes: int) -> bytes:
    return b'{"url": "http://big", "url2text": ["' + b"a" * n_bytes + b'"]}'


def test_an_oversize_line_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    big = store_mod.MAX_LINE_BYTES * 4 + 12345
    (tmp_path / "4.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n" + _big_line(big) + b"\n" + orjson.dumps(GOOD_DOC) + b"\n")
    ks = KnowledgeStore(tmp_path)
    tracemalloc.start()
    try:
        load = ks.load(4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.position for d in load.documents] == [0, 2], "the documents around the long line are kept"
    assert [p.line for p in load.problems] == [2] and "longer than" in load.problems[0].message
    # readline(cap + 1) may hold two copies of the capped piece; the line is 4x the cap
    assert peak < store_mod.MAX_LINE_BYTES * 2.5, f"peak {peak / 2**20:.0f} MiB: the long line was read whole"


def test_an_oversize_line_in_a_zip_member_is_skipped(tmp_path: Path) -> None:
    """A zip bomb of one line: a few hundred KB compressed, 4x the line cap unpacked."""
    path = tmp_path / "store.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("output_dev/1.json", "w") as f:
        f.write(b'{"url": "http://big", "url2text": ["')
        chunk = b"a" * (1 << 20)
        for _ in range(4 * store_mod.MAX_LINE_BYTES >> 20):
            f.write(chunk)
        f.write(b'"]}\n' + orjson.dumps(GOOD_DOC) + b"\n")
    ks = KnowledgeStore(path)
    tracemalloc.start()
    try:
        load = ks.load(1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.position for d in load.documents] == [1]
    assert [p.line for p in load.problems] == [1] and "output_dev/1.json" in load.problems[0].file
    assert peak < store_mod.MAX_LINE_BYTES * 2.5


def test_a_file_over_the_size_cap_stops_at_the_cap_with_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "MAX_FILE_BYTES", 4096)
    line = orjson.dumps(GOOD_DOC) + b"\n"
    (tmp_path / "2.json").write_bytes(line * 200)
    load = KnowledgeStore(tmp_path).load(2)
    assert 0 < len(load.documents) < 200
    assert len(load.problems) == 1 and "2.json" in str(load.problems[0]) and "4096" in load.problems[0].message


# ------------------------------------------------------ defect 9: ambiguous names


def test_two_names_for_one_claim_are_refused_naming_both(tmp_path: Path) -> None:
    for name in ("007.json", "7.json"):
        (tmp_path / name).write_bytes(orjson.dumps(GOOD_DOC) + b"\n")
    with pytest.raises(UserError) as err:
        KnowledgeStore(tmp_path)
    _one_line_naming(err.value, "007.json", "7.json")


def test_two_names_for_one_claim_in_a_zip_are_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "store.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("output_dev/7.json", orjson.dumps(GOOD_DOC) + b"\n")
        zf.writestr("output_dev/0007.json", orjson.dumps(GOOD_DOC) + b"\n")
    with pytest.raises(UserError) as err:
        KnowledgeStore(path)
    _one_line_naming(err.value, "output_dev/0007.json", "output_dev/7.json")


def test_non_ascii_digits_are_not_a_claim_index(tmp_path: Path) -> None:
    (tmp_path / "7.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n")
    (tmp_path / "\u0667.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n")  # ARABIC-INDIC DIGIT SEVEN
    ks = KnowledgeStore(tmp_path)
    assert ks.claim_indices() == [7] and ks.file_name(7).endswith("/7.json")


def test_a_lone_zero_padded_name_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "007.json").write_bytes(orjson.dumps(GOOD_DOC) + b"\n")
    ks = KnowledgeStore(tmp_path)
    assert ks.claim_indices() == [7] and len(ks.load(7).documents) == 1


# ---------------------------------------------------------------- defect 10: BOM


def test_a_utf8_bom_at_the_start_of_a_store_file_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "0.json").write_bytes(b"\xef\xbb\xbf" + orjson.dumps(GOOD_DOC) + b"\n" + orjson.dumps(GOOD_DOC) + b"\n")
    load = KnowledgeStore(tmp_path).load(0)
    assert load.problems == [] and [d.lines for d in load.documents] == [("one", "two")] * 2


def test_a_utf8_bom_in_a_zip_member_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "store.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("output_dev/0.json", b"\xef\xbb\xbf" + orjson.dumps(GOOD_DOC) + b"\n")
    load = KnowledgeStore(path).load(0)
    assert load.problems == [] and len(load.documents) == 1


# ------------------------------------------------------------ defect 11: file modes


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request: pytest.FixtureRequest) -> Any:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_outputs_respect_the_umask(tmp_path: Path, umask: int) -> None:
    want = 0o666 & ~umask
    out = tmp_path / "out"
    check_state(out, {"store": "x"}, force=True)
    write_predictions_json([_pred(0)], out / "predictions.json")
    write_leaderboard_csv([LeaderboardRow("0", "c", "", "Refuted", "pred")], out / "submission.csv")
    sf = StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict)
    sf.append(0, HydeResult(0, "Refuted", (Query(0, 0, "q?", ()),)))
    line = {"claim_index": 0, "record": _evidence_record(0), "extra": {}}
    (out / STAGE_FILES["retrieval"]).write_bytes(orjson.dumps(line) + b"\n")
    report = write_report(out).index.parent
    files = [out / STATE_FILE, out / "predictions.json", out / "submission.csv", out / STAGE_FILES["hyde"],
             report / "index.html", report / "claim_0.html"]
    assert {f.name: oct(_mode(f)) for f in files} == {f.name: oct(want) for f in files}


def test_umask_is_read_without_changing_it(umask: int) -> None:
    from sanctuary_local.io.safe_io import current_umask

    assert current_umask() == umask
    assert os.umask(umask) == umask  # unchanged


# ----------------------------------------------------------- memory, end to end


def test_a_whole_hostile_store_stays_within_memory(tmp_path: Path) -> None:
    """Every hostile file at once in one store, loaded claim by claim in a child limited
    to 1 GiB of address space: each claim ends loaded or flagged."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "0.json").write_bytes(b"\xef\xbb\xbf" + orjson.dumps(GOOD_DOC) + b"\n")
    (store / "1.json").write_bytes(_big_line(store_mod.MAX_LINE_BYTES + 1) + b"\n")
    (store / "2.json").symlink_to("/dev/zero")
    (store / "3.json").symlink_to(store / "nowhere.json")
    _fifo(store / "4.json")
    res = _in_child(
        "    from sanctuary_local.io.store import KnowledgeStore\n"
        f"    ks = KnowledgeStore({str(store)!r})\n"
        "    loads = [ks.load(i) for i in range(6)]\n"
        "    assert len(loads[0].documents) == 1 and not loads[0].problems, loads[0]\n"
        "    assert all(l.problems for l in loads[1:5]), loads\n"
        "    assert loads[5].missing\n", limit=1 << 30)
    assert res["ok"], res
    assert res["seconds"] < DEADLINE_S and res["maxrss_mb"] < 1024


@pytest.mark.parametrize("damage", ["bad_crc", "encrypted"])
def test_a_damaged_zip_member_is_the_claims_problem_in_a_run_store(tmp_path: Path, damage: str) -> None:
    """What `run` reads (KnowledgeStore.load): a member with a bad CRC keeps the documents
    read before the damage and records a problem; an encrypted member is a problem; neither
    raises, and the other claims read normally."""
    import zipfile

    from sanctuary_local.io.store import KnowledgeStore

    good = b'{"url": "https://a.example", "url2text": ["fine text"]}\n'
    zpath = tmp_path / "store.zip"
    with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("0.json", good * 3)
        z.writestr("1.json", good)
    raw = bytearray(zpath.read_bytes())
    if damage == "bad_crc":
        i = raw.index(b"fine text")  # first member's data, stored: flip a byte of its text
        raw[i] ^= 0x20
    else:  # the encryption bit in the first member's local and central headers
        for sig in (b"PK\x03\x04", b"PK\x01\x02"):
            at = raw.index(sig) + (6 if sig == b"PK\x03\x04" else 8)
            raw[at] |= 0x01
    zpath.write_bytes(bytes(raw))
    store = KnowledgeStore(zpath)
    load = store.load(0)
    assert load.problems and all("\n" not in str(p) for p in load.problems), load.problems
    assert len(load.documents) <= 3
    assert store.load(1).documents and not store.load(1).problems
    assert store.fingerprint(0)  # hashing the damaged member does not raise either
