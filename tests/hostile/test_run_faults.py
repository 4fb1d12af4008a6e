"""Faults and stops inside a run, in-process.

Storage faults while a run writes its stage files — disk full, read-only output
directory, output directory removed mid-run: each must give exit code 2 and one error
line naming the file and the cause, leave every stage file parseable with no temp file
behind, and resume cleanly (every claim exactly once) once the fault is gone.

A stop request (what the first Ctrl-C/SIGTERM sets) in stage 2, sequential and overlapped
with stage 1: the claims in flight are kept, nothing after them runs, the outputs hold
the finished claims, and the resumed run completes exactly once. (Signals themselves, on
a real subprocess: ``test_chaos.py``, ``test_interrupt.py``.)

The LLM is a stub (the faults are about files, not generation); retrieval is real. Real
faults (a size-capped tmpfs, a read-only bind mount) are used where this process may
mount (root, no sandbox veto); otherwise the same errno is injected into the stage-file
write path.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.run import stage_files as runstate
from sanctuary_local.io.run_files import STAGE_FILES

from tests.support.fake_llm import FixedLatencyLLM

#: The stage files of a run with the default config (the optional modes add more; off here).
RUN_FILES = [STAGE_FILES[s] for s in ("hyde", "retrieval", "verdict")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TINY = str(ROOT / "tests" / "data" / "tiny_cpu.toml")
N = 2  # claims per run (--limit): enough for a fault after a finished line
STAGE1, STAGE2, STAGE3 = STAGE_FILES["hyde"], STAGE_FILES["retrieval"], STAGE_FILES["verdict"]


#: Answers every HyDE prompt with one question and every verdict prompt with a label (no latency).
StubLLM = FixedLatencyLLM


def use_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    import sanctuary_local.llm as llm

    monkeypatch.setattr(llm, "make_backend", lambda cfg, models_dir="models": StubLLM(cfg, models_dir))


@pytest.fixture(autouse=True)
def stub_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    use_stub(monkeypatch)


def run_cli(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["run", "--claims", str(EXAMPLES / "claims.json"), "--store", str(EXAMPLES / "store"),
               "--out", str(out), "--profile", TINY, "--workers", "1", "--limit", str(N), "--quiet"])
    return rc, capsys.readouterr().err


def fault_before(monkeypatch: pytest.MonkeyPatch, name: str, nth: int, action: Callable[[], None]) -> None:
    """Run ``action`` just before the ``nth`` (1-based) line is appended to stage file ``name``."""
    real = runstate._append_line
    seen = {"n": 0}

    def append(path: Path, data: bytes) -> None:
        if path.name == name:
            seen["n"] += 1
            if seen["n"] == nth:
                action()
        real(path, data)

    monkeypatch.setattr(runstate, "_append_line", append)


def assert_clean_error(rc: int, err: str, path: Path, cause: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    assert f"cannot write {path}: {cause}" in lines[0], lines[0]
    assert "rerun the same command to resume" in lines[0]


def assert_stage_files_sound(out: Path) -> dict[str, list[int]]:
    """Every stage file is whole JSONL lines only; no temp file is left; claim indices per file."""
    found = {}
    assert not any((out / n).exists() for n in set(STAGE_FILES.values()) - set(RUN_FILES))
    for name in RUN_FILES:
        path = out / name
        data = path.read_bytes() if path.exists() else b""
        assert not data or data.endswith(b"\n"), f"{name} ends in a torn line"
        found[name] = [orjson.loads(line)["claim_index"] for line in data.splitlines()]
    assert list(out.glob(".*.tmp")) == []
    return found


def assert_resumes_exactly_once(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run_cli(out, capsys)
    assert rc in (0, 3), err[-2000:]
    for name, idx in assert_stage_files_sound(out).items():
        assert sorted(idx) == list(range(N)), (name, idx)
    preds = orjson.loads((out / "predictions.json").read_bytes())
    assert sorted(int(p["claim_id"]) for p in preds) == list(range(N))


def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path | None]:
    """A 16 MB tmpfs (None where this process may not mount)."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)):
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(fs: Path) -> Path:
    """Fill filesystem ``fs`` to the last byte; returns the filler file."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def test_disk_full_on_a_real_tmpfs(tmpfs: Path | None, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    if tmpfs is None:
        pytest.skip("cannot mount a tmpfs here (needs root); the injected test covers ENOSPC")
    out = tmpfs / "out"
    fault_before(monkeypatch, STAGE1, 1, lambda: fill(tmpfs))
    rc, err = run_cli(out, capsys)
    assert_clean_error(rc, err, out / STAGE1, "no space left on device")
    assert assert_stage_files_sound(out)[STAGE1] == []
    (tmpfs / "filler").unlink()
    monkeypatch.undo()  # the fault is gone
    use_stub(monkeypatch)
    assert_resumes_exactly_once(out, capsys)


class _HalfWriteOS:
    """``os`` for run/stage_files whose ``write`` stores half the bytes, then fails like a full disk."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: Any) -> int:
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_mid_line_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    fault_before(monkeypatch, STAGE3, 2, lambda: monkeypatch.setattr(runstate, "os", _HalfWriteOS()))
    rc, err = run_cli(out, capsys)
    assert_clean_error(rc, err, out / STAGE3, "no space left on device")
    assert len(assert_stage_files_sound(out)[STAGE3]) == 1  # the half line is gone, the first kept
    monkeypatch.undo()  # the fault is gone
    use_stub(monkeypatch)
    assert_resumes_exactly_once(out, capsys)


