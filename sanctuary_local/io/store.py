"""The AVeriTeC knowledge store: per-claim JSON-lines files, in a directory or a zip.

Claim ``i``'s crawled pages live in ``{i}.json``; each line is one document
``{"claim_id", "type", "query", "url", "url2text": [sentences…]}`` (paper §3: the
evidence documents e of the input (c, m, e)). A real file holds ~1,000 documents and
~95 MB, so files are read line by line (bounded memory) and parsed with orjson.

Reading never raises for bad *content*: malformed lines are skipped and reported as
``StoreProblem(file, line, message)``; a claim without a file is ``missing``. Only a
store path that is neither a directory nor a zip archive (a FIFO, a device…), or two
store files of the same claim (``007.json`` and ``7.json``), is a ``UserError``.

Hostile files (issue 27) are problems of their claim, which goes on with what could be
read: a claim file that is not a regular file (a FIFO would block forever, ``/dev/zero``
never ends) is refused before a byte is read (line 0 = the whole file); a line longer
than ``MAX_LINE_BYTES`` is skipped without being held in memory; reading stops after
``MAX_FILE_BYTES``. A UTF-8 byte-order mark at the start of a line (the file's start, or
files concatenated) is dropped. Claim indices are ASCII digits only.
"""

from __future__ import annotations

import hashlib
import re
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import NotRegularFile, open_regular
from sanctuary_local.records import Document

__all__ = ["StoreProblem", "StoreLoad", "KnowledgeStore", "MAX_LINE_BYTES", "MAX_FILE_BYTES"]

#: Longest store line (one document) read, in bytes: a real page is well under 1 MiB; a
#: longer line is skipped (a problem of its claim) and never held in memory whole.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Most bytes read from one store file: a real file is ~100 MB (1,000 pages); reading
#: stops here with a problem, so that no file (a zip bomb, a runaway crawl) can make the
#: documents of one claim outgrow memory.
MAX_FILE_BYTES = 256 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"
_MEMBER = re.compile(r"(?:^|/)([0-9]+)\.json$")  # ASCII digits: int() would read other scripts' too


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """A line of a store file that was skipped or repaired; ``line`` is 1-based."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass(frozen=True, slots=True)
class StoreLoad:
    """All documents of one claim, with what went wrong while reading them."""

    claim_index: int
    documents: list[Document]
    problems: list[StoreProblem] = field(default_factory=list)
    missing: bool = False
    path: str = ""
    n_bytes: int = 0


class KnowledgeStore:
    """Lazy, read-only access to a knowledge store directory or official ``.zip``.

    Zip members are streamed without unpacking and may sit in a sub-folder
    (``output_dev/17.json``). Instances can be pickled (the zip handle is reopened)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._zip: zipfile.ZipFile | None = None
        self._fingerprints: dict[int, str] = {}
        if not self.path.exists():
            raise UserError(f"{self.path}: knowledge store not found (expected a directory of {{i}}.json files or a .zip)")
        self._files, self._is_zip = _claim_files(self.path, self._archive)

    def _archive(self) -> zipfile.ZipFile:
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.path)
        return self._zip

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_zip"] = None  # an open file handle cannot cross a process boundary
        return state

    def __repr__(self) -> str:
        return f"KnowledgeStore({str(self.path)!r}, {len(self._files)} claim files)"

    # ------------------------------------------------------------------ lookup

    def claim_indices(self) -> list[int]:
        """Indices of the claims that have a store file, sorted."""
        return sorted(self._files)

    def has(self, claim_index: int) -> bool:
        """Whether claim ``claim_index`` has a store file."""
        return claim_index in self._files

    def file_name(self, claim_index: int) -> str:
        """Display name of the claim's file (``dir/17.json`` or ``store.zip:folder/17.json``)."""
        name = self._files.get(claim_index, f"{claim_index}.json")
        return f"{self.path}:{name}" if self._is_zip else str(self.path / name)

    def n_bytes(self, claim_index: int) -> int:
        """Size of the claim's file in bytes (uncompressed for zip members); 0 if missing."""
        if claim_index not in self._files:
            return 0
        if self._is_zip:
            return self._archive().getinfo(self._files[claim_index]).file_size
        return _regular_size(self.path / self._files[claim_index])

    def _open(self, claim_index: int) -> IO[bytes]:
        """The claim's file; ``NotRegularFile`` for a FIFO/device (without blocking)."""
        if self._is_zip:
            return self._archive().open(self._files[claim_index])
        return open_regular(self.path / self._files[claim_index])

    # ----------------------------------------------------------------- reading

    def load(self, claim_index: int) -> StoreLoad:
        """All documents of a claim; never raises for bad content (see module doc)."""
        name = self.file_name(claim_index)
        if not self.has(claim_index):
            return StoreLoad(claim_index, [], [], missing=True, path=name, n_bytes=0)
        problems: list[StoreProblem] = []
        documents = list(self.iter_documents(claim_index, problems))
        return StoreLoad(claim_index, documents, problems, missing=False, path=name, n_bytes=self.n_bytes(claim_index))

    def iter_documents(self, claim_index: int, problems: list[StoreProblem] | None = None) -> Iterator[Document]:
        """Stream a claim's documents one line at a time (bounded memory for huge files).

        Yields nothing for a missing file. Skipped/repaired lines are appended to
        ``problems`` when given. ``Document.position`` is the 0-based line number."""
        if not self.has(claim_index):
            return
        sink = problems if problems is not None else []
        name = self.file_name(claim_index)
        try:
            fh = self._open(claim_index)
        except (NotRegularFile, OSError, *_ZIP_MEMBER_ERRORS) as exc:
            sink.append(_unopened(name, exc))
            return
        with fh:
            yield from _documents(fh, claim_index, name, sink)

    def fingerprint(self, claim_index: int) -> str:
        """SHA-256 of the claim's file bytes (cache key); ``"missing"`` if there is none."""
        if claim_index not in self._fingerprints:
            if not self.has(claim_index):
                return "missing"
            try:
                fh = self._open(claim_index)
            except (OSError, UserError, *_ZIP_MEMBER_ERRORS):
                return "unreadable"  # no documents: the same (empty) index as a missing file
            with fh:
                self._fingerprints[claim_index] = _sha256_capped(fh)
        return self._fingerprints[claim_index]


