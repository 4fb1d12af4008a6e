"""The AVeriTeC knowledge store: per-claim JSON-lines files, in a directory or a zip.

Claim ``i``'s crawled pages live in ``{i}.json``; each line is one document
``{"claim_id", "type", "query", "url", "url2text": [sentences…]}`` (paper §3: the
evidence documents e of the input (c, m, e)). A real file holds ~1,000 documents and
~95 MB, so files are read line by line (bounded memory) and parsed with orjson.

Reading never raises for bad *content*: malformed lines are skipped and reported as
``StoreProblem(file, line, message)``; a claim without a file is ``missing``. Only a
store path that is neither a directory nor a zip archive is a ``UserError``.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.records import Document

__all__ = ["StoreProblem", "StoreLoad", "KnowledgeStore"]

_MEMBER = re.compile(r"(?:^|/)(\d+)\.json$")


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """A line of a store file that was skipped or repaired; ``line`` is 1-based."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


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
        if self.path.is_dir():
            self._files = {int(m.group(1)): p.name for p in self.path.iterdir() if (m := _MEMBER.search(p.name)) and p.is_file()}
            self._is_zip = False
        elif zipfile.is_zipfile(self.path):
            self._is_zip = True
            self._files = self._zip_members()
        else:
            raise UserError(f"{self.path}: not a knowledge store (neither a directory nor a zip archive)")

    def _zip_members(self) -> dict[int, str]:
        members: dict[int, str] = {}
        # Sorted so that, should two folders hold the same index, the choice is stable.
        for name in sorted(self._archive().namelist()):
            m = _MEMBER.search(name)
            if m and not name.endswith("/") and "__MACOSX" not in name:
                members.setdefault(int(m.group(1)), name)
        return members

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
        return (self.path / self._files[claim_index]).stat().st_size

    def _open(self, claim_index: int) -> IO[bytes]:
        if self._is_zip:
            return self._archive().open(self._files[claim_index])
        return open(self.path / self._files[claim_index], "rb")

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
        bad_utf8 = False
        with self._open(claim_index) as fh:
            for lineno, raw in enumerate(fh):
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

    def fingerprint(self, claim_index: int) -> str:
        """SHA-256 of the claim's file bytes (cache key); ``"missing"`` if there is none."""
        if claim_index not in self._fingerprints:
            if not self.has(claim_index):
                return "missing"
            h = hashlib.sha256()
            with self._open(claim_index) as fh:
                while block := fh.read(1 << 20):
                    h.update(block)
            self._fingerprints[claim_index] = h.hexdigest()
        return self._fingerprints[claim_index]


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
