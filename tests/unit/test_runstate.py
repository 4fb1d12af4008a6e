"""Crash-safe stage files: torn lines, exactly-once, config fingerprint refusal."""

from pathlib import Path

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.records import Query, HydeResult
from sanctuary_local.run.stage_files import StageFile, check_state, STATE_FILE


def _hyde(i: int) -> HydeResult:
    return HydeResult(claim_index=i, provisional_label="Refuted",
                      queries=(Query(claim_index=i, number=0, question=f"q{i}?", answers=("a",)),))


def test_append_and_reload_roundtrip(tmp_path: Path) -> None:
    sf = StageFile(tmp_path / "s.jsonl", HydeResult.from_dict)
    for i in (3, 1, 2):
        sf.append(i, _hyde(i), {"seconds": 0.5})
    again = StageFile(tmp_path / "s.jsonl", HydeResult.from_dict)
    assert again.records == {1: _hyde(1), 2: _hyde(2), 3: _hyde(3)}
    assert again.extras[3] == {"seconds": 0.5}
    assert again.pending([0, 1, 2, 3, 4]) == [0, 4]


def test_torn_last_line_is_cut_and_redone(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    sf = StageFile(path, HydeResult.from_dict)
    sf.append(0, _hyde(0))
    good = path.read_bytes()
    line = orjson.dumps({"claim_index": 1, "record": _hyde(1).to_dict()})
    path.write_bytes(good + line[: len(line) // 2])  # killed mid-write
    again = StageFile(path, HydeResult.from_dict)
    assert list(again.records) == [0]
    assert again.repaired_bytes == len(line) // 2
    assert path.read_bytes() == good
    again.append(1, _hyde(1))
    assert list(StageFile(path, HydeResult.from_dict).records) == [0, 1]


def test_duplicate_lines_count_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = orjson.dumps({"claim_index": 5, "record": _hyde(5).to_dict()}) + b"\n"
    path.write_bytes(line + line)
    sf = StageFile(path, HydeResult.from_dict)
    assert list(sf.records) == [5]
    sf.append(5, _hyde(5))  # already there: not written again
    assert path.read_bytes().count(b"\n") == 2


def test_changed_config_refused_unless_force(tmp_path: Path) -> None:
    check_state(tmp_path, {"config": "a"}, force=False)
    (tmp_path / "stage1_hyde.jsonl").write_bytes(b"partial\n")
    check_state(tmp_path, {"config": "a"}, force=False)  # same run: fine
    with pytest.raises(UserError, match="different run.*config"):
        check_state(tmp_path, {"config": "b"}, force=False)
    assert (tmp_path / "stage1_hyde.jsonl").exists()
    check_state(tmp_path, {"config": "b"}, force=True)  # no completed claim: nothing is kept
    assert (tmp_path / "stage1_hyde.jsonl").read_bytes() == b""
    assert orjson.loads((tmp_path / STATE_FILE).read_bytes())["fingerprint"] == {"config": "b"}


class _DiskFullOS:
    """``os`` for run/stage_files whose ``write`` stores part of the bytes, then fails (ENOSPC)."""

    def __getattr__(self, name):
        import os

        return getattr(os, name)

    @staticmethod
    def write(fd, data):
        import errno
        import os

        os.write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_failed_append_is_rolled_back_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sanctuary_local.errors import StorageError
    from sanctuary_local.run import stage_files as runstate

    path = tmp_path / "s.jsonl"
    sf = StageFile(path, HydeResult.from_dict)
    sf.append(0, _hyde(0))
    good = path.read_bytes()
    monkeypatch.setattr(runstate, "os", _DiskFullOS())
    with pytest.raises(StorageError, match=rf"cannot write {path}: no space left on device \(disk full\) \[ENOSPC\]"):
        sf.append(1, _hyde(1))
    monkeypatch.undo()
    assert path.read_bytes() == good  # the 10 bytes written were cut back
    assert 1 not in sf and list(StageFile(path, HydeResult.from_dict).records) == [0]
    sf.append(1, _hyde(1))  # the fault is gone: the same record goes in
    assert list(StageFile(path, HydeResult.from_dict).records) == [0, 1]


def test_check_state_removes_temp_files_of_an_interrupted_write(tmp_path: Path) -> None:
    (tmp_path / ".predictions.json.abc123.tmp").write_bytes(b"half")
    (tmp_path / "keep.tmp").write_bytes(b"not ours")
    check_state(tmp_path, {"config": "a"}, force=False)
    assert not (tmp_path / ".predictions.json.abc123.tmp").exists()
    assert (tmp_path / "keep.tmp").exists()
