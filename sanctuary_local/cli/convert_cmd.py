"""``sanctuary-local convert IN --to OUT``: between predictions JSON, gold claims JSON and
the FEVER-8 leaderboard CSV.

- predictions JSON → leaderboard CSV (``split=pred``; what the shared task's converter does)
- gold claims JSON → solution CSV (``split=gold``)
- leaderboard CSV → predictions JSON (to score others' submissions)

Formats are guessed from the input's content and the output's suffix; ``--from`` and
``--to-format`` override. ``--claims-range a:b`` keeps the claims with index a ≤ i < b
(the index in the claims file = the CSV id), so the solution CSV of a subset has the
same ids as that subset's ``run`` submission. Output is written atomically: a failure
leaves no file; an unwritable output is one error line naming it.

The official FEVER-8 scorer matches rows by position, not id (``io/official_pair.py``):
with ``--gold GOLD`` (claims JSON or solution CSV), a predictions → leaderboard
conversion whose ids are not 0…n-1 (a subset) also writes ``<OUT>_official_submission.csv``
and ``<OUT>_official_solution.csv`` beside ``--to``: the same claims' predictions and gold,
both renumbered 0…n-1 in id order, which the official scorer scores right.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from sanctuary_local.cli.help_panels import INPUTS, OUTPUTS
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import load_json_file, parse_claims_range, read_claims
from sanctuary_local.io.files import check_not_an_input, writing
from sanctuary_local.io.leaderboard import LeaderboardRow, read_leaderboard_csv, write_leaderboard_csv
from sanctuary_local.io.predictions import (
    gold_to_solution,
    leaderboard_to_predictions,
    predictions_to_leaderboard,
    read_predictions_json,
    write_predictions_json,
)
from sanctuary_local.records import Prediction

T = TypeVar("T")


class Fmt(str, Enum):
    """File formats ``convert`` knows."""

    predictions = "predictions"  # official predictions JSON (ours has extra fields)
    claims = "claims"  # official gold claims JSON (train/dev)
    leaderboard = "leaderboard"  # id,claim,evi,label,split CSV (submission or solution)


def sniff_input(path: Path) -> Fmt:
    """Guess an input file's format: ``.csv`` → leaderboard; JSON → by its first entry."""
    if path.suffix.lower() == ".csv":
        return Fmt.leaderboard
    data = load_json_file(path, "input file")
    return _json_kind(data, path)


def _json_kind(data: Any, path: Path) -> Fmt:
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array (predictions or claims), got {type(data).__name__}")
    if not data:
        raise UserError(f"{path}: the JSON array is empty; nothing to convert")
    first = data[0]
    if isinstance(first, dict) and "pred_label" in first:
        return Fmt.predictions
    if isinstance(first, dict) and "claim" in first:
        return Fmt.claims
    raise UserError(f"{path}: entry 0 has neither 'pred_label' (predictions) nor 'claim' (claims); use --from")


def output_format(path: Path) -> Fmt:
    """Guess the output format from the suffix: ``.csv`` → leaderboard, ``.json`` → predictions."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return Fmt.leaderboard
    if suffix == ".json":
        return Fmt.predictions
    raise UserError(f"{path}: cannot tell the output format from suffix {suffix!r}; use --to-format")


def _in_range(items: list[T], index: Callable[[T], int], claims_range: str | None, src: Path) -> list[T]:
    """The items whose claim index lies in ``claims_range`` (all when it is None)."""
    if claims_range is None:
        return items
    selected = parse_claims_range(claims_range)
    kept = [x for x in items if index(x) in selected]
    if not kept:
        raise UserError(f"{src}: --claims-range {claims_range} selects none of its {len(items)} entries")
    return kept


def _prediction_index(p: Prediction) -> int:
    return p.claim_index


def pair_paths(dst: Path) -> tuple[Path, Path]:
    """Where ``--gold`` writes the official scorer's pair for ``dst``."""
    return dst.with_name(f"{dst.stem}_official_submission.csv"), dst.with_name(f"{dst.stem}_official_solution.csv")


def official_pair_beside(rows: list[LeaderboardRow], gold: Path, dst: Path) -> list[Path]:
    """For a subset (ids not 0…n-1): the renumbered submission and solution pair beside ``dst``."""
    from sanctuary_local.evaluation.inputs import load_gold
    from sanctuary_local.io.official_pair import needs_pair, write_scoring_pair
    from sanctuary_local.io.predictions import official_evi

    if not needs_pair([r.id for r in rows]):
        return []
    wanted = {r.id for r in rows}
    sol = [LeaderboardRow(g.claim_id, g.claim, official_evi(g.qa_pairs), g.label, "gold")
           for g in load_gold(gold) if g.claim_id in wanted]
    paths = pair_paths(dst)
    try:
        write_scoring_pair(rows, sol, *paths)
    except UserError as exc:
        raise UserError(f"--gold {gold}: {exc}") from None
    return list(paths)


