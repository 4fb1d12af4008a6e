"""What ``index`` reads of a folder someone else wrote: the caps and the link policy.

Every cap bounds the work one file can cause, so a hostile file costs at most its cap;
whatever a cap stops is listed in ``index_report.json`` with the reason, never dropped
silently.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits", "MAX_FILE_BYTES"]

#: Default cap on one file's (or zip member's uncompressed) size: bigger files are skipped.
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The caps of one ``index`` run (the CLI's ``--max-*`` options)."""

    max_file_bytes: int = MAX_FILE_BYTES
    """A file, or a zip member uncompressed, larger than this is skipped."""
    max_archive_bytes: int = 1024 * 1024 * 1024
    """A zip's members are read until their uncompressed total would pass this; the
    rest are skipped (a zip bomb, or one member listed a thousand times)."""
    max_docx_xml_bytes: int = 16 * 1024 * 1024
    """A .docx whose XML parts expand past this is skipped (python-docx parses them whole)."""
    max_pdf_pages: int = 5000
    """Pages read per PDF (a page object counted once, however often the tree lists it)."""
    follow_links: bool = False
    """Follow links to files outside the folder too (links inside it are always followed)."""

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_archive_bytes", "max_docx_xml_bytes", "max_pdf_pages"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be ≥ 1, got {getattr(self, name)}")
