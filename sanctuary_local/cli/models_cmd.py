"""``sanctuary-local models list | fetch PROFILE | verify | prep-vllm``: the model manifest on the command line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from sanctuary_local.cli.help_panels import ADVANCED, MODELS, OUTPUTS
from sanctuary_local.errors import UserError
from sanctuary_local.models.resolve import ROLE_FIELDS, ROLES, STATIC_PREFIX, load_manifest, missing_files, source_model

console = Console()

def _log(message: str) -> None:
    """Progress lines of fetch / prep-vllm, printed as text (paths and pip hints hold brackets)."""
    console.print(escape(message), highlight=False)


MODELS_DIR = typer.Option(Path("models"), "--models-dir", help="Where fetched models live (config: models_dir).", rich_help_panel=MODELS)


def _status(name: str, models_dir: Path) -> str:
    """present / missing / incomplete for a hub model; for a split packaged model whether it
    is assembled (or which parts are missing); 'packaged' otherwise."""
    manifest = load_manifest()
    if name not in manifest.models:
        packaged = manifest.packaged[name.removeprefix("packaged:")]
        if packaged.split:
            from sanctuary_local.models.parts import assembled_state

            state = assembled_state(packaged)
            return f"[red]{state}[/]" if "missing" in state else state
        return "packaged"
    model = manifest.models[name]
    directory = models_dir / model.dir
    if not directory.exists():
        return "[red]missing[/]"
    return "[yellow]incomplete[/]" if missing_files(model, directory) else "[green]present[/]"


LIST_TITLE = "sanctuary_local models (manifest: sanctuary_local/data/manifest.toml)"
LIST_COLUMNS = ("profile", "role (config field)", "model", "source", "revision", "quant / dtype", "status")


def _list_rows(profile: str | None, models_dir: Path) -> list[tuple[str, ...]]:
    """One row per profile role, cells in ``LIST_COLUMNS`` order: text escaped for rich,
    the status cell in rich markup (coloured)."""
    manifest = load_manifest()
    rows = []
    for pname in [profile] if profile else sorted(manifest.profiles):
        roles = manifest.profile(pname)
        for role in ROLES:
            shown = roles[role]
            name = source_model(shown)  # a static: model is distilled locally from its base
            hub = manifest.models.get(name)
            source = hub.repo if hub else manifest.packaged[name.removeprefix("packaged:")].source_label
            if shown.startswith(STATIC_PREFIX):
                source = f"static (model2vec), distilled here from {source}"
            revision = (hub.revision[:12] + ("" if hub.pinned else " (unpinned)")) if hub else "-"
            quant = f"{hub.quantization} / {hub.dtype}" if hub else manifest.packaged[name.removeprefix("packaged:")].quantization
            cells = (pname, f"{role} ({ROLE_FIELDS[role]})", shown, source, revision, quant)
            rows.append((*map(escape, cells), _status(name, models_dir)))
    return rows


def _wide_table(rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=LIST_TITLE)
    for col in LIST_COLUMNS:
        # model names are what users copy into configs: never truncate them
        table.add_column(col, no_wrap=col in ("model", "status"), overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _print_narrow(rows: list[tuple[str, ...]]) -> None:
    """The same cells as the wide table, one block per profile role (fits 80 columns:
    the longest model name is 48 characters; long sources wrap at spaces)."""
    console.print(LIST_TITLE, style="italic", highlight=False)
    last = None
    for pname, role, *details in rows:
        if pname != last:
            console.print(f"\n[bold]profile {pname}[/]", highlight=False)
            last = pname
        console.print(f"  {role}", highlight=False)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for key, value in zip(LIST_COLUMNS[2:], details):
            grid.add_row(key, value)
        console.print(Padding(grid, (0, 0, 0, 4)), highlight=False)


def list_models(
    profile: str | None = typer.Option(None, "--profile", "-p", help="Only this profile.", rich_help_panel=MODELS),
    models_dir: Path = MODELS_DIR,
) -> None:
    """List profiles, their role → model table, hub repo, revision and local status."""
    rows = _list_rows(profile, models_dir)
    table = _wide_table(rows)
    needed = console.measure(table, options=console.options.update_width(10_000)).maximum  # unsqueezed
    if needed <= console.width:
        console.print(table)
    else:  # a narrow terminal would squeeze columns to nothing: one block per model instead
        _print_narrow(rows)


def fetch(
    profile: str = typer.Argument(..., help="Profile whose models to download (e.g. paper)."),
    models_dir: Path = MODELS_DIR,
    only: str | None = typer.Option(None, "--only", help="Fetch just this model of the profile.", rich_help_panel=MODELS),
) -> None:
    """Download a profile's models from the Hugging Face hub (needs internet; resumable)."""
    from sanctuary_local.models.store import fetch_profile

    paths = fetch_profile(profile, models_dir, only=only, log=_log)
    _log(f"fetched {len(paths)} model(s) into {models_dir}; check offline with "
         f"`sanctuary-local models verify --profile {profile}`")


