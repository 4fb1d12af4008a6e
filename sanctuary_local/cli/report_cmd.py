"""``sanctuary-local report RUN_DIR``: a self-contained HTML page per claim plus an index,
with the justification's evidence citations linked to each snippet, highlighted in its
source page (see ``sanctuary_local/report/``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from sanctuary_local.cli.help_panels import INPUTS, OUTPUTS


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to the CLI."""

    @app.command("report")
    def report_cmd(
        run_dir: Path = typer.Argument(..., help="The --out directory of a `run` (reads predictions.json, "
                                       "stage2_evidence.jsonl, run_state.json)."),
        store: Path | None = typer.Option(None, "--store", help="Knowledge store (directory or .zip) for the snippets' "
                                          "source pages (default: the one the run used, from RUN_DIR/run_state.json). "
                                          "Without a readable store each snippet is shown alone, with a note.", rich_help_panel=INPUTS),
        claims_range: str | None = typer.Option(None, "--claims-range", help="Only claims with index a <= i < b (a:b).", rich_help_panel=INPUTS),
        out: Path | None = typer.Option(None, "--out", help="Where the pages go (default RUN_DIR/report).", rich_help_panel=OUTPUTS),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar.", rich_help_panel=OUTPUTS),
    ) -> None:
        """Write a run's cited HTML report: an index and one page per claim, which open offline.

        Each page: claim, verdict, flags, justification with its "Evidence q.n" linked to each
        snippet, highlighted at its exact span in its source page. Inline CSS, no script, no network."""
        from sanctuary_local.report.build import write_report

        console = Console(stderr=True)
        with Progress(TextColumn("report pages"), BarColumn(), MofNCompleteColumn(), console=console,
                      transient=True, disable=quiet) as bar:
            task = bar.add_task("report", total=None)
            summary = write_report(run_dir, out, store, claims_range=claims_range,
                                   progress=lambda i, n: bar.update(task, completed=i, total=n))
        if summary.store_problem:
            console.print(f"[yellow]warning:[/] source pages not shown: {escape(summary.store_problem)}",
                          highlight=False, soft_wrap=True)
        console.print(f"report: {escape(str(summary.index))} (claim pages: {summary.n_claims})",
                      highlight=False, soft_wrap=True)
