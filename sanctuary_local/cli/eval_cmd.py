"""``sanctuary-local eval --pred PRED --gold GOLD [--out DIR] [--judge PROFILE]``.

Label metrics, the Hungarian-METEOR (old) AVeriTeC score, and — with ``--judge`` — Ev2R
recall and the new AVeriTeC score from a local LLM judge. Prints a table and writes
``metrics.json``, ``per_claim.csv`` and ``confusion.png`` into ``--out`` (default: the run
directory when PRED is one, else ``./eval``), atomically, and ``eval_manifest.json`` with the
SHA-256 of each: in an existing folder it replaces only files an earlier ``eval`` wrote and
nobody changed since, and refuses anything else at one of its names before scoring
(``io/owned_outputs.py``).

When the scored claims are not ids 0…n-1 (a subset run, ``--claims-range``), it also
writes ``official_submission.csv`` and ``official_solution.csv``: the predictions and the
gold of the same claims, both renumbered 0…n-1 in id order, which the official FEVER-8
scorer (it matches rows by position, ``io/official_pair.py``) scores as ``eval`` does.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from sanctuary_local.cli.help_panels import ADVANCED, INPUTS, MODELS, OUTPUTS, PERF
from sanctuary_local.errors import UserError
from sanctuary_local.io.files import check_not_an_input, check_writable, writing


def _attach_ev2r(report, data, judge: str, cache_dir: Path, max_tokens: int, limit: int | None) -> None:  # type: ignore[no-untyped-def]
    """Run the Ev2R judge (profile ``judge``'s ``verdict.llm``) and add its figures to ``report``."""
    from sanctuary_local.config.settings import SamplingConfig, load_config
    from sanctuary_local.evaluation.ev2r import JudgeCache, ev2r_scores
    from sanctuary_local.llm import make_backend

    cfg = load_config(judge)
    n = len(data.gold) if limit is None else min(limit, len(data.gold))
    backend = make_backend(cfg.verdict.llm, cfg.models_dir)
    try:
        sampling = SamplingConfig(temperature=0.0, top_p=1.0, top_k=1, max_tokens=max_tokens, seed=cfg.seed)
        summary, per_claim = ev2r_scores(data.gold[:n], data.pred[:n], backend, JudgeCache(cache_dir), sampling)
    finally:
        backend.close()
    summary.update({"profile": cfg.profile, "n_claims_judged": n, "max_tokens": max_tokens})
    report.ev2r = summary
    for claim, scores in zip(report.claims, per_claim):
        claim.ev2r = scores


def official_rows(data):  # type: ignore[no-untyped-def]
    """``data`` (``Aligned``) as leaderboard rows: (submission rows, solution rows)."""
    from sanctuary_local.io.leaderboard import LeaderboardRow
    from sanctuary_local.io.predictions import official_evi

    sub = [LeaderboardRow(p.claim_id, p.claim or g.claim, official_evi(p.qa_pairs), p.label, "pred")
           for g, p in zip(data.gold, data.pred)]
    sol = [LeaderboardRow(g.claim_id, g.claim, official_evi(g.qa_pairs), g.label, "gold") for g in data.gold]
    return sub, sol


def _shown(text: str) -> str:
    """Console text from the input files (ids, notes): markup escaped, and control characters
    spelled out (``\\x1b``): a file's id must not recolour or rewrite the terminal."""
    from sanctuary_local.corpus.names import printable

    return escape(printable(text))


def _text(path: Path) -> str:
    """``path`` as ``metrics.json`` can hold it: an undecodable byte of its name as ``\\xNN``."""
    from sanctuary_local.corpus.names import display_name

    return display_name(str(path))


def official_pair(data, out: Path) -> tuple[dict, dict[str, bytes]]:  # type: ignore[no-untyped-def]
    """The official scorer's pair for a subset (see the module docstring): what is done, for
    ``metrics.json`` (``written`` false, with the reason, when no pair is needed or none can
    be written), and the files to write into ``out``, ``{name: bytes}``."""
    from sanctuary_local.evaluation.report import OFFICIAL_SOLUTION, OFFICIAL_SUBMISSION
    from sanctuary_local.io.official_pair import needs_pair, scoring_pair_bytes

    ids = [g.claim_id for g in data.gold]
    if not needs_pair(ids):
        return {"written": False, "reason": "the claims are ids 0…n-1: submission.csv scores as it is"}, {}
    if not all(i.isascii() and i.isdigit() for i in ids):
        return {"written": False, "reason": "the official scorer needs integer ids"}, {}
    if data.missing:
        return {"written": False, "reason": f"{len(data.missing)} claims have no prediction: the official scorer "
                "cannot score them (finish the run, or narrow --claims-range)"}, {}
    bare = [g.claim_id for g, p in zip(data.gold, data.pred) if not "".join(q + a for q, a in p.qa_pairs).strip()]
    if bare:
        return {"written": False, "reason": f"{len(bare)} predictions have no evidence (e.g. claim {bare[0]}): the "
                "official scorer crashes on an empty evi (convert writes them a placeholder pair)"}, {}
    sub, sol, order = scoring_pair_bytes(*official_rows(data))
    return ({"written": True, "submission": _text(out / OFFICIAL_SUBMISSION), "solution": _text(out / OFFICIAL_SOLUTION),
             "claim_ids_of_rows": order}, {OFFICIAL_SUBMISSION: sub, OFFICIAL_SOLUTION: sol})


def eval_command(
    pred: Path = typer.Option(..., "--pred", help="Predictions JSON, a `run` output directory, or a leaderboard CSV.", rich_help_panel=INPUTS),
    gold: Path = typer.Option(..., "--gold", help="Official claims JSON with labels, or a solution CSV.", rich_help_panel=INPUTS),
    claims_range: str = typer.Option(
        None, "--claims-range", rich_help_panel=INPUTS,
        help="Score only claim ids a:b (e.g. a `run --claims-range a:b` against the full gold file).",
    ),
    out: Path = typer.Option(None, "--out", help="Output directory (default: PRED's run directory, else ./eval); in an existing one only the files an earlier eval wrote are replaced.", rich_help_panel=OUTPUTS),
    judge: str = typer.Option(None, "--judge", help="Also compute Ev2R with this profile's verdict LLM as judge (cpu | paper | file).", rich_help_panel=MODELS),
    judge_max_tokens: int = typer.Option(1024, "--judge-max-tokens", help="Generation cap of each judge answer.", rich_help_panel=MODELS),
    workers: int = typer.Option(None, "--workers", help="Processes for METEOR (default and most: the usable CPUs).", rich_help_panel=PERF),
    judge_limit: int = typer.Option(None, "--judge-limit", help="Judge only the first N claims (smoke tests).", rich_help_panel=ADVANCED),
    judge_cache: Path = typer.Option(None, "--judge-cache", help="Judge answer cache directory (default OUT/ev2r_cache).", rich_help_panel=ADVANCED),
) -> None:
    """Score predictions against gold: label metrics, Hungarian METEOR, optional Ev2R.

    For a subset (claim ids other than 0…n-1) also writes official_submission.csv and official_solution.csv into --out: the same claims renumbered 0…n-1, which the official FEVER-8 scorer (it matches rows by position) scores as eval does."""
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import align, load_gold, load_predictions, select_range
    from sanctuary_local.evaluation.report import CONFUSION, METRICS, PER_CLAIM, earlier_outputs, output_files, summary_table
    from sanctuary_local.io.owned_outputs import OwnedOutputs

    if judge_max_tokens <= 0:
        raise UserError("--judge-max-tokens must be > 0")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1 (got {workers})")
    if judge_limit is not None and judge_limit < 1:  # a negative one sliced the claims from the end
        raise UserError(f"--judge-limit must be >= 1 (got {judge_limit})")
    out = out or (pred if pred.is_dir() else Path("eval"))
    gold_examples, pred_examples = load_gold(gold), load_predictions(pred)
    if claims_range:
        gold_examples, pred_examples = select_range(gold_examples, claims_range), select_range(pred_examples, claims_range)
        if not gold_examples:
            raise UserError(f"{gold}: --claims-range {claims_range} selects no gold claim")
    data = align(gold_examples, pred_examples)
    if pred.suffix.lower() == ".csv" and pred.is_file():  # someone's submission: would the official scorer read it?
        from sanctuary_local.io.leaderboard import check_official_rows

        data.notes[:0] = [f"{pred}: the official scorer would stop on it: {p}" for p in check_official_rows(pred)]
    # Before minutes of scoring, not after: out writable, no user's file at one of our names.
    check_writable(out, "the eval outputs")
    outputs, (pair, pair_files) = OwnedOutputs(out, "eval", earlier_outputs), official_pair(data, out)
    for name in (METRICS, PER_CLAIM, CONFUSION, *pair_files):
        check_not_an_input(out / name, (pred / "predictions.json" if pred.is_dir() else pred, gold), "the eval outputs")
    outputs.check((METRICS, PER_CLAIM, CONFUSION, *pair_files))
    cache = judge_cache or out / "ev2r_cache"
    if judge and judge_cache is None and cache.is_symlink():  # inside --out: never written through a planted link
        raise UserError(f"{cache}: is a symbolic link; refusing to write the judge cache through it (remove it)")
    if judge:
        check_writable(cache, "the judge cache")
    report = evaluate(data, workers=workers)
    if judge:
        with writing(cache, "the judge cache"):
            _attach_ev2r(report, data, judge, cache, judge_max_tokens, judge_limit)
    inputs = {"pred": _text(pred), "gold": _text(gold), "judge": judge, "claims_range": claims_range, "official_pair": pair}
    with writing(out, "the eval outputs"):
        written = outputs.write({**output_files(report, inputs), **pair_files})
    paths = {"metrics": written[METRICS], "per_claim": written[PER_CLAIM], "confusion": written[CONFUSION]}
    console = Console()
    console.print(summary_table(report))
    if report.ev2r:
        console.print(f"[yellow]Ev2R judge: {_shown(report.ev2r['judge'])}[/] — {_shown(report.ev2r['comparability'])}")
    for label, ids in (("missing predictions (placeholder: no evidence, wrong label)", data.missing), ("predictions for unknown ids (ignored)", data.extra)):
        if ids:
            console.print(f"[yellow]warning:[/] {len(ids)} {label}: {_shown(', '.join(ids[:10]))}{' …' if len(ids) > 10 else ''}")
    if data.missing and not claims_range:
        console.print("[yellow]hint:[/] scoring a subset run? pass its --claims-range a:b to score those claims only")
    if data.notes:
        console.print(f"[yellow]{len(data.notes)} notes[/] (see metrics.json), e.g. {_shown(data.notes[0])}")
    console.print(escape(f"wrote {paths['metrics']}, {paths['per_claim']}, {paths['confusion']}"), highlight=False)
    if pair["written"]:
        ids = pair["claim_ids_of_rows"]
        console.print(escape(f"official scorer (it matches rows by position): score --prediction_file {pair['submission']} "
                             f"--label_file {pair['solution']}; their rows 0…{len(ids) - 1} are claims {ids[0]}…{ids[-1]} "
                             "in id order"), soft_wrap=True, highlight=False)
    elif "ids 0…n-1" not in pair["reason"]:
        console.print(f"[yellow]official scorer pair not written:[/] {_shown(pair['reason'])}")


def register(app: typer.Typer) -> None:
    """Add ``eval`` to the CLI."""
    app.command("eval")(eval_command)
