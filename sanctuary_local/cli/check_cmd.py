"""``sanctuary-local check "claim" --corpus INDEX``: one claim typed in, checked against
your own indexed documents; prints the verdict, the question-answer evidence and the
sources (file, PDF page, character span), and optionally writes the cited HTML report."""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import typer

from sanctuary_local.cli.help_panels import INPUTS, MODELS, OUTPUTS, PROFILE_HELP
from sanctuary_local.errors import UserError

#: Seconds a first Ctrl-C or SIGTERM leaves the check to reach a stop point before it stops at once.
STOP_GRACE_S = 3.0
#: Words of a snippet printed under its question (``verdict_model.inputs.excerpt``; the report shows it whole).
EXCERPT_WORDS = 60


def _claim_date(value: str | None) -> str | None:
    """``YYYY-MM-DD`` → the claims file's ``DD-MM-YYYY``; a bad date is a ``UserError``."""
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value).strftime("%d-%m-%Y")
    except ValueError:
        raise UserError(f"--date must be YYYY-MM-DD, got {value!r}") from None


def check(
    claim: str = typer.Argument(..., help="The claim to check, in quotes."),
    corpus: Path = typer.Option(..., "--corpus", help="A corpus index written by `sanctuary-local index`.", rich_help_panel=INPUTS),
    date: str = typer.Option(None, "--date", help="When the claim was made (YYYY-MM-DD).", rich_help_panel=INPUTS),
    report: Path = typer.Option(None, "--report", help="Also write the cited HTML report of this claim to this file.", rich_help_panel=OUTPUTS),
    out: Path = typer.Option(None, "--out", help="Keep the run's files here (default: a temporary folder, removed).", rich_help_panel=OUTPUTS),
    profile: str = typer.Option("cpu", "--profile", help=PROFILE_HELP, rich_help_panel=MODELS),
    models_dir: str = typer.Option(None, "--models-dir", help="Where fetched models live (default: models/).", rich_help_panel=MODELS),
    set_: list[str] = typer.Option([], "--set", help="Override a config value (repeatable), as in `run`.", rich_help_panel=MODELS),
) -> None:
    """Check one typed-in claim against your own documents, indexed by `sanctuary-local index`.

    Stages: generated questions → BM25 over the corpus index → semantic retrieval → verdict. Prints the verdict, the justification, each question with its answer snippet and the snippet's source: file, PDF page, and character span in the text extracted from the file. Exit code 0; 3 when the result is degraded (flagged); 2 for bad input."""
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.corpus.index import CorpusIndex, corpus_problem, pinned
    from sanctuary_local.interrupt import RunInterrupted, StopRequest
    from sanctuary_local.pipeline import RunOptions, run_pipeline
    from sanctuary_local.procs import OrphanGuard

    if not claim.strip():
        raise UserError("the claim is empty")
    if problem := corpus_problem(corpus, 'check "CLAIM"'):
        raise UserError(problem)
    claim_date = _claim_date(date)
    # the generation live now, for the whole check: a rerun of `index` meanwhile renumbers the units
    # (the run would retrieve from one generation and cite from another) and removes this one
    # (an open index keeps it mapped)
    index = CorpusIndex(corpus)
    work = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="sanctuary-check-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        claims_file = work / "claim.json"
        claims_file.write_bytes(orjson.dumps([{"claim": claim.strip(), "claim_date": claim_date}]))
        opts = RunOptions(claims=claims_file, store=pinned(index), out=work / "run", profile=profile, force=True, quiet=True,
                          overrides=parse_overrides(set_) or None, models_dir=models_dir,
                          argv=["sanctuary-local", *sys.argv[1:]])
        # One claim: "finish the claim in flight" would be the whole check, so a signal gets a
        # short grace, then a hard stop (the run's stage files are fsync'ed as they are written).
        cleanup = (lambda: shutil.rmtree(work, ignore_errors=True)) if out is None else None
        with OrphanGuard() as guard, StopRequest(hint="", exclude_pids=(guard.pid or 0,), grace_s=STOP_GRACE_S,
                                                 on_hard_stop=cleanup) as stop:
            try:
                summary = run_pipeline(opts, stop=stop)
            except RunInterrupted as exc:
                print(f"stopped: {exc}", file=sys.stderr, flush=True)
                raise typer.Exit(exc.exit_code) from None
        pred = summary.predictions[0]
        cited = print_check(pred, index)
        (work / "run" / "sources.json").write_bytes(orjson.dumps([c.to_dict() for c in cited], option=orjson.OPT_INDENT_2))
        if report is not None:
            _write_report(work / "run", pred, report)
    finally:
        if out is None:
            shutil.rmtree(work, ignore_errors=True)
    raise typer.Exit(summary.exit_code)


