"""Errors a user can act on. The CLI prints them without a traceback (exit code 2)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or configuration: message names the file/line/claim and what to do."""


class MissingDependency(UserError):
    """An optional heavy dependency is not installed."""

    def __init__(self, module: str, extra: str, what: str = "") -> None:
        hint = f"pip install 'sanctuary-local[{extra}]'"
        super().__init__(f"{what or module} needs the Python package '{module}', which is not installed. Install it with: {hint}")


class MissingModel(UserError):
    """A model named in the config is not on disk; says how to get it."""


def require(module: str, extra: str, what: str = ""):
    """Import ``module`` or raise MissingDependency with an install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised via tests with fake names
        raise MissingDependency(module, extra, what) from exc


class StorageError(UserError):
    """The output directory cannot be written (disk full, read-only, gone). Nothing
    finished is lost: fix the cause and rerun the same command to resume."""
