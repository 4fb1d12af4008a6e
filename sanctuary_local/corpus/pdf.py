"""A PDF's pages, each page object once, at most ``max_pages`` of them.

pypdf's ``reader.pages`` flattens the page tree as it is written: a tree whose ``/Kids``
list one page (or one subtree) again and again gives that page again and again (a
1.3 kB file listing one page 10,000 times through four nested ``/Pages`` gave 10,000
documents, and deeper sharing grows exponentially). ``pdf_pages`` walks the tree itself,
iteratively, and visits every node once, keyed by its object number: a repeat is
skipped and counted, never expanded. Inheritable attributes (``/Resources``,
``/MediaBox``, ``/CropBox``, ``/Rotate``) pass from a ``/Pages`` node to its pages as
pypdf's flattening does. The walk stops at ``max_pages`` pages or ``_ENTRIES_PER_PAGE ×
max_pages`` tree entries, whichever comes first, and says so in a flag.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pdf_pages"]

_INHERITABLE = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")
#: Tree entries (kids, repeats included) walked per page allowed: a bound on the walk itself.
_ENTRIES_PER_PAGE = 20
_END = object()


def _is_pages_node(node: Any) -> bool:
    kind = node.get("/Type")
    return kind == "/Pages" or (kind is None and "/Kids" in node)


def _is_page(node: Any) -> bool:
    return node.get("/Type") in ("/Page", None)


def pdf_pages(reader: Any, max_pages: int) -> tuple[list[Any], tuple[str, ...]]:
    """The page objects of ``reader`` (a ``pypdf.PdfReader``) in document order, each
    once, and the flags of what was left out (``pdf_page_tree_repeats_skipped:N``,
    ``pdf_pages_capped:N``, ``pdf_page_tree_capped:N``)."""
    from pypdf import PageObject
    from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject

    root = reader.trailer["/Root"].get_object()  # the catalog (``root_object`` in recent pypdf)
    frames: list[tuple[Any, dict[str, Any]]] = [(iter([root.get("/Pages")]), {})]
    seen: set[Any] = set()
    pages: list[Any] = []
    repeats = entries = 0
    flags: list[str] = []
    while frames:
        kids, inherit = frames[-1]
        kid = next(kids, _END)
        if kid is _END:
            frames.pop()
            continue
        entries += 1
        if entries > _ENTRIES_PER_PAGE * max_pages:
            flags.append(f"pdf_page_tree_capped:{_ENTRIES_PER_PAGE * max_pages}")
            break
        ref = kid if isinstance(kid, IndirectObject) else None
        node = kid.get_object() if kid is not None else None
        if not isinstance(node, DictionaryObject) or not node:
            continue  # a damaged entry: pypdf skips it too
        key = (ref.idnum, ref.generation) if ref is not None else id(node)
        if key in seen:
            repeats += 1
            continue
        seen.add(key)
        if _is_pages_node(node):
            kids_of = node.get("/Kids")
            kids_of = kids_of.get_object() if kids_of is not None else None
            if isinstance(kids_of, ArrayObject):
                frames.append((iter(kids_of), {**inherit, **{a: node[a] for a in _INHERITABLE if a in node}}))
        elif _is_page(node):
            if len(pages) == max_pages:
                flags.append(f"pdf_pages_capped:{max_pages}")
                break
            page = PageObject(reader, ref)
            page.update(node)
            for attr, value in inherit.items():
                if attr not in page:  # a page's own value wins over its parent's
                    page[NameObject(attr)] = value
            pages.append(page)
    if repeats:
        flags.insert(0, f"pdf_page_tree_repeats_skipped:{repeats}")
    return pages, tuple(flags)
