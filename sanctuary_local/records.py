"""Typed records that flow between the stages.

SANCTUARY §3: the input is (c, m, e) — claim, metadata, evidence documents — and the
output is (v, E, J) — verdict, question/answer/document evidence, justification.

Every record is a frozen dataclass with ``to_dict``/``from_dict`` so that it can be
written to a stage JSONL file and read back identically (orjson serialises dataclasses
natively; ``from_dict`` rebuilds nested records). Ids are deterministic: see ``ids.py``.

Text offsets: a document's text is ``"\\n".join(url2text)`` (``Document.text``); every
``start``/``end`` in a Segment, Chunk, EvidenceSnippet or EvidenceItem indexes that string, so
``document.text[start:end] == snippet.text`` (``== item.scraped_text``) always holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from sanctuary_local.ids import stable_id

SUPPORTED = "Supported"
REFUTED = "Refuted"
NEE = "Not Enough Evidence"
CONFLICTING = "Conflicting Evidence/Cherrypicking"
#: The four AVeriTeC labels, in the order the official scorer lists them.
LABELS: tuple[str, ...] = (SUPPORTED, REFUTED, NEE, CONFLICTING)
#: Stage 1 (HyDE) never abstains: NEE is excluded (paper §4.1).
HYDE_LABELS: tuple[str, ...] = (SUPPORTED, REFUTED, CONFLICTING)

T = TypeVar("T")


def _build(cls: type[T], data: dict[str, Any]) -> T:
    """Build ``cls`` from a dict, ignoring unknown keys (forward compatible)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


class _Record:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True, slots=True)
class GoldAnswer(_Record):
    answer: str
    answer_type: str = ""
    source_url: str = ""
    boolean_explanation: str = ""

    def scored_text(self) -> str:
        """The answer as the official converter writes it (Boolean answers get their explanation)."""
        if self.answer_type == "Boolean" and self.boolean_explanation:
            return f"{self.answer}. {self.boolean_explanation}"
        return self.answer


