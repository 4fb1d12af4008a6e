"""``sanctuary-local verdict-model stack``: several verdict models read each claim as one."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from sanctuary_local.cli.argv import command_line

console = Console()


def stack(
    members: list[str] = typer.Option(..., "--member", help="A member model (packaged:NAME or a directory), "
                                      "optionally NAME=WEIGHT (default 1); repeat for each member.",
                                      rich_help_panel="Inputs"),
    out: Path = typer.Option(..., "--out", help="Stack directory to write: absent, empty, or a model to replace.",
                             rich_help_panel="Outputs"),
) -> None:
    """Stack verdict models: one model whose probabilities are its members' weighted geometric mean.

    Each member reads the claim as it would alone; members are pinned by their files' SHA-256."""
    from sanctuary_local.verdict_model.stack import parse_member
    from sanctuary_local.verdict_model.train import stack as do_stack

    card = do_stack(out, [parse_member(m) for m in members], command_line())
    shown = ", ".join(f"{m['model']} ×{m['weight']:g}" for m in card["members"])
    console.print(f"wrote {escape(str(out))} (stack of {len(card['members'])}: {escape(shown)})", highlight=False)
