"""The provenance of a prediction's evidence against a corpus index: for every
question-answer pair, the file, the PDF page, the span in the extracted text and the
snippet itself (``CitedEvidence``), checked against the index's text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sanctuary_local.corpus.index import CorpusIndex, Provenance
from sanctuary_local.records import Prediction

__all__ = ["CitedEvidence", "cite_prediction"]


@dataclass(frozen=True, slots=True)
class CitedEvidence:
    """One question-answer pair of a verdict with where its snippet comes from."""

    question: str
    answer: str
    score: float
    source: Provenance

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "score": self.score, "source": self.source.to_dict()}


def cite_prediction(index: CorpusIndex, pred: Prediction) -> list[CitedEvidence]:
    """Provenance of each evidence item that points into ``index`` (a placeholder item,
    without a span, has none). ``ValueError`` when an item's span does not hold its
    snippet: the run was made against another generation of the index."""
    out = []
    for item in pred.evidence:
        if item.doc_position < 0 or item.start < 0 or item.doc_position >= index.n_units:
            continue
        prov = index.provenance(item.doc_position, item.start, item.end)
        if item.scraped_text and prov.text != item.scraped_text:
            raise ValueError(f"unit {item.doc_position} [{item.start}:{item.end}] does not hold the snippet "
                             f"(the index changed since the run?)")
        out.append(CitedEvidence(item.question, item.answer, item.score, prov))
    return out
