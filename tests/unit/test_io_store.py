"""Knowledge store: directory and zip, lazy streaming, bad lines, missing files."""

from __future__ import annotations

import json
import pickle
import tracemalloc
import zipfile
from pathlib import Path

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.io.store import KnowledgeStore


def _zip_dir(src: Path, dst: Path, folder: str = "output_dev") -> Path:
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(src.glob("*.json")):
            zf.write(f, f"{folder}/{f.name}")
    return dst


def test_examples_store(examples_dir: Path) -> None:
    ks = KnowledgeStore(examples_dir / "store")
    assert ks.claim_indices() == [0, 1, 2, 3]
    load = ks.load(0)
    assert not load.missing and load.problems == [] and 12 <= len(load.documents) <= 30
    assert [d.position for d in load.documents] == list(range(len(load.documents)))
    assert any(not d.lines for d in load.documents), "examples include an empty document"
    urls = [d.url for d in load.documents]
    assert len(set(urls)) < len(urls), "examples include a repeated URL"
    raw = (examples_dir / "store" / "0.json").read_text(encoding="utf-8").splitlines()
    assert [d.lines for d in load.documents] == [tuple(json.loads(r)["url2text"]) for r in raw]


def test_zip_equals_directory(surrogate_store: Path, tmp_path: Path) -> None:
    dir_store = KnowledgeStore(surrogate_store)
    zip_store = KnowledgeStore(_zip_dir(surrogate_store, tmp_path / "store.zip"))
    assert zip_store.claim_indices() == dir_store.claim_indices() == list(range(20))
    for i in (0, 7, 19):
        a, b = dir_store.load(i), zip_store.load(i)
        assert a.documents == b.documents and a.n_bytes == b.n_bytes > 0
        assert dir_store.fingerprint(i) == zip_store.fingerprint(i)
        assert "output_dev/" in b.path
    assert pickle.loads(pickle.dumps(zip_store)).load(3).documents == zip_store.load(3).documents


def test_bad_lines_are_skipped_and_reported(tmp_path: Path) -> None:
    good = {"claim_id": "0", "type": "search", "query": "q", "url": "http://a", "url2text": ["one", "two"]}
    lines = [
        orjson.dumps(good),
        b'{"url": "http://broken", "url2text": ["x"',  # truncated JSON
        b"",  # blank line: ignored, not a problem
        b"[1, 2]",  # not an object
        orjson.dumps({**good, "url2text": None}),
        orjson.dumps({**good, "url2text": {"a": 1}}),
        orjson.dumps({**good, "url2text": ["ok", 3, None]}),
        b'{"url": "http://latin1", "url2text": ["caf\xe9"]}',
        b'{"url": "http://latin1b", "url2text": ["na\xefve"]}',
    ]
    (tmp_path / "0.json").write_bytes(b"\n".join(lines) + b"\n")
    load = KnowledgeStore(tmp_path).load(0)
    assert [d.position for d in load.documents] == [0, 4, 5, 6, 7, 8]
    assert load.documents[1].lines == () and load.documents[2].lines == ()
    assert load.documents[3].lines == ("ok", "3", "")
    assert load.documents[4].lines == ("caf\ufffd",)
    by_line = {p.line: p.message for p in load.problems}
    assert set(by_line) == {2, 4, 6, 7, 8}  # 1-based; the non-UTF-8 problem is reported once
    assert "malformed JSON" in by_line[2] and "not UTF-8" in by_line[8]
    assert all(p.file.endswith("0.json") for p in load.problems)
    assert str(load.problems[0]).startswith(f"{tmp_path / '0.json'}:2:")


def test_missing_claim_is_flagged(examples_dir: Path) -> None:
    ks = KnowledgeStore(examples_dir / "store")
    load = ks.load(99)
    assert load.missing and load.documents == [] and not ks.has(99)
    assert list(ks.iter_documents(99)) == [] and ks.fingerprint(99) == "missing"


def test_bad_store_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        KnowledgeStore(tmp_path / "nope")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(UserError, match="neither a directory nor a zip"):
        KnowledgeStore(tmp_path / "x.txt")


def test_fingerprint_changes_with_content(tmp_path: Path) -> None:
    (tmp_path / "0.json").write_text('{"url": "a", "url2text": ["x"]}\n')
    fp = KnowledgeStore(tmp_path).fingerprint(0)
    (tmp_path / "0.json").write_text('{"url": "a", "url2text": ["y"]}\n')
    assert KnowledgeStore(tmp_path).fingerprint(0) != fp


def test_streaming_memory_is_bounded(tmp_path: Path) -> None:
    """A large file is streamed one line at a time: peak Python memory stays a small
    fraction of the file size (here ~24 MB of 300 documents)."""
    body = ["word " * 16] * 1000
    with open(tmp_path / "5.json", "wb") as f:
        for i in range(300):
            f.write(orjson.dumps({"url": f"http://d/{i}", "url2text": body}) + b"\n")
    size = (tmp_path / "5.json").stat().st_size
    ks = KnowledgeStore(tmp_path)
    tracemalloc.start()
    try:
        n = sum(1 for _ in ks.iter_documents(5))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 300 and size > 20e6
    assert peak < size / 4
