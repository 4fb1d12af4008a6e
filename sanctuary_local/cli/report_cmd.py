"""``sanctuary-local report RUN_DIR``: a self-contained HTML page per claim plus an index,
with the justification's evidence citations linked to each snippet, highlighted in its
source page (see ``sanctuary_local/report.py``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to the CLI."""

    @app.command("report")
    def report_cmd(
        run_dir: Path = typer.Argument(..., help="The --out directory of a `run` (reads predictions.json, stage2_evidence.jsonl)."),
        out: Path | None = typer.Option(None, "--out", help="Where the pages go (default RUN_DIR/report)."),
        store: Path | None = typer.Option(None, "--store", help="Knowledge store for the snippets' context "
                                          "(default: the one the run used, from RUN_DIR/run_state.json)."),
    ) -> None:
        """Write a cited HTML report (index.html + claim_<i>.html) that opens offline."""
        from sanctuary_local.report import write_report

        console = Console(stderr=True)
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("report", total=None)
            index = write_report(run_dir, out, store, progress=lambda i, n: bar.update(task, completed=i, total=n))
        console.print(f"report: {index}")
