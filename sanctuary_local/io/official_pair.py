"""Subset submissions that the official FEVER-8 scorer scores right (issue 29).

The official scorer (``averitec_evaluate.py``, ``compute(solution_file, submission_file)``)
matches rows by position, not by id:

1. it reads both CSVs with ``pandas.read_csv``;
2. keeps the ids of the solution's ``split == "gold"`` rows, and the rows of both files
   whose ``id`` is among them;
3. sorts both by ``id`` and resets the index; then submission row k is scored against
   solution row k (Hungarian METEOR Q-only and Q+A, label, old AVeriTeC score), for k over
   the submission's rows (a submission with more rows than the solution crashes it);
4. its Ev2R part (Q+A recall, new AVeriTeC score) finds row k's judgement by
   ``id == k``: it assumes the ids are 0, 1, … n-1.

A subset run (``run --claims-range 50:100``) writes ids 50…99. Against the full solution
file step 3 pairs claim 50 with gold claim 0, and so on (a score near 0, no warning);
against a solution slice with ids 50…99 the METEOR figures are right but step 4 finds
no judgement (Ev2R 0). ``scoring_pair`` therefore writes both files renumbered 0…n-1
in id order, the same claims in the same rows: every figure of the official scorer is
then the one ``eval`` reports. ``official_pairs`` reproduces steps 2–4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.io.leaderboard import LeaderboardRow, atomic_write_bytes, leaderboard_csv_text

__all__ = ["ScorerView", "needs_pair", "official_pairs", "pairing_problems", "renumbered", "scoring_pair",
           "scoring_pair_bytes", "write_scoring_pair"]


@dataclass(frozen=True)
class ScorerView:
    """What the official scorer compares: ``pairs[k]`` = (submission row, solution row)."""

    pairs: list[tuple[LeaderboardRow, LeaderboardRow]]
    crashes: bool
    """More submission rows than solution rows: ``solution.iloc[k]`` raises."""
    ev2r_found: list[bool]
    """Per row: whether the Ev2R lookup (``id == k`` of the solution row) finds it."""


def _id(row: LeaderboardRow) -> int:
    return int(row.id)


def official_pairs(solution: Sequence[LeaderboardRow], submission: Sequence[LeaderboardRow]) -> ScorerView:
    """The official scorer's row matching (steps 2–4 of the module docstring)."""
    public = {_id(r) for r in solution if r.split == "gold"}
    sol = sorted((r for r in solution if _id(r) in public), key=_id)
    sub = sorted((r for r in submission if _id(r) in public), key=_id)
    pairs = list(zip(sub, sol))
    return ScorerView(pairs, len(sub) > len(sol), [_id(s) == k for k, (_, s) in enumerate(pairs)])


def pairing_problems(solution: Sequence[LeaderboardRow], submission: Sequence[LeaderboardRow]) -> list[str]:
    """Why the official scorer would misscore this pair of files, one line each; ``[]``: it scores right."""
    view = official_pairs(solution, submission)
    problems = []
    if view.crashes:
        problems.append(f"the submission has more scored rows than the solution ({len(submission)}): the scorer crashes")
    wrong = [(a.id, b.id) for a, b in view.pairs if a.id != b.id]
    if wrong:
        problems.append(f"{len(wrong)} rows are scored against another claim's gold (row order, not id), "
                        f"e.g. submission id {wrong[0][0]} against solution id {wrong[0][1]}")
    if len(view.pairs) < len({r.id for r in solution if r.split == "gold"}):
        problems.append(f"{len({r.id for r in solution if r.split == 'gold'}) - len(view.pairs)} gold rows have no "
                        "submission row (not scored, or shifted onto other rows)")
    if not all(view.ev2r_found):
        problems.append("ids are not 0…n-1: the Ev2R part finds no judgement for those rows (Ev2R scores 0)")
    return problems


def needs_pair(ids: Sequence[str]) -> bool:
    """Whether rows with these ids (in file order) need a renumbered pair for the official scorer."""
    return list(ids) != [str(k) for k in range(len(ids))]


def renumbered(rows: Sequence[LeaderboardRow]) -> list[LeaderboardRow]:
    """``rows`` in id order, with ids 0…n-1."""
    return [replace(r, id=str(k)) for k, r in enumerate(sorted(rows, key=_id))]


def scoring_pair(submission: Sequence[LeaderboardRow], solution: Sequence[LeaderboardRow]
                 ) -> tuple[list[LeaderboardRow], list[LeaderboardRow]]:
    """The submission and the solution rows of the same claims, both renumbered 0…n-1 in
    id order. Every submission id must be in the solution and vice versa (a ``UserError``
    names the first ones that are not)."""
    sub_ids, sol_ids = {r.id for r in submission}, {r.id for r in solution}
    for what, lacking in (("the solution", sub_ids - sol_ids), ("the submission", sol_ids - sub_ids)):
        if lacking:
            first = sorted(lacking, key=int)[:5]
            raise UserError(f"{len(lacking)} ids are not in {what} ({', '.join(first)}…): the official scorer "
                            "would pair rows of different claims")
    return renumbered(submission), renumbered(solution)


def scoring_pair_bytes(submission: Sequence[LeaderboardRow], solution: Sequence[LeaderboardRow]
                       ) -> tuple[bytes, bytes, list[str]]:
    """``scoring_pair``'s two CSV files, and the claim ids of their rows 0…n-1."""
    sub, sol = scoring_pair(submission, solution)
    return (leaderboard_csv_text(sub).encode("utf-8"), leaderboard_csv_text(sol).encode("utf-8"),
            sorted((r.id for r in submission), key=int))


def write_scoring_pair(submission: Sequence[LeaderboardRow], solution: Sequence[LeaderboardRow],
                       submission_path: Path, solution_path: Path) -> list[str]:
    """Write ``scoring_pair``'s two files (atomically); returns the claim ids of rows 0…n-1."""
    sub, sol, order = scoring_pair_bytes(submission, solution)
    atomic_write_bytes(submission_path, sub)
    atomic_write_bytes(solution_path, sol)
    return order
