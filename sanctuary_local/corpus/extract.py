"""Bytes of one file → its searchable texts (``SourceUnit``), or the reason it has none.

One function per format, chosen by the file's extension from ``EXTRACTORS``:

- HTML: the main content via trafilatura (no comments, tables kept); the title from
  the page's metadata; the URL from ``<link rel=canonical>``, else ``og:url``, else
  none (the file path stands in). A page trafilatura finds no main text in falls back
  to the text of its ``<body>`` (lxml), so a short note saved as HTML is not lost.
  Deep nesting: libxml2 stops parsing at 256 levels (2,048 with ``huge_tree``) and
  drops everything after the deep part without an error; a page deeper than 2,048
  levels is read by stripping its tags instead (all its text, no main-content
  selection) and flagged ``HTML_TOO_DEEP``. Wide pages: trafilatura's time grows with
  the square of the children of one element (a flat 10 MB page took minutes), so a page
  with an element of more than ``WIDE_CHILDREN`` children is read by lxml instead (all
  text but scripts, styles, navigation, headers, footers, asides and forms), flagged
  ``HTML_TOO_WIDE``.
- PDF: one unit per page (``page`` is 1-based) via pypdf; an encrypted PDF that does
  not open with the empty password, or a PDF pypdf cannot parse, is a failure. The page
  tree is walked by ``pdf.py``: a page object listed many times is read once, and at
  most ``Limits.max_pdf_pages`` pages are read (both flagged).
- Plain text and Markdown: the decoded file as it is (so a span in the unit is a span
  in the file's text).
- .docx: the paragraphs' text via python-docx, one per line; one whose XML parts expand
  past ``Limits.max_docx_xml_bytes`` is skipped before python-docx parses it.
- AVeriTeC store files (``.json``/``.jsonl``, one JSON object per line with ``url`` and
  ``url2text``): one unit per line, its text ``"\\n".join(url2text)`` exactly as
  ``records.Document.text``.

Decoding: UTF-8 (a leading BOM dropped); bytes that are not UTF-8 are replaced by U+FFFD
and the file is flagged ``undecodable_bytes_replaced``. A text file with NUL bytes or
mostly control characters is ``binary`` and skipped. Heavy libraries are imported
inside the extractors, with an install hint.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

import orjson

from sanctuary_local.corpus.limits import Limits
from sanctuary_local.corpus.pdf import pdf_pages

__all__ = ["SourceUnit", "Extraction", "Skipped", "Failed", "EXTRACTORS", "extract", "kind_of", "UNDECODABLE",
           "HTML_TOO_DEEP", "HTML_TOO_WIDE"]

#: Flag of a file whose undecodable bytes were replaced by U+FFFD.
UNDECODABLE = "undecodable_bytes_replaced"
#: Flag of a page nested too deep to parse: its text was read with the tags stripped.
HTML_TOO_DEEP = "html_too_deep_tags_stripped"
#: Flag of a page with an element of more than ``WIDE_CHILDREN`` children: read without trafilatura.
HTML_TOO_WIDE = "html_too_wide_all_text"
#: Children of one element past which trafilatura is not used: its time grows with the
#: square of one element's children (one <div> of 10,000 <span>s, 2 MB: 32 s; ten of
#: 1,000: 1.9 s; benchmarks/results/corpus/html_extractors*.md), so a page of many sentences in
#: one container took minutes. Such a page is read by lxml instead (``_visible_text``).
WIDE_CHILDREN = 1000
_SNIFF_BYTES = 8192
DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class SourceUnit:
    """One searchable text: a whole file, one PDF page or one line of a store file.

    ``text`` is what spans index: every snippet's ``start``/``end`` is a span of it."""

    path: str
    """The file, relative to the indexed folder; a zip member is ``archive.zip!/member``."""
    text: str
    page: int = 0
    """1-based PDF page; 0 for a format without pages."""
    line: int = 0
    """1-based line of an AVeriTeC store file; 0 otherwise."""
    url: str = ""
    """The saved page's canonical URL (or og:url), a store line's ``url``; "" = none."""
    title: str = ""


@dataclass(frozen=True, slots=True)
class Extraction:
    """What one file gave: its units (possibly none) and its flags."""

    units: tuple[SourceUnit, ...]
    flags: tuple[str, ...] = ()


class Skipped(Exception):
    """The file holds nothing to index (empty, binary, too big, unsupported type)."""


class Failed(Exception):
    """The file should hold text but cannot be read (encrypted or broken)."""


def decode_text(data: bytes) -> tuple[str, tuple[str, ...]]:
    """UTF-8 text of ``data`` (BOM dropped), with ``UNDECODABLE`` when bytes were replaced;
    ``Skipped`` for binary data (NUL bytes, or > 30 % control characters in its start)."""
    head = data[:_SNIFF_BYTES]
    if b"\0" in head:
        raise Skipped("binary (NUL bytes in a text file)")
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
    if head and controls > 0.3 * len(head):
        raise Skipped("binary (mostly control characters)")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), ()
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), (UNDECODABLE,)


