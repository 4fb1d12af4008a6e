"""The README and docs/ against the code: every ``sanctuary-local`` command line in README.md's
code blocks parses (its sub-command exists, ``--help`` exits 0 for it, every option it names is
one of that command's and is shown in its help), every relative link in README.md and docs/
resolves (to a file, and to a heading where it names one), README.md stays at most 300 lines,
and no page names an issue number.

The commands are parsed by the typer app in-process (click's parser, no subprocess): a line is
first joined over its ``\\`` continuations and cut at ``&&``, ``||``, ``;`` and ``|``, so a
``make`` or ``cd`` beside the command in the same block is skipped, not misread.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from sanctuary_local.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 300
MAX_README_WORDS = 1200
#: Wide enough that rich never wraps an option name in ``--help``.
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}

FENCE = re.compile(r"^(```|~~~)")
SHELL_OPS = {"&&", "||", ";", "|", "&"}
#: A command word ``sanctuary-local`` (or a path ending in it), at a line's start (after an
#: optional ``$`` prompt) or after a shell operator: what makes a line a command line.
COMMAND_WORD = re.compile(r"(?:^|[;&|]\s*|^\$\s+)(?:\S*/)?sanctuary-local(?=\s|$)")
ISSUE_NUMBER = re.compile(r"(?i)\bissues?[ -]?#?\d+")


def code_blocks(text: str) -> list[list[str]]:
    """The lines of every fenced code block, in order."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def logical_lines(lines: list[str]) -> list[str]:
    """Lines with their ``\\`` continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def shell_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (tokens each), cut at its operators; comments dropped."""
    lexer = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in SHELL_OPS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def sanctuary_commands(text: str) -> list[tuple[str, list[str]]]:
    """(the line as written, its arguments after ``sanctuary-local``) for every command line
    in the code blocks of ``text``. A command line that cannot be tokenised is kept with
    ``None`` arguments, so the test fails on it instead of skipping it."""
    found: list[tuple[str, list[str]]] = []
    for block in code_blocks(text):
        for line in logical_lines(block):
            if not COMMAND_WORD.search(line.strip()):
                continue
            try:
                commands = shell_commands(line)
            except ValueError:
                found.append((line, None))  # type: ignore[arg-type]
                continue
            for tokens in commands:
                while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
                    tokens = tokens[1:]  # VAR=value prefixes
                if tokens and (tokens[0] == "sanctuary-local" or tokens[0].endswith("/sanctuary-local")):
                    found.append((line, tokens[1:]))
    return found


def test_the_command_finder_is_not_fooled() -> None:
    """Continuations, a ``make`` in the same block, comments, prompts, several commands on a
    line, and output lines that mention the program are each handled as meant."""
    text = "\n".join([
        "```bash",
        "make demo    # sanctuary-local is not run here",
        "sanctuary-local run --claims c.json \\",
        "    --store s --out o   # a comment",
        "cd x && sanctuary-local eval --pred o --gold g; echo done",
        "$ sanctuary-local index docs --out ix",
        "```",
        "```text",
        "sanctuary-local: 4 claims → runs/demo",
        "  read the report:  sanctuary-local report runs/demo",
        "```",
    ])
    assert [args for _, args in sanctuary_commands(text)] == [
        ["run", "--claims", "c.json", "--store", "s", "--out", "o"],
        ["eval", "--pred", "o", "--gold", "g"],
        ["index", "docs", "--out", "ix"],
    ]


def _click_app():
    return typer.main.get_command(app)


def _resolve(args: list[str]):
    """(command path, leaf command, the rest of the arguments) for ``sanctuary-local ARGS``."""
    cmd, path, rest = _click_app(), [], list(args)
    while getattr(cmd, "commands", None) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        assert name in cmd.commands, f"no such command: sanctuary-local {' '.join([*path, name])}"
        cmd, path = cmd.commands[name], [*path, name]
    return path, cmd, rest


def _option_names(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("-")}


README_COMMANDS = sanctuary_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands() -> None:
    """Guards the parametrised test below: an empty list would make it pass vacuously."""
    subcommands = {args[0] for _, args in README_COMMANDS if args}
    assert {"run", "index", "check", "eval", "report", "serve"} <= subcommands


@pytest.mark.parametrize("line,args", README_COMMANDS, ids=[" ".join((a or ["?"])[:2]) for _, a in README_COMMANDS])
def test_every_readme_command_parses(line: str, args: list[str] | None) -> None:
    assert args is not None, f"cannot be split into shell words: {line!r}"
    path, cmd, rest = _resolve(args)
    result = CliRunner(env=WIDE).invoke(app, [*path, "--help"])
    assert result.exit_code == 0, f"`sanctuary-local {' '.join(path)} --help` failed: {result.output}"
    known = _option_names(cmd)
    for token in rest:
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d+(\.\d+)?", token):
            continue
        option = token.split("=", 1)[0]
        assert option in known, f"{line!r}: {option} is not an option of `sanctuary-local {' '.join(path)}`"
        assert option in result.output, f"{line!r}: {option} is not shown in `{' '.join(path)} --help`"
    # click's own parser: arity, values of fixed choices, required options and arguments
    try:
        cmd.make_context(" ".join(["sanctuary-local", *path]), list(rest)).close()
    except Exception as exc:  # noqa: BLE001 - click's, typer's or a value converter's error: all mean "does not parse"
        pytest.fail(f"{line!r} does not parse: {type(exc).__name__}: {exc}")


def _strip_code(text: str) -> str:
    """Markdown text without fenced blocks and inline code spans (links there are examples)."""
    kept, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            kept.append(re.sub(r"`[^`\n]*`", "", line))
    return "\n".join(kept)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\S)|(?<=\S)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page (GitHub numbers repeated ones -1, -2, …)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
        elif not inside and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            out.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return out


