"""Usage errors on every command: one ``error:`` line, the usage hint, exit code 2, no traceback.

typer >= 0.20 raises its own vendored click classes (``typer._click.exceptions``), older
typer raises click's: ``cli.main`` must catch both (issue 31). The commands are discovered
from the app itself, so a new command is covered by the unknown-option and missing-option
cases at once; its bad-value case is a row of ``BAD_VALUES`` (the coverage test says so).
Run on the dependency versions a fresh install resolves (``make install``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from sanctuary_local.cli import app, main

#: A value each command rejects, per leaf command (space-joined path): a number option given
#: letters, a choice outside its set, or a value the command itself refuses (UserError).
BAD_VALUES: dict[str, list[str]] = {
    "run": ["--claims", "c.json", "--store", "s", "--out", "o", "--limit", "abc"],
    "index": ["/nonexistent/sanctuary-docs", "--out", "/nonexistent/sanctuary-ix", "--max-file-mb", "abc"],
    "check": ["a claim", "--corpus", "/nonexistent/sanctuary-ix", "--date", "yesterday"],
    "serve": ["--corpus", "/nonexistent/sanctuary-ix", "--port", "abc"],
    "eval": ["--pred", "p", "--gold", "g", "--workers", "abc"],
    "report": ["/nonexistent/sanctuary-run"],
    "inspect": ["--store", "/nonexistent/sanctuary-store"],
    "convert": ["in.json", "--to", "out.csv", "--from", "bogus"],
    "bench": ["--synthetic", "abc"],
    "models list": ["--profile", "no-such-profile"],
    "models fetch": ["no-such-profile"],
    "models verify": ["--profile", "no-such-profile"],
    "models prep-vllm": ["no-such.gguf", "--out", "/nonexistent/sanctuary-prep"],
    "doctor": ["--profile", "no-such-profile"],
    "verdict-model train": ["t.json", "--out", "/nonexistent/sanctuary-vm", "--epochs", "abc"],
    "verdict-model eval": ["--claims", "c.json", "--indices", "x:y"],
    "verdict-model fit-rule": ["/nonexistent/sanctuary-vm", "--claims", "c.json", "--indices", "9:1"],
    "verdict-model fit-confidence": ["/nonexistent/sanctuary-vm", "--claims", "c.json", "--indices", "9:1"],
    "verdict-model stack": ["--out", "/nonexistent/sanctuary-stack", "--member", "packaged:verdict-tfidf-web=heavy"],
    "verdict-model evidence": ["t.json", "--store", "/nonexistent/sanctuary-store", "--out", "/nonexistent/e.jsonl", "--limit", "abc"],
}


def _leaves(cmd, path: tuple[str, ...] = ()):
    """(path, click-style command) of every runnable command, sub-commands included."""
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, cmd


LEAVES = {" ".join(path): cmd for path, cmd in _leaves(typer.main.get_command(app))}
WITH_REQUIRED = sorted(name for name, cmd in LEAVES.items() if any(p.required for p in cmd.params))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


def _assert_usage_error(code: int, output: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1, output


def test_the_app_has_the_documented_commands() -> None:
    """Guards the discovery below: an empty walk would make every parametrised case vanish."""
    assert {"run", "eval", "report", "inspect", "convert", "bench", "models list", "doctor"} <= set(LEAVES)
    assert {"run", "eval", "inspect", "convert", "report", "models fetch"} <= set(WITH_REQUIRED)


def test_every_command_has_a_bad_value_case() -> None:
    missing = sorted(set(LEAVES) - set(BAD_VALUES))
    assert not missing, f"add a row to BAD_VALUES in {__file__} for: {missing}"


@pytest.mark.parametrize("argv", [["no-such-command"], ["models", "no-such-command"], ["--no-such-option"]])
def test_unknown_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _run(argv, capsys)
    _assert_usage_error(code, output)
    assert "no such" in output.lower() and "--help" in output


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_unknown_option(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _run([*name.split(), "--no-such-option"], capsys)
    _assert_usage_error(code, output)
    assert "--no-such-option" in output
    assert f"sanctuary-local {name} --help" in output  # the hint names the command


@pytest.mark.parametrize("name", WITH_REQUIRED)
def test_missing_required(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _run(name.split(), capsys)
    _assert_usage_error(code, output)
    assert "missing" in output.lower()


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_bad_value(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths in the rows name nothing that exists
    code, output = _run([*name.split(), *BAD_VALUES[name]], capsys)
    _assert_usage_error(code, output)


def _console_script() -> str:
    script = Path(sys.executable).with_name("sanctuary-local")
    return str(script) if script.exists() else (shutil.which("sanctuary-local") or pytest.skip("no sanctuary-local script"))


@pytest.mark.parametrize("argv", [
    ["no-such-command"],
    ["eval", "--predictions", "p.json"],
    ["run"],
    ["run", "--claims", "c.json", "--store", "s", "--out", "o", "--limit", "abc"],
    ["run", "--claims", "c.json", "--store", "s", "--out", "o", "--out", "p"],
])
def test_console_script(argv: list[str], tmp_path: Path) -> None:
    """The installed entry point, as a user types it (not only ``main()`` in-process)."""
    res = subprocess.run([_console_script(), *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    _assert_usage_error(res.returncode, res.stdout + res.stderr)
    assert res.stdout == ""  # errors go to stderr
    assert res.stderr.splitlines()[-1].startswith("Try 'sanctuary-local")


def _options(cmd, *, repeatable: bool) -> list[str]:
    """The first spelling of each option of ``cmd`` that takes values: repeatable ones (lists,
    ``--set``) or those taking one value."""
    return [p.opts[0] for p in cmd.params if getattr(p, "param_type_name", "") == "option"
            and not getattr(p, "is_flag", False) and bool(getattr(p, "multiple", False)) == repeatable]


SINGLE = {name: opts for name, cmd in LEAVES.items() if (opts := _options(cmd, repeatable=False))}
REPEATABLE = {name: opts for name, cmd in LEAVES.items() if (opts := _options(cmd, repeatable=True))}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_an_option_taking_one_value_given_twice(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``eval --pred A --pred B`` used B without a word; every command now refuses it."""
    for opt in SINGLE[name]:
        nargs = next(p.nargs for p in LEAVES[name].params if p.opts[:1] == [opt])  # --compare A B
        once = [opt, *["/nonexistent/a"] * nargs]
        code, output = _run([*name.split(), *once, *once], capsys)
        _assert_usage_error(code, output)
        assert f"'{opt}'" in output and "more than once" in output, output
        assert f"sanctuary-local {name} --help" in output