@dataclass(frozen=True, slots=True)
class GoldQuestion(_Record):
    question: str
    answers: tuple[GoldAnswer, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GoldQuestion:
        return cls(question=d["question"], answers=tuple(_build(GoldAnswer, a) for a in d.get("answers", ())))


@dataclass(frozen=True, slots=True)
class Claim(_Record):
    """A claim c with its metadata m (paper §3). ``index`` = position in the claims file
    = the knowledge-store file ``{index}.json``."""

    index: int
    text: str
    date: str | None = None
    speaker: str | None = None
    reporting_source: str | None = None
    location: str | None = None
    original_url: str | None = None
    claim_types: tuple[str, ...] = ()
    gold_label: str | None = None
    gold_justification: str | None = None
    gold_questions: tuple[GoldQuestion, ...] = ()
    claim_id: str = ""

    def __post_init__(self) -> None:
        if not self.claim_id:
            object.__setattr__(self, "claim_id", str(self.index))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Claim:
        d = dict(d)
        d["claim_types"] = tuple(d.get("claim_types") or ())
        d["gold_questions"] = tuple(GoldQuestion.from_dict(q) for q in d.get("gold_questions") or ())
        return _build(cls, d)


# ------------------------------------------------------------------------ documents


@dataclass(frozen=True, slots=True)
class Document(_Record):
    """One crawled web page of a claim's knowledge store (one JSON line)."""

    claim_index: int
    position: int  # 0-based line number in the store file
    url: str
    lines: tuple[str, ...]
    type: str = ""
    query: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def doc_id(self) -> str:
        return stable_id("doc", self.claim_index, self.position, self.url)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Document:
        d = dict(d)
        d["lines"] = tuple(d.get("lines") or ())
        return _build(cls, d)


@dataclass(frozen=True, slots=True)
class Segment(_Record):
    """A coarse (~500-token, zero-overlap) span of a document, indexed by BM25 (§4.2)."""

    claim_index: int
    doc_position: int
    start: int
    end: int
    n_tokens: int

    @property
    def segment_id(self) -> str:
        return stable_id("seg", self.claim_index, self.doc_position, self.start, self.end)


@dataclass(frozen=True, slots=True)
class Chunk(_Record):
    """A semantic chunk of a document (§4.3) with its exact character span."""

    claim_index: int
    doc_position: int
    url: str
    start: int
    end: int
    text: str
    n_tokens: int = 0

    @property
    def chunk_id(self) -> str:
        return stable_id("chunk", self.claim_index, self.url, self.doc_position, self.start, self.end)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Chunk:
        return _build(cls, d)


# -------------------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class Query(_Record):
    """One stage-1 question with its hypothetical answers; used as a retrieval query."""

    claim_index: int
    number: int  # 0-based position among the claim's queries
    question: str
    answers: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The retrieval text: the question and its hypothetical passages (HyDE)."""
        return " ".join((self.question, *self.answers)).strip()

    @property
    def query_id(self) -> str:
        return stable_id("query", self.claim_index, self.number, self.question)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Query:
        d = dict(d)
        d["answers"] = tuple(d.get("answers") or ())
        return _build(cls, d)


@dataclass(frozen=True, slots=True)
class Generation(_Record):
    """Accounting of one LLM request (any backend)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    finish_reason: str = ""
    cached_tokens: int = 0
    """Prompt tokens not computed again: a reused KV prefix (llama.cpp) or a prefix-cache hit (vLLM)."""


@dataclass(frozen=True, slots=True)
class HydeResult(_Record):
    """Stage 1 output for one claim: provisional label and the hypothetical Q-A queries."""

    claim_index: int
    provisional_label: str | None
    queries: tuple[Query, ...]
    raw_text: str = ""
    flags: tuple[str, ...] = ()
    generation: Generation = field(default_factory=Generation)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HydeResult:
        d = dict(d)
        d["queries"] = tuple(Query.from_dict(q) for q in d.get("queries") or ())
        d["flags"] = tuple(d.get("flags") or ())
        d["generation"] = _build(Generation, d.get("generation") or {})
        return _build(cls, d)


@dataclass(frozen=True, slots=True)
class Decomposition(_Record):
    """The atomic parts of one claim (``decompose.enabled``; ClaimCLAIRE, FactAgent):
    ``components`` in order, whether the last exhaustiveness check passed (None: not
    checked or unreadable), the parts the checks added, and the model outputs."""

    claim_index: int
    components: tuple[str, ...]
    exhaustive: bool | None = None
    added: tuple[str, ...] = ()
    raw_text: str = ""
    check_text: str = ""
    flags: tuple[str, ...] = ()
    generation: Generation = field(default_factory=Generation)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decomposition:
        d = dict(d)
        for k in ("components", "added", "flags"):
            d[k] = tuple(d.get(k) or ())
        d["generation"] = _build(Generation, d.get("generation") or {})
        return _build(cls, d)


# ------------------------------------------------------------------------- evidence


@dataclass(frozen=True, slots=True)
class EvidenceSnippet(_Record):
    """A retrieved chunk answering one query, with its cosine score (§4.3–4.4)."""

    chunk: Chunk
    score: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvidenceSnippet:
        return cls(chunk=Chunk.from_dict(d["chunk"]), score=float(d["score"]))


@dataclass(frozen=True, slots=True)
class QueryEvidence(_Record):
    """Stage 2 result for one query: ≤ 8 snippets, best first."""

    query: Query
    snippets: tuple[EvidenceSnippet, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueryEvidence:
        return cls(
            query=Query.from_dict(d["query"]),
            snippets=tuple(EvidenceSnippet.from_dict(s) for s in d.get("snippets") or ()),
        )


@dataclass(frozen=True, slots=True)
class ClaimEvidence(_Record):
    """Stage 2 output for one claim.

    ``below_threshold``: when no query kept a snippet, the best-scoring candidate that
    fell below the similarity threshold, with its query (else ``None``). The verdict
    prompt never sees it; it only keeps the official outputs valid (every prediction
    must carry at least one question-answer pair), flagged as a placeholder."""

    claim_index: int
    queries: tuple[QueryEvidence, ...] = ()
    flags: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    below_threshold: QueryEvidence | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClaimEvidence:
        d = dict(d)
        d["queries"] = tuple(QueryEvidence.from_dict(q) for q in d.get("queries") or ())
        d["flags"] = tuple(d.get("flags") or ())
        if d.get("below_threshold") is not None:
            d["below_threshold"] = QueryEvidence.from_dict(d["below_threshold"])
        return _build(cls, d)


@dataclass(frozen=True, slots=True)
class EvidenceItem(_Record):
    """One entry of the official ``evidence`` list: question, answer, url, scraped_text.

    ``scraped_text`` is the verbatim snippet of the source document: ``doc_position``,
    ``start`` and ``end`` locate it there, ``document.text[start:end] == scraped_text``
    (audit requirement, paper §5.5). ``question`` and ``answer`` are what the scorers
    read, with every whitespace run collapsed to one space (a tab or newline in them
    would break the leaderboard CSV's separators)."""

    question: str
    answer: str
    url: str
    scraped_text: str = ""
    doc_position: int = -1
    start: int = -1
    end: int = -1
    score: float = 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvidenceItem:
        return _build(cls, d)


@dataclass(frozen=True, slots=True)
class Prediction(_Record):
    """Final output (v, E, J) for one claim plus the run's bookkeeping.

    ``evidence`` is what the official outputs carry (a run emits at most
    ``io.predictions.MAX_EVIDENCE`` ranked items, or one flagged placeholder when nothing
    was retrieved); ``evidence_all`` is every retrieved item in the same ranking (empty
    for predictions read from files that do not have it)."""

    claim_index: int
    claim_id: str
    claim: str
    label: str
    evidence: tuple[EvidenceItem, ...] = ()
    justification: str = ""
    provisional_label: str | None = None
    flags: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    evidence_all: tuple[EvidenceItem, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prediction:
        d = dict(d)
        d["evidence"] = tuple(EvidenceItem.from_dict(e) for e in d.get("evidence") or ())
        d["evidence_all"] = tuple(EvidenceItem.from_dict(e) for e in d.get("evidence_all") or ())
        d["flags"] = tuple(d.get("flags") or ())
        return _build(cls, d)
