"""``sanctuary-local bench``: time the pipeline per stage and project against the 60 s/claim budget."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.markdown import Markdown

from sanctuary_local.cli.help_panels import ADVANCED, INPUTS, MODELS, OUTPUTS, PROFILE_HELP
from sanctuary_local.errors import UserError

console = Console()


def bench(
    claims: Path = typer.Option(None, "--claims", help="AVeriTeC claims JSON (with --store).", rich_help_panel=INPUTS),
    store: Path = typer.Option(None, "--store", help="Knowledge store dir or zip (with --claims).", rich_help_panel=INPUTS),
    synthetic: int = typer.Option(0, "--synthetic", help="Generate N synthetic claims + store instead.", rich_help_panel=INPUTS),
    scale: float = typer.Option(0.05, "--scale", help="Synthetic store size (1.0 ≈ 95 MB/claim, the real store's).", rich_help_panel=INPUTS),
    limit: int = typer.Option(None, "--limit", help="Only the first N claims.", rich_help_panel=INPUTS),
    out: Path = typer.Option(None, "--out", help="Run directory (default: a temporary one).", rich_help_panel=OUTPUTS),
    results_dir: Path = typer.Option(Path("benchmarks/results/speed"), "--results-dir", help="Where bench_<label>.* go.", rich_help_panel=OUTPUTS),
    label: str = typer.Option(None, "--label", help="Result name (default: <profile>_<source>_<N>).", rich_help_panel=OUTPUTS),
    profile: str = typer.Option("cpu", "--profile", help=PROFILE_HELP, rich_help_panel=MODELS),
    set_: list[str] = typer.Option([], "--set", help="Config override key=value (repeatable), as in `run`.", rich_help_panel=MODELS),
    from_timings: Path = typer.Option(None, "--from-timings", help="Report an existing run's timings.json; no run.", rich_help_panel=ADVANCED),
    compare_: tuple[Path, Path] | None = typer.Option(None, "--compare", help="Print B/A per stage of two bench JSONs (A = before, B = after); with --label also write bench_compare_<label>.{json,md,png} (a before/after chart).", rich_help_panel=ADVANCED),
) -> None:
    """Time the pipeline per stage on N claims and write the figures as JSON, markdown and a chart.

    With --from-timings it reads a finished run's timings.json instead; with --compare it compares two bench results."""
    from sanctuary_local.machine import bench as b

    if compare_:
        ra, rb = b.load_result(compare_[0]), b.load_result(compare_[1])
        cmp = b.compare(ra, rb)
        console.print(Markdown(b.compare_markdown(cmp, ra, rb)))
        console.print_json(json.dumps(cmp))
        if label:
            paths = b.write_comparison(cmp, ra, rb, results_dir, label)
            console.print("wrote " + ", ".join(str(p) for p in paths))
        return
    if from_timings is not None:
        timings, source, kind = b.load_timings(from_timings), str(from_timings), "timings"
    else:
        timings, source = _run(b, profile, claims, store, synthetic, scale, limit, out, set_)
        kind = "synthetic" if synthetic else "run"
    label = label or f"{Path(profile).stem}_{kind}_{timings['n_claims']}claims"
    res = b.summarize(timings, Path(profile).stem, label, source)
    paths = b.write_result(res, results_dir)
    console.print(Markdown(b.to_markdown(res)))
    console.print("wrote " + ", ".join(str(p) for p in paths))


def _run(b, profile, claims, store, synthetic, scale, limit, out, set_):  # type: ignore[no-untyped-def]
    """Run the pipeline (synthetic inputs when asked) and return (timings, source)."""
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    if bool(synthetic) == bool(claims and store):
        raise UserError("bench needs either --claims and --store, or --synthetic N")
    work = Path(tempfile.mkdtemp(prefix="sanctuary-bench-"))
    if synthetic:
        claims, store = b.synthetic_inputs(synthetic, scale, work / "synthetic")
        console.print(f"synthetic store: {synthetic} claim(s), scale {scale}, in {store}")
    run_out = out or work / "run"
    opts = RunOptions(claims=claims, store=store, out=run_out, profile=profile, limit=limit, quiet=True,
                      force=True, overrides=parse_overrides(set_) or None)
    summary = run_pipeline(opts)
    source = f"synthetic/{synthetic}x{scale}/timings.json" if synthetic else str(run_out / "timings.json")
    return summary.timings, source


def register(app: typer.Typer) -> None:
    """Add ``bench`` to the root app."""
    app.command("bench")(bench)
