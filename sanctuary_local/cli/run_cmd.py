"""``sanctuary-local run``: the whole pipeline, resumable."""

from __future__ import annotations

import os
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import typer

from sanctuary_local.cli.help_panels import ADVANCED, INPUTS, MODELS, OUTPUTS, PERF, PROFILE_HELP
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
    claims: Path = typer.Option(..., "--claims", help="AVeriTeC claims JSON (train/dev/test format).", rich_help_panel=INPUTS),
    store: Path = typer.Option(None, "--store", help="Knowledge store: a directory of {i}.json files or the official zip.", rich_help_panel=INPUTS),
    corpus: Path = typer.Option(None, "--corpus", help="Instead of --store: a corpus index (`sanctuary-local index`) searched for every claim.", rich_help_panel=INPUTS),
    evidence_from: Path = typer.Option(None, "--evidence-from", help="Instead of --store: skip stages 1-2 and give the verdict on this evidence, any system's leaderboard CSV or predictions.json (rows matched to claims by id: the claim's index in --claims).", rich_help_panel=INPUTS),
    claims_range: str = typer.Option(None, "--claims-range", help="Claim indices a:b (python slice).", rich_help_panel=INPUTS),
    limit: int = typer.Option(None, "--limit", help="Only the first N selected claims.", rich_help_panel=INPUTS),
    out: Path = typer.Option(..., "--out", help="Output directory (created; rerun the same command to resume).", rich_help_panel=OUTPUTS),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars, no verdicts on the console.", rich_help_panel=OUTPUTS),
    show_config: bool = typer.Option(False, "--show-config", help="Print the effective config (JSON) before the run; it is always saved to --out/config.json.", rich_help_panel=OUTPUTS),
    profile: str = typer.Option("cpu", "--profile", help=PROFILE_HELP, rich_help_panel=MODELS),
    set_: list[str] = typer.Option([], "--set", help="Override a config value, e.g. --set verdict.sampling.max_tokens=256 (repeatable).", rich_help_panel=MODELS),
    models_dir: str = typer.Option(None, "--models-dir", help="Where fetched models live (default: models/).", rich_help_panel=MODELS),
    workers: int = typer.Option(None, "--workers", help="Retrieval processes (default: CPU count).", rich_help_panel=PERF),
    budget_s: float = typer.Option(None, "--budget-s", help="Target mean seconds per claim; degrades documented knobs when over (docs/budget.md).", rich_help_panel=PERF),
    engine: str = typer.Option("local", "--engine", help="local | ray: run the stages on a Ray cluster (needs the ray extra; same records, see docs/scale-out.md).", rich_help_panel=PERF),
    ray_address: str = typer.Option(None, "--ray-address", help="--engine ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT); default: start a local one for this run.", rich_help_panel=PERF),
    ray_actors: int = typer.Option(None, "--ray-actors", help="--engine ray: model actors per LLM stage (default: one per GPU, or one per n_threads CPUs).", rich_help_panel=PERF),
    overlap: bool = typer.Option(None, "--overlap/--no-overlap", help="Retrieve finished stage-1 waves while the next generates (default: on for vllm/openai_http stage 1, off on CPU).", rich_help_panel=PERF),
    force: bool = typer.Option(False, "--force", help="--out holds results of different settings, data, code or models: keep its completed claims, redo the rest with these.", rich_help_panel=ADVANCED),
    restart: bool = typer.Option(False, "--restart", help="Discard every result in --out and start over.", rich_help_panel=ADVANCED),
    reuse_from: Path = typer.Option(None, "--reuse-from", help="Copy the finished stages of this earlier run whose inputs are unchanged; recompute the rest (what-if runs, docs/what-if.md).", rich_help_panel=ADVANCED),
) -> None:
    """Fact-check a claims file against a knowledge store or a corpus index.

    Writes predictions.json (official format), submission.csv (leaderboard), one JSONL per stage, timings.json, manifest.json, config.json and run.log into --out.

    Rerun the same command to resume after a crash or Ctrl-C: finished claims are kept. Other data, settings, prompts, code or models are refused unless --force or --restart (docs/resume.md).

    Exit code 0: all claims clean; 3: some claims degraded (flagged); 2: bad input, or --out cannot be written; 130 / 143: stopped by Ctrl-C / SIGTERM."""
    from sanctuary_local.interrupt import RunInterrupted, StopRequest, exit_stopped
    from sanctuary_local.pipeline import RunOptions, run_pipeline
    from sanctuary_local.procs import OrphanGuard

    if sum(x is not None for x in (store, corpus, evidence_from)) != 1:
        raise UserError("give exactly one of --store (a per-claim knowledge store), --corpus (a corpus index) "
                        "and --evidence-from (another system's evidence file)")
    if evidence_from is not None:
        if budget_s is not None or engine != "local" or reuse_from is not None:
            raise UserError("--evidence-from runs stage 3 alone: it takes no --budget-s, --engine ray or --reuse-from")
        store = evidence_from
    if corpus is not None:
        from sanctuary_local.corpus.index import corpus_problem

        if problem := corpus_problem(corpus, "run --claims FILE --out DIR"):
            raise UserError(problem)
        store = corpus
    if budget_s is not None and budget_s <= 0:
        raise UserError("--budget-s must be > 0")
    if workers is not None and workers <= 0:
        raise UserError("--workers must be > 0")
    if engine not in ("local", "ray"):
        raise UserError(f"--engine must be local or ray, got '{engine}'")
    if engine == "local" and (ray_address is not None or ray_actors is not None):
        raise UserError("--ray-address and --ray-actors need --engine ray")
    if ray_actors is not None and ray_actors <= 0:
        raise UserError("--ray-actors must be > 0")
    if force and restart:
        raise UserError("--force keeps the completed claims, --restart discards them: give one of them")
    opts = RunOptions(
        claims=claims, store=store, out=out, profile=profile, limit=limit, claims_range=claims_range,
        workers=workers, budget_s=budget_s, force=force, restart=restart, quiet=quiet, show_config=show_config,
        overrides=parse_overrides(set_) or None,
        models_dir=models_dir, overlap=overlap, reuse_from=reuse_from, engine=engine, ray_address=ray_address,
        ray_actors=ray_actors, evidence_from=evidence_from, argv=["sanctuary-local", *sys.argv[1:]],
    )
    hint = f"to resume, run the same command again (from {os.getcwd()}):\n  {shlex.join(opts.argv)}"
    # The guard ends this run's child processes if it dies without cleaning up (kill -9, OOM).
    stopped: int | None = None
    with OrphanGuard() as guard, StopRequest(hint=hint, exclude_pids=(guard.pid or 0,)) as stop:
        try:
            summary = run_pipeline(opts, stop=stop)
        except RunInterrupted as exc:
            print(f"stopped: {exc}\n{hint}", file=sys.stderr, flush=True)
            stopped = exc.exit_code
    if stopped is not None:  # the guard is closed: every child has ended
        exit_stopped(stopped)
    if not quiet:
        print_verdicts(summary, claims)
    raise typer.Exit(summary.exit_code)