def _require(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        from sanctuary_local.errors import UserError

        raise UserError(f"reading this file type needs the package '{package}': pip install 'sanctuary-local[cpu]'") from None


# ------------------------------------------------------------------------------ HTML
_CANONICAL = "//link[translate(@rel,'CANONICAL','canonical')='canonical']/@href"
_OG_URL = "//meta[@property='og:url']/@content"


def _page_url(tree) -> str:
    for xpath in (_CANONICAL, _OG_URL):
        for value in tree.xpath(xpath):
            if str(value).strip():
                return str(value).strip()
    return ""


def extract_html(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """Main text of a saved web page; title and canonical URL kept (module doc)."""
    text, flags = decode_text(data)
    if not text.strip():
        raise Skipped("empty")
    trafilatura = _require("trafilatura", "trafilatura")
    lxml_html = _require("lxml.html", "lxml")
    parser = lxml_html.HTMLParser(huge_tree=True)  # libxml2's default stops at 256 levels of nesting
    try:
        tree = lxml_html.document_fromstring(text, parser=parser)
    except Exception as exc:  # noqa: BLE001 - lxml raises several types for junk
        raise Failed(f"not parseable as HTML ({type(exc).__name__}: {exc})") from None
    title = tree.findtext(".//title") or ""  # the head is parsed even when the body is too deep
    url = _page_url(tree)
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):  # the parse stopped early
        body, flags = strip_tags(text), flags + (HTML_TOO_DEEP,)
    elif max((len(el) for el in tree.iter()), default=0) > WIDE_CHILDREN:
        body, flags = _visible_text(tree), flags + (HTML_TOO_WIDE,)
    else:
        meta = trafilatura.extract_metadata(tree)  # both copy the tree: it stays as parsed
        title = meta.title if meta is not None and meta.title else title
        body = trafilatura.extract(tree, include_comments=False, include_tables=True, favor_recall=True,
                                   deduplicate=False) or ""
        if not body.strip():
            body = re.sub(r"[ \t]*\n\s*", "\n", tree.text_content() or "").strip()
    if not body.strip():
        raise Skipped("empty (no text in the page)")
    return Extraction((SourceUnit(path, body, url=url, title=" ".join(title.split())),), flags)


def _visible_text(tree) -> str:
    """The page's text without scripts, styles, navigation, headers, footers, asides and
    forms (what a wide page is read with: linear in its size; no main-content choice)."""
    for el in tree.xpath("//script|//style|//noscript|//template|//nav|//header|//footer|//aside|//form"):
        el.drop_tree()
    return re.sub(r"[ \t]*\n\s*", "\n", tree.text_content() or "").strip()


_HIDDEN_OPEN = re.compile(r"<(script|style|noscript|template)\b|<!--", re.IGNORECASE)
_HIDDEN_CLOSE = {name: re.compile(rf"</{name}\s*>", re.IGNORECASE) for name in ("script", "style", "noscript", "template")}
#: A tag: ``[^<>]`` stops at the next "<", so a stray "<" costs one short scan, not one to the end.
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)?[^<>]*>")
_BLOCK = frozenset("p div br li ul ol tr table h1 h2 h3 h4 h5 h6 section article header footer blockquote pre dd dt".split())


def strip_tags(page: str) -> str:
    """The text of an HTML page without parsing it: scripts, styles and comments dropped,
    tags removed (a block tag ends a line), entities decoded. Linear in the page's size
    whatever its nesting; what an unparseable page's text is read with."""
    import html

    kept, pos = [], 0
    while (m := _HIDDEN_OPEN.search(page, pos)) is not None:
        kept.append(page[pos:m.start()])
        close = re.compile("-->") if m.group(1) is None else _HIDDEN_CLOSE[m.group(1).lower()]
        end = close.search(page, m.end())
        pos = end.end() if end is not None else len(page)
    kept.append(page[pos:])
    text = _TAG.sub(lambda t: "\n" if (t.group(2) or "").lower() in _BLOCK else " ", "".join(kept))
    text = html.unescape(text)
    return re.sub(r"\n\s*\n+", "\n", re.sub(r"[ \t\r\f\v]+", " ", text)).strip()