def test_read_only_output_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    mounted: list[bool] = []

    def make_read_only() -> None:
        # A read-only bind mount of the directory onto itself (root ignores chmod 0555).
        if _mount("--bind", str(out), str(out)):
            mounted.append(True)
            if _mount("-o", "remount,bind,ro", str(out)):
                return
        monkeypatch.setattr(runstate, "_append_line", _raise(errno.EROFS))

    fault_before(monkeypatch, STAGE2, 1, make_read_only)
    try:
        rc, err = run_cli(out, capsys)
    finally:
        if mounted:
            subprocess.run(["umount", str(out)], capture_output=True)
    assert_clean_error(rc, err, out / STAGE2, "read-only file system")
    assert_stage_files_sound(out)
    monkeypatch.undo()  # the fault is gone
    use_stub(monkeypatch)
    assert_resumes_exactly_once(out, capsys)


def _raise(code: int) -> Callable[[Path, bytes], None]:
    def fail(path: Path, data: bytes) -> None:
        raise OSError(code, os.strerror(code), str(path))

    return fail


def test_output_directory_removed_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    fault_before(monkeypatch, STAGE1, 2, lambda: shutil.rmtree(out))
    rc, err = run_cli(out, capsys)
    assert_clean_error(rc, err, out / STAGE1, "the output directory has disappeared")
    assert not out.exists()
    monkeypatch.undo()  # the fault is gone
    use_stub(monkeypatch)
    assert_resumes_exactly_once(out, capsys)  # starts over in a new directory


# ----------------------------------------------------------------------- stop requests
def _opts(out: Path, **kw: Any) -> RunOptions:
    return RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out, profile=TINY,
                      quiet=True, **kw)


def test_stop_request_during_retrieval_keeps_the_claim_in_flight(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=1: retrieval runs claim by claim in-process; the stop lands after one."""
    out, stop = tmp_path / "out", StopRequest()
    fault_before(monkeypatch, STAGE2, 1, lambda: stop.request(signal.SIGINT))
    with pytest.raises(RunInterrupted) as info:
        run_pipeline(_opts(out, workers=1), stop=stop)
    assert info.value.exit_code == 130 and (info.value.done, info.value.total) == (0, 4)
    lines = assert_stage_files_sound(out)
    assert len(lines[STAGE1]) == 4 and lines[STAGE2] == [0] and lines[STAGE3] == []
    assert orjson.loads((out / "predictions.json").read_bytes()) == []
    assert orjson.loads((out / "timings.json").read_bytes())["complete"] is False
    monkeypatch.undo()
    use_stub(monkeypatch)
    summary = run_pipeline(_opts(out, workers=1))
    assert sorted(p.claim_index for p in summary.predictions) == [0, 1, 2, 3]
    for name, idx in assert_stage_files_sound(out).items():
        assert sorted(idx) == [0, 1, 2, 3], name


def test_stop_request_with_overlapped_retrieval_keeps_the_claims_in_flight(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """overlap: stage 1 wave by wave feeding a 2-process pool; stop during the first wave."""
    out, stop = tmp_path / "out", StopRequest()
    fault_before(monkeypatch, STAGE1, 1, lambda: stop.request(signal.SIGTERM))
    with pytest.raises(RunInterrupted) as info:
        run_pipeline(_opts(out, workers=2, overlap=True), stop=stop)
    assert info.value.exit_code == 143
    lines = assert_stage_files_sound(out)
    assert lines[STAGE1] == [0]  # no stage-1 wave after the one in flight
    # Its retrieval finished if a worker had taken it, else it was cancelled: never a failure.
    assert lines[STAGE2] in ([], [0]) and lines[STAGE3] == []
    assert b"worker failed" not in (out / STAGE2).read_bytes()
    monkeypatch.undo()
    use_stub(monkeypatch)
    run_pipeline(_opts(out, workers=2, overlap=True))
    for name, idx in assert_stage_files_sound(out).items():
        assert sorted(idx) == [0, 1, 2, 3], name
