"""Command-line interface: the only place that reads argv, config files and the environment.

Each sub-command lives in its own module ``<name>_cmd.py`` exposing ``register(app)``.
User errors (``UserError``) print one clear line and exit with code 2, no traceback; so
do usage errors (unknown command or option, missing option, bad value), which click and
typer's vendored copy of click (``typer._click`` in recent typer, e.g. 0.29) raise as their own
``ClickException`` classes: one ``error:`` line, then the usage and the ``--help`` hint.
An option that takes one value given twice (``--out X --out Y``, ``--overlap --no-overlap``) is one too
(``argv.forbid_repeated_options``; click alone keeps the last); repeatable ones (``--set``) repeat.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from rich.console import Console

from sanctuary_local import __version__
from sanctuary_local.errors import UserError

#: Sub-command modules ``sanctuary_local.cli.<name>_cmd``, in ``--help`` order (one per line:
#: add a command by adding its line).
COMMANDS = (
    "run",
    "index",
    "check",
    "serve",
    "eval",
    "report",
    "inspect",
    "convert",
    "verdict_model",
    "models",
    "bench",
    "doctor",
)

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


def _click_class(exc: BaseException, name: str) -> bool:
    """True when ``exc`` is click's class ``name`` (``ClickException``, ``Exit``, ``Abort``)
    from click itself or from the copy vendored in recent typer (``typer._click``):
    the installed typer decides which one the parser raises, so match both by name."""
    return any(c.__name__ == name and c.__module__.split(".")[0] in ("click", "typer") for c in type(exc).__mro__)


def _show_usage_error(exc: BaseException) -> int:
    """One ``error:`` line, then the command's usage and its ``--help`` hint (stderr);
    the exception's exit code (2 for usage errors, as click intends)."""
    from rich.markup import escape

    code = getattr(exc, "exit_code", 1)
    if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help is the answer
        exc.show()  # type: ignore[attr-defined]
        return code
    fmt = getattr(exc, "format_message", None)
    message = fmt() if callable(fmt) else str(exc)
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        err_console.print(escape(ctx.get_usage()), highlight=False, soft_wrap=True)
    where = ctx.command_path if ctx is not None else app.info.name
    err_console.print(f"Try '{escape(where)} --help' for help.", highlight=False, soft_wrap=True)
    return code


def _say_aborted(command: Any) -> None:
    """typer turns a Ctrl-C that no command handles into a silent exit 130: say so in one
    line. (Commands with their own stop handling print their line and exit themselves.)"""
    invoke = command.invoke

    def invoke_saying(ctx: Any) -> Any:
        try:
            return invoke(ctx)
        except KeyboardInterrupt:
            err_console.print("aborted")
            raise

    command.invoke = invoke_saying


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sanctuary-local`` console script."""
    import typer.main

    from sanctuary_local.cli.argv import INVOKED, forbid_repeated_options

    INVOKED[:] = list(sys.argv[1:] if argv is None else argv)
    try:
        command = typer.main.get_command(app)
        forbid_repeated_options(command)  # `--out X --out Y`: a usage error, not the last one
        _say_aborted(command)
        # prog_name: usage lines name the command users type, also under `python -m` or a test
        rc = command.main(args=argv, standalone_mode=False, prog_name=app.info.name)
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
    except Exception as exc:  # noqa: BLE001 - click's own classes, from click or typer._click
        if _click_class(exc, "ClickException") and callable(getattr(exc, "show", None)):
            return _show_usage_error(exc)
        if _click_class(exc, "Exit"):
            return int(getattr(exc, "exit_code", 0))
        if _click_class(exc, "Abort"):
            err_console.print("aborted")
            return 130
        raise
    # With standalone_mode=False click returns the code of a raised typer.Exit.
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