def relative_links(page: Path) -> list[str]:
    text = _strip_code(page.read_text(encoding="utf-8"))
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    targets += re.findall(r"""(?:src|href)=["']([^"']+)["']""", text)
    return [t for t in targets if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", t)]


def test_the_anchor_rules_match_github() -> None:
    assert _slug("What-if runs (`--reuse-from`)") == "what-if-runs---reuse-from"
    assert _slug("Verdicts: scored, calibrated labels") == "verdicts-scored-calibrated-labels"
    assert _slug("The paper profile on 8× A10G (estimate, not measured)") == "the-paper-profile-on-8-a10g-estimate-not-measured"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_finder_sees_links() -> None:
    """Guards the test above: README links to docs/ and to committed results."""
    links = relative_links(README)
    assert any(t.startswith("docs/") for t in links) and any(t.startswith("benchmarks/results/") for t in links)


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}): move detail to docs/"


def test_readme_reads_in_five_minutes() -> None:
    """About 240 words a minute, and tables and commands read slower: at most 1,200 words."""
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= MAX_README_WORDS, f"README.md has {words} words (at most {MAX_README_WORDS}): move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_no_issue_numbers_in_pages(page: Path) -> None:
    """Readers have no issue tracker: name the feature instead (file names may keep theirs)."""
    hits = ISSUE_NUMBER.findall(page.read_text(encoding="utf-8"))
    assert not hits, f"{page.relative_to(ROOT)} names issues: {hits}"


def test_the_readme_says_what_the_default_gets_wrong() -> None:
    """The results block (which the verdict work replaces as a whole) keeps a plain statement."""
    text = README.read_text(encoding="utf-8")
    start, end = text.find("<!-- verdict-results:start -->"), text.find("<!-- verdict-results:end -->")
    assert 0 <= start < end, "README.md lacks the verdict-results block"
    assert "What the default gets wrong" in text[start:end]
    assert "majority class" in text[start:end]


COMMANDS_PAGE = ROOT / "docs" / "commands.md"
LONG_OPTION = re.compile(r"--[a-z][a-z0-9-]*(?![\w-])")


def _leaves(cmd, path: tuple[str, ...] = ()):
    """(path, command) of every command that runs, under ``cmd``."""
    subs = getattr(cmd, "commands", None)
    if not subs:
        yield path, cmd
        return
    for name, sub in subs.items():
        yield from _leaves(sub, (*path, name))


def _command_rows(name: str) -> list[str]:
    """The rows of docs/commands.md's command table about ``sanctuary-local NAME``."""
    prefix = f"| `sanctuary-local {name} "
    return [line for line in COMMANDS_PAGE.read_text(encoding="utf-8").splitlines()
            if line.startswith(prefix) or line.startswith(prefix.rstrip() + "`")]


TOP_COMMANDS = sorted(_click_app().commands)


@pytest.mark.parametrize("name", TOP_COMMANDS)
def test_commands_page_names_every_option(name: str) -> None:
    """docs/commands.md's row(s) for each command name every long option its ``--help`` shows
    (``--help`` aside), and its synopsis names no option the command lacks."""
    rows = _command_rows(name)
    assert rows, f"docs/commands.md has no row for `sanctuary-local {name}`"
    options = {o for _, leaf in _leaves(_click_app().commands[name]) for o in _option_names(leaf)
               if o.startswith("--") and o != "--help"}
    named = {o for row in rows for o in LONG_OPTION.findall(row)}
    missing = sorted(options - named)
    assert not missing, f"docs/commands.md: `sanctuary-local {name}` lacks {missing}"
    synopsis = {o for row in rows for o in LONG_OPTION.findall(row.split(" | ")[0])}
    unknown = sorted(synopsis - options)
    assert not unknown, f"docs/commands.md: `sanctuary-local {name}` names options it does not have: {unknown}"


def test_the_readme_results_name_the_default_and_its_figures() -> None:
    """The results table's default row names the `cpu` profile's verdict model, and its figures
    and the majority row's are those of the committed result it links as the default's source."""
    import json
    import tomllib

    text = README.read_text(encoding="utf-8")
    block = text[text.find("<!-- verdict-results:start -->"):text.find("<!-- verdict-results:end -->")]
    model = tomllib.loads((ROOT / "sanctuary_local/profiles/cpu.toml").read_text("utf-8"))["verdict"]["trained_model"]
    source = re.search(r"\[default\]\((benchmarks/results/[^)]+)\.md\)", block)
    assert source, "README's results block links no [default] source"
    result = json.loads((ROOT / f"{source.group(1)}.json").read_text("utf-8"))
    assert result["model"] == model, f"README's default source scores {result['model']}, the cpu default is {model}"
    rows = {cells[0]: cells[1:] for line in block.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    default = next((v for k, v in rows.items() if k.startswith("**default**")), None)
    assert default is not None and f"`{model}`" in next(k for k in rows if k.startswith("**default**")), \
        f"README's default row does not name {model}"
    majority = next(v for k, v in rows.items() if k.startswith("majority class"))

    def figures(cells: list[str]) -> list[float]:  # columns: macro-F1, AVeriTeC, accuracy (real-web evidence, held out)
        return [float(c.strip("*")) for c in cells[:3]]

    held = {r["row"]: r for r in result["rows"] if r["range"].startswith("dev 50-99")}
    for name, cells, key in (("default", default, f"default `{model}`"), ("majority", majority, "majority class (Refuted)")):
        want = [round(held[key][k], 3) for k in ("macro_f1", "averitec", "accuracy")]
        assert figures(cells) == want, f"README's {name} row says {figures(cells)}, {source.group(1)}.json {want}"