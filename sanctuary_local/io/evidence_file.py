"""Any system's evidence for a claims file: a FEVER-8 leaderboard CSV or a ``predictions.json``.

Stage 3 can read evidence that another system retrieved (``verdict-model eval --evidence``,
``verdict-model train --evidence``, ``run --evidence-from``). Each row is matched to the
claim it is about by ``id`` (``claim_index`` in our predictions): the claim's index in the
claims file, as the official tools number them. A file made for another claims file is
refused before anything is computed or written, in one line naming its first bad id: an
id past the claims file's end, or a claim text that differs from the claim of that index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.records import Claim, EvidenceItem

#: What the file kinds look like on their first non-blank character / line.
CSV_HEADER = "id,claim,evi,label,split"


@dataclass(frozen=True, slots=True)
class ExternalEvidence:
    """One claim's evidence as another system gave it."""

    claim_index: int
    claim: str
    items: tuple[EvidenceItem, ...]
    label: str
    """That system's label for the claim (the leaderboard's ``label``, or ``pred_label``)."""


def _kind(path: Path) -> str:
    """"csv" or "json", by the file's first non-blank bytes (a BOM allowed), else one line."""
    from sanctuary_local.io.files import read_utf8

    head = read_utf8(path, "evidence file")[:4096].decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if head.startswith("["):
        return "json"
    if head.split("\n", 1)[0].strip().replace(" ", "") == CSV_HEADER:
        return "csv"
    raise UserError(f"{path}: not an evidence file: expected a leaderboard CSV (header {CSV_HEADER}) "
                    "or a predictions.json (a JSON array)")


def read_evidence_file(path: str | Path) -> dict[int, ExternalEvidence]:
    """The evidence of every claim in ``path``, by claim index; a bad file or row is one line."""
    from sanctuary_local.io.leaderboard import read_leaderboard_csv
    from sanctuary_local.io.predictions import leaderboard_to_predictions, read_predictions_json

    path = Path(path)
    if not path.is_file():
        what = "is a directory, not an evidence file" if path.is_dir() else "no such evidence file"
        raise UserError(f"{path}: {what} (a leaderboard CSV or a predictions.json)")
    if _kind(path) == "csv":
        try:
            preds = leaderboard_to_predictions(read_leaderboard_csv(path))
        except UserError as exc:
            raise UserError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    else:
        preds = read_predictions_json(path)
    if not preds:
        raise UserError(f"{path}: holds no claim's evidence")
    return {p.claim_index: ExternalEvidence(p.claim_index, p.claim, p.evidence, p.label) for p in preds}


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _shown(text: str) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= 60 else one[:60] + "…")


def check_evidence_matches(claims: Sequence[Claim], found: dict[int, ExternalEvidence], path: Path,
                           claims_path: Path, selected: Sequence[int] | None = None) -> None:
    """One line naming the first bad id when ``found`` was made for another claims file: an id
    past the ``claims`` (the whole file), a claim text that differs, or (``selected``: the
    claim indices to be read) a selected claim the file has no row for."""
    by_index = {c.index: c for c in claims}
    n = max(by_index, default=-1) + 1
    for i in sorted(found):
        if i not in by_index:
            where = f"is past the {n} claims of {claims_path}" if i >= n else f"names no claim read from {claims_path}"
            raise UserError(f"{path}: id {i} {where}; the evidence file was made for another claims file")
        if not _same(found[i].claim, by_index[i].text):
            raise UserError(f"{path}: id {i}: its claim {_shown(found[i].claim)} is not claim {i} of {claims_path} "
                            f"({_shown(by_index[i].text)}); the evidence file was made for another claims file")
    if selected is not None:
        missing = [i for i in selected if i not in found]
        if missing:
            raise UserError(f"{path}: has no row for claim {missing[0]} of {claims_path} "
                            f"({len(missing)} of the {len(selected)} claims selected have none; it holds {len(found)})")
