"""``sanctuary-local run``: the whole pipeline, resumable."""

from __future__ import annotations

import os
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import typer

from sanctuary_local.errors import UserError


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["hyde.sampling.max_tokens=128", ...]`` → nested dict (values parsed as TOML, else string)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects KEY=VALUE (e.g. hyde.sampling.max_tokens=128), got '{item}'")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def run(
    claims: Path = typer.Option(..., "--claims", help="AVeriTeC claims JSON (train/dev/test format)."),
    store: Path = typer.Option(..., "--store", help="Knowledge store: a directory of {i}.json files or the official zip."),
    out: Path = typer.Option(..., "--out", help="Output directory (created; rerun the same command to resume)."),
    profile: str = typer.Option("cpu", "--profile", help="cpu | paper | a TOML/YAML profile file."),
    limit: int = typer.Option(None, "--limit", help="Only the first N selected claims."),
    claims_range: str = typer.Option(None, "--claims-range", help="Claim indices a:b (python slice)."),
    workers: int = typer.Option(None, "--workers", help="Retrieval processes (default: CPU count)."),
    budget_s: float = typer.Option(None, "--budget-s", help="Target mean seconds per claim; degrades documented knobs when over."),
    force: bool = typer.Option(False, "--force", help="Discard partial results of a different config in --out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or config dump."),
    models_dir: str = typer.Option(None, "--models-dir", help="Where fetched models live (default: models/)."),
    overlap: bool = typer.Option(None, "--overlap/--no-overlap", help="Retrieve finished stage-1 waves while the next generates (default: on for vllm/openai_http stage 1, off on CPU)."),
    reuse_from: Path = typer.Option(None, "--reuse-from", help="Copy the finished stages of this earlier run whose inputs (config sections, claims, store, prompts) are unchanged; recompute the rest (what-if runs)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value, e.g. --set verdict.sampling.max_tokens=256 (repeatable)."),
) -> None:
    """Fact-check claims: HyDE questions → BM25 + semantic retrieval → verdict.

    Writes predictions.json (official format), submission.csv (leaderboard), one JSONL per stage, timings.json, manifest.json, config.json and run.log into --out.

    Rerun the same command to resume: finished claims are kept, every claim ends up exactly once. The first Ctrl-C or SIGTERM finishes the claim in flight, writes the outputs for the finished claims and prints the command to resume; a second one stops at once.

    Exit code 0: all claims clean; 3: finished, some claims degraded (flagged); 2: bad input, or --out cannot be written (disk full, read-only, gone; one line names the file); 130: stopped by SIGINT (Ctrl-C); 143: stopped by SIGTERM."""
    from sanctuary_local.interrupt import RunInterrupted, StopRequest
    from sanctuary_local.pipeline import RunOptions, run_pipeline
    from sanctuary_local.procs import OrphanGuard

    if budget_s is not None and budget_s <= 0:
        raise UserError("--budget-s must be > 0")
    if workers is not None and workers <= 0:
        raise UserError("--workers must be > 0")
    opts = RunOptions(
        claims=claims, store=store, out=out, profile=profile, limit=limit, claims_range=claims_range,
        workers=workers, budget_s=budget_s, force=force, quiet=quiet, overrides=parse_overrides(set_) or None,
        models_dir=models_dir, overlap=overlap, reuse_from=reuse_from, argv=["sanctuary-local", *sys.argv[1:]],
    )
    hint = f"to resume, run the same command again (from {os.getcwd()}):\n  {shlex.join(opts.argv)}"
    # The guard ends this run's child processes if it dies without cleaning up (kill -9, OOM).
    with OrphanGuard() as guard, StopRequest(hint=hint, exclude_pids=(guard.pid or 0,)) as stop:
        try:
            summary = run_pipeline(opts, stop=stop)
        except RunInterrupted as exc:
            print(f"stopped: {exc}\n{hint}", file=sys.stderr, flush=True)
            raise typer.Exit(exc.exit_code) from None
    if not quiet:
        _print_verdicts(summary)
    raise typer.Exit(summary.exit_code)


def _print_verdicts(summary: Any) -> None:
    from rich.console import Console

    console = Console()
    for p in summary.predictions:
        urls = list(dict.fromkeys(e.url for e in p.evidence))
        console.print(f"[bold]claim {p.claim_id}[/]: {p.claim}")
        console.print(f"  → [bold magenta]{p.label}[/]" + (f"  flags: {', '.join(p.flags)}" if p.flags else ""))
        for u in urls[:5]:
            console.print(f"    evidence: {u}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