def _write_report(run_dir: Path, pred: Any, dest: Path) -> None:
    from sanctuary_local.report.build import write_report
    from sanctuary_local.report.pages import page_name

    write_report(run_dir, run_dir / "report", alone=True)  # one page, no index beside it: no "All claims" link
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "report" / page_name(pred), dest)  # self-contained: inline CSS, no links out
    print(f"report: {dest}")


def print_check(pred: Any, index: Any, console: Any = None) -> list[Any]:
    """Verdict, justification, evidence and sources of one prediction; returns the
    ``CitedEvidence`` records (``index``: the ``CorpusIndex`` the run read). Texts come from
    files and models: escaped, never markup."""
    from rich.console import Console
    from rich.markup import escape

    from sanctuary_local.cli.run_cmd import print_flag_legend, label_scores_line
    from sanctuary_local.corpus.cite import cite_prediction
    from sanctuary_local.verdict_model.confidence import uncertain_note
    from sanctuary_local.verdict_model.inputs import excerpt

    console = console or Console(width=max(100, shutil.get_terminal_size((100, 20)).columns))
    cited = cite_prediction(index, pred)
    console.print(f"[bold]claim[/]: {escape(pred.claim)}", highlight=False)
    console.print(f"[bold]verdict[/]: [bold magenta]{escape(pred.label)}[/]", highlight=False)
    if unsure := uncertain_note(pred.label, pred.meta):
        console.print(f"  [bold yellow]{escape(unsure)}[/]", highlight=False)
    if scores := label_scores_line(pred.meta):
        console.print(f"  {escape(scores)}", highlight=False)
    if pred.flags:
        console.print(f"  flags: {escape(', '.join(pred.flags))}", highlight=False, soft_wrap=True)
    console.print(f"[bold]justification[/]: {escape(pred.justification)}", highlight=False)
    console.print("[bold]evidence[/]:" if cited else "[bold]evidence[/]: none found in the corpus")
    sources: dict[tuple[str, int], int] = {}
    questions: dict[str, list[Any]] = {}  # each question once, its answers under it (stage 3 reads a question's top snippets)
    for c in cited:
        sources.setdefault((c.source.path, c.source.page), len(sources) + 1)
        questions.setdefault(c.question, []).append(c)
    for i, (question, answers) in enumerate(questions.items(), start=1):
        console.print(f"  Q{i}. {escape(question)}", highlight=False)
        for c in answers:
            shown = excerpt(c.answer, question, pred.claim, EXCERPT_WORDS)  # the report shows it whole
            console.print(f"      A: {escape(shown)}  [{sources[(c.source.path, c.source.page)]}]", highlight=False)
    if cited:
        console.print("[bold]sources[/]:")
    shown: set[int] = set()
    for c in cited:
        s = c.source
        n = sources[(s.path, s.page)]
        spans = list(dict.fromkeys(f"{x.source.start}-{x.source.end}" for x in cited
                                   if (x.source.path, x.source.page) == (s.path, s.page)))  # each span once
        if n in shown:
            continue
        shown.add(n)
        where = s.path + (f", page {s.page}" if s.page else "") + (f", line {s.line}" if s.line else "")
        extra = f"  {s.url}" if s.url else ""
        console.print(f"  [{n}] {escape(where)}: characters {escape(', '.join(spans))} of its extracted text{escape(extra)}",
                      highlight=False, soft_wrap=True)
    if pred.flags:
        print_flag_legend(console, list(pred.flags))
    return cited


def register(app: typer.Typer) -> None:
    app.command("check")(check)
