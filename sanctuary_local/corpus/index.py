"""A built corpus index, memory-mapped: BM25 search over its segments, unit texts, provenance,
and a run's snippet found again after a re-index renumbered the units (``locate_snippet``).

Nothing is loaded whole: every array is ``np.load(mmap_mode="r")`` and the texts are read
from a memory map of ``texts.bin`` one unit at a time. After each query the postings'
pages are dropped from the process's resident set (``madvise(MADV_DONTNEED)`` on the
read-only maps; they stay in the page cache, so the next query maps them again without
reading the disk): resident memory is bounded by one query's postings, not by all the
postings a long run has touched (at a million segments, most of them: 2.3 GB). A query is tokenised as a
per-claim index tokenises it (``retrieval/segment.py``: same terms, stop words dropped,
a repeated term counted once per repetition, as rank-bm25 does).
"""

from __future__ import annotations

import mmap
import re
import shlex
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from sanctuary_local.corpus import lease
from sanctuary_local.corpus.extract import SourceUnit
from sanctuary_local.corpus.postings import POSTINGS_FILES
from sanctuary_local.errors import UserError
from sanctuary_local.retrieval.bm25 import top_k
from sanctuary_local.retrieval.segment import TOKENISER_ID, _is_stop, term_hashes

__all__ = ["CURRENT", "INDEX_FORMAT", "CorpusIndex", "Provenance", "corpus_problem", "is_corpus_index", "live_manifest",
           "locate_snippet", "pinned"]

#: The file naming an index folder's live generation (``build.py`` replaces it atomically).
CURRENT = "CURRENT"
#: The file that says "an index made by ``sanctuary-local index``", with its format (``outdir.py``).
MARKER = "sanctuary-index.json"
#: The on-disk format this version reads and writes (a manifest with another is refused).
INDEX_FORMAT = "sanctuary-corpus-v1"


#: A generation folder's name (``build.py``).
GEN_NAME = re.compile(r"gen-\d{6}")


