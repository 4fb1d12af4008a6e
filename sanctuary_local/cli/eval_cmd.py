"""``sanctuary-local eval --pred PRED --gold GOLD [--out DIR] [--judge PROFILE]``.

Label metrics, the Hungarian-METEOR (old) AVeriTeC score, and — with ``--judge`` — Ev2R
recall and the new AVeriTeC score from a local LLM judge. Prints a table and writes
``metrics.json``, ``per_claim.csv`` and ``confusion.png`` into ``--out`` (default: the run
directory when PRED is one, else ``./eval``).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from sanctuary_local.errors import UserError
from sanctuary_local.io.files import check_writable, writing


def _attach_ev2r(report, data, judge: str, out: Path, cache_dir: Path | None, max_tokens: int, limit: int | None) -> None:  # type: ignore[no-untyped-def]
    """Run the Ev2R judge (profile ``judge``'s ``verdict.llm``) and add its figures to ``report``."""
    from sanctuary_local.config import SamplingConfig, load_config
    from sanctuary_local.evaluation.ev2r import JudgeCache, ev2r_scores
    from sanctuary_local.llm import make_backend

    cfg = load_config(judge)
    n = len(data.gold) if limit is None else min(limit, len(data.gold))
    backend = make_backend(cfg.verdict.llm, cfg.models_dir)
    try:
        sampling = SamplingConfig(temperature=0.0, top_p=1.0, top_k=1, max_tokens=max_tokens, seed=cfg.seed)
        summary, per_claim = ev2r_scores(data.gold[:n], data.pred[:n], backend, JudgeCache(cache_dir or out / "ev2r_cache"), sampling)
    finally:
        backend.close()
    summary.update({"profile": cfg.profile, "n_claims_judged": n, "max_tokens": max_tokens})
    report.ev2r = summary
    for claim, scores in zip(report.claims, per_claim):
        claim.ev2r = scores


def eval_command(
    pred: Path = typer.Option(..., "--pred", help="Predictions JSON, a `run` output directory, or a leaderboard CSV."),
    gold: Path = typer.Option(..., "--gold", help="Official claims JSON with labels, or a solution CSV."),
    out: Path = typer.Option(None, "--out", help="Output directory (default: PRED's run directory, else ./eval)."),
    judge: str = typer.Option(None, "--judge", help="Also compute Ev2R with this profile's verdict LLM as judge (cpu | paper | file)."),
    judge_max_tokens: int = typer.Option(1024, "--judge-max-tokens", help="Generation cap of each judge answer."),
    judge_limit: int = typer.Option(None, "--judge-limit", help="Judge only the first N claims (smoke tests)."),
    judge_cache: Path = typer.Option(None, "--judge-cache", help="Judge answer cache directory (default OUT/ev2r_cache)."),
    workers: int = typer.Option(None, "--workers", help="Processes for METEOR (default: all CPUs)."),
    claims_range: str = typer.Option(
        None, "--claims-range", help="Score only claim ids a:b (e.g. a `run --claims-range a:b` against the full gold file)."
    ),
) -> None:
    """Score predictions against gold: label metrics, Hungarian METEOR, optional Ev2R."""
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions, select_range
    from sanctuary_local.evaluation.report import summary_table, write_outputs

    if judge_max_tokens <= 0:
        raise UserError("--judge-max-tokens must be > 0")
    out = out or (pred if pred.is_dir() else Path("eval"))
    gold_examples, pred_examples = load_gold(gold), load_predictions(pred)
    if claims_range:
        gold_examples, pred_examples = select_range(gold_examples, claims_range), select_range(pred_examples, claims_range)
        if not gold_examples:
            raise UserError(f"{gold}: --claims-range {claims_range} selects no gold claim")
    data = align(gold_examples, pred_examples)
    check_writable(out, "the eval outputs")  # before minutes of scoring, not after
    report = evaluate(data, workers=workers)
    if judge:
        _attach_ev2r(report, data, judge, out, judge_cache, judge_max_tokens, judge_limit)
    with writing(out, "the eval outputs"):
        paths = write_outputs(report, out, {"pred": str(pred), "gold": str(gold), "judge": judge, "claims_range": claims_range})
    console = Console()
    console.print(summary_table(report))
    if report.ev2r:
        console.print(f"[yellow]Ev2R judge: {report.ev2r['judge']}[/] — {report.ev2r['comparability']}")
    for label, ids in (("missing predictions (placeholder: no evidence, wrong label)", data.missing), ("predictions for unknown ids (ignored)", data.extra)):
        if ids:
            console.print(f"[yellow]warning:[/] {len(ids)} {label}: {', '.join(ids[:10])}{' …' if len(ids) > 10 else ''}")
    if data.missing and not claims_range:
        console.print("[yellow]hint:[/] scoring a subset run? pass its --claims-range a:b to score those claims only")
    if data.notes:
        console.print(f"[yellow]{len(data.notes)} notes[/] (see metrics.json), e.g. {data.notes[0]}")
    console.print(f"wrote {paths['metrics']}, {paths['per_claim']}, {paths['confusion']}")


def register(app: typer.Typer) -> None:
    """Add ``eval`` to the CLI."""
    app.command("eval")(eval_command)
