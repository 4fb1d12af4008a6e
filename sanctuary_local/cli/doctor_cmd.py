"""``sanctuary-local doctor``: what a profile needs on this machine, and whether it is there."""

from __future__ import annotations

from pathlib import Path

import typer

from sanctuary_local.cli.help_panels import ADVANCED, MODELS, PROFILE_HELP

STYLE = {"ok": "green", "FAIL": "bold red", "WARN": "yellow", "later": "cyan", "info": "dim"}


def _examples_root() -> Path:
    """The working directory when it holds ``examples/`` (a checkout), else the package's checkout."""
    import sanctuary_local

    cwd = Path.cwd()
    return cwd if (cwd / "examples").is_dir() else Path(sanctuary_local.__file__).resolve().parents[1]


def doctor(
    profile: str = typer.Option("cpu", "--profile", help=PROFILE_HELP, rich_help_panel=MODELS),
    models_dir: str = typer.Option(None, "--models-dir", help="Where fetched models live (default: the profile's, models/).", rich_help_panel=MODELS),
    set_: list[str] = typer.Option([], "--set", help="Override a config value, as in `run` (repeatable).", rich_help_panel=MODELS),
    rehash: bool = typer.Option(False, "--rehash", help="Re-hash assembled model files even when their verification record matches (~2 s per GB).", rich_help_panel=ADVANCED),
) -> None:
    """Check that this machine has what a profile needs, and print the fix for each missing item.

    Checks: models (assembled, SHA-256), packages, cache space, threads, WordNet, vLLM/Ray/GPU, example data.

    Offline; nothing is downloaded, assembled or distilled. Each missing item comes with its fix.

    Exit code 0: the profile can run (rows marked WARN or later do not stop it); 1: it cannot (the FAIL rows say why); 2: bad arguments."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.machine.doctor import FAIL, WARN, diagnose

    cfg = load_config(profile, parse_overrides(set_) or None)
    if models_dir:
        cfg.models_dir = models_dir
    rows = diagnose(cfg, _examples_root(), rehash=rehash)
    console = Console()
    table = Table(title=f"sanctuary-local doctor: profile {escape(cfg.profile)}")
    for col in ("check", "status", "found"):
        table.add_column(col, overflow="fold")
    for r in rows:
        status = f"[{STYLE.get(r.status, 'bold')}]{r.status}[/]" + (" (fix below)" if r.fix and r.status in (FAIL, WARN) else "")
        table.add_row(escape(r.item), status, escape(r.detail))
    console.print(table)
    # Fixes as whole lines under the table: commands stay copyable, never folded by a column.
    fixes = [r for r in rows if r.fix and r.status in (FAIL, WARN)]
    for r in fixes:
        console.print(f"[{STYLE[r.status]}]{r.status}[/] {escape(r.item)}: {escape(r.fix)}", highlight=False, soft_wrap=True)
    failed = [r for r in rows if r.status == FAIL]
    if failed:
        console.print(f"[bold red]profile {escape(cfg.profile)} cannot run[/] on this machine: "
                      f"{len(failed)} item(s) marked FAIL above.", highlight=False)
        raise typer.Exit(1)
    console.print(f"[bold green]profile {escape(cfg.profile)} can run[/] on this machine.", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
