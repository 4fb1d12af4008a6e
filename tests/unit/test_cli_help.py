"""``--help`` in plain words: every command opens with one sentence of at most 100 characters,
every option sits in one of the five panels (Inputs, Outputs, Models and profile, Performance,
Advanced), ``run --help`` shows its common options first, and no help names an issue number.

The commands are discovered from the app, so a new command is held to the same rules at once.
"""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from sanctuary_local.cli import app
from sanctuary_local.cli.help_panels import PANELS

MAX_FIRST_SENTENCE = 100
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}
#: Commands whose options get their panels on another branch: held to the panel rule as soon
#: as one of their options has a panel (then every option must), skipped while none has.
PANELS_PENDING = {"index"}


def _walk(cmd, path: tuple[str, ...] = ()):
    """(path, click command) of the root, every group and every runnable command."""
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _walk(sub, (*path, name))


ALL = {" ".join(path): cmd for path, cmd in _walk(typer.main.get_command(app))}
LEAVES = {name: cmd for name, cmd in ALL.items() if not getattr(cmd, "commands", None)}


def first_paragraph(help_text: str | None) -> str:
    return (help_text or "").strip().split("\n\n")[0].strip()


def test_the_walk_finds_the_commands() -> None:
    """Guards the parametrised tests: an empty walk would make them vanish."""
    assert {"run", "check", "eval", "report", "doctor", "models verify"} <= set(LEAVES)


@pytest.mark.parametrize("name", sorted(ALL), ids=lambda n: n or "(root)")
def test_help_opens_with_one_plain_sentence(name: str) -> None:
    first = first_paragraph(ALL[name].help)
    assert first, f"`{name or 'sanctuary-local'}` has no help text"
    assert "\n" not in first, f"`{name}`: the opening sentence spans several lines: {first!r}"
    assert len(first) <= MAX_FIRST_SENTENCE, f"`{name}`: {len(first)} characters (at most {MAX_FIRST_SENTENCE}): {first!r}"
    assert first.endswith("."), f"`{name}`: not a sentence: {first!r}"
    assert not re.search(r"[.!?]\s+\S", first), f"`{name}`: more than one sentence: {first!r}"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_option_sits_in_a_named_panel(name: str) -> None:
    options = [p for p in LEAVES[name].params if p.param_type_name == "option" and not getattr(p, "hidden", False)]
    panels = {p.opts[0]: getattr(p, "rich_help_panel", None) for p in options}
    if name in PANELS_PENDING and not any(panels.values()):
        pytest.skip(f"`{name}`'s panels come with its own branch")
    wrong = {opt: panel for opt, panel in panels.items() if panel not in PANELS}
    assert not wrong, f"`{name}`: options outside the panels {PANELS}: {wrong}"
    shown = [panel for panel in dict.fromkeys(panels.values())]
    assert shown == sorted(shown, key=PANELS.index), f"`{name}`: panels in the order {shown}, expected {PANELS}'s order"


def test_run_help_shows_the_common_options_first() -> None:
    result = CliRunner(env=WIDE).invoke(app, ["run", "--help"])
    assert result.exit_code == 0, result.output
    out = result.output
    titles = [t for t in PANELS if t in out]
    assert titles == list(PANELS), f"run --help panels: {titles}"
    positions = [out.index(f"─ {t} ") for t in PANELS]
    assert positions == sorted(positions), "run --help shows its panels out of order"
    for common in ("--claims", "--store", "--out", "--profile"):
        assert out.index(common) < out.index(f"─ {PANELS[3]} "), f"{common} is not among the first options"


@pytest.mark.parametrize("name", sorted(ALL), ids=lambda n: n or "(root)")
def test_help_names_no_issue_numbers(name: str) -> None:
    result = CliRunner(env=WIDE).invoke(app, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert not re.search(r"(?i)\bissues?[ -]?#?\d+", result.output), f"`{name} --help` names an issue number"
