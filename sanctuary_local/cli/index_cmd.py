"""``sanctuary-local index DIR --out INDEX``: a searchable corpus from a folder of your own
documents (saved web pages, PDFs, text, Markdown, .docx, AVeriTeC store files, zips of
them), for ``check`` and ``run --corpus`` (see ``sanctuary_local/corpus/``)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


_IN, _OUT, _MODEL, _PERF, _ADV = "Inputs", "Outputs", "Models and profile", "Performance", "Advanced"


def index(
    folder: Path = typer.Argument(..., help="The folder of documents (walked recursively; zip archives opened).", rich_help_panel=_IN),
    out: Path = typer.Option(..., "--out", help="The index folder: new, empty, or an index made by this command (rerun to update it: unchanged files are not extracted again). Any other folder is refused.", rich_help_panel=_OUT),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar.", rich_help_panel=_OUT),
    segment_tokens: int = typer.Option(500, "--segment-tokens", help="Words per coarse segment (the pipeline's retrieval.segment_tokens).", rich_help_panel=_MODEL),
    max_file_mb: float = typer.Option(64.0, "--max-file-mb", help="Skip files (and zip members, uncompressed) larger than this.", rich_help_panel=_PERF),
    max_archive_mb: float = typer.Option(1024.0, "--max-archive-mb", help="Skip a zip larger than this, and read its members only until they expand to this much in total.", rich_help_panel=_PERF),
    follow_links: bool = typer.Option(False, "--follow-links", help="Also index files that symbolic links lead to outside the folder (by default only links to files inside it are followed; links to folders never are).", rich_help_panel=_ADV),
    max_docx_xml_mb: float = typer.Option(16.0, "--max-docx-xml-mb", help="Skip a .docx whose XML parts expand to more than this.", rich_help_panel=_ADV),
    other_folder: bool = typer.Option(False, "--other-folder", help="Allow --out to be an index of another folder: it becomes an index of this one, and the other folder's documents leave it (refused without this flag).", rich_help_panel=_OUT),
    max_pdf_pages: int = typer.Option(5000, "--max-pdf-pages", min=1, help="Read at most this many pages of a PDF (each page object once, however often its page tree lists it).", rich_help_panel=_ADV),
) -> None:
    """Index a folder of documents so that check and run --corpus can search it.

    Reads HTML (main text, title, canonical URL), PDF (text per page), .txt and .md as they are, .docx paragraphs, AVeriTeC store files (.json/.jsonl, one document per line) and the members of .zip archives. Unchanged files are reused on a rerun; deleted files leave the index. The new index goes live only when it is complete and on disk: an interrupted run leaves the previous one usable.

    Followed: links to files inside the folder (--follow-links: outside it too). Never followed or opened: links to folders, archives inside archives. Capped: a file's size, a zip's size and expanded total (a member listed many times is read once), a .docx's XML, pages per PDF (a page its page tree lists many times is read once); HTML nested past 2,048 levels, or with an element of more than 1,000 children, is read without main-text selection and flagged. Refused with one line: an --out folder that holds anything but an index made by this command, an index of another folder (unless --other-folder), the indexed folder itself as --out, a second run on an index while one is writing it.

    A file that cannot be read (encrypted, broken, binary, empty, over a cap, a FIFO or device, a link not followed) never stops the run: INDEX/index_report.json lists every one with its reason; the terminal shows the first ten of each kind, control characters escaped. Exit code 0, or 2 for a bad folder or --out."""
    from sanctuary_local.corpus.build import REPORT_NAME, build_index
    from sanctuary_local.errors import UserError

    from sanctuary_local.corpus.limits import Limits

    for flag, value in (("--max-file-mb", max_file_mb), ("--max-archive-mb", max_archive_mb),
                        ("--max-docx-xml-mb", max_docx_xml_mb)):
        if not value > 0:
            raise UserError(f"{flag} must be > 0")
    limits = Limits(max_file_bytes=_mb(max_file_mb), max_archive_bytes=_mb(max_archive_mb),
                    max_docx_xml_bytes=_mb(max_docx_xml_mb), max_pdf_pages=max_pdf_pages, follow_links=follow_links)
    console = Console(stderr=True)
    try:
        with _library_warnings(console):
            rep = _build_with_bar(console, quiet, lambda tick: build_index(
                folder, out, segment_tokens=segment_tokens, limits=limits, other_folder=other_folder, progress=tick))
    except KeyboardInterrupt:  # typer would exit 130 without a word
        _say(console, f"stopped: {_shown(str(out))} keeps its last complete index, if it had one (a new one goes "
                      "live only when complete); run the same command again to finish")
        raise typer.Exit(130) from None
    size = f"{rep.text_bytes / 1e6:.1f} MB" if rep.text_bytes >= 1e6 else f"{rep.text_bytes / 1e3:.1f} kB"
    _say(console, f"index {_shown(str(out))} ({rep.generation}): {rep.indexed} files read, {rep.reused} unchanged, "
                  f"{rep.removed} removed; {rep.units} documents, {rep.segments} segments, {size} of text "
                  f"in {rep.seconds:.1f} s")
    for kind in ("failed", "skipped", "flagged"):
        _print_problems(console, kind, getattr(rep, kind))
    if rep.still_read:
        _say(console, f"kept {', '.join(rep.still_read)}: a check, run or serve still reads it; "
                      "the next index run removes it once that has ended")
    _say(console, f"report: {_shown(str(Path(out) / REPORT_NAME))}")


def _build_with_bar(console: Console, quiet: bool, build: Callable[[Callable[[int, int, str], None]], Any]) -> Any:
    """``build(tick)`` under a progress bar (none with ``--quiet`` or off a terminal)."""
    with Progress(TextColumn("indexing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  TextColumn("{task.description}"), console=console, transient=True, disable=quiet or not console.is_terminal) as bar:
        task = bar.add_task("", total=None)

        def tick(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total, description=_shown(path[-60:]))

        return build(tick)


#: Problems of one kind printed one per line; past this, the first ones and a count per reason.
SHOWN_PROBLEMS = 20


def _shown(text: str) -> str:
    """A name from the folder as it is safe to print: control characters escaped (an escape
    sequence in a file name must not reach the terminal, a newline must not forge a line)
    and rich markup escaped."""
    from sanctuary_local.corpus.names import printable

    return escape(printable(text))


@contextmanager
def _library_warnings(console: Console) -> Iterator[None]:
    """The extractors' log warnings (pypdf's "Page resources are not a dictionary: …" quotes
    the file's own strings) printed as one escaped line each: without a handler, Python's
    last-resort handler wrote them to the terminal as they were, escape sequences and
    newlines of a hostile file included."""
    class _Escaped(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                _say(console, f"  warning: {_shown(record.name)}: {_shown(record.getMessage())}")
            except Exception:  # noqa: BLE001 - a message that cannot be formatted is dropped, never fatal
                self.handleError(record)

    root = logging.getLogger()
    handler = _Escaped(logging.WARNING)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def _say(console: Console, line: str) -> None:
    console.print(line, highlight=False, soft_wrap=True)


def _print_problems(console: Console, kind: str, items: list[dict]) -> None:
    """One line per failed, skipped or flagged file; a long list is cut to its first lines
    and a count per reason (the report keeps every entry)."""
    def reason(item: dict) -> str:
        return item["reason"] if "reason" in item else ", ".join(item["flags"])

    cut = len(items) > SHOWN_PROBLEMS
    for item in items[: SHOWN_PROBLEMS // 2 if cut else SHOWN_PROBLEMS]:
        _say(console, f"  {kind}: {_shown(item['path'])}: {_shown(reason(item))}")
    if cut:
        counts = Counter(reason(item).split(" (")[0].split(":")[0] for item in items)
        top = "; ".join(f"{n} {_shown(r)}" for r, n in counts.most_common(5))
        more = f"; {len(counts) - 5} other reasons" if len(counts) > 5 else ""
        _say(console, f"  … {len(items) - SHOWN_PROBLEMS // 2} more {kind} (all {len(items)} are in the report): {top}{more}")


def _mb(value: float) -> int:
    return max(1, int(value * 1024 * 1024))


def register(app: typer.Typer) -> None:
    app.command("index")(index)