def convert(
    src: Path, dst: Path, src_fmt: Fmt | None = None, dst_fmt: Fmt | None = None, claims_range: str | None = None,
    gold: Path | None = None,
) -> tuple[Fmt, Fmt, int]:
    """Convert ``src`` to ``dst``; returns (input format, output format, number of rows).
    ``gold``: see the module docstring (predictions → leaderboard only)."""
    if src.resolve() == dst.resolve():
        raise UserError(f"{dst}: output would overwrite the input")
    for written in (dst, *(pair_paths(dst) if gold is not None else ())):  # the pair too: e.g. --gold X_official_solution.csv
        check_not_an_input(written, (src, gold))
    src_fmt = src_fmt or sniff_input(src)
    dst_fmt = dst_fmt or output_format(dst)
    if gold is not None and (src_fmt, dst_fmt) != (Fmt.predictions, Fmt.leaderboard):
        raise UserError("--gold goes with a predictions JSON → leaderboard CSV conversion")
    if src_fmt is Fmt.predictions and dst_fmt is Fmt.leaderboard:
        rows = predictions_to_leaderboard(_in_range(read_predictions_json(src), _prediction_index, claims_range, src))
        with writing(dst):
            if gold is not None:  # first: a gold file that lacks some ids is an error before anything is written
                official_pair_beside(rows, gold, dst)
            write_leaderboard_csv(rows, dst)
        return src_fmt, dst_fmt, len(rows)
    if src_fmt is Fmt.claims and dst_fmt is Fmt.leaderboard:
        try:
            rows = gold_to_solution(_in_range(read_claims(src), lambda c: c.index, claims_range, src))
        except UserError as exc:
            raise _named(src, exc) from None
        with writing(dst):
            write_leaderboard_csv(rows, dst)
        return src_fmt, dst_fmt, len(rows)
    if src_fmt is Fmt.leaderboard and dst_fmt is Fmt.predictions:
        try:
            preds = _in_range(leaderboard_to_predictions(read_leaderboard_csv(src)), _prediction_index, claims_range, src)
        except UserError as exc:
            raise _named(src, exc) from None
        with writing(dst):
            write_predictions_json(preds, dst)
        return src_fmt, dst_fmt, len(preds)
    raise UserError(
        f"cannot convert {src_fmt.value} → {dst_fmt.value}; supported: predictions → leaderboard, "
        "claims → leaderboard (solution), leaderboard → predictions"
    )


def _named(path: Path, exc: UserError) -> UserError:
    """Prefix the file name to an error that does not name it yet."""
    return exc if str(exc).startswith(str(path)) else UserError(f"{path}: {exc}")


def register(app: typer.Typer) -> None:
    """Add the ``convert`` command to the CLI."""

    @app.command("convert")
    def convert_cmd(
        src: Path = typer.Argument(..., help="Input: predictions JSON, gold claims JSON or leaderboard CSV."),
        from_fmt: Fmt | None = typer.Option(None, "--from", help="Input format, when the guess is wrong.", rich_help_panel=INPUTS),
        claims_range: str = typer.Option(None, "--claims-range", help="Keep claim indices a:b only (as `run --claims-range`).", rich_help_panel=INPUTS),
        gold: Path = typer.Option(None, "--gold", help="Gold claims JSON or solution CSV: for a subset, also write OUT_official_submission.csv and OUT_official_solution.csv (renumbered 0…n-1), the pair the official scorer scores right.", rich_help_panel=INPUTS),
        to: Path = typer.Option(..., "--to", help="Output file (.csv → leaderboard, .json → predictions).", rich_help_panel=OUTPUTS),
        to_fmt: Fmt | None = typer.Option(None, "--to-format", help="Output format, when the suffix does not say.", rich_help_panel=OUTPUTS),
    ) -> None:
        """Convert between predictions JSON, gold claims JSON and the leaderboard CSV."""
        from sanctuary_local.io.official_pair import needs_pair

        a, b, n = convert(src, to, from_fmt, to_fmt, claims_range, gold)
        console = Console(stderr=True)
        console.print(escape(f"{src} ({a.value}) → {to} ({b.value}): {n} rows"), highlight=False)
        if gold is not None and needs_pair([r.id for r in read_leaderboard_csv(to)]):
            sub, sol = pair_paths(to)
            console.print(escape(f"a subset: the official scorer (rows matched by position) scores {sub} against {sol} "
                                 "(both renumbered 0…n-1 in id order)"), highlight=False, soft_wrap=True)