def print_verdicts(summary: Any, claims: Path, console: Any = None) -> None:
    """Each claim's verdict, flags and evidence URLs; what the flags mean, once per kind;
    then the next steps with this run's paths. Claim texts, URLs and flags come from the
    data and the models: they are escaped, never read as rich markup."""
    from rich.console import Console
    from rich.markup import escape

    from sanctuary_local.flag_help import degraded_reasons
    from sanctuary_local.verdict_model.confidence import uncertain_note

    console = console or Console()
    flags: list[str] = []
    gold = _gold_labels(claims)
    for p in summary.predictions:
        urls = list(dict.fromkeys(e.url for e in p.evidence if e.url))
        bad = set(degraded_reasons(p.flags))
        shown = ", ".join(f"[red]{escape(f)}[/]" if f.split(":")[0] in bad else escape(f) for f in p.flags)
        console.print(f"[bold]claim {escape(str(p.claim_id))}[/]: {escape(p.claim)}", highlight=False)
        g = gold.get(p.claim_index)
        mark = "" if g is None else (" [green](gold: same)[/]" if g == p.label else f" [yellow](gold: {escape(g)})[/]")
        console.print(f"  → [bold magenta]{escape(p.label)}[/]{mark}" + (f"  flags: {shown}" if p.flags else ""), highlight=False)
        if unsure := uncertain_note(p.label, p.meta):
            console.print(f"    [bold yellow]{escape(unsure)}[/]", highlight=False)
        scores = label_scores_line(p.meta)
        if scores:
            console.print(f"    {escape(scores)}", highlight=False, soft_wrap=True)
        for u in urls[:5]:
            console.print(f"    evidence: {escape(u)}", highlight=False, soft_wrap=True)
        flags += p.flags
    if gold:
        n = sum(1 for p in summary.predictions if gold.get(p.claim_index) == p.label)
        console.print(f"\n{n} of {len(summary.predictions)} verdicts match the gold labels in {escape(str(claims))}.",
                      highlight=False, soft_wrap=True)
    print_flag_legend(console, flags)
    _print_next_steps(console, summary, claims)


