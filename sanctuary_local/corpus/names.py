"""File names from a folder someone else wrote, made safe to store and to print.

A name on disk is bytes: Python gives an undecodable byte as a lone surrogate
(``surrogateescape``), which JSON cannot hold, so ``display_name`` spells such a byte
``\\xff`` (the name stays readable and the report stays valid JSON). A name may also
hold control characters: an escape sequence would recolour or rewrite the terminal, a
newline would forge a line of output. ``printable`` spells every control, format and
separator character as a Python-style escape; it is applied to whatever reaches the
console, while the report keeps the name as it is (JSON escapes control characters).
"""

from __future__ import annotations

import os
import unicodedata

__all__ = ["display_name", "json_safe", "printable"]

#: Unicode categories never printed as they are: controls (C0, C1, DEL), formats (bidi
#: overrides that reverse what follows), line/paragraph separators, lone surrogates.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def display_name(name: str) -> str:
    """``name`` as ``os`` gave it (``surrogateescape``) with each undecodable byte as ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def printable(text: str) -> str:
    """``text`` with every control, format or separator character escaped (``\\x1b``,
    ``\\n``, ``\\u202e``): one line, nothing the terminal acts on."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch == " " or unicodedata.category(ch) not in _HIDDEN:
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])  # these are not printable: repr always escapes them
    return "".join(out)


def json_safe(value):
    """``value`` (dicts, lists, strings, numbers) with lone surrogates in its strings
    spelled ``\\udcff``: ``orjson`` refuses them, and one odd name must not lose a report."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", errors="backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
