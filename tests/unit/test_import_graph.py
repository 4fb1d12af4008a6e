"""The house's shape (issue 29): the package's import graph is a tree from ``cli`` down (no
circles, nothing below ``cli`` imports it), no module or class outgrows its room, few modules
lie loose at the top of the package (the rest sit in packages named after their role), and
only the command line reads argv and the environment.

The graph is read from the source with ``ast``: every ``import`` counts, at module level,
inside functions (lazy imports) and under ``if TYPE_CHECKING:`` (a type-only circle is still
a circle: the two modules cannot be understood, moved or tested apart)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "sanctuary_local"
BENCHMARKS = PKG.parent / "benchmarks"
#: The house rule: modules (and benchmark scripts) at most 400 lines, classes at most 100.
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 100
#: Modules directly in ``sanctuary_local/`` (besides ``__init__``); the others sit in a package
#: named after their role (``models/``, ``run/``, ``config/``, ``stages/verdict/``...).
MAX_TOP_LEVEL_MODULES = 8
#: Classes over the limit that are not split yet, at their size then: they may shrink, not
#: grow, and an entry goes once its class fits. Issue 29 split pipeline._Run and
#: reporting.RunReporter; the last follow-ups (the three LLM backends, KnowledgeStore,
#: EvidenceRetriever, CorpusIndex) were split on 2026-11-26, so none is left.
NOT_YET_SPLIT: dict[str, int] = {}


def module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every dotted name an import statement anywhere in ``tree`` may load (``from a import b``
    gives ``a`` and ``a.b``: ``b`` may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("sanctuary_local."):
            names.add(node.value)  # a module loaded by name (importlib), e.g. the LLM backend table
    return names


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` (a string that is exactly a dotted
    name counts: ``importlib.import_module`` tables)."""
    files = module_files()

    def owner(name: str) -> str | None:  # the longest module prefix of a dotted name
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        names = imported_names(ast.parse(f.read_text("utf-8"), str(f)), mod, f.name == "__init__.py")
        graph[mod] = {o for n in names if n.startswith("sanctuary_local") and (o := owner(n)) and o != mod}
    return graph