def label_scores_line(meta: dict[str, Any]) -> str:
    """``label probabilities (trained model): Refuted 0.61, Supported 0.22, ...`` from a
    trained verdict's ``meta.label_scores``, best first; "" for a label read from text."""
    ls = meta.get("label_scores") if isinstance(meta, dict) else None
    if not isinstance(ls, dict):
        return ""
    probs, labels = ls.get("probabilities") or [], ls.get("labels") or []
    if len(probs) != len(labels) or not probs:
        return ""
    ranked = sorted(zip(labels, probs, strict=True), key=lambda kv: -float(kv[1]))
    shown = ", ".join(f"{lab} {float(pr):.2f}" for lab, pr in ranked)
    rule = ", label by the fitted decision rule" if ls.get("calibrated") else ""
    sure = {True: "; confident", False: "; uncertain"}.get(ls.get("confident"), "")  # type: ignore[arg-type]
    if sure and isinstance(ls.get("confidence_threshold"), (int, float)):
        sure += f" (threshold {float(ls['confidence_threshold']):.3f})"
    return f"label probabilities (trained model{rule}): {shown}{sure}"


def _gold_labels(claims: Path) -> dict[int, str]:
    """Gold labels by claim index when the claims file has them (else empty)."""
    from sanctuary_local.io.claims import read_claims

    try:
        return {c.index: c.gold_label for c in read_claims(claims) if c.gold_label}
    except UserError:
        return {}


def print_flag_legend(console: Any, flags: list[str]) -> None:
    from rich.markup import escape

    from sanctuary_local.flag_help import legend
    from sanctuary_local.flag_help import DEGRADING

    if not flags:
        return
    rows = legend(flags)
    red = any(kind.startswith(DEGRADING) for kind, _, _ in rows)
    console.print("\n[bold]What the flags mean[/]" + (" ([red]red[/]: the claim's result is degraded)" if red else "") + ":")
    for kind, values, text in rows:
        name = f"[red]{escape(kind)}[/]" if kind.startswith(DEGRADING) else escape(kind)
        shown = f" ({escape(', '.join(values))})" if values else ""
        console.print(f"  {name}{shown}: {escape(text)}", highlight=False)


def _print_next_steps(console: Any, summary: Any, claims: Path) -> None:
    from rich.markup import escape

    from sanctuary_local.io.claims import read_claims

    out = summary.out_dir
    console.print("\n[bold]Next[/]:")
    console.print(f"  read the cited report:  sanctuary-local report {escape(shlex.quote(str(out)))}", highlight=False, soft_wrap=True)
    console.print(f"                          then open {escape(str(Path(out) / 'report' / 'index.html'))}", highlight=False, soft_wrap=True)
    try:
        all_claims = read_claims(claims)
    except UserError:
        return
    if not any(c.gold_label for c in all_claims):
        return
    idx = sorted(p.claim_index for p in summary.predictions)
    subset = "" if idx == list(range(len(all_claims))) or not idx else f" --claims-range {idx[0]}:{idx[-1] + 1}"
    console.print(f"  score it (the claims have gold labels):  sanctuary-local eval --pred {escape(shlex.quote(str(out)))} "
                  f"--gold {escape(shlex.quote(str(claims)))}{subset}", highlight=False, soft_wrap=True)
    if subset:
        console.print("    (a subset: eval also writes official_submission.csv + official_solution.csv, the pair the "
                      "official FEVER-8 scorer scores right; submission.csv alone it scores near 0)", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