@pytest.mark.parametrize("name", sorted(REPEATABLE))
def test_repeatable_options_still_repeat(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``--set a=1 --set b=2`` (lists) parse as before: the command's bad-value error is the answer."""
    monkeypatch.chdir(tmp_path)
    twice = [arg for opt in REPEATABLE[name] for arg in (opt, "x=1", opt, "y=2")]
    code, output = _run([*name.split(), *BAD_VALUES[name], *twice], capsys)
    _assert_usage_error(code, output)
    assert "more than once" not in output, output


@pytest.mark.parametrize("name, pair", [("run", ["--overlap", "--no-overlap"]),
                                        ("verdict-model train", ["--no-gold", "--gold"])])
def test_an_on_off_flag_given_twice(name: str, pair: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--overlap --no-overlap`` took the last one without a word."""
    code, output = _run([*name.split(), *pair], capsys)
    _assert_usage_error(code, output)
    assert "'--overlap' / '--no-overlap'" in output or "'--gold' / '--no-gold'" in output, output
    assert "more than once" in output, output


def test_repeat_cases_cover_the_commands() -> None:
    """Guards the discovery: lists and single-value options exist where expected."""
    assert {"eval", "run", "check", "serve"} <= set(SINGLE)
    assert {"run", "check", "serve", "verdict-model train"} <= set(REPEATABLE)


def test_a_ctrl_c_no_command_handles_says_aborted(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """typer turns a KeyboardInterrupt that reaches it into exit 130 without a word (found by
    the serve audit: Ctrl-C while serve started printed nothing); main now says "aborted"."""
    import sanctuary_local.machine.doctor as doctor

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "diagnose", interrupted)
    assert main(["doctor"]) == 130
    assert capsys.readouterr().err.strip() == "aborted"


def test_a_commands_own_stop_line_is_not_followed_by_aborted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`index` prints its own "stopped: ..." line on Ctrl-C and exits 130: no second line."""
    import sanctuary_local.corpus.build as build

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "build_index", interrupted)
    (tmp_path / "docs").mkdir()
    assert main(["index", str(tmp_path / "docs"), "--out", str(tmp_path / "ix"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "stopped:" in err and "aborted" not in err, err