def is_corpus_index(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by ``sanctuary-local index`` (it has ``CURRENT``),
    or one generation folder of such an index (``pinned``)."""
    return Path(path).is_dir() and ((Path(path) / CURRENT).is_file() or _split(path)[1] is not None)


def _split(path: str | Path) -> tuple[Path, str | None]:
    """(the index folder, the generation ``path`` pins, or None when it names the index folder)."""
    p = Path(path)
    if GEN_NAME.fullmatch(p.name) and (p.parent / CURRENT).is_file():
        return p.parent, p.name
    return p, None


def pinned(index: CorpusIndex) -> Path:
    """The path that opens ``index``'s generation, not whatever generation is live when it is
    opened: a run's workers and its printed sources read the generation its fingerprint
    records, even when ``index`` switches the folder to a new one meanwhile."""
    return index.root / index.generation


def corpus_problem(corpus: str | Path, command: str) -> str | None:
    """Why ``--corpus`` is not a corpus index, as a one-line error that says what to do
    (``command``: how the sub-command that was given it starts, e.g. ``check "CLAIM"``), or
    None when it is one. A folder of
    documents gets the commands to index it elsewhere, never into itself."""
    corpus = Path(corpus)
    if is_corpus_index(corpus):
        return None
    if not corpus.exists():
        return f"--corpus {corpus}: the folder does not exist; give the folder `sanctuary-local index` wrote"
    if not corpus.is_dir():
        return f"--corpus {corpus}: not a folder; give the folder `sanctuary-local index` wrote"
    if (corpus / MARKER).is_file():  # never "index this folder": it holds a stopped run's files, not documents
        return (f"--corpus {corpus}: its first `sanctuary-local index` run did not finish (no index yet); "
                f"run it again: `sanctuary-local index DOCS --out {shlex.quote(str(corpus))}`")
    return (f"--corpus {corpus}: not a corpus index; if it holds your documents, index them first: "
            f"`sanctuary-local index {shlex.quote(str(corpus))} --out my-index`, then "
            f"`sanctuary-local {command} --corpus my-index`")


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a snippet comes from: the file, the PDF page (0: none), the store line (0:
    none) and the span in the unit's extracted text, with the snippet itself:
    ``extracted_text[start:end] == text``."""

    path: str
    page: int
    line: int
    url: str
    title: str
    unit: int
    start: int
    end: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def release_postings(arrays: dict[str, Any]) -> None:
    """Drop the postings' pages from this process's resident set (not from the page cache);
    the arrays stay valid, a later access maps the pages again."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    for name in ("post_seg", "post_w"):
        base = getattr(arrays.get(name), "base", None)
        if advice is not None and isinstance(base, mmap.mmap) and not base.closed:
            base.madvise(advice)


def close_maps(maps: dict[str, Any]) -> None:
    for m in maps.values():
        if isinstance(m, mmap.mmap):
            m.close()
    maps.clear()


class CorpusIndex:
    """The live generation of an index folder (``build.py``), or the one a ``pinned`` path
    names; mapped whole at open, and leased (``lease.py``) until closed or collected."""

    def __init__(self, root: str | Path, *, release_pages: bool = True) -> None:
        self.root, generation = _split(root)
        self.release_pages = release_pages
        self.generation, self.dir, self.manifest, self.arrays, self._maps, fd = _open_generation(self.root, generation)
        self._lease = weakref.finalize(self, lease.release, fd)

    def __getstate__(self) -> dict[str, Any]:  # a pool worker reopens this generation, not the live one
        return {"root": pinned(self), "release_pages": self.release_pages}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], release_pages=state.get("release_pages", True))  # type: ignore[misc]

    def release(self) -> None:
        """Drop the postings' pages from this process's resident set (``release_postings``)."""
        release_postings(self.arrays)

    def close(self) -> None:
        close_maps(self._maps)
        self.arrays.clear()
        self._lease()  # a rerun of `index` may now remove this generation

    def _bytes(self, name: str) -> mmap.mmap | bytes:
        return _mapped(self._maps, self.dir, name)

    # ---------------------------------------------------------------- sizes
    @property
    def n_units(self) -> int:
        return int(self.arrays["units"].shape[0])

    @property
    def n_segments(self) -> int:
        return int(self.arrays["seg_unit"].shape[0])

    @property
    def fingerprint(self) -> str:
        """Identifies this generation's content (run fingerprints, caches)."""
        return f"{self.root.resolve()}@{self.generation}"

    # ---------------------------------------------------------------- units
    def unit_text(self, unit: int) -> str:
        t_off, t_len, _, _ = (int(x) for x in self.arrays["units"][unit])
        return bytes(self._bytes("texts.bin")[t_off:t_off + t_len]).decode("utf-8")

    def unit_meta(self, unit: int) -> dict[str, Any]:
        _, _, m_off, m_len = (int(x) for x in self.arrays["units"][unit])
        return orjson.loads(bytes(self._bytes("meta.bin")[m_off:m_off + m_len]))

    def source_unit(self, unit: int) -> SourceUnit:
        m = self.unit_meta(unit)
        return SourceUnit(m["path"], self.unit_text(unit), page=m["page"], line=m["line"], url=m["url"], title=m["title"])

    def unit_url(self, unit: int) -> str:
        """What the pipeline shows as the document's URL: the page's own URL when it has
        one, else the file path (``#page=N`` for a PDF page, ``#line=N`` for a store line)."""
        m = self.unit_meta(unit)
        if m["url"]:
            return m["url"]
        return m["path"] + (f"#page={m['page']}" if m["page"] else f"#line={m['line']}" if m["line"] else "")

    def provenance(self, unit: int, start: int, end: int) -> Provenance:
        """The provenance record of the span ``[start, end)`` of ``unit``'s text."""
        m = self.unit_meta(unit)
        text = self.unit_text(unit)[start:end]
        return Provenance(m["path"], m["page"], m["line"], m["url"], m["title"], unit, start, end, text)

    # --------------------------------------------------------------- search
    def query_terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Vocabulary positions of a query's terms and how often each occurs in it."""
        return _vocab_positions(self.arrays["vocab"], text)

    def scores(self, text: str) -> np.ndarray:
        """BM25 score of every segment for one query (float32, length ``n_segments``).

        A term's postings name each segment once, so ``scores[segs] += w`` is exact (no
        repeated index in one fancy-index add) and touches only that term's postings."""
        terms, counts = self.query_terms(text)
        indptr, post_seg, post_w = self.arrays["indptr"], self.arrays["post_seg"], self.arrays["post_w"]
        scores = np.zeros(self.n_segments, dtype=np.float32)
        for t, c in zip(terms.tolist(), counts.tolist()):
            a, b = int(indptr[t]), int(indptr[t + 1])
            w = post_w[a:b]
            scores[post_seg[a:b]] += w if c == 1 else w * np.float32(c)
        if self.release_pages:
            self.release()
        return scores

    def search(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ≤ k best segments (positive scores only), best first, ties by segment id."""
        if self.n_segments == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0)
        return top_k(self.scores(text), k)

    def segment(self, seg: int) -> tuple[int, int, int, int]:
        """(unit, start, end, tokens) of one segment."""
        a = self.arrays
        return int(a["seg_unit"][seg]), int(a["seg_start"][seg]), int(a["seg_end"][seg]), int(a["seg_ntok"][seg])


#: Units scanned for a moved snippet whose URL names no indexed file (a page's own URL).
SCAN_UNITS = 20_000


def _holds(index: CorpusIndex, unit: int, s: Any) -> bool:
    """Whether ``unit`` of the live index is the snippet's page and holds it at its span."""
    if not 0 <= unit < index.n_units or index.unit_url(unit) != s.url:
        return False
    return s.start is None or s.end is None or index.unit_text(unit)[s.start:s.end] == s.text


def locate_snippet(index: CorpusIndex, s: Any) -> int | None:
    """The unit of the live index holding snippet ``s`` (anything with ``url``,
    ``doc_position``, ``start``, ``end`` and ``text``, as a run recorded them): its own
    ``doc_position`` unless a re-index since the run moved it (a file added or removed
    before it renumbers the units), then the unit of its file (``s.url``) that holds it;
    None when none does. The check page of ``serve`` and ``report`` both find snippets so."""
    if s.doc_position is None:
        return None
    if _holds(index, s.doc_position, s):
        return s.doc_position
    entry = (index.manifest.get("files") or {}).get(s.url.split("#")[0])
    units = entry.get("units") if isinstance(entry, dict) else None
    if isinstance(units, list) and len(units) == 2:
        candidates = range(int(units[0]), int(units[1]))
    else:
        candidates = range(index.n_units if index.n_units <= SCAN_UNITS else 0)
    return next((u for u in candidates if _holds(index, u, s)), None)


def _mapped(maps: dict[str, mmap.mmap | bytes], folder: Path, name: str) -> mmap.mmap | bytes:
    """``folder/name`` memory-mapped read-only (``b""`` for an empty file), once per name in ``maps``."""
    if name not in maps:
        with open(folder / name, "rb") as fh:
            size = fh.seek(0, 2)
            maps[name] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    return maps[name]


def _map_texts(folder: Path) -> dict[str, mmap.mmap | bytes]:
    """``texts.bin`` and ``meta.bin`` of a generation, mapped now (``CorpusIndex``'s doc)."""
    maps: dict[str, mmap.mmap | bytes] = {}
    try:
        for name in ("texts.bin", "meta.bin"):
            _mapped(maps, folder, name)
    except OSError as exc:
        close_maps(maps)
        raise UserError(f"{folder}: damaged corpus index ({exc}); rebuild it with `sanctuary-local index`") from None
    return maps


def _vocab_positions(vocab: np.ndarray, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions in the sorted ``vocab`` of a query's terms (stop words dropped) and how
    often each occurs in it."""
    h = term_hashes(text)
    h = h[~_is_stop(h)]
    if not len(h) or not len(vocab):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pos = np.minimum(np.searchsorted(vocab, h), len(vocab) - 1)
    found = pos[np.asarray(vocab[pos]) == h]
    return np.unique(found, return_counts=True)


def _live_name(root: Path) -> str:
    """The generation ``CURRENT`` names: read as a small regular file (never a FIFO or a link,
    whose read could block), and only a name ``build.py`` writes (never ``../elsewhere``)."""
    from sanctuary_local.io.safe_io import read_regular

    name = read_regular(root / CURRENT, 64, CURRENT, follow=False).decode("utf-8", "replace").strip()
    if not GEN_NAME.fullmatch(name):
        raise UserError(f"{root}: its {CURRENT} file names {name[:40]!r}, not a generation of this index; "
                        f"rebuild it with `sanctuary-local index DOCS --out {root}`")
    return name


def _gone(root: Path, generation: str) -> str:
    return (f"{root}: its generation {generation} is gone: `sanctuary-local index` rebuilt the index "
            f"since it was opened; run again on the new one")


def live_manifest(root: str | Path, generation: str | None = None) -> tuple[str, dict[str, Any]]:
    """The live generation of ``root`` (or ``generation``) and its manifest, no array opened
    (a missing or foreign index is a ``UserError`` saying how to rebuild it)."""
    root = Path(root)
    if generation is not None and not (root / generation / "manifest.json").is_file():
        raise UserError(_gone(root, generation))
    try:
        generation = generation or _live_name(root)
        manifest = orjson.loads((root / generation / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{root}: not a corpus index, or an interrupted first `index` run "
                        f"({type(exc).__name__}: {exc}); run `sanctuary-local index DIR --out {root}`") from None
    if manifest.get("format") != INDEX_FORMAT or manifest.get("tokeniser") != TOKENISER_ID:
        raise UserError(f"{root}: index format {manifest.get('format')!r} / tokeniser "
                        f"{manifest.get('tokeniser')!r} is not this version's; rebuild it with `sanctuary-local index`")
    return generation, manifest


def _open_generation(root: Path, generation: str | None) -> tuple[str, Path, dict[str, Any], dict[str, np.ndarray],
                                                                  dict[str, mmap.mmap | bytes], int]:
    """The live generation of ``root`` (or ``generation``): its name, folder, manifest,
    memory-mapped arrays and texts, and the reader's lease on it (``lease.py``; a missing,
    foreign or damaged index is a ``UserError`` saying how to rebuild it)."""
    for _ in range(5):  # a live generation replaced and removed between reading CURRENT and the lease: again
        name, manifest = live_manifest(root, generation)
        fd = lease.take(root / name)
        if fd is not None:
            break
        if generation is not None:
            raise UserError(_gone(root, generation))
    else:
        raise UserError(f"{root}: `sanctuary-local index` keeps replacing this index; try again once it has finished")
    folder = root / name
    try:
        arrays = {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in (*POSTINGS_FILES, "units")}
        maps = _map_texts(folder)
    except (OSError, ValueError) as exc:
        lease.release(fd)
        raise UserError(f"{folder}: damaged corpus index ({exc}); rebuild it with `sanctuary-local index`") from None
    except BaseException:
        lease.release(fd)
        raise
    return name, folder, manifest, arrays, maps, fd