def parents(mod: str) -> list[str]:
    """The packages Python imports before ``mod`` (``a.b.c``: ``a``, ``a.b``)."""
    parts = mod.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def a_circle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One concrete circle inside a strongly connected component: a -> b -> ... -> a."""
    members, start = set(comp), comp[0]
    paths = {start: [start]}
    queue = [start]
    while queue:  # breadth first from start, within the component, until an edge returns to it
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return comp


def _short(mod: str) -> str:
    return mod.removeprefix("sanctuary_local.")


def test_the_graph_reader_sees_lazy_type_only_and_relative_imports() -> None:
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sanctuary_local.models.resolve import X\n"
           "def f():\n    import sanctuary_local.ids\n    from . import sibling\n")
    names = imported_names(ast.parse(src), "sanctuary_local.stages.hyde", False)
    assert {"sanctuary_local.models.resolve", "sanctuary_local.ids", "sanctuary_local.stages.sibling"} <= names
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    (comp,) = cycles(graph)
    assert comp == ["a", "b", "c"] and a_circle(graph, comp) == ["a", "b", "c", "a"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_circles() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "sanctuary_local.pipeline" in graph["sanctuary_local.cli.run_cmd"]
    circles = [" -> ".join(map(_short, a_circle(graph, comp))) for comp in cycles(graph)]
    assert not circles, "import circles (each must be broken):\n  " + "\n  ".join(circles)


def test_nothing_below_cli_imports_it() -> None:
    graph = import_graph()

    def in_cli(m: str) -> bool:
        return m == "sanctuary_local.cli" or m.startswith("sanctuary_local.cli.")

    up = sorted(f"{_short(m)} -> {_short(t)}" for m, ts in graph.items() if not in_cli(m) for t in ts if in_cli(t))
    assert not up, "modules below the CLI import it:\n  " + "\n  ".join(up)


#: Modules of the package no command imports, and why they are in the package all the same.
NOT_FROM_CLI = {
    "sanctuary_local.cli.__main__": "python -m sanctuary_local.cli",
    "sanctuary_local.cli.nltk_data": "python -m sanctuary_local.cli.nltk_data install|check (scripts/install_nltk_data.sh, run by make install)",
    "sanctuary_local.llm.local_server": "starts llama.cpp servers for the openai_http tests (a test fixture any user can reuse)",
}


def test_every_module_is_reached_from_cli() -> None:
    """A tree from ``cli`` down: every module is in use by the command line (importing a
    module loads its parent packages too), save the few named in ``NOT_FROM_CLI``."""
    graph = import_graph()
    # cli/__init__.py loads its sub-commands by name from its COMMANDS table
    tree = ast.parse((PKG / "cli" / "__init__.py").read_text("utf-8"))
    (table,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "COMMANDS"]
    graph["sanctuary_local.cli"] |= {f"sanctuary_local.cli.{name}_cmd" for name in ast.literal_eval(table)}
    seen, todo = set(), ["sanctuary_local.cli"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
            todo.extend(parents(m))
    unreached = sorted(_short(m) for m in graph if m not in seen and m not in NOT_FROM_CLI)
    assert not unreached, "modules no command reaches (dead code, or a missing import):\n  " + "\n  ".join(unreached)


@pytest.mark.parametrize("kind", ["module", "class"])
def test_rooms_stay_small(kind: str) -> None:
    over = []
    for mod, f in module_files().items():
        text = f.read_text("utf-8")
        if kind == "module":
            n = len(text.splitlines())
            if n > MAX_MODULE_LINES:
                over.append(f"{_short(mod)}: {n} lines (limit {MAX_MODULE_LINES})")
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                n, name = node.end_lineno - node.lineno + 1, f"{_short(mod)}.{node.name}"
                limit = NOT_YET_SPLIT.get(name, MAX_CLASS_LINES)
                if n > limit:
                    over.append(f"{name}: {n} lines (limit {limit})")
                elif name in NOT_YET_SPLIT and n <= MAX_CLASS_LINES:
                    over.append(f"{name}: {n} lines now fits: take it out of NOT_YET_SPLIT")
    what = "classes" if kind == "class" else "modules"
    assert not over, f"{what} over the limit (split them):\n  " + "\n  ".join(over)


def test_benchmark_scripts_stay_small() -> None:
    over = [f"{f.name}: {n} lines" for f in sorted(BENCHMARKS.rglob("*.py"))
            if (n := len(f.read_text("utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not over, f"benchmark scripts over {MAX_MODULE_LINES} lines (split them):\n  " + "\n  ".join(over)


def test_few_modules_lie_loose_at_the_top() -> None:
    loose = sorted(f.stem for f in PKG.glob("*.py") if f.name != "__init__.py")
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(loose)} top-level modules (limit {MAX_TOP_LEVEL_MODULES}): move some into the package of "
        f"their role: {', '.join(loose)}")


#: What reads argv or touches the process environment: ``sys.argv``, ``os.environ``,
#: ``os.getenv``, ``os.putenv``, ``os.unsetenv`` (as attributes or imported names).
_ENV_ATTRS = {("sys", "argv"), *(("os", n) for n in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"))}

#: Modules outside ``cli/`` that use argv or the environment all the same, and why. They may
#: go, not grow: a new setting is read by the command line and passed down as an argument.
OUTSIDE_CLI = {
    "sanctuary_local.procs": "argv of its own `python -m sanctuary_local.procs` (the orphan guard a run starts)",
    "sanctuary_local.evaluation.nltk_data": "$SANCTUARY_WORDNET_DIR, where `eval` finds WordNet",
    "sanctuary_local.models.parts": "$SANCTUARY_CACHE: the model cache every process of a user shares",
    "sanctuary_local.retrieval.embed": "$SANCTUARY_CACHE: where distilled static embedders are kept",
    "sanctuary_local.run.fingerprint": "$SANCTUARY_CACHE: the shared hash cache; git runs without GIT_* variables",
    "sanctuary_local.models.resolve": "writes HF_HUB_OFFLINE and friends, which the model libraries read",
    "sanctuary_local.run.ray_engine": "writes Ray's settings before ray.init starts its processes",
    "sanctuary_local.llm.local_server": "the environment of the llama.cpp server it starts (offline)",
}


def environment_uses(tree: ast.AST) -> list[int]:
    """Lines that read argv or touch the environment."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (node.value.id, node.attr) in _ENV_ATTRS:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any((node.module, a.name) in _ENV_ATTRS for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_environment_uses_reader_sees_attributes_and_imported_names() -> None:
    src = "import os, sys\nfrom os import getenv\nx = os.environ.get('A')\ny = sys.argv[1:]\nz = os.path.join('a')\n"
    assert environment_uses(ast.parse(src)) == [2, 3, 4]


def test_only_the_command_line_reads_argv_and_the_environment() -> None:
    found, stale = [], []
    for mod, f in module_files().items():
        uses = environment_uses(ast.parse(f.read_text("utf-8")))
        if mod in OUTSIDE_CLI and not uses:
            stale.append(f"{_short(mod)}: uses neither any more: take it out of OUTSIDE_CLI")
        elif uses and not (mod == "sanctuary_local.cli" or mod.startswith("sanctuary_local.cli.")) and mod not in OUTSIDE_CLI:
            found.append(f"{_short(mod)}: line(s) {', '.join(map(str, uses))}")
    assert not found, ("modules below the CLI read argv or the environment (let the command read it and pass it "
                       "down):\n  " + "\n  ".join(found))
    assert not stale, "\n".join(stale)


def test_stages_never_import_a_mode() -> None:
    """The optional modes (``modes/``) plug into the stages through hooks (``modes.MODES``);
    no module of ``stages/`` imports one, at run time or for types."""
    graph = import_graph()
    found = sorted(f"{_short(m)} -> {_short(t)}" for m, targets in graph.items() if m.startswith("sanctuary_local.stages")
                   for t in targets if t.startswith("sanctuary_local.modes"))
    assert not found, "stages/ imports modes/:\n  " + "\n  ".join(found)


def test_every_mode_names_its_switch_and_its_fingerprint_part() -> None:
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.modes import MODES, enabled_modes
    from sanctuary_local.run.fingerprint import prompt_identities

    cfg = load_config("cpu", [])
    parts = {"prompts": prompt_identities(cfg), "trust_file": ""}
    for name, mode in MODES.items():
        section, key = mode.switch.split(".")
        assert hasattr(getattr(cfg, section), key), (name, mode.switch)
        top, _, part = mode.fingerprint.partition(".")
        assert top in parts and (not part or part in parts[top]), (name, mode.fingerprint)
    assert enabled_modes(cfg) == []  # every mode is off by default
