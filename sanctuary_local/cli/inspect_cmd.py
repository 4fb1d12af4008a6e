"""``sanctuary-local inspect``: summary statistics of a knowledge store (and claims file).

Streams every claim's store file once (bounded memory) and prints a rich table:
claims, documents per claim, empty documents, lines per document, MB per claim,
malformed lines (with file:line) and the claims whose store file is missing. A zip
that cannot be read (damaged archive, bad CRC, encrypted member) and an unwritable
``--json`` are one error line naming the file.
"""

from __future__ import annotations

import statistics
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from sanctuary_local.cli.help_panels import INPUTS, OUTPUTS
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.files import check_not_an_input, check_writable, writing
from sanctuary_local.io.leaderboard import atomic_write_bytes
from sanctuary_local.io.store import KnowledgeStore, StoreProblem

#: At most this many problems/missing claims are listed one by one (the rest counted).
MAX_LISTED = 20
#: Show a progress bar from this many claims on (small stores finish instantly).
PROGRESS_FROM = 20


@dataclass
class StoreReport:
    """What ``inspect`` measured; ``--json`` writes it as is."""

    store: str
    claims_file: str | None
    n_claims: int = 0
    n_store_files: int = 0
    missing: list[int] = field(default_factory=list)
    unclaimed_files: list[int] = field(default_factory=list)
    docs_per_claim: list[int] = field(default_factory=list)
    lines_per_doc: list[int] = field(default_factory=list)
    mb_per_claim: list[float] = field(default_factory=list)
    empty_documents: int = 0
    problems: list[StoreProblem] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """JSON-ready summary (distributions reduced to min/median/max)."""
        d = asdict(self)
        for key in ("docs_per_claim", "lines_per_doc", "mb_per_claim"):
            d[key] = _spread(getattr(self, key))
        d["n_documents"] = sum(self.docs_per_claim)
        d["n_problems"] = len(self.problems)
        d["problems"] = [str(p) for p in self.problems]
        return d


def _spread(values: list[int] | list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def inspect_store(store: KnowledgeStore, indices: list[int], claims_file: str | None, console: Console) -> StoreReport:
    """Scan the store files of ``indices``; a missing file flags that claim only."""
    report = StoreReport(store=str(store.path), claims_file=claims_file, n_claims=len(indices))
    wanted = set(indices)
    report.unclaimed_files = [i for i in store.claim_indices() if i not in wanted]
    progress = Progress(
        TextColumn("inspecting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, transient=True, disable=len(indices) < PROGRESS_FROM,
    )
    with progress:
        task = progress.add_task("inspect", total=len(indices))
        for i in indices:
            _scan_claim(store, i, report)
            progress.advance(task)
    return report


#: What reading a damaged zip raises (zipfile: bad CRC, bad headers; zlib: bad deflate data;
#: EOFError: truncated member; NotImplementedError: unknown compression method).
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError)


@contextmanager
def zip_errors(name: str) -> Iterator[None]:
    """A damaged or encrypted zip (member) ``name`` → one ``UserError`` line naming it."""
    try:
        yield
    except ZIP_ERRORS as exc:
        raise UserError(f"{name}: damaged zip: {exc}") from None
    except RuntimeError as exc:  # zipfile's way to say "encrypted, password required"
        if "encrypted" not in str(exc):
            raise
        raise UserError(f"{name}: encrypted zip member; unpack it, or zip the store again without a password") from None


def _scan_claim(store: KnowledgeStore, index: int, report: StoreReport) -> None:
    if not store.has(index):
        report.missing.append(index)
        return
    with zip_errors(store.file_name(index)):
        _scan_file(store, index, report)


def _scan_file(store: KnowledgeStore, index: int, report: StoreReport) -> None:
    report.n_store_files += 1
    n_docs = 0
    for doc in store.iter_documents(index, report.problems):
        n_docs += 1
        report.lines_per_doc.append(len(doc.lines))
        if not any(line.strip() for line in doc.lines):
            report.empty_documents += 1
    report.docs_per_claim.append(n_docs)
    report.mb_per_claim.append(store.n_bytes(index) / 1e6)


def _fmt(spread: dict[str, float] | None, digits: int = 0) -> str:
    if spread is None:
        return "–"
    spec = f".{digits}f" if digits else "g"  # integers stay integers; a median may be x.5
    return " / ".join(format(spread[k], spec) for k in ("min", "median", "max"))


def render(report: StoreReport, console: Console) -> None:
    """Print the report as a rich table plus the listed problems."""
    s = report.summary()
    table = Table(title=escape(f"Knowledge store {report.store}"), show_header=True)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("claims" + (" (from claims file)" if report.claims_file else " (store files)"), str(report.n_claims))
    table.add_row("claims with a store file", str(report.n_store_files))
    table.add_row("claims whose store file is missing", str(len(report.missing)))
    table.add_row("documents (total)", str(s["n_documents"]))
    table.add_row("documents per claim (min / median / max)", _fmt(s["docs_per_claim"]))  # type: ignore[arg-type]
    table.add_row("empty documents", str(report.empty_documents))
    table.add_row("lines per document (min / median / max)", _fmt(s["lines_per_doc"]))  # type: ignore[arg-type]
    table.add_row("MB per claim (min / median / max)", _fmt(s["mb_per_claim"], 2))  # type: ignore[arg-type]
    table.add_row("malformed / repaired lines", str(len(report.problems)))
    if report.claims_file:
        table.add_row("store files without a claim", str(len(report.unclaimed_files)))
    console.print(table)
    if report.missing:
        listed = ", ".join(map(str, report.missing[:MAX_LISTED]))
        more = f" … and {len(report.missing) - MAX_LISTED} more" if len(report.missing) > MAX_LISTED else ""
        console.print(f"[yellow]missing store files for claims:[/] {listed}{more}", highlight=False)
    for p in report.problems[:MAX_LISTED]:
        console.print(f"[yellow]problem:[/] {escape(str(p))}", highlight=False, soft_wrap=True)
    if len(report.problems) > MAX_LISTED:
        console.print(f"… and {len(report.problems) - MAX_LISTED} more problems (use --json for the full list)")


def register(app: typer.Typer) -> None:
    """Add the ``inspect`` command to the CLI."""

    @app.command("inspect")
    def inspect_cmd(
        store: Path = typer.Option(..., "--store", help="Knowledge store: a directory of {i}.json files or an official .zip.", rich_help_panel=INPUTS),
        claims: Path | None = typer.Option(None, "--claims", help="Claims file; its indices decide which store files are expected.", rich_help_panel=INPUTS),
        json_out: Path | None = typer.Option(None, "--json", help="Also write the full report (every problem) as JSON here.", rich_help_panel=OUTPUTS),
    ) -> None:
        """Summarise a knowledge store: documents, lines, sizes, malformed lines, missing files."""
        console = Console()
        if json_out is not None:  # before the scan, which can take minutes
            check_writable(json_out, "the inspect report", is_file=True)
            check_not_an_input(json_out, (store, claims), "the inspect report")
        with zip_errors(str(store)):
            ks = KnowledgeStore(store)
        indices = list(range(len(read_claims(claims)))) if claims else ks.claim_indices()
        report = inspect_store(ks, indices, str(claims) if claims else None, console)
        render(report, console)
        if json_out is not None:
            with writing(json_out, "the inspect report"):
                atomic_write_bytes(json_out, orjson.dumps(report.summary(), option=orjson.OPT_INDENT_2) + b"\n")