def content_id(store: KnowledgeStore, claim_index: int, sha256: Callable[[Path], str]) -> str:
    """What identifies the content of the claim's file for the run fingerprint, without
    reading a zip: a zip member's ``crc32:<crc>:<size>`` from the archive's directory, a
    file's ``sha256`` (the caller's, e.g. cached) cut to 16 hex digits; ``"missing"``."""
    files = store._files  # noqa: SLF001 - the store's own module
    if claim_index not in files:
        return "missing"
    if store._is_zip:  # noqa: SLF001
        info = store._archive().getinfo(files[claim_index])  # noqa: SLF001
        return f"crc32:{info.CRC:08x}:{info.file_size}"
    return sha256(store.path / files[claim_index])[:16]


#: What reading a damaged or unsupported zip member raises: a bad CRC (BadZipFile), a
#: corrupt deflate stream (zlib.error), a truncated member (EOFError), an encrypted member
#: (RuntimeError: password required), an unknown compression (NotImplementedError).
_ZIP_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError)


def _claim_files(path: Path, archive: Callable[[], zipfile.ZipFile]) -> tuple[dict[int, str], bool]:
    """``(claim index → file name, whether the store is a zip)`` of the store at ``path``
    (an existing path; ``archive()`` opens the zip); ``UserError`` for anything else."""
    if path.is_dir():
        # Not only regular files: a FIFO or a link to a device named 7.json is claim 7's
        # problem (reported when it is read), not a silently missing claim.
        return _index(path, (p.name for p in path.iterdir() if _MEMBER.search(p.name) and not p.is_dir())), False
    if not _is_zipfile(path):
        raise UserError(f"{path}: not a knowledge store (neither a directory nor a zip archive)")
    try:
        names = archive().namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise UserError(f"{path}: damaged zip archive ({exc})") from None
    return _index(path, (n for n in names if not n.endswith("/") and "__MACOSX" not in n)), True


def _is_zipfile(path: Path) -> bool:
    """Whether the store path is a zip archive; a FIFO or a device (never opened for
    reading: it would block or never end) is a one-line ``UserError``."""
    try:
        with open_regular(path) as fh:
            return zipfile.is_zipfile(fh)
    except NotRegularFile as exc:
        raise UserError(f"{path}: not a knowledge store: it is {exc.kind} "
                        "(expected a directory of {i}.json files or a .zip)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the knowledge store: {exc.strerror or exc}") from None


def _index(path: Path, names: Iterable[str]) -> dict[int, str]:
    """Claim index → file name; two names of one index (``007.json`` and ``7.json``, or
    two folders of a zip) are a ``UserError`` naming both: nothing says which is meant."""
    files: dict[int, str] = {}
    for name in sorted(names):
        if (m := _MEMBER.search(name)) is None:
            continue
        index = int(m.group(1))
        if index in files:
            raise UserError(f"{path}: {files[index]} and {name} are both the store file of claim {index}; "
                            "remove or rename one")
        files[index] = name
    return files


def _regular_size(path: Path) -> int:
    """Size of a regular file in bytes; 0 for anything else or an unreadable path."""
    try:
        st = path.stat()
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _unopened(name: str, exc: Exception) -> StoreProblem:
    """The problem of a claim file that could not be opened (line 0: the whole file)."""
    if isinstance(exc, NotRegularFile):
        return StoreProblem(name, 0, f"is {exc.kind}, not a regular file; not read")
    if isinstance(exc, OSError):  # a dangling link, no permission…
        return StoreProblem(name, 0, f"cannot be read: {exc.strerror or exc}")
    # an encrypted member, an unknown compression
    return StoreProblem(name, 0, f"cannot be read from the zip: {exc}")


