"""The arguments ``main`` was called with (a model card records the exact command), and the
one rule click does not enforce on them: an option taking one value is given at most once."""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

INVOKED: list[str] = []


def command_line() -> str:
    """The command as a user would retype it."""
    return shlex.join(["sanctuary-local", *INVOKED])


def _repeated(ctx: Any, order: list[Any]) -> None:
    """A usage error (``ctx.fail``) for the first option taking one value that ``order``
    (the parser's record of each option occurrence) holds twice; click keeps the last."""
    counts = Counter(id(p) for p in order)
    for param in order:
        pair = list(getattr(param, "secondary_opts", None) or [])  # --overlap/--no-overlap: on or off, once
        once = getattr(param, "param_type_name", "") == "option" and not (
            getattr(param, "multiple", False) or getattr(param, "count", False)
            or (getattr(param, "is_flag", False) and not pair))
        if once and counts[id(param)] > 1:
            names = " / ".join(f"'{o}'" for o in [*param.opts, *pair])
            ctx.fail(f"Option {names} given more than once; {'give one of them' if pair else 'it takes one value'}.")


def forbid_repeated_options(command: Any) -> None:
    """Make ``command`` and every sub-command refuse an option that takes one value given twice
    (``--out X --out Y``, ``--overlap --no-overlap``) with a usage error; repeatable options
    (lists: ``--set``) and plain flags (``--force``) keep click's behaviour. Works on click's
    and typer's vendored click alike: the parser's ``parse_args`` returns the options in the
    order given, repeats included."""
    for sub in (getattr(command, "commands", None) or {}).values():
        forbid_repeated_options(sub)
    make_parser = command.make_parser

    def checked_make_parser(ctx: Any) -> Any:
        parser = make_parser(ctx)
        parse = parser.parse_args

        def checked_parse(args: list[str]) -> Any:
            opts, rest, order = parse(args=args)
            if not ctx.resilient_parsing:
                _repeated(ctx, order)
            return opts, rest, order

        parser.parse_args = checked_parse
        return parser

    command.make_parser = checked_make_parser
