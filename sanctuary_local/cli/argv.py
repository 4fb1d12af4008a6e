"""The arguments ``main`` was called with (a model card records the exact command)."""

from __future__ import annotations

import shlex

INVOKED: list[str] = []


def command_line() -> str:
    """The command as a user would retype it."""
    return shlex.join(["sanctuary-local", *INVOKED])