def _documents(fh: IO[bytes], claim_index: int, name: str, sink: list[StoreProblem]) -> Iterator[Document]:
    """The documents of an open claim file, line by line; skipped/repaired lines go to ``sink``."""
    bad_utf8 = False
    for lineno, raw in _guarded(_capped_lines(fh, name, sink), name, sink):
        if not raw.strip():
            continue  # blank lines (e.g. a trailing newline) are not documents
        obj, text_ok = _parse_line(raw)
        if not text_ok and not bad_utf8:
            bad_utf8 = True  # reported once per file: one bad file can have thousands
            sink.append(StoreProblem(name, lineno + 1, "not UTF-8; undecodable bytes replaced by U+FFFD"))
        if isinstance(obj, str):  # parse error message
            sink.append(StoreProblem(name, lineno + 1, obj))
            continue
        doc = _to_document(obj, claim_index, lineno, name, sink)
        if doc is not None:
            yield doc


def _sha256_capped(fh: IO[bytes]) -> str:
    """SHA-256 of the file's bytes: documents come from the first ``MAX_FILE_BYTES`` only, so
    hash no further; a damaged zip member adds a marker after what was read."""
    h = hashlib.sha256()
    left = MAX_FILE_BYTES + 1
    try:
        while left > 0 and (block := fh.read(min(1 << 20, left))):
            h.update(block)
            left -= len(block)
    except _ZIP_MEMBER_ERRORS:
        h.update(b"\0damaged")  # what was read, then the damage: stable for the same bytes
    return h.hexdigest()


def _guarded(lines: Iterator[tuple[int, bytes]], name: str, sink: list[StoreProblem]) -> Iterator[tuple[int, bytes]]:
    """``lines`` until a damaged zip member stops them: a problem, and the documents already
    read stay (issue 27: a bad CRC or an encrypted member is the claim's problem, not a crash)."""
    last = 0
    try:
        for lineno, raw in lines:
            last = lineno + 1
            yield lineno, raw
    except _ZIP_MEMBER_ERRORS as exc:
        sink.append(StoreProblem(name, last + 1, f"damaged zip member ({exc}); the rest not read"))


def _capped_lines(fh: IO[bytes], name: str, sink: list[StoreProblem]) -> Iterator[tuple[int, bytes]]:
    """``(0-based line number, bytes)`` of each line, a leading BOM dropped. A line over
    ``MAX_LINE_BYTES`` is skipped in 1 MiB pieces (never held whole) with a problem;
    reading stops, with a problem, once the file passes ``MAX_FILE_BYTES``."""
    line_cap, file_cap = MAX_LINE_BYTES, MAX_FILE_BYTES  # read once: a test may lower them
    total, lineno = 0, -1
    while raw := fh.readline(line_cap + 1):
        lineno += 1
        total += len(raw)
        if len(raw) > line_cap and not raw.endswith(b"\n"):
            raw = b""  # dropped now: only 1 MiB pieces of the rest are read
            while (rest := fh.readline(1 << 20)) and total <= file_cap:
                total += len(rest)
                if rest.endswith(b"\n"):
                    break
            if total <= file_cap:
                sink.append(StoreProblem(name, lineno + 1, f"line longer than {line_cap} bytes (the cap per "
                                                           "document); skipped"))
                continue
        if total > file_cap:
            sink.append(StoreProblem(name, lineno + 1, f"file longer than {file_cap} bytes (the cap per store file); "
                                                       "this line and the rest not read"))
            return
        yield lineno, raw[3:] if raw.startswith(_BOM) else raw


def _parse_line(raw: bytes) -> tuple[Any, bool]:
    """Parse one JSON line → (object or error-message str, bytes-were-valid-UTF-8).

    orjson rejects invalid UTF-8 outright, so on failure we decode with replacement
    and parse again: one stray byte should not cost the whole document."""
    try:
        return orjson.loads(raw), True
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            try:
                return orjson.loads(text), False
            except orjson.JSONDecodeError as exc2:
                return f"malformed JSON line: {exc2.msg} (column {exc2.colno})", False
        return f"malformed JSON line: {exc.msg} (column {exc.colno})", True


def _to_document(obj: Any, claim_index: int, lineno: int, name: str, sink: list[StoreProblem]) -> Document | None:
    """A parsed JSON line → Document; a non-object line is skipped, odd fields repaired."""
    if not isinstance(obj, dict):
        sink.append(StoreProblem(name, lineno + 1, f"expected a JSON object, got {type(obj).__name__}; line skipped"))
        return None
    lines = obj.get("url2text")
    if lines is None:
        lines = []
    elif isinstance(lines, str):
        lines = [lines]
    elif not isinstance(lines, list):
        sink.append(StoreProblem(name, lineno + 1, f"'url2text' is a {type(lines).__name__}, not a list; document kept empty"))
        lines = []
    elif not all(isinstance(s, str) for s in lines):
        sink.append(StoreProblem(name, lineno + 1, "'url2text' holds non-string items; they were converted to text"))
        lines = ["" if s is None else s if isinstance(s, str) else str(s) for s in lines]
    return Document(
        claim_index=claim_index,
        position=lineno,
        url=str(obj.get("url") or ""),
        lines=tuple(lines),
        type=str(obj.get("type") or ""),
        query=str(obj.get("query") or ""),
    )