def verify(
    profile: str | None = typer.Option(None, "--profile", "-p", help="Only this profile (default: all).", rich_help_panel=MODELS),
    models_dir: Path = MODELS_DIR,
    quick: bool = typer.Option(False, "--quick", help="Compare file sizes only, skip sha256.", rich_help_panel=ADVANCED),
) -> None:
    """Check models offline for missing or altered files and unpinned revisions (exit 2 on problems)."""
    from sanctuary_local.models.store import verify as verify_models

    reports = verify_models(profile, models_dir, quick=quick)
    table = Table(title=f"models verify ({profile or 'all profiles'}, {'sizes' if quick else 'sha256'})")
    for col in ("model", "kind", "result", "details"):
        table.add_column(col, overflow="fold")
    for rep in reports:
        # escaped: a hint such as pip install 'sanctuary-local[gemma]' is not rich markup
        details = "\n".join(rep.problems + [f"warning: {w}" for w in rep.warnings]) or rep.path
        table.add_row(escape(rep.name), escape(rep.kind), "[green]ok[/]" if rep.ok else "[red]FAIL[/]", escape(details))
    console.print(table)
    bad = [r.name for r in reports if not r.ok]
    if bad:  # a UserError: one clear line and exit code 2 (see cli/__init__.py)
        raise UserError(f"{len(bad)} model(s) failed verification in '{models_dir}': {', '.join(bad)}")
    console.print(f"all {len(reports)} model(s) ok")


def prep_vllm(
    source: str = typer.Argument(..., help="GGUF to convert: packaged:NAME, a manifest name, or a .gguf path."),
    out: Path = typer.Option(..., "--out", help="Folder to write (the model path a vllm profile names).", rich_help_panel=OUTPUTS),
    models_dir: Path = MODELS_DIR,
    sha256: str | None = typer.Option(None, "--sha256", help="Expected GGUF sha256 (default: the manifest's).", rich_help_panel=ADVANCED),
    dtype: str = typer.Option("bfloat16", "--dtype", help="bfloat16 | float16 | float32.", rich_help_panel=ADVANCED),
    force: bool = typer.Option(False, "--force", help="Replace an --out made from another source.", rich_help_panel=ADVANCED),
) -> None:
    """Convert a GGUF into the Hugging Face folder vLLM loads (offline, hash-checked, idempotent)."""
    from sanctuary_local.models.prep import prep_vllm as run_prep

    run_prep(source, out, sha256=sha256, models_dir=models_dir, dtype=dtype, force=force, log=_log)


def register(app: typer.Typer) -> None:
    """Add the ``models`` command group to the root app."""
    group = typer.Typer(help="Model manifest: list, fetch (connected machine), verify (offline).",
                        no_args_is_help=True)
    group.command("list")(list_models)
    group.command("fetch")(fetch)
    group.command("verify")(verify)
    group.command("prep-vllm")(prep_vllm)
    app.add_typer(group, name="models")