# ------------------------------------------------------------------------------- PDF
def extract_pdf(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """One unit per page that has text; the page numbers kept (1-based)."""
    pypdf = _require("pypdf", "pypdf")
    if not data.strip():
        raise Skipped("empty")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Failed("encrypted PDF (needs a password)")
        objects, flags = pdf_pages(reader, limits.max_pdf_pages)  # each page object once, capped
        pages = [(i + 1, page.extract_text() or "") for i, page in enumerate(objects)]
    except Failed:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types for damaged files
        if "decrypt" in str(exc).lower() or "encrypt" in str(exc).lower():
            raise Failed(f"encrypted PDF ({exc})") from None
        raise Failed(f"broken PDF ({type(exc).__name__}: {exc})"[:300]) from None
    title = ""
    try:
        title = str((reader.metadata or {}).get("/Title") or "")
    except Exception:  # noqa: BLE001 - a damaged info dictionary costs only the title
        title = ""
    units = tuple(SourceUnit(path, _valid(t), page=n, title=title) for n, t in pages if t.strip())
    if not units:
        raise Skipped("empty (no extractable text: a scanned PDF?)" if pages else "empty (no pages)")
    return Extraction(units, flags)


def _valid(text: str) -> str:
    """``text`` as valid UTF-8 round-trips it (lone surrogates from a PDF become U+FFFD)."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


# ----------------------------------------------------------------- text, docx, store
def extract_text(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """The decoded file as it is (plain text, Markdown)."""
    text, flags = decode_text(data)
    if not text.strip():
        raise Skipped("empty")
    heading = re.search(r"^#[ \t]+(.+)$", text, re.MULTILINE) if kind_of(path) in (".md", ".markdown") else None
    title = heading.group(1).strip() if heading else PurePosixPath(path.rsplit("!/", 1)[-1]).name
    return Extraction((SourceUnit(path, text, title=title),), flags)


def extract_docx(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """Paragraph texts of a Word document, one per line."""
    docx = _require("docx", "python-docx")
    if not data:
        raise Skipped("empty")
    _check_docx_size(data, limits)
    try:
        doc = docx.Document(io.BytesIO(data))
        text = "\n".join(p.text for p in doc.paragraphs)
        title = doc.core_properties.title or ""
    except Exception as exc:  # noqa: BLE001 - a damaged zip or XML
        raise Failed(f"broken .docx ({type(exc).__name__}: {exc})"[:300]) from None
    if not text.strip():
        raise Skipped("empty (no paragraph text)")
    return Extraction((SourceUnit(path, text, title=title),))


def _check_docx_size(data: bytes, limits: Limits) -> None:
    """``Skipped`` when the .docx's parts expand past the caps: python-docx parses every
    XML part whole (20 MB of XML in a 61 kB file took 24 s and 650 MB). The declared sizes
    bound what zipfile reads, so they are what is checked; a file that is not a zip is
    left to python-docx's own error."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return
    xml = sum(i.file_size for i in infos if i.filename.lower().endswith((".xml", ".rels")))
    if xml > limits.max_docx_xml_bytes:
        raise Skipped(f"over the .docx XML cap (its XML parts expand to {xml} > {limits.max_docx_xml_bytes} bytes)")
    total = sum(i.file_size for i in infos)
    if total > limits.max_archive_bytes:
        raise Skipped(f"over the archive cap (its parts expand to {total} > {limits.max_archive_bytes} bytes)")


def extract_store(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """AVeriTeC store lines (``{"url", "url2text": [...]}``), one unit per line; lines
    that are not such objects are counted in a flag, not fatal."""
    text, flags = decode_text(data)
    if not text.strip():
        raise Skipped("empty")
    units, bad = [], 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("url2text"), list):
            bad += 1
            continue
        body = "\n".join(s if isinstance(s, str) else str(s) for s in obj["url2text"])
        if body.strip():
            units.append(SourceUnit(path, body, line=lineno, url=str(obj.get("url") or "")))
    if not units:
        raise Skipped("not an AVeriTeC store file (no line with 'url2text' text)")
    return Extraction(tuple(units), flags + ((f"store_lines_skipped:{bad}",) if bad else ()))


#: File extension → extractor (house style: an explicit table).
EXTRACTORS: dict[str, Callable[[str, bytes, Limits], Extraction]] = {
    ".html": extract_html, ".htm": extract_html, ".xhtml": extract_html,
    ".pdf": extract_pdf,
    ".txt": extract_text, ".text": extract_text, ".md": extract_text, ".markdown": extract_text,
    ".docx": extract_docx,
    ".json": extract_store, ".jsonl": extract_store,
}


def kind_of(path: str) -> str:
    """The lower-cased extension of ``path`` (``.pdf``), "" when it has none."""
    return PurePosixPath(path.rsplit("!/", 1)[-1]).suffix.lower()


def extract(path: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """Units of one file; ``Skipped``/``Failed`` with the reason when there are none
    (``limits``: the caps of the run, ``limits.py``)."""
    fn = EXTRACTORS.get(kind_of(path))
    if fn is None:
        raise Skipped(f"unsupported file type ({kind_of(path) or 'no extension'})")
    if not data:
        raise Skipped("empty (0 bytes)")
    return fn(path, data, limits)
