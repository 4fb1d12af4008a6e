"""Command-line interface: the only place that reads argv, config files and the environment.

Each sub-command lives in its own module ``<name>_cmd.py`` exposing ``register(app)``.
User errors (``UserError``) print one clear line and exit with code 2, no traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from sanctuary_local import __version__
from sanctuary_local.errors import UserError

COMMANDS = ("inspect", "convert", "run", "eval", "models", "bench", "report")

app = typer.Typer(
    name="sanctuary-local",
    help="Offline SANCTUARY fact-checking on local open models (AVeriTeC formats in and out).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sanctuary-local {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Offline SANCTUARY fact-checking on local open models."""


for _name in COMMANDS:
    _spec = importlib.util.find_spec(f"sanctuary_local.cli.{_name}_cmd")
    if _spec is not None:
        importlib.import_module(f"sanctuary_local.cli.{_name}_cmd").register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sanctuary-local`` console script."""
    try:
        rc = app(args=argv, standalone_mode=False)
    except UserError as exc:
        from rich.markup import escape  # messages hold brackets, e.g. pip install 'sanctuary-local[gpu]'

        # soft_wrap: one line per message line, whatever the terminal width (scripts grep it)
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        raise
    # With standalone_mode=False click returns the code of a raised typer.Exit.
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
