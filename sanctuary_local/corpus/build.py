"""``sanctuary-local index DIR --out INDEX``: build (or update) a corpus index.

Layout of ``INDEX``::

    CURRENT              the name of the live generation, replaced atomically (os.replace)
    gen-000003/          one complete generation:
      manifest.json      parameters, counts, and every indexed file: sha256, size, its units
      texts.bin          the units' extracted texts, UTF-8, back to back
      meta.bin           one JSON object per unit (path, page, line, url, title), back to back
      units.npy          per unit: text and meta byte offsets and lengths (int64 × 4)
      vocab.npy …        the BM25 arrays (``postings.py``), memory-mapped when searching
    index_report.json    the last run: every skipped, failed or flagged file with its reason
    sanctuary-index.json the marker: this folder is an index made by ``index`` (its format)
    index.lock           held (flock) by the run writing the index: one run at a time

``--out`` must be absent, empty or an index this tool made, and only these names are
ever written or removed in it (``outdir.py``): a folder of the user's files is refused.

Atomic and durable: a run writes a new generation folder, flushes its files and the folder
to disk (fsync), and only then points ``CURRENT`` at it (and flushes the index folder), so
an interrupted run leaves the previous index loadable (or, the first time, no index:
``CorpusIndex`` refuses a folder without ``CURRENT``); its half-written folder is removed
by the next run. Incremental: a file whose sha256 matches the live generation's record
is not extracted again (its texts are copied from the old ``texts.bin``); a file no
longer in the folder is not carried over. Every unit is then re-segmented and the
postings rebuilt: BM25's idf and average length are corpus-wide, so they change anyway.
One bad file never stops a run: it is listed in ``index_report.json``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from sanctuary_local.corpus import lease
from sanctuary_local.corpus.extract import Extraction, Failed, SourceUnit, Skipped, extract, kind_of
from sanctuary_local.corpus.index import CURRENT, INDEX_FORMAT, CorpusIndex
from sanctuary_local.corpus.names import json_safe
from sanctuary_local.corpus.outdir import (REPORT_NAME, IndexLock, check_out, fsync_dir, fsync_tree, generations,
                                           write_marker)
from sanctuary_local.corpus.postings import PostingsWriter
from sanctuary_local.corpus.limits import Limits
from sanctuary_local.corpus.walk import SourceFile, WalkProblem, list_folder, read_entry
from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, read_regular
from sanctuary_local.retrieval.segment import TOKENISER_ID

__all__ = ["IndexReport", "build_index", "INDEX_FORMAT", "CURRENT", "REPORT_NAME"]


@dataclass
class IndexReport:
    """What an ``index`` run did; written to ``INDEX/index_report.json``."""

    index: str
    generation: str = ""
    indexed: int = 0
    reused: int = 0
    removed: int = 0
    units: int = 0
    segments: int = 0
    text_bytes: int = 0
    seconds: float = 0.0
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    #: Replaced generations kept because a check, run or ``serve`` still reads them (``lease.py``).
    still_read: list[str] = field(default_factory=list)


class _Units:
    """Appends units to ``texts.bin``/``meta.bin`` and to the postings writer."""

    def __init__(self, gen: Path, postings: PostingsWriter) -> None:
        self.texts = open(gen / "texts.bin", "wb")
        self.meta = open(gen / "meta.bin", "wb")
        self.rows: list[tuple[int, int, int, int]] = []
        self.postings = postings
        self.t_off = self.m_off = 0

    def add(self, u: SourceUnit) -> None:
        data = u.text.encode("utf-8", errors="replace")
        meta = orjson.dumps(json_safe({"path": u.path, "page": u.page, "line": u.line, "url": u.url, "title": u.title}))
        self.texts.write(data)
        self.meta.write(meta)
        self.rows.append((self.t_off, len(data), self.m_off, len(meta)))
        self.t_off += len(data)
        self.m_off += len(meta)
        # segment the text exactly as it will be read back (U+FFFD for unpaired surrogates)
        self.postings.add(len(self.rows) - 1, data.decode("utf-8"))

    def abandon(self) -> None:
        """Close the files of an interrupted build (nothing of it is kept): each one, even
        when flushing the other fails (a full disk), and without hiding why the build stopped."""
        for fh in (self.texts, self.meta):
            try:
                fh.close()
            except OSError:
                pass

    def close(self, gen: Path) -> None:
        for fh in (self.texts, self.meta):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        np.save(gen / "units.npy", np.array(self.rows, dtype=np.int64).reshape(-1, 4))


def _previous(out: Path) -> tuple[Any, dict[str, Any]]:
    """The live generation (a ``CorpusIndex``) and its file records, or (None, {})."""
    if not (out / CURRENT).is_file():
        return None, {}
    try:
        old = CorpusIndex(out)
    except UserError:
        return None, {}  # an unreadable previous index is rebuilt from the files
    return old, old.manifest.get("files", {})


#: The temporary files ``atomic_write_bytes`` makes in the index folder (``.CURRENT.x1y2.tmp``), left by
#: a run killed between writing one and renaming it into place.
_OUR_TEMPS = {f".{name}." for name in (CURRENT, REPORT_NAME)}


def _clean_stale(out: Path, keep: str | None) -> list[str]:
    """Remove the generation folders no one reads any more (all but the live one and those an
    open index still reads, ``lease.py``; only ``gen-NNNNNN`` folders: nothing else in ``out``
    is ours to delete), and the temporary copies of ``CURRENT`` and the report a crashed run
    left (regular files, never a link). Returns the generations kept because they are read."""
    in_use = [p.name for p in generations(out) if p.name != keep and not lease.remove_unless_read(p)]
    for p in Path(out).iterdir():
        if p.name.endswith(".tmp") and any(p.name.startswith(t) for t in _OUR_TEMPS) and not p.is_symlink() and p.is_file():
            p.unlink(missing_ok=True)
    return in_use


def _next_name(out: Path, live: str | None) -> str:
    """The generation after ``live``, past any name already taken: a link or a file named
    ``gen-NNNNNN`` is not ours to remove (``generations``), and making the folder over it
    failed on every rerun."""
    n = int(live.split("-")[1]) + 1 if live and live.split("-")[-1].isdigit() else 1
    while os.path.lexists(out / f"gen-{n:06d}"):
        n += 1
    return f"gen-{n:06d}"


def build_index(root: Path, out: Path, *, segment_tokens: int = 500, k1: float = 1.5, b: float = 0.75,
                limits: Limits | None = None, other_folder: bool = False,
                progress: Callable[[int, int, str], None] | None = None) -> IndexReport:
    """Index the files under ``root`` into ``out`` (module doc); ``progress(done, total,
    path)`` is called before the first file and after each (a zip archive counts as one). ``limits``: the caps and the
    link policy (``limits.py``; the defaults when None). ``other_folder``: ``out`` may be an index of
    another folder, which then becomes an index of ``root`` (refused by default: ``check_out``)."""
    root, out = Path(root), Path(out)
    if not os.path.lexists(root):
        raise UserError(f"{root}: the folder does not exist (index expects a folder of documents)")
    if not root.is_dir():
        raise UserError(f"{root}: not a folder (index expects a folder of documents)")
    check_out(out, root, other_folder)  # before anything is written: a folder of the user's own files is refused
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create the index folder: {exc.strerror or exc}") from None
    with IndexLock(out):
        check_out(out, root, other_folder)  # again, now that no other run can change it
        write_marker(out)
        try:
            return _build(root, out, segment_tokens, k1, b, limits or Limits(), progress)
        except OSError as exc:  # writing the index (a file that cannot be read is only listed: _one_file)
            _drop_unfinished(out)
            where = f" ({json_safe(str(exc.filename))})" if exc.filename else ""
            raise UserError(f"{out}: the index could not be written: {exc.strerror or exc}{where}; "
                            f"the live index, if any, is unchanged and the unfinished one was removed") from None


def _drop_unfinished(out: Path) -> None:
    """Remove the generation a failed write left (on a full disk it holds the space the user
    needs back), keeping the live one ``CURRENT`` names; called under the lock."""
    try:
        live: str | None = read_regular(out / CURRENT, 64, CURRENT, follow=False).decode("utf-8", "replace").strip() or None
    except FileNotFoundError:
        live = None
    except (OSError, UserError):
        return  # which generation is live cannot be told (or CURRENT is no file): leave them all for the next run
    _clean_stale(out, live)


def _build(root: Path, out: Path, segment_tokens: int, k1: float, b: float, limits: Limits,
           progress: Callable[[int, int, str], None] | None) -> IndexReport:
    """``build_index`` once ``out`` is checked and locked."""
    t0 = time.perf_counter()
    old, old_files = _previous(out)
    live = old.generation if old is not None else None
    _clean_stale(out, live)
    name = _next_name(out, live)
    gen = out / name
    gen.mkdir()
    report = IndexReport(index=json_safe(str(out)), generation=name)
    entries = list_folder(root, exclude=out, limits=limits)  # names only: nothing is read yet
    postings = PostingsWriter(gen, segment_tokens, k1, b)
    units = _Units(gen, postings)
    files: dict[str, Any] = {}
    tick = progress or (lambda done, total, path: None)
    tick(0, len(entries), "")
    try:
        for i, entry in enumerate(entries, start=1):
            for item in read_entry(entry, limits):  # a zip: its members, streamed from the open archive
                _one_file(item, old, old_files, units, files, report, limits)
            tick(i, len(entries), entry.path)
    except BaseException:  # Ctrl-C, a full disk: the half generation stays for the next run to remove
        units.abandon()
        if old is not None:
            old.close()
        raise
    units.close(gen)
    counts = postings.finish()
    report.removed = sum(1 for p in old_files if p not in files)
    report.units, report.segments, report.text_bytes = len(units.rows), counts["segments"], units.t_off
    manifest = {"format": INDEX_FORMAT, "tokeniser": TOKENISER_ID, "segment_tokens": segment_tokens, "k1": k1, "b": b,
                "root": str(root.resolve()), "max_pdf_pages": limits.max_pdf_pages, **counts, "units": len(units.rows),
                "text_bytes": units.t_off, "files": files}
    atomic_write_bytes(gen / "manifest.json", orjson.dumps(json_safe(manifest), option=orjson.OPT_INDENT_2))
    report.seconds = round(time.perf_counter() - t0, 3)
    # serialised before the switch: a report that cannot be written must not follow a live index
    report_bytes = orjson.dumps(json_safe(report.__dict__), option=orjson.OPT_INDENT_2)
    if old is not None:
        old.close()
    fsync_tree(gen)  # its data on disk before CURRENT names it
    atomic_write_bytes(out / CURRENT, name.encode())  # the switch: the new generation is live
    fsync_dir(out)  # the switch itself on disk
    report.still_read = _clean_stale(out, name)
    atomic_write_bytes(out / REPORT_NAME, orjson.dumps(json_safe(report.__dict__), option=orjson.OPT_INDENT_2)
                       if report.still_read else report_bytes)
    return report


def _same_extraction(old: Any, path: str, limits: Limits) -> bool:
    """Whether the live generation extracted ``path`` as this run would: a PDF's pages
    depend on ``--max-pdf-pages`` (an index made before the manifest recorded it
    re-extracts its PDFs once)."""
    return kind_of(path) != ".pdf" or old.manifest.get("max_pdf_pages") == limits.max_pdf_pages


def _one_file(item: SourceFile | WalkProblem, old: Any, old_files: dict[str, Any], units: _Units,
              files: dict[str, Any], report: IndexReport, limits: Limits) -> None:
    """Extract (or reuse) one file's units into the new generation; record any problem."""
    if isinstance(item, WalkProblem):
        getattr(report, item.status).append({"path": item.path, "reason": item.reason})
        return
    if item.path in files:  # two names spelled alike (an undecodable byte vs a literal "\xff")
        report.skipped.append({"path": item.path, "reason": "duplicate name (another file has the same name; indexed once)"})
        return
    try:
        data = item.read()
    except Skipped as exc:
        report.skipped.append({"path": item.path, "reason": str(exc)})
        return
    except Failed as exc:
        report.failed.append({"path": item.path, "reason": str(exc)})
        return
    except OSError as exc:
        report.failed.append({"path": item.path, "reason": f"cannot be read: {exc.strerror or exc}"})
        return
    if len(data) > limits.max_file_bytes:
        report.skipped.append({"path": item.path, "reason": f"over the size cap (> {limits.max_file_bytes} bytes)"})
        return
    sha = hashlib.sha256(data).hexdigest()
    prev = old_files.get(item.path)
    if old is not None and prev is not None and prev.get("sha256") == sha and _same_extraction(old, item.path, limits):
        got = Extraction(tuple(old.source_unit(u) for u in range(*prev["units"])), tuple(prev.get("flags", ())))
        report.reused += 1
    else:
        try:
            got = extract(item.path, data, limits)
        except Skipped as exc:
            report.skipped.append({"path": item.path, "reason": str(exc)})
            return
        except Failed as exc:
            report.failed.append({"path": item.path, "reason": str(exc)})
            return
        except UserError:
            raise  # a missing extractor package: every file of its type would fail
        except Exception as exc:  # noqa: BLE001 - an extractor bug on one file never stops the run
            report.failed.append({"path": item.path, "reason": f"extraction error ({type(exc).__name__}: {exc})"[:300]})
            return
        report.indexed += 1
    first = len(units.rows)
    for u in got.units:
        units.add(u)
    flags = list(dict.fromkeys((*item.flags, *got.flags)))  # the walk's, then the extractor's, each once
    files[item.path] = {"sha256": sha, "size": len(data), "units": [first, len(units.rows)], "flags": flags}
    if flags:
        report.flagged.append({"path": item.path, "flags": flags})
